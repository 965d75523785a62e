"""The face quality gate's measures on the sample faces and degraded copies of them, and what each bar refuses.

    python -m benchmarks.quality [--encoder face-arcface-s] [--captures 8]

Clean: the 17 sample photos (biomem.identity.samples.calibration_faces) and `captures` augmented captures of
each (the set the tests, the demo and calibration use). Degraded copies of each photo: downscaled (the face
smaller), Gaussian-blurred, rotated in the image plane (roll), turned in depth (yaw: the crop warped over a
head-shaped depth map), darkened with sensor noise, and cut through the face. Prints a markdown table: per
set, the range of each measure and the share the "probe" and "enrol" bars refuse, with the hints given.
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

import modalities
from biomem.errors import MultipleFacesError, NoFaceError, PoorCaptureError
from biomem.identity.degraded import DEGRADATIONS
from biomem.identity.samples import augment, calibration_faces


def row(name: str, images: list[np.ndarray], encoder: modalities.Encoder) -> str:
    """One table row: measure ranges (min-max) and the share each bar refuses, with its hints."""
    measured, missing = [], 0
    refused: dict[str, Counter] = {"probe": Counter(), "enrol": Counter()}
    for image in images:
        try:
            measured.append(encoder.assess(image))
        except (NoFaceError, MultipleFacesError):
            missing += 1
            continue
        for bar in refused:
            try:
                encoder.quality_bars[bar].check(measured[-1], bar)
            except PoorCaptureError as exc:
                refused[bar][exc.hint] += 1

    def span(field: str, absolute: bool = False) -> str:
        values = [abs(getattr(m, field)) if absolute else getattr(m, field) for m in measured]
        return f"{min(values):.3g}–{max(values):.3g}" if values else "–"

    def share(bar: str) -> str:
        hints = ", ".join(f"{hint} {n}" for hint, n in refused[bar].most_common())
        return f"{sum(refused[bar].values())}/{len(measured)}" + (f" ({hints})" if hints else "")

    return (f"| {name} | {len(images)} | {missing} | {span('size')} | {span('yaw', True)} | {span('roll', True)} | "
            f"{span('sharpness')} | {span('score')} | {share('probe')} | {share('enrol')} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", default="face-arcface-s")
    parser.add_argument("--captures", type=int, default=8, help="augmented captures per sample photo")
    args = parser.parse_args()
    encoder = modalities.create(args.encoder)
    photos = [photo for person in calibration_faces() for photo in person]
    captures = [augment(photo, seed=1000 * n + k) for n, photo in enumerate(photos)
                for k in range(1, args.captures + 1)]
    for bar, values in encoder.quality_bars.items():
        print(f"- {bar}: {values}")
    print("\n| set | images | no single face | face px | yaw° | roll° | sharpness | detector score | "
          "probe bar refuses | enrol bar refuses |\n|---|---|---|---|---|---|---|---|---|---|")
    print(row("sample photos", photos, encoder))
    print(row("augmented captures", captures, encoder))
    for name, degrade in DEGRADATIONS:
        print(row(name, [degrade(photo) for photo in photos], encoder))


if __name__ == "__main__":
    main()
