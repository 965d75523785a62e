"""The voice encoder (voice-ge2e) on real speech: EER, FNMR at FMR 1 %, strangers, probe length, latency.

    python -m benchmarks.voice [--splits 20] [--out benchmarks/results/voice.json]

Data (tests/voice_clips.py, fetched into a cache outside the checkout, never committed): speakerbox's 73
clips of 9 city-council speakers in 9 meetings (each speaker in 3-5 of them), and pyannote's sample, two
speakers of another room as strangers. Clips with less than 2 s of speech after VAD are refused by the
encoder, as a probe would be, and left out (counted).

Protocols, all with 3-clip enrolment (the template is the L2-normalised mean of 3 full-clip embeddings):
- verification: `--splits` seeded draws of 3 enrolment clips per speaker; genuine trials are a speaker's other
  clips against their template, impostor trials every other speaker's non-enrolment clips. "cross-recording"
  keeps only genuine probes from a meeting none of the enrolment clips comes from. EER, and FNMR at FMR 1 %
  with the number of impostor trials behind that 1 %.
- probe length: the same trials with probes cut to their first 2, 4 or 6 s of speech (clips with less left out).
- strangers: every choice of 3 of the 9 speakers (84 splits) is never enrolled; the other 6 are; each
  stranger probe (their clips and pyannote's two voices) is a false positive when its best score over the 6
  templates reaches τ, and an enrolled probe a false negative when its own template is not the best or is
  under τ. At the encoder's default τ and at the verification EER's τ.
- latency: encode() of a (16000, samples) probe cut to 2, 4, 6 s and whole clips, VAD included, one torch thread.
- fused (face + voice through BioMemory's gate): each of the 9 speakers is given a face of another real person
  (biomem.identity.samples.calibration_faces, face-arcface-s), pyannote's two voices two more. Over the same 84
  splits, the 6 enrolled pairs are enrolled in a BioMemory on a temporary SQLite store (3 clips the engine takes
  as one person, and the face photo plus one augmented capture), then identify() is asked with (own face, own
  voice), (own face, another enrolled speaker's voice), (a stranger's face, a stranger's voice), a voice alone
  and a face alone, fusion "all", at the encoders' default τ and δ, then again with the voice's τ set to the
  one `biomem calibrate` finds on these clips (calibrate_folder, clip against clip, FMR 1 %; δ kept at its
  default). Each probe counts as admitting the right person, a wrong one (anyone, where nobody should be), or
  nobody. Calls carry no client, so attempt limits, which count per client, play no part. Draws of 3 clips that
  the engine would refuse as not one person (a pair under τ) are drawn again, and counted.
- closest speaker: the rule of Home Assistant's Speaker Recognition integration (EuleMitKeule/speaker-recognition,
  also on Resemblyzer's GE2E: it names the enrolled user of highest cosine, with no threshold), on the same
  templates and probes: every stranger is attributed to a family member.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import modalities
from benchmarks.common import RESULTS, command, log, percentiles, write_result
from benchmarks.machine import machine_info
from biomem import BioMemory, Probe
from biomem.errors import EnrolmentError, InvalidInputError
from biomem.identity.calibrate import calibrate_folder
from biomem.identity.samples import augment, calibration_faces
from biomem.notes.textenc import TextEncoder
from modalities.audio import SAMPLE_RATE, load_audio, speech
from modalities.errors import TooLittleSpeechError
from tests.voice_clips import Clip, clips, strangers

ENROL = 3  # clips per template
LENGTHS = (2, 4, 6)  # seconds of speech a cut probe holds
FMR = 0.01
HELD_OUT = 3  # speakers never enrolled in the strangers protocol
FACE, VOICE = "face-arcface-s", "voice-ge2e"
FACE_ENROL = (0, 1)  # captures of a face enrolled: the photo itself and one augmented capture
FACE_PROBES = (2, 3, 4)  # augmented captures probed with, in turn
ENROL_TRIES = 200  # seeded draws of 3 clips per speaker before one the engine takes as one person is given up


@dataclass(eq=False)  # compared by identity: `in` tests which clips a draw took
class Embedded:
    """One usable clip: its embedding from the whole clip and from its first 2, 4, 6 s of speech (where long enough)."""

    clip: Clip
    seconds: float  # of speech after VAD
    full: np.ndarray
    cut: dict[int, np.ndarray]


def embed_all(encoder, rows: list[Clip]) -> tuple[list[Embedded], list[Clip]]:
    """(the clips the encoder takes, embedded; those it refuses for too little speech)."""
    kept, refused = [], []
    for clip in rows:
        try:
            voiced = speech(load_audio(clip.path))
        except TooLittleSpeechError:
            refused.append(clip)
            continue
        cut = {n: encoder.embed_speech(voiced[: n * SAMPLE_RATE]) for n in LENGTHS if voiced.size >= n * SAMPLE_RATE}
        kept.append(Embedded(clip, voiced.size / SAMPLE_RATE, encoder.embed_speech(voiced), cut))
    return kept, refused


def template(rows: list[Embedded]) -> np.ndarray:
    mean = np.mean([r.full for r in rows], axis=0)
    return mean / np.linalg.norm(mean)


def draw(by_speaker: dict[str, list[Embedded]], rng: np.random.Generator) -> dict[str, list[Embedded]]:
    """ENROL enrolment clips per speaker that has at least one clip more to probe with."""
    return {s: [rows[i] for i in sorted(rng.choice(len(rows), ENROL, replace=False))]
            for s, rows in by_speaker.items() if len(rows) > ENROL}


def eer(genuine: np.ndarray, impostor: np.ndarray) -> tuple[float, float]:
    """(equal error rate, the τ where FNMR and FMR cross), over every score as a candidate τ."""
    taus = np.unique(np.concatenate([genuine, impostor]))
    fnmr = np.array([(genuine < t).mean() for t in taus])
    fmr = np.array([(impostor >= t).mean() for t in taus])
    i = int(np.argmin(np.abs(fnmr - fmr)))
    return float((fnmr[i] + fmr[i]) / 2), float(taus[i])


def fnmr_at(genuine: np.ndarray, impostor: np.ndarray, fmr: float) -> tuple[float, float]:
    """(FNMR, τ) at the lowest τ whose FMR is at most `fmr`."""
    ranked = np.sort(impostor)[::-1]
    allowed = int(np.floor(fmr * ranked.size))  # impostor trials that may pass
    tau = float(np.nextafter(ranked[allowed], np.inf)) if allowed < ranked.size else float(ranked[-1])
    return float((genuine < tau).mean()), tau


def verification(by_speaker: dict[str, list[Embedded]], splits: int) -> dict:
    """Scores over `splits` enrolment draws, per probe length and for cross-recording genuine probes."""
    scores: dict[str, tuple[list[float], list[float]]] = {}
    for split in range(splits):
        enrolled = draw(by_speaker, np.random.default_rng(split))
        templates = {s: template(rows) for s, rows in enrolled.items()}
        probes = [r for s, rows in by_speaker.items() if s in enrolled for r in rows if r not in enrolled[s]]
        for owner, tmpl in templates.items():
            meetings = {r.clip.recording for r in enrolled[owner]}
            for probe in probes:
                same = probe.clip.speaker == owner
                for key, vector in [("full", probe.full), *((f"{n}s", v) for n, v in probe.cut.items())]:
                    keys = [key] + (["cross-recording"] if key == "full" and (not same or probe.clip.recording
                                                                             not in meetings) else [])
                    for k in keys:
                        scores.setdefault(k, ([], []))[0 if same else 1].append(float(vector @ tmpl))
    rows = {}
    for key, (genuine, impostor) in scores.items():
        g, i = np.array(genuine), np.array(impostor)
        rate, tau = eer(g, i)
        fnmr, tau_fmr = fnmr_at(g, i, FMR)
        rows[key] = {"eer": rate, "eer_tau": tau, "fnmr_at_fmr_1pct": fnmr, "tau_at_fmr_1pct": tau_fmr,
                     "genuine_trials": int(g.size), "impostor_trials": int(i.size),
                     "impostor_trials_passing_at_fmr_1pct": int((i >= tau_fmr).sum()),
                     "genuine_mean": float(g.mean()), "impostor_mean": float(i.mean()),
                     "impostor_p99": float(np.percentile(i, 99)), "impostor_max": float(i.max())}
    return rows


def stranger_protocol(by_speaker: dict[str, list[Embedded]], outsiders: list[Embedded], taus: dict[str, float]) -> dict:
    """FPIR and FNIR at each τ over every choice of HELD_OUT speakers never enrolled."""
    counts = {name: {"stranger_probes": 0, "false_positives": 0, "enrolled_probes": 0, "false_negatives": 0}
              for name in taus}
    best_stranger = []
    speakers = sorted(by_speaker)
    combos = list(itertools.combinations(speakers, HELD_OUT))
    for n, held in enumerate(combos):
        enrolled = draw({s: by_speaker[s] for s in speakers if s not in held}, np.random.default_rng(1000 + n))
        names = sorted(enrolled)
        matrix = np.stack([template(enrolled[s]) for s in names])
        stranger_probes = [r for s in held for r in by_speaker[s]] + outsiders
        enrolled_probes = [r for s in names for r in by_speaker[s] if r not in enrolled[s]]
        stranger_best = (np.stack([r.full for r in stranger_probes]) @ matrix.T).max(axis=1)
        best_stranger.extend(stranger_best.tolist())
        enrolled_scores = np.stack([r.full for r in enrolled_probes]) @ matrix.T
        own = np.array([names.index(r.clip.speaker) for r in enrolled_probes])
        own_score = enrolled_scores[np.arange(own.size), own]
        rank1 = enrolled_scores.argmax(axis=1) == own
        for name, tau in taus.items():
            c = counts[name]
            c["stranger_probes"] += int(stranger_best.size)
            c["false_positives"] += int((stranger_best >= tau).sum())
            c["enrolled_probes"] += int(own.size)
            c["false_negatives"] += int((~rank1 | (own_score < tau)).sum())
    return {"splits": len(combos), "held_out": HELD_OUT, "enrolled": len(speakers) - HELD_OUT,
            "best_stranger_score_p50": float(np.median(best_stranger)),
            "best_stranger_score_max": float(np.max(best_stranger)),
            **{name: {**c, "tau": taus[name], "fpir": c["false_positives"] / c["stranger_probes"],
                      "fnir": c["false_negatives"] / c["enrolled_probes"]} for name, c in counts.items()}}


@dataclass(frozen=True)
class Face:
    """A real person's face given to a speaker: the embeddings enrolled and those probed with, in turn."""

    person: int  # index in calibration_faces()
    enrol: tuple[np.ndarray, ...]
    probes: tuple[np.ndarray, ...]


def faces_for(speakers: list[str], face_encoder) -> dict[str, Face]:
    """A different real person's face for each of `speakers`, in order: the first people of calibration_faces()
    whose photo and every capture used encode (one face found, clear enough)."""
    given: dict[str, Face] = {}
    people = iter(enumerate(calibration_faces()))
    for speaker in speakers:
        for person, photos in people:
            shots = {n: photos[0] if n == 0 else augment(photos[0], seed=1000 * person + n)
                     for n in (*FACE_ENROL, *FACE_PROBES)}
            try:
                enrol = tuple(face_encoder.capture(shots[n], "enrol") for n in FACE_ENROL)
                probes = tuple(face_encoder.encode(shots[n]) for n in FACE_PROBES)
            except InvalidInputError:
                continue
            given[speaker] = Face(person, enrol, probes)
            break
        else:
            raise RuntimeError(f"calibration_faces() holds too few usable faces for {len(speakers)} speakers")
    return given


def consistent_draw(rows: list[Embedded], tau: float, rng: np.random.Generator) -> tuple[list[Embedded], int]:
    """(ENROL clips whose every pair scores at least τ, the draws refused before them): the enrolment the engine
    takes as one person (check_one_person), as someone asked to record again would give it; ([], tries) if none."""
    for tries in range(ENROL_TRIES):
        picked = [rows[i] for i in sorted(rng.choice(len(rows), ENROL, replace=False))]
        matrix = np.stack([r.full for r in picked])
        if (matrix @ matrix.T)[np.triu_indices(ENROL, k=1)].min() >= tau:
            return picked, tries
    return [], ENROL_TRIES


FUSED_ROWS = {  # probe -> whom it should admit ("own": the probe's owner, None: nobody)
    "face + voice, both the enrolled person's": "own",
    "face + voice, own face with another enrolled speaker's voice": None,
    "face + voice, a stranger's face and voice": None,
    "voice alone, enrolled speaker": "own",
    "voice alone, stranger": None,
    "face alone, enrolled person": "own",
    "face alone, stranger": None,
}
CLOSEST = "closest speaker, no threshold"


def calibration(encoder, rows: list[Clip]) -> dict:
    """What `biomem calibrate --modality voice-ge2e --fmr 0.01` reports on the speakerbox clips laid out as
    speaker/clip.wav (calibrate_folder: every clip against every other, no templates)."""
    with tempfile.TemporaryDirectory(prefix="biomem-voice-calibrate-") as folder:
        for clip in rows:
            (Path(folder) / clip.speaker).mkdir(exist_ok=True)
            (Path(folder) / clip.speaker / f"{clip.recording}-{clip.path.name}").symlink_to(clip.path)
        report = calibrate_folder(encoder, folder, fmr=FMR)
    tau = report.at_fmr.tau
    return {"command": "biomem calibrate --modality voice-ge2e --data SPEAKERS --fmr 0.01",
            "genuine_pairs": report.genuine, "impostor_pairs": report.impostor, "refused": len(report.refused),
            "eer": report.eer, "eer_tau": report.at_eer.tau, "tau_at_fmr_1pct": tau, "fnmr_at_fmr_1pct":
            report.at_fmr.fnmr, "impostor_pairs_passing": int((report.impostor_scores >= tau).sum()),
            "margin_at_that_tau": report.margin(tau)}


def fused_protocol(by_speaker: dict[str, list[Embedded]], outsiders: list[Embedded], face_encoder,
                   text_model: TextEncoder, voice_tau: float | None = None) -> dict:
    """Face + voice through BioMemory's gate over every choice of HELD_OUT speakers never enrolled (module doc):
    per probe kind, trials and how many admitted the right person, a wrong one, nobody; and the closest-speaker
    rule on the same voice templates and probes. `voice_tau`: the voice's τ, set by hand (the encoder's default
    otherwise); set so, it records no FMR, so enrolment is not capped by the target FPIR (check_room)."""
    speakers = sorted(by_speaker)
    faces = faces_for(speakers + [r.clip.speaker for r in outsiders], face_encoder)
    counts = {name: {"expected": "the probe's owner" if who else "nobody", "trials": 0, "right": 0, "wrong": 0,
                     "nobody": 0} for name, who in FUSED_ROWS.items()}
    closest = {"enrolled": {"trials": 0, "right": 0, "wrong": 0, "nobody": 0},
               "stranger": {"trials": 0, "attributed_to_an_enrolled_speaker": 0}}
    refused = {"draws_not_one_person": 0, "speakers_not_enrolled": 0, "enrolments_refused_by_the_engine": 0}
    settings: dict = {}
    combos = list(itertools.combinations(speakers, HELD_OUT))
    with tempfile.TemporaryDirectory(prefix="biomem-voice-fused-") as folder:
        for n, held in enumerate(combos):
            mem = BioMemory(Path(folder) / f"split-{n}.db", encoder=face_encoder, text_model=text_model)
            try:
                if voice_tau is not None:
                    mem.set_threshold(voice_tau, VOICE, "benchmarks.voice: calibrate_folder's τ at FMR 1 %, by hand")
                tau = mem.threshold(VOICE)
                settings = {"voice_tau": tau, "voice_margin": mem.margin(VOICE), "face_tau": mem.threshold(FACE),
                            "face_margin": mem.margin(FACE), "fusion": mem.fusion}
                rng, ids, enrolled = np.random.default_rng(2000 + n), {}, {}
                for speaker in (s for s in speakers if s not in held):
                    clips_, tries = consistent_draw(by_speaker[speaker], tau, rng)
                    refused["draws_not_one_person"] += tries
                    if not clips_:
                        refused["speakers_not_enrolled"] += 1
                        continue
                    try:
                        ids[speaker] = mem.enroll(speaker, {
                            FACE: [Probe(v, FACE) for v in faces[speaker].enrol],
                            VOICE: [Probe(r.full, VOICE) for r in clips_]}).id
                        enrolled[speaker] = clips_
                    except EnrolmentError:
                        refused["enrolments_refused_by_the_engine"] += 1
                strangers_ = [r for s in held for r in by_speaker[s]] + outsiders
                _probe_split(mem, by_speaker, enrolled, ids, strangers_, faces, counts, closest)
            finally:
                mem.close()
    for row in counts.values():
        row["right_rate"] = row["right"] / row["trials"] if row["expected"] != "nobody" else None
        row["wrong_rate"], row["nobody_rate"] = row["wrong"] / row["trials"], row["nobody"] / row["trials"]
    closest["stranger"]["rate"] = closest["stranger"]["attributed_to_an_enrolled_speaker"] / \
        closest["stranger"]["trials"]
    return {"splits": len(combos), "held_out": HELD_OUT, "enrolled_per_split": len(speakers) - HELD_OUT,
            "face_encoder": FACE, "faces": {s: f.person for s, f in faces.items()},
            "face_captures": {"enrolled": list(FACE_ENROL), "probed": list(FACE_PROBES)}, **settings,
            "enrolment": refused, "rows": counts, CLOSEST: closest}


def _probe_split(mem: BioMemory, by_speaker: dict[str, list[Embedded]], enrolled: dict[str, list[Embedded]],
                 ids: dict[str, int], strangers_: list[Embedded], faces: dict[str, Face], counts: dict,
                 closest: dict) -> None:
    """One split's probes (fused_protocol), counted into `counts` and `closest`."""
    def count(row: str, probe: dict, owner: int | None, face_owner: int | None = None) -> None:
        admitted = mem.identify(probe).identity
        c = counts[row]
        c["trials"] += 1
        c["nobody" if admitted is None else "right" if admitted == owner else "wrong"] += 1
        if face_owner is not None:  # whose face it was, when another's voice came with it
            c["wrong_the_face_owner"] = c.get("wrong_the_face_owner", 0) + int(admitted == face_owner)

    def face(speaker: str, turn: int) -> Probe:
        shots = faces[speaker].probes
        return Probe(shots[turn % len(shots)], FACE)

    names = sorted(ids)
    templates = {s: np.stack([r.full for r in enrolled[s]]) for s in names}  # the gate's templates of each person
    def nearest(vector: np.ndarray) -> str:
        return max(names, key=lambda s: float((templates[s] @ vector).max()))

    for speaker in names:
        own = ids[speaker]
        for turn in range(len(FACE_PROBES)):
            count("face alone, enrolled person", {FACE: face(speaker, turn)}, own)
        for turn, row in enumerate(r for r in by_speaker[speaker] if r not in enrolled[speaker]):
            voice = Probe(row.full, VOICE)
            count("face + voice, both the enrolled person's", {FACE: face(speaker, turn), VOICE: voice}, own)
            count("voice alone, enrolled speaker", {VOICE: voice}, own)
            for other in (s for s in names if s != speaker):
                count("face + voice, own face with another enrolled speaker's voice",
                      {FACE: face(other, turn), VOICE: voice}, None, ids[other])
            c = closest["enrolled"]
            c["trials"] += 1
            c["right" if nearest(row.full) == speaker else "wrong"] += 1
    seen: set[str] = set()
    for turn, row in enumerate(strangers_):
        stranger = row.clip.speaker
        count("face + voice, a stranger's face and voice", {FACE: face(stranger, turn), VOICE: Probe(row.full, VOICE)},
              None)
        count("voice alone, stranger", {VOICE: Probe(row.full, VOICE)}, None)
        closest["stranger"]["trials"] += 1
        closest["stranger"]["attributed_to_an_enrolled_speaker"] += 1  # the nearest, whatever its score
        if stranger not in seen:
            seen.add(stranger)
            for n in range(len(FACE_PROBES)):
                count("face alone, stranger", {FACE: face(stranger, n)}, None)


def latency(encoder, rows: list[Clip], repeats: int) -> dict:
    """encode() of (16000, samples) probes, VAD included: the first 2, 4, 6 s of a clip's speech (plus 0.1 s, so
    that VAD's 30 ms windows leave the whole length), and whole clips as recorded: ms per probe."""
    result = {}
    for length in (*LENGTHS, None):
        times, refused = [], 0
        for clip in rows:
            wav = load_audio(clip.path)
            if length is not None:
                wav = speech(wav, 0.0)[: round((length + 0.1) * SAMPLE_RATE)]
                if wav.size < (length + 0.1) * SAMPLE_RATE:
                    continue
            for _ in range(repeats):
                start = time.perf_counter()
                try:
                    encoder.encode((SAMPLE_RATE, wav))
                except TooLittleSpeechError:
                    refused += 1
                    break
                times.append((time.perf_counter() - start) * 1000)
        result["full" if length is None else f"{length}s"] = {**percentiles(times), "refused": refused}
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=20, help="seeded enrolment draws for verification")
    parser.add_argument("--latency-clips", type=int, default=12, help="clips timed per probe length")
    parser.add_argument("--out", default=str(RESULTS / "voice.json"))
    args = parser.parse_args(argv)
    rows, outsiders_rows = clips(), strangers()
    load_before = _loadavg()
    start = time.perf_counter()
    import torch

    imported = time.perf_counter()
    encoder = modalities.create("voice-ge2e")
    loaded = time.perf_counter()
    log(f"torch imported in {imported - start:.2f} s, encoder loaded in {loaded - imported:.2f} s")
    embedded, refused = embed_all(encoder, rows)
    outsiders, _ = embed_all(encoder, outsiders_rows)
    by_speaker: dict[str, list[Embedded]] = {}
    for row in embedded:
        by_speaker.setdefault(row.clip.speaker, []).append(row)
    log(f"{len(embedded)} clips embedded, {len(refused)} refused (< 2 s of speech)")
    verify = verification(by_speaker, args.splits)
    taus = {"default_tau": encoder.info.default_threshold, "eer_tau": verify["full"]["eer_tau"],
            "fmr_1pct_tau": verify["full"]["tau_at_fmr_1pct"]}
    crowd = stranger_protocol(by_speaker, outsiders, taus)
    log("calibrate_folder on the clips, then face + voice through the gate")
    calibrated = calibration(encoder, rows)
    face_encoder, text_model = modalities.create(FACE), TextEncoder()
    fused = fused_protocol(by_speaker, outsiders, face_encoder, text_model)
    fused_calibrated = fused_protocol(by_speaker, outsiders, face_encoder, text_model, calibrated["tau_at_fmr_1pct"])
    timed = latency(encoder, [r.clip for r in embedded][:: max(1, len(embedded) // args.latency_clips)], 3)
    results = {
        "command": command("voice", argv), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_info("torch", "webrtcvad-wheels", "resemblyzer"),
        "load_average_before": load_before, "load_average_after": _loadavg(),
        "torch_threads": {"encoder": encoder.worker_threads(), "this_thread": torch.get_num_threads()},
        "encoder": encoder.info.as_dict(),
        "data": {"clips": len(rows), "refused_under_2s": [f"{c.recording}/{c.speaker}/{c.path.name}" for c in refused],
                 "speakers": {s: {"clips": len(v), "recordings": len({r.clip.recording for r in v}),
                                  "speech_s": round(sum(r.seconds for r in v), 1)} for s, v in by_speaker.items()},
                 "strangers": [c.speaker for c in outsiders_rows], "enrolment_clips": ENROL, "splits": args.splits},
        "load_s": {"import_torch": imported - start, "create": loaded - imported},
        "verification": verify, "strangers": crowd, "latency_ms": timed,
        "calibration": calibrated, "fused": fused, "fused_calibrated_tau": fused_calibrated,
    }
    print(table(results))
    log(f"wrote {write_result(args.out, results)}")


def table(results: dict) -> str:
    lines = ["| probes | genuine | impostor | EER | τ at EER | FNMR @ FMR 1 % (τ, passing/impostor trials) |",
             "| --- | ---: | ---: | ---: | ---: | --- |"]
    for key, row in results["verification"].items():
        lines.append(f"| {key} | {row['genuine_trials']} | {row['impostor_trials']} | {row['eer']:.1%} | "
                     f"{row['eer_tau']:.3f} | {row['fnmr_at_fmr_1pct']:.1%} ({row['tau_at_fmr_1pct']:.3f}, "
                     f"{row['impostor_trials_passing_at_fmr_1pct']}/{row['impostor_trials']}) |")
    crowd = results["strangers"]
    lines += ["", f"Strangers: {crowd['held_out']} of 9 speakers never enrolled, {crowd['splits']} splits",
              "| τ | FPIR | FNIR |", "| --- | ---: | ---: |"]
    for name in ("default_tau", "eer_tau", "fmr_1pct_tau"):
        row = crowd[name]
        lines.append(f"| {row['tau']:.3f} ({name}) | {row['fpir']:.1%} ({row['false_positives']}/"
                     f"{row['stranger_probes']}) | {row['fnir']:.1%} ({row['false_negatives']}/"
                     f"{row['enrolled_probes']}) |")
    cal = results["calibration"]
    lines += ["", f"{cal['command']}: EER {cal['eer']:.1%} (τ {cal['eer_tau']:.3f}); FMR 1 % at τ "
              f"{cal['tau_at_fmr_1pct']:.3f}, FNMR {cal['fnmr_at_fmr_1pct']:.1%} ({cal['impostor_pairs_passing']} of "
              f"{cal['impostor_pairs']} impostor pairs pass); δ at that τ {cal['margin_at_that_tau']}"]
    for key in ("fused", "fused_calibrated_tau"):
        lines += ["", fused_table(results[key]), "", closest_table(results[key])]
    lines += ["", "| probe | p50 ms | p95 ms |", "| --- | ---: | ---: |"]
    lines += [f"| {k} | {v['p50_ms']:.0f} | {v['p95_ms']:.0f} |" for k, v in results["latency_ms"].items()]
    load = results["load_s"]
    lines.append(f"\nload: torch import {load['import_torch']:.2f} s, create "
                 f"{load['create']:.2f} s; load average {results['load_average_before']} -> "
                 f"{results['load_average_after']}")
    return "\n".join(lines)


def fused_table(fused: dict) -> str:
    """Face + voice through the gate: per probe kind, trials and outcomes."""
    lines = [f"Face + voice through the gate: {fused['splits']} splits, {fused['enrolled_per_split']} pairs enrolled, "
             f"voice τ {fused['voice_tau']:.3f} δ {fused['voice_margin']:.2f}, face τ {fused['face_tau']:.3f} "
             f"δ {fused['face_margin']:.2f}, fusion {fused['fusion']}",
             "| probe | should admit | trials | right person | a wrong person | nobody |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for name, row in fused["rows"].items():
        right = "—" if row["right_rate"] is None else f"{row['right_rate']:.1%} ({row['right']})"
        lines.append(f"| {name} | {row['expected']} | {row['trials']:,} | {right} | {row['wrong_rate']:.1%} "
                     f"({row['wrong']}) | {row['nobody_rate']:.1%} ({row['nobody']}) |")
    return "\n".join(lines)


def closest_table(fused: dict) -> str:
    """What a stranger gets: the closest-speaker rule, the voice through the gate, face + voice through the gate."""
    rows, near = fused["rows"], fused[CLOSEST]
    lines = ["| rule | strangers attributed to someone enrolled | enrolled speakers: right | wrong | nobody |",
             "| --- | ---: | ---: | ---: | ---: |"]
    enrolled, stranger = near["enrolled"], near["stranger"]
    lines.append(f"| {CLOSEST} | {stranger['rate']:.1%} ({stranger['attributed_to_an_enrolled_speaker']}/"
                 f"{stranger['trials']}) | {_share(enrolled, 'right')} | {_share(enrolled, 'wrong')} | "
                 f"{_share(enrolled, 'nobody')} |")
    for label, mine, theirs in (("voice-ge2e through the gate", "voice alone, enrolled speaker",
                                 "voice alone, stranger"),
                                ("face + voice through the gate", "face + voice, both the enrolled person's",
                                 "face + voice, a stranger's face and voice")):
        lines.append(f"| {label} | {_share(rows[theirs], 'wrong')} | {_share(rows[mine], 'right')} | "
                     f"{_share(rows[mine], 'wrong')} | {_share(rows[mine], 'nobody')} |")
    return "\n".join(lines)


def _share(row: dict, outcome: str) -> str:
    return f"{row[outcome] / row['trials']:.1%} ({row[outcome]}/{row['trials']})"


def _loadavg() -> list[float]:
    with open("/proc/loadavg") as handle:
        return [float(x) for x in handle.read().split()[:3]]


if __name__ == "__main__":
    main()
