"""Kiosk replay: 500 strangers and the owners at one device, under the default attempt limits.

    python benchmarks/kiosk.py [--strangers 500] [--encoder face-arcface-s] [--out FILE]

The demo store (Ana, Ben and Chloe, faces only, biomem.engine.demo.build_demo) is asked "What is my bank card
PIN?" through BioMemory.ask by one client (one session, one address: a kiosk) on an injected clock. The strangers
are every real person available offline who is not enrolled (biomem.identity.samples.calibration_faces(), 13
people: their photos and augmented captures, pre-encoded); the owners ask with fresh captures of their own
faces. Two paces, each on a fresh store under the default limits, and the steady pace again under the earlier
limits (any 20 misses in 10 minutes, then a doubling cool-down) for contrast:

- "steady": a stranger every 30 s on average (exponential gaps, seeded), an owner after about every fifth;
- "rush": a stranger every 4 s (a queue at a party: 15 a minute), an owner after every fifth.

Prints a markdown table and writes JSON (default benchmarks/results/kiosk.json): per pace, the stranger and owner
asks, the owners served and refused, strangers refused, the busiest hour, near-misses, guarded identities, the
client's daily budget (AttemptLimits.budget_for) and the simulated span.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="biomem-kiosk-config-")  # the template key goes here
for _name in ("BIOMEM_KEY", "BIOMEM_KEY_FILE", "BIOMEM_ATTEMPTS"):  # BioMemory's defaults, not the caller's
    os.environ.pop(_name, None)

import numpy as np  # noqa: E402
from machine import machine_info  # noqa: E402  (benchmarks/machine.py)

import modalities  # noqa: E402
from biomem import BioMemory  # noqa: E402
from biomem.engine.demo import DEMO_PEOPLE, build_demo, demo_capture  # noqa: E402
from biomem.errors import MultipleFacesError, NoFaceError, TooManyAttemptsError  # noqa: E402
from biomem.identity.gate import Probe  # noqa: E402
from biomem.identity.limits import AttemptLimiter  # noqa: E402
from biomem.identity.samples import augment, calibration_faces  # noqa: E402
from biomem.notes.textenc import TextEncoder  # noqa: E402
from biomem.vocabulary import AttemptLimits  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "What is my bank card PIN?"
CLIENT = ("session:kiosk", "address:203.0.113.9")
PACES = {"steady": 30.0, "rush": 4.0}  # mean seconds between strangers
BEFORE = AttemptLimits(misses=20, window=600.0)  # the earlier limits: any 20 misses in 10 minutes
CAPTURES = 6  # a stranger's photo and its first augmentations


class Clock:
    """The replay's clock, moved by the schedule."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def encoded(encoder: modalities.Encoder, images: list[np.ndarray]) -> list[Probe]:
    """Probes of the images in which the encoder finds one face (a detector misses a few augmentations)."""
    probes = []
    for image in images:
        try:
            probes.append(Probe(encoder.encode(image), encoder.name))
        except (NoFaceError, MultipleFacesError):  # a capture the kiosk would not send
            continue
    return probes


def replay(name: str, gap: float, args: argparse.Namespace, text: TextEncoder, face: modalities.Encoder,
           strangers: list[Probe], owners: dict[str, list[Probe]], limits: AttemptLimits) -> dict[str, Any]:
    """One pace on a fresh demo store under `limits`; returns the row."""
    rng = np.random.default_rng(args.seed)
    clock = Clock()
    with tempfile.TemporaryDirectory(prefix=f"biomem-kiosk-{name}-") as tmp:
        mem = BioMemory(Path(tmp) / "kiosk.db", encoder=face, text_model=text, llm="offline")
        try:
            assert mem.limiter.limits == AttemptLimits(), "not the default limits"
            ids = build_demo(mem)
            mem.limiter = AttemptLimiter(limits, mem.store, clock=clock)
            start = clock.now
            counts = {"stranger_asks": 0, "stranger_refused": 0, "stranger_admitted": 0, "owner_asks": 0,
                      "owner_served": 0, "owner_refused": 0, "owner_missed": 0, "near_misses": 0}
            hours: dict[int, int] = {}
            labels = list(owners)
            for i in range(args.strangers):
                clock.now += rng.exponential(gap) if name == "steady" else gap
                hours[int((clock.now - start) // 3600)] = hours.get(int((clock.now - start) // 3600), 0) + 1
                probe = strangers[i % len(strangers)]
                counts["stranger_asks"] += 1
                try:
                    answer = mem.ask(QUESTION, probe=probe, client=CLIENT)
                    counts["stranger_admitted"] += answer.gate.matched
                    tau = answer.gate.threshold
                    band = limits.near * (mem.threshold(step_up=True) - tau)
                    counts["near_misses"] += bool((answer.gate.best_scores >= tau - band).any())
                except TooManyAttemptsError:
                    counts["stranger_refused"] += 1
                if (rng.random() < 0.2) if name == "steady" else i % 5 == 4:
                    label = labels[counts["owner_asks"] % len(labels)]
                    clock.now += 5
                    counts["owner_asks"] += 1
                    try:
                        answer = mem.ask(QUESTION, probe=owners[label][counts["owner_asks"] % len(owners[label])],
                                         client=CLIENT)
                        counts["owner_served" if answer.gate.identity == ids[label] else "owner_missed"] += 1
                    except TooManyAttemptsError:
                        counts["owner_refused"] += 1
            guarded = sorted(mem.store.identity(i).label for i in mem.limiter.guarded(ids.values()))
            budget = mem.limiter.limits.budget_for(len(ids))
        finally:
            mem.close()
    return {"pace": name, "limits": "default" if limits == AttemptLimits() else "before (20 per 10 min)",
            "mean_gap_s": gap, **counts, "busiest_hour_strangers": max(hours.values()),
            "span_h": (clock.now - start) / 3600, "guarded": guarded, "enrolled": len(ids), "daily_budget": budget}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strangers", type=int, default=500, help="stranger asks per pace")
    parser.add_argument("--encoder", default="face-arcface-s", help="face encoder of the store and the probes")
    parser.add_argument("--seed", type=int, default=0, help="seed of the steady pace's gaps and owner turns")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "kiosk.json"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    began = time.perf_counter()
    text, face = TextEncoder(), modalities.create(args.encoder)
    people = calibration_faces()
    strangers = encoded(face, [crop if n == 0 else augment(crop, seed=1000 * person + 100 * photo + n)
                               for person, crops in enumerate(people) if person >= len(DEMO_PEOPLE)
                               for photo, crop in enumerate(crops) for n in range(CAPTURES)])
    owners = {label: encoded(face, [demo_capture(person, seed) for seed in range(2, 12)])
              for person, label in enumerate(DEMO_PEOPLE)}
    rows = [replay(name, gap, args, text, face, strangers, owners, AttemptLimits()) for name, gap in PACES.items()]
    rows.append(replay("steady", PACES["steady"], args, text, face, strangers, owners, BEFORE))
    total = time.perf_counter() - began
    print(f"{len(strangers)} distinct stranger captures of {len(people) - len(DEMO_PEOPLE)} people; "
          f"owners {', '.join(owners)}; one client {CLIENT}; default limits {AttemptLimits()}\n")
    print("| pace | limits | stranger asks | busiest hour | strangers refused | owner asks | owners served "
          "| owners refused | near-misses | guarded | daily budget (N) | span |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['pace']} (mean {r['mean_gap_s']:g} s) | {r['limits']} | {r['stranger_asks']} "
              f"| {r['busiest_hour_strangers']} | {r['stranger_refused']} | {r['owner_asks']} | {r['owner_served']} "
              f"| {r['owner_refused']} "
              f"| {r['near_misses']} | {', '.join(r['guarded']) or 'nobody'} | {r['daily_budget']} ({r['enrolled']}) "
              f"| {r['span_h']:.1f} h |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine_info("onnxruntime"), "args": vars(args), "question": QUESTION,
                               "stranger_captures": len(strangers), "limits": str(AttemptLimits()),
                               "total_wall_s": total, "rows": rows}, indent=2, default=float))
    print(f"\nwrote {out} ({total:.0f} s in all)")


if __name__ == "__main__":
    main()
