"""A small demo store: three people from the sample faces, everyday memories, three askers.

`biomem demo` (and the app's "load demo") enrol Ana, Ben and Chloe from two captures each
(faces, and synthetic palms when a palm encoder is given), give them look-alike memories,
then ask the same question as each of them and as a stranger: each gets only their own
memories, the stranger none.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable
from pathlib import Path

import numpy as np

import modalities

from ..errors import BioMemError, InvalidInputError, MultipleFacesError, NoFaceError
from ..identity.samples import augment, face_crops
from .memory import BioMemory

log = logging.getLogger(__name__)

DEMO_PEOPLE: dict[str, list[tuple[str, str]]] = {
    "Ana": [
        ("My PIN for the bank card is 4821", "2024-03-02T09:15:00"),
        ("I am allergic to peanuts", "2024-03-05T12:30:00"),
        ("My daughter Lea starts piano lessons on Tuesdays", "2024-03-09T18:00:00"),
        ("I parked the car on level 3 of the station garage", "2024-03-12T08:05:00"),
    ],
    "Ben": [
        ("My PIN for the bank card is 7390", "2024-03-03T10:00:00"),
        ("I am training for the Berlin marathon in September", "2024-03-06T07:00:00"),
        ("My doctor's appointment is on Friday at 4 pm", "2024-03-10T14:20:00"),
        ("I promised to bring the salad to Sunday's barbecue", "2024-03-13T19:45:00"),
    ],
    "Chloe": [
        ("My PIN for the bank card is 1156", "2024-03-04T11:11:00"),
        ("My cat Miso needs her vaccine next month", "2024-03-07T16:40:00"),
        ("I am learning Japanese with an app every morning", "2024-03-11T06:50:00"),
    ],
}
STRANGER = 6  # index into face_crops(): a person who is never enrolled
# Synthetic palm identity seeds (modalities.palmsynth) of the demo people and the stranger.
DEMO_PALM_SEEDS = {"Ana": 1, "Ben": 2, "Chloe": 3}
STRANGER_PALM_SEED = 99
LOCOMO_FACES = (3, 4, 5)  # sample faces left for imported conversations (palms have no limit)
LOCOMO_PALM_BASE = 100


def locomo_sample(index: int) -> str:
    """The sample person an imported LoCoMo conversation `index` (0-based) is given."""
    return f"LoCoMo {index + 1}"


# Sample people a visitor can "be" without a camera: a face (face_crops() index, or None) and a
# synthetic palm (modalities.palmsynth identity seed). Ana, Ben and Chloe are the demo store's
# people; the stranger is never enrolled; the LoCoMo samples go to imported conversations.
SAMPLE_PEOPLE: dict[str, tuple[int | None, int]] = {
    **{label: (face, DEMO_PALM_SEEDS[label]) for face, label in enumerate(DEMO_PEOPLE)},
    "Stranger": (STRANGER, STRANGER_PALM_SEED),
    **{locomo_sample(i): (LOCOMO_FACES[i] if i < len(LOCOMO_FACES) else None, LOCOMO_PALM_BASE + i)
       for i in range(10)},
}


def demo_capture(person: int, seed: int) -> np.ndarray:
    """Another capture of sample person `person` (seed 0: the photo itself)."""
    face = face_crops()[person]
    return face if seed == 0 else augment(face, seed=1000 * person + seed)


def usable_capture(encoder: modalities.Encoder, person: int, seeds: Iterable[int]) -> np.ndarray:
    """The first capture among `seeds` in which `encoder` finds exactly one face: the augmentations
    tilt, scale and blur, and a detector misses a few of them, as it would a badly framed shot."""
    for seed in seeds:
        image = demo_capture(person, seed)
        try:
            encoder.encode(image)
        except (NoFaceError, MultipleFacesError):
            continue
        return image
    raise NoFaceError(f"{encoder.name} found no single face in the captures tried of sample person {person}")


def demo_palm(seed: int, capture: int) -> np.ndarray:
    """A synthetic palm ROI of identity `seed` (capture 0: the canonical rendering)."""
    from modalities.palmsynth import palm_capture

    return palm_capture(seed, capture)


def sample_capture(mem: BioMemory, person: str, modality: str | None = None) -> np.ndarray:
    """A fresh capture of sample person `person`: a face photo or a palm ROI, by the kind of
    `modality` (default the store's); never one of the demo's two enrolment captures."""
    if person not in SAMPLE_PEOPLE:
        raise InvalidInputError(f"no sample person {person!r}")
    face, palm = SAMPLE_PEOPLE[person]
    encoder = mem.encoder(modality)
    seeds = [secrets.randbelow(39) + 2 for _ in range(8)]
    if encoder.info.kind == "palm":
        return demo_palm(palm, seeds[0])
    if face is None:
        raise InvalidInputError(f"{person} has a sample palm but no sample face: choose a palm encoder")
    return usable_capture(encoder, face, seeds)


def loadable(mem: BioMemory, modality: str) -> bool:
    """Whether `modality`'s encoder loads here (the demo's palms are optional)."""
    try:
        mem.encoder(modality)
    except (KeyError, ImportError, OSError, BioMemError) as exc:
        log.info("%s unavailable: %s", modality, exc)
        return False
    return True


def demo_loaded(mem: BioMemory) -> bool:
    """Whether the demo people are enrolled in `mem`."""
    return set(DEMO_PEOPLE) <= {i.label for i in mem.identities()}


def build_demo(mem: BioMemory, palm_encoder: str | None = None) -> dict[str, int]:
    """Enrol the demo people (faces, plus synthetic palms through `palm_encoder` when given)
    with their memories; returns label -> identity id."""
    ids = {}
    for person, (label, memories) in enumerate(DEMO_PEOPLE.items()):
        identity = mem.enroll(label, [demo_capture(person, 0), demo_capture(person, 1)], sample=True)
        if palm_encoder:
            seed = DEMO_PALM_SEEDS[label]
            mem.add_templates(identity.id, [demo_palm(seed, 0), demo_palm(seed, 1)], palm_encoder)
        mem.add_many([text for text, _ in memories], identity=identity.id,
                     timestamps=[when for _, when in memories])
        ids[label] = identity.id
    return ids


def run_demo(path: str | Path, question: str = "What is my bank card PIN?") -> None:
    """Build the demo store at `path` (if empty) and print what each asker gets."""
    with BioMemory(path) as mem:
        if not mem.identities():
            build_demo(mem)
        people = [*enumerate(DEMO_PEOPLE), (STRANGER, "a stranger")]
        askers = [(label, usable_capture(mem.encoder(), person, range(5, 40))) for person, label in people]
        print(f"store: {path} | question: {question!r}\n")
        for who, probe in askers:
            answer = mem.ask(question, probe=probe, k=3)
            matched = answer.gate.labels.get(answer.gate.identity, "nobody")
            best = max(answer.gate.scores.values(), default=float("nan"))
            print(f"{who:>10} -> gate: {matched} (best cos {best:.3f}, tau {answer.gate.threshold:.3f}); "
                  f"{len(answer.notes)} note(s) in, {answer.gated_out} gated out")
            print(f"{'':>13}answer: {answer.text}")
