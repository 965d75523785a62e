"""Kiosk replay: a crowd of strangers and the owners at one device, and a dictionary attacker at it, under the
default attempt limits.

    python -m benchmarks.kiosk [--strangers 300] [--encoder face-arcface-s] [--out FILE]

The demo store (Ana, Ben and Chloe, faces only, biomem.engine.demo.build_demo) is asked "What is my bank card
PIN?" through BioMemory.ask by one client (one session, one address: a kiosk) on an injected clock. The strangers
are every real person available offline who is not enrolled (biomem.identity.samples.calibration_faces(), 13
people: their photos and augmented captures, pre-encoded); the owners ask with fresh captures of their own
faces. Each pace runs on a fresh store:

- "crowd": strangers back to back, one every 2 s (30 a minute, past the pace limit), an owner after every 15th;
- "rush": a stranger every 4 s (a queue at a party: 15 a minute), an owner after every fifth;
- "steady": a stranger every 30 s on average (exponential gaps, seeded), an owner after about every fifth;
- "attacker": the strangers' captures cycled as a dictionary from that client for a day, a guess every 0.25 s
  (as fast as the server answers), every cool-down it is told waited out.

Prints a markdown table and writes JSON (default benchmarks/results/kiosk.json): per row, the stranger (or guess)
asks, answered and refused, false admissions, owner asks, served and refused, the client's daily budget
(AttemptLimits.budget_for) and the expected false admissions a day its answered misses can buy at most,
N × FMR(τ) × misses (the FMR the limiter uses: the calibration stored with τ, else the setting's).
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import modalities
from benchmarks.common import RESULTS, arguments, write_result
from benchmarks.machine import machine_info
from biomem import BioMemory
from biomem.engine.demo import DEMO_PEOPLE, build_demo, demo_capture
from biomem.errors import MultipleFacesError, NoFaceError, TooManyAttemptsError
from biomem.identity.gate import Probe
from biomem.identity.limits import AttemptLimiter
from biomem.identity.samples import augment, calibration_faces
from biomem.notes.textenc import TextEncoder
from biomem.vocabulary import AttemptLimits

# read when a store opens: the template key goes to a throw-away folder, and the limits are BioMemory's defaults
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="biomem-kiosk-config-")
for _name in ("BIOMEM_KEY", "BIOMEM_KEY_FILE", "BIOMEM_ATTEMPTS"):  # BioMemory's defaults, not the caller's
    os.environ.pop(_name, None)

QUESTION = "What is my bank card PIN?"
CLIENT = ("session:kiosk", "address:203.0.113.9")
PACES = {"crowd": (2.0, 15), "rush": (4.0, 5), "steady": (30.0, 5)}  # seconds between strangers, owner turn
ATTACK_GAP = 0.25  # seconds between an attacker's guesses: as fast as the server answers
DAY = 86_400.0
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


def fresh(tmp: str, text: TextEncoder, face: modalities.Encoder, clock: Clock) -> tuple[BioMemory, dict[str, int]]:
    """The demo store in `tmp` under the default limits on `clock`, and its owners' ids."""
    mem = BioMemory(Path(tmp) / "kiosk.db", encoder=face, text_model=text, llm="offline")
    assert mem.limiter.limits == AttemptLimits(), "not the default limits"
    ids = build_demo(mem)
    mem.limiter = AttemptLimiter(AttemptLimits(), mem.store, clock=clock)
    return mem, ids


def exposure(mem: BioMemory, misses: int) -> dict[str, Any]:
    """The client's daily budget and the expected false admissions `misses` answered misses can buy at most."""
    enrolled, fmr = mem.limiter.exposure()
    return {"enrolled": enrolled, "fmr": fmr, "daily_budget": mem.limiter.limits.budget_for(enrolled),
            "expected_false_admissions_bound": enrolled * fmr * misses}


def replay(name: str, gap: float, turn: int, args: argparse.Namespace, text: TextEncoder, face: modalities.Encoder,
           strangers: list[Probe], owners: dict[str, list[Probe]]) -> dict[str, Any]:
    """One pace on a fresh demo store: strangers every `gap` s (mean, for "steady"), an owner after every
    `turn`-th (about, for "steady"); returns the row."""
    rng = np.random.default_rng(args.seed)
    clock = Clock()
    with tempfile.TemporaryDirectory(prefix=f"biomem-kiosk-{name}-") as tmp:
        mem, ids = fresh(tmp, text, face, clock)
        try:
            start = clock.now
            counts = {"asks": 0, "refused": 0, "admitted": 0, "owner_asks": 0, "owner_served": 0,
                      "owner_refused": 0, "owner_missed": 0}
            labels = list(owners)
            for i in range(args.strangers):
                clock.now += rng.exponential(gap) if name == "steady" else gap
                counts["asks"] += 1
                try:
                    answer = mem.ask(QUESTION, probe=strangers[i % len(strangers)], client=CLIENT)
                    counts["admitted"] += answer.gate.matched
                except TooManyAttemptsError:
                    counts["refused"] += 1
                if (rng.random() < 1 / turn) if name == "steady" else i % turn == turn - 1:
                    label = labels[counts["owner_asks"] % len(labels)]
                    clock.now += gap / 2
                    counts["owner_asks"] += 1
                    try:
                        answer = mem.ask(QUESTION, probe=owners[label][counts["owner_asks"] % len(owners[label])],
                                         client=CLIENT)
                        counts["owner_served" if answer.gate.identity == ids[label] else "owner_missed"] += 1
                    except TooManyAttemptsError:
                        counts["owner_refused"] += 1
            guarded = sorted(mem.store.identity(i).label for i in mem.limiter.guarded(ids.values()))
            row = {"pace": name, "gap_s": gap, **counts, "span_h": (clock.now - start) / 3600, "guarded": guarded,
                   **exposure(mem, counts["asks"] - counts["refused"] - counts["admitted"])}
        finally:
            mem.close()
    return row


def attack(text: TextEncoder, face: modalities.Encoder, strangers: list[Probe]) -> dict[str, Any]:
    """A dictionary attacker at the kiosk's client for a day, a guess every ATTACK_GAP s, waiting out each
    cool-down it is told (a refused guess is no guess); returns the row."""
    clock = Clock()
    with tempfile.TemporaryDirectory(prefix="biomem-kiosk-attack-") as tmp:
        mem, _ = fresh(tmp, text, face, clock)
        try:
            start, counts = clock.now, {"asks": 0, "refused": 0, "admitted": 0}
            while clock.now < start + DAY:
                clock.now += ATTACK_GAP
                try:
                    counts["admitted"] += mem.ask(QUESTION, probe=strangers[counts["asks"] % len(strangers)],
                                                  client=CLIENT).gate.matched
                    counts["asks"] += 1
                except TooManyAttemptsError as refused:
                    counts["refused"] += 1
                    clock.now += refused.retry_after or 0.0
            row = {"pace": "attacker", "gap_s": ATTACK_GAP, **counts, "owner_asks": 0, "owner_served": 0,
                   "owner_refused": 0, "owner_missed": 0, "span_h": (clock.now - start) / 3600, "guarded": [],
                   **exposure(mem, counts["asks"] - counts["admitted"])}
        finally:
            mem.close()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strangers", type=int, default=300, help="stranger asks per pace")
    parser.add_argument("--encoder", default="face-arcface-s", help="face encoder of the store and the probes")
    parser.add_argument("--seed", type=int, default=0, help="seed of the steady pace's gaps and owner turns")
    parser.add_argument("--out", type=Path, default=RESULTS / "kiosk.json")
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
    rows = [replay(name, gap, turn, args, text, face, strangers, owners) for name, (gap, turn) in PACES.items()]
    rows.append(attack(text, face, strangers))
    total = time.perf_counter() - began
    print(f"{len(strangers)} distinct stranger captures of {len(people) - len(DEMO_PEOPLE)} people; "
          f"owners {', '.join(owners)}; one client {CLIENT}; default limits {AttemptLimits()}\n")
    print("| at the kiosk | stranger asks / guesses | refused | admitted | owner asks | owners served | owners refused "
          "| guarded | daily budget (N) | expected false admissions a day, at most | span |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['pace']} (every {r['gap_s']:g} s) | {r['asks']} | {r['refused']} | {r['admitted']} "
              f"| {r['owner_asks']} | {r['owner_served']} | {r['owner_refused']} "
              f"| {', '.join(r['guarded']) or 'nobody'} "
              f"| {r['daily_budget']} ({r['enrolled']}) | {r['expected_false_admissions_bound']:.3f} "
              f"| {r['span_h']:.1f} h |")
    out = write_result(args.out, {"machine": machine_info("onnxruntime"), "args": arguments(args),
                                  "question": QUESTION, "stranger_captures": len(strangers),
                                  "limits": str(AttemptLimits()), "total_wall_s": total, "rows": rows},
                       default=float)
    print(f"\nwrote {out} ({total:.0f} s in all)")


if __name__ == "__main__":
    main()
