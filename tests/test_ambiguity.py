"""The gate's ambiguity rule: a probe as close to two enrolled people as the gate can tell apart admits nobody.

Unit tests of the rule on synthetic scores and fused margins; then real faces: blends and landmark-aligned
morphs of two enrolled people at α 0.3-0.7 are never admitted as either where both clear τ, while real
captures of each still are; then the engine, REST and page paths, which name nobody.

The morph table and the capture rates of the docs (docs/gate-lookalikes.md) are printed by
`HF_HUB_OFFLINE=1 python -m pytest -q -s -p no:cacheprovider tests/test_ambiguity.py -k "morph or real_captures"`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from unittest import mock

import gradio as gr
import httpx
import numpy as np
import pytest
from PIL import Image

import modalities
from biomem import BioMemory
from biomem.engine.keys import create_key
from biomem.engine.messages import AMBIGUOUS, readable
from biomem.errors import AmbiguousProbeError, InvalidInputError, StepUpRequiredError
from biomem.identity import disclosure
from biomem.identity.calibrate import calibrate_folder, save
from biomem.identity.gate import DEFAULT_MARGINS, GateResult, _admit, fuse
from biomem.identity.samples import write_face_set
from biomem.ui import Controller, render
from biomem.ui.messages import friendly
from modalities.arcface import _bgr, detector_input

from .shared import ANA, BEN, DAN, EVE, FINN, STRANGER, png, rest_service

ALPHAS = (0.3, 0.4, 0.5, 0.6, 0.7)
ENROLLED = (ANA, BEN, DAN, EVE, FINN, STRANGER)  # the people the real-face tests enrol; Chloe stays a stranger
LOOK_ALIKES = (BEN, FINN)  # the closest pair of them (photo cosine 0.19): their morphs clear τ for both
CAPTURES = 10  # fresh captures per enrolled person scored for the admission rate


# ---- the rule on synthetic scores ----------------------------------------------------------------------

IDS = np.array([1, 2, 3])


@pytest.mark.parametrize("scores, margin, admitted, ambiguous", [
    ([0.70, 0.30, 0.10], 0.18, [1], False),  # a clear winner
    ([0.50, 0.40, 0.10], 0.18, [], True),  # the runner-up within δ of the best: nobody
    ([0.50, 0.32, 0.10], 0.18, [], True),  # exactly δ below the best counts as within
    ([0.50, 0.31, 0.10], 0.18, [1], False),  # just beyond δ
    ([0.95, 0.45, 0.10], 0.18, [], True),  # far apart but both clear τ: τ itself cannot tell them apart
    ([0.40, 0.39, 0.10], 0.18, [], False),  # nobody clears τ: a miss, not ambiguous
    ([0.50, 0.49, 0.10], 0.0, [], True),  # δ 0 still refuses a runner-up at or above τ
    ([0.50, 0.41, 0.10], 0.0, [1], False),
])
def test_best_admits_nobody_when_the_runner_up_is_within_delta_or_clears_tau(scores, margin, admitted, ambiguous):
    assert _admit(IDS, np.array(scores), 0.43, "best", margin) == (admitted, ambiguous)


def test_one_enrolled_person_is_never_ambiguous_and_all_keeps_the_paper_s_rule():
    assert _admit(np.array([7]), np.array([0.44]), 0.43, "best", 0.18) == ([7], False)
    assert _admit(IDS, np.array([0.50, 0.45, 0.10]), 0.43, "all", 0.18) == ([1, 2], False)
    assert _admit(IDS[:0], np.zeros(0), 0.43, "best", 0.18) == ([], False)


def test_a_negative_or_infinite_margin_is_refused():
    for margin in (-0.01, np.inf, np.nan):
        with pytest.raises(InvalidInputError):
            _admit(IDS, np.array([0.5, 0.1, 0.0]), 0.43, "best", margin)


def part(modality: str, scores: list[float], threshold: float, margin: float) -> GateResult:
    admitted, ambiguous = _admit(IDS, np.array(scores), threshold, "all", margin)
    return GateResult(identity=None, admitted=admitted, identity_ids=IDS, best_scores=np.array(scores),
                      threshold=threshold, modality=modality, policy="all", margin=margin, ambiguous=ambiguous)


def test_fusion_applies_the_rule_to_fused_margins():
    """Fused scores are margins s - τ combined (sum, min, max); δ is combined the same way."""
    face = part("face", [0.60, 0.50, 0.10], 0.43, 0.18)  # margins 0.17, 0.07: within the face's δ
    palm = part("palm", [0.80, 0.30, 0.10], 0.40, 0.10)  # margins 0.40, -0.10: the palm tells them apart
    summed = fuse([face, palm], "sum")  # fused 0.57 vs -0.03, δ 0.28: identity 1
    assert summed.admitted == [1] and not summed.ambiguous and summed.margin == pytest.approx(0.28)
    both = fuse([face, palm], "all")  # min margins 0.17 vs -0.10, δ 0.10: identity 1
    assert both.admitted == [1] and not both.ambiguous
    close = part("palm", [0.50, 0.45, 0.10], 0.40, 0.10)  # margins 0.10, 0.05: the palm cannot tell either
    for fusion in ("sum", "all", "any"):
        fused = fuse([face, close], fusion)
        assert fused.ambiguous and not fused.matched and fused.identity is None, fusion
    assert fuse([face, close], "sum", policy="all").admitted == [1, 2]


# ---- δ: stored beside τ, else the encoder's default, calibrated from the genuine gaps --------------------

def test_margin_is_stored_per_modality_else_the_encoder_default(make_memory):
    mem = make_memory()
    assert mem.margin() == DEFAULT_MARGINS["face-arcface-s"] == 0.18
    mem.set_margin(0.05, source="test")
    assert mem.margin() == 0.05 and mem.store.margin("face-arcface-s") == (0.05, "test")
    with pytest.raises(InvalidInputError):
        mem.set_margin(-0.1)


def test_calibration_saves_delta_with_its_provenance(tmp_path, face_encoder, make_memory):
    write_face_set(tmp_path / "faces", 3)
    report = calibrate_folder(face_encoder, tmp_path / "faces")
    runner_up = np.quantile(report.top_two[:, 1], 0.99)
    assert report.margin() == pytest.approx(report.intersection.tau - runner_up)
    assert (report.top_two[:, 0] > report.top_two[:, 1]).all()  # the sample faces are separated
    assert "ambiguity margin δ" in report.table()
    mem = make_memory()
    tau = save(report, mem)
    delta, source = mem.store.margin(face_encoder.name)
    assert delta == pytest.approx(report.margin(tau)) and "runner-up" in source and "calibrate" in source
    save(report, mem, which="fmr", step_up=True)  # a step-up τ leaves δ alone
    assert mem.store.margin(face_encoder.name)[0] == delta


# ---- real faces: blends and landmark-aligned morphs ------------------------------------------------------

def aligned(encoder: modalities.Encoder, image: np.ndarray) -> np.ndarray:
    """The face in `image` as the encoder aligns it (its detector's 5 keypoints, insightface's norm_crop):
    a 112x112 RGB crop."""
    bgr = _bgr(image)
    _, keypoints = encoder._detector.detect(bgr, input_size=detector_input(bgr.shape))
    return np.ascontiguousarray(encoder._norm_crop(bgr, landmark=keypoints[0], image_size=112)[:, :, ::-1])


def mix(a: np.ndarray, b: np.ndarray, alpha: float) -> np.ndarray:
    """(1 - α) a + α b, pixel by pixel."""
    return np.round((1 - alpha) * a.astype(np.float32) + alpha * b.astype(np.float32)).astype(np.uint8)


def attacks(encoder: modalities.Encoder, faces: list[np.ndarray]) -> dict[str, Callable[[int, int, float], np.ndarray]]:
    """kind -> make(a, b, α): a pixel blend of the two face photos, or a morph of their landmark-aligned crops."""
    crops = {p: aligned(encoder, faces[p]) for p in ENROLLED}
    return {"blend": lambda a, b, alpha: mix(faces[a], faces[b], alpha),
            "morph": lambda a, b, alpha: mix(crops[a], crops[b], alpha)}


def enrol_all(mem: BioMemory, capture) -> dict[int, int]:
    """Every person of ENROLLED from two captures: person -> identity id."""
    return {p: mem.enroll(f"person-{p}", [capture(p, 0), capture(p, 1)]).id for p in ENROLLED}


def morph_table(mem: BioMemory, encoder: modalities.Encoder, faces: list[np.ndarray],
                ids: dict[int, int]) -> list[dict]:
    """One row per kind and α over every pair of enrolled people: admitted as A / as B / ambiguous / nobody,
    how many cleared τ for both, and how many of those were admitted as either (must be 0)."""
    tau, rows = mem.threshold(), []
    for kind, make in attacks(encoder, faces).items():
        for alpha in ALPHAS:
            row = {"kind": kind, "alpha": alpha, "as A": 0, "as B": 0, "ambiguous": 0, "nobody": 0, "refused": 0,
                   "both ≥ τ": 0, "both ≥ τ admitted": 0}
            for a, b in itertools.combinations(ENROLLED, 2):
                try:
                    gate = mem.identify(make(a, b, alpha))
                except InvalidInputError:  # the detector finds no single face in the blend
                    row["refused"] += 1
                    continue
                admitted = gate.identity in (ids[a], ids[b])
                row["as A" if gate.identity == ids[a] else "as B" if gate.identity == ids[b] else
                    "ambiguous" if gate.ambiguous else "nobody"] += 1
                both = min(gate.score_of(ids[a]), gate.score_of(ids[b])) >= tau
                row["both ≥ τ"] += both
                row["both ≥ τ admitted"] += both and admitted
            rows.append(row)
    return rows


def capture_rates(mem: BioMemory, capture, ids: dict[int, int]) -> dict[str, int]:
    """Fresh captures (2 .. CAPTURES+1) of each enrolled person: admitted as themselves with δ, ambiguous,
    and admitted as themselves by the rule without δ (the best at or above τ)."""
    counts = {"captures": 0, "admitted": 0, "ambiguous": 0, "admitted without δ": 0, "as someone else": 0}
    tau = mem.threshold()
    for person, n in itertools.product(ENROLLED, range(2, CAPTURES + 2)):
        gate = mem.identify(capture(person, n))
        best = int(np.argmax(gate.best_scores))
        counts["captures"] += 1
        counts["admitted"] += gate.identity == ids[person]
        counts["ambiguous"] += gate.ambiguous
        counts["as someone else"] += gate.identity not in (None, ids[person])
        counts["admitted without δ"] += bool(gate.best_scores[best] >= tau and gate.identity_ids[best] == ids[person])
    return counts


@pytest.fixture(scope="module")
def enrolled(tmp_path_factory, text_encoder, face_encoder, capture):
    mem = BioMemory(tmp_path_factory.mktemp("ambiguity") / "m.db", text_model=text_encoder, encoder=face_encoder,
                    limits="off")
    ids = enrol_all(mem, capture)
    yield mem, ids
    mem.close()


def test_no_blend_or_morph_is_admitted_as_either_person_where_both_clear_tau(enrolled, face_encoder, faces):
    mem, ids = enrolled
    rows = morph_table(mem, face_encoder, faces, ids)
    print(f"\n{len(ids)} people enrolled from 2 captures each; τ {mem.threshold():.2f}, δ {mem.margin():.2f};"
          f" {len(list(itertools.combinations(ENROLLED, 2)))} pairs per α\n| " + " | ".join(rows[0]) + " |\n|"
          + "---|" * len(rows[0]) + "".join("\n| " + " | ".join(str(v) for v in r.values()) + " |" for r in rows))
    assert sum(r["both ≥ τ admitted"] for r in rows) == 0
    assert sum(r["both ≥ τ"] for r in rows) >= 1  # the test reaches the case it is about
    middle = [r for r in rows if r["alpha"] == 0.5]
    assert all(r["as A"] + r["as B"] <= r["nobody"] + r["ambiguous"] for r in middle)  # half-and-half is nobody's


def test_real_captures_of_each_person_are_still_admitted(enrolled, capture):
    mem, ids = enrolled
    counts = capture_rates(mem, capture, ids)
    print("\nreal captures:", counts)
    assert counts["as someone else"] == 0
    assert counts["admitted"] >= counts["admitted without δ"] - 1  # δ costs at most one real capture here
    assert counts["admitted"] >= 0.9 * counts["captures"]


# ---- every surface: the engine, the page, REST; nobody is named -----------------------------------------

@pytest.fixture(scope="module")
def look_alikes(tmp_path_factory, text_encoder, face_encoder, faces, capture):
    """A store of the two look-alikes with a note each, and an aligned morph of them the gate finds ambiguous."""
    mem = BioMemory(tmp_path_factory.mktemp("look-alikes") / "m.db", text_model=text_encoder,
                    encoder=face_encoder, limits="off")
    a, b = (mem.enroll(f"person-{p}", [capture(p, 0), capture(p, 1)]) for p in LOOK_ALIKES)
    mem.add("My PIN is 1234", identity=a.id)
    mem.add("My PIN is 9876", identity=b.id)
    morph = attacks(face_encoder, faces)["morph"](*LOOK_ALIKES, 0.4)
    yield mem, a, b, morph
    mem.close()


def test_an_ambiguous_probe_reads_and_writes_nothing(look_alikes):
    mem, a, b, morph = look_alikes
    gate = mem.identify(morph)
    assert gate.ambiguous and not gate.matched and gate.admitted == [] and gate.identity is None
    assert min(gate.score_of(a.id), gate.score_of(b.id)) >= mem.threshold() - mem.margin()
    found = mem.search("my PIN", probe=morph)
    assert found.notes == [] and found.view["gate"] == {"matched": False, "modality": mem.modality, "ambiguous": True,
                                                        "advice": disclosure.AMBIGUOUS}
    before = mem.store.note_total()
    with pytest.raises(AmbiguousProbeError) as refused:
        mem.add("Planted", probe=morph)
    with pytest.raises(AmbiguousProbeError):
        mem.session(morph)
    with pytest.raises(StepUpRequiredError):
        mem.verify(morph)
    assert mem.store.note_total() == before
    title, message = readable(refused.value)
    assert message == AMBIGUOUS and not {"person-1", "person-5"} & set(f"{title} {message}".split())


def test_an_ambiguous_probe_counts_as_a_miss(tmp_path, text_encoder, face_encoder, faces, capture):
    mem = BioMemory(tmp_path / "m.db", text_model=text_encoder, encoder=face_encoder)
    for p in LOOK_ALIKES:
        mem.enroll(f"person-{p}", [capture(p, 0), capture(p, 1)])
    morph = attacks(face_encoder, faces)["morph"](*LOOK_ALIKES, 0.4)
    with mock.patch.object(mem.limiter, "miss") as miss:
        assert mem.identify(morph, client="kiosk").ambiguous
    assert miss.call_args.args[0] == "kiosk"
    mem.close()


def test_the_page_asks_for_a_better_capture_and_names_nobody(look_alikes):
    mem, _, _, morph = look_alikes
    view = mem.search("my PIN", probe=morph).view["gate"]
    for html in (render.gate_html(view), render.asker(view)):
        assert "take a clearer one" in html and "person-" not in html
    assert "take a clearer one" in render.gate_html({**view, "matched": False, "scores": []})


def test_my_households_says_the_gate_could_not_tell_and_names_nobody(look_alikes, cache):
    """The Remember's "My households" (the households a person's notes may go to, with their members) refuses an
    ambiguous probe as the gate could not tell who, as Chat does, not as "Not recognised", and names nobody."""
    mem, _, _, morph = look_alikes
    folder = cache / "morph"
    folder.mkdir()
    Image.fromarray(morph).save(folder / "morph.png")
    with pytest.raises(gr.Error) as refused:
        friendly(Controller(mem).homes.of)(str(folder / "morph.png"), None)
    assert refused.value.title == "Could not tell who" and refused.value.message.endswith(AMBIGUOUS)
    assert "person-" not in f"{refused.value.title} {refused.value.message}"
    assert not (folder / "morph.png").exists()  # the probe is used once, as every probe is


def test_rest_says_the_gate_could_not_tell_and_names_nobody(look_alikes):
    mem, _, _, morph = look_alikes
    key = create_key(mem.store, "agent", "agent")[0]
    with rest_service(mem) as (_, http):
        def call(path: str, **data) -> httpx.Response:
            return http.post(f"/v1{path}", headers={"Authorization": f"Bearer {key}"},
                             files={"probe": ("probe.png", png(morph), "image/png")}, data=data)
        found = call("/search", query="my PIN")
        assert found.status_code == 200 and found.json()["results"] == []
        assert found.json()["gate"] == {"matched": False, "modality": mem.modality, "ambiguous": True,
                                        "advice": disclosure.AMBIGUOUS}
        added = call("/memories", text="Planted")
        assert added.status_code == 422, added.text
        assert added.json()["error"]["type"] == "AmbiguousProbeError" and added.json()["error"]["message"] == AMBIGUOUS
        for reply in (found, added):
            assert "person-" not in reply.text and "1234" not in reply.text and "9876" not in reply.text

