"""τ that knows how many people it guards: FPIR = 1 - (1 - FMR)^N against a simulation, the report's
rule-of-three floor, stats and /v1/health, and enrolment refused past the size a calibrated τ guards."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from biomem.engine.keys import create_key
from biomem.engine.messages import readable
from biomem.errors import EnrolmentLimitError, InvalidInputError
from biomem.identity.calibrate import calibrate_scores, save
from biomem.identity.enrolment import calibrated_fmr, fpir, max_enrolled, rule_of_three
from biomem.identity.gate import Probe
from biomem.server.errors import status_of
from biomem.settings import Settings
from biomem.ui import Controller, render
from biomem.ui.layout import build_app

from .shared import rest_service

SYNTH = "synthetic-64"  # precomputed probes: random unit vectors are near-orthogonal people


def person(seed: int) -> Probe:
    vector = np.random.default_rng(seed).normal(size=64)
    return Probe(vector / np.linalg.norm(vector), SYNTH)


def report(impostors: int, target_fmr: float, seed: int = 0):
    """A calibration of SYNTH on synthetic scores: genuine near 0.9, `impostors` uniform in [-0.3, 0.5]."""
    rng = np.random.default_rng(seed)
    return calibrate_scores(rng.normal(0.9, 0.03, 400).clip(-1, 1), rng.uniform(-0.3, 0.5, impostors),
                            fmr=target_fmr, modality=SYNTH)


# ---- the formula ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("tau", "enrolled"), [(0.3, 20), (0.25, 100), (0.35, 1000)])
def test_fpir_matches_a_brute_force_simulation(tau, enrolled):
    """Strangers' scores against N enrolled people drawn from an impostor density: the share of strangers
    clearing τ against anyone is 1 - (1 - FMR)^N within sampling error."""
    rng = np.random.default_rng(7)
    fmr = float(norm.sf(tau, loc=0.0, scale=0.1))  # impostor cosines ~ N(0, 0.1)
    trials = 20_000
    hits = 0
    for chunk in range(0, trials, 2_000):
        scores = rng.normal(0.0, 0.1, size=(min(2_000, trials - chunk), enrolled))
        hits += int((scores >= tau).any(axis=1).sum())
    expected = fpir(fmr, enrolled)
    sd = math.sqrt(expected * (1 - expected) / trials)
    assert abs(hits / trials - expected) <= 4 * sd + 1e-4
    assert expected <= enrolled * fmr  # N × FMR is the union bound


@pytest.mark.parametrize("fmr", [1e-2, 3.9e-4, 1e-5, 0.3])
@pytest.mark.parametrize("target", [0.01, 0.05])
def test_the_largest_n_is_the_last_one_under_target(fmr, target):
    limit = max_enrolled(fmr, target)
    assert fpir(fmr, limit) <= target < fpir(fmr, limit + 1)
    assert max_enrolled(0.0, target) is None and fpir(0.0, 10_000) == 0.0


# ---- the report ---------------------------------------------------------------------------------------


def test_the_report_gives_fpir_per_n_and_the_rule_of_three_floor():
    separated = calibrate_scores(np.linspace(0.7, 0.95, 300), np.linspace(-0.2, 0.3, 4_000), modality=SYNTH)
    assert separated.intersection.false_matches == 0
    assert separated.fmr_floor == rule_of_three(4_000) == 3 / 4_000
    assert separated.credited_fmr(separated.intersection) == 3 / 4_000  # 0 false matches credit no less
    table = separated.table(enrolled=3)
    assert "3/4,000 = 7.50e-04" in table
    assert "FPIR N=3 (store)" in table and "FPIR N=10,000" in table
    row = next(line for line in table.splitlines() if line.startswith("| intersection") and "FMR credited" not in line
               and line.count("|") == 9)
    assert f"{fpir(3 / 4_000, 100):.2%}" in row and f"| {max_enrolled(3 / 4_000, 0.01):,} |" in row
    measured = report(1_000, 0.005)  # FMR at τ 5/1,000, above the floor 3/1,000
    assert measured.credited_fmr(measured.at_fmr) == measured.at_fmr.fmr == 0.005


def test_a_saved_calibration_states_its_fmr_and_other_sources_do_not(make_memory):
    mem = make_memory()
    measured = report(1_000, 0.005)
    save(measured, mem, which="fmr")
    assert calibrated_fmr(mem.store.threshold(SYNTH)[1]) == pytest.approx(0.005)
    save(calibrate_scores(np.linspace(0.7, 0.95, 300), np.linspace(-0.2, 0.3, 4_000), modality=SYNTH), mem)
    assert calibrated_fmr(mem.store.threshold(SYNTH)[1]) == pytest.approx(3 / 4_000)
    for source in ("manual", "env BIOMEM_TAU", "--tau", "density intersection over the 40 rows of x.npz", None):
        assert calibrated_fmr(source) is None


# ---- enrolment ------------------------------------------------------------------------------------------


def test_enrolment_is_refused_past_the_size_and_allowed_after_raising_tau(make_memory):
    mem = make_memory(limits="off")
    loose = report(1_000, 0.005)
    save(loose, mem, which="fmr")  # FMR 0.005: at FPIR ≤ 1% this τ guards 2 people
    assert max_enrolled(0.005, mem.target_fpir) == 2
    for n in range(2):
        mem.enroll(f"p{n}", [person(n)])
    before = len(mem.identities())
    with pytest.raises(EnrolmentLimitError, match="at most 2 people") as refused:
        mem.enroll("p2", [person(2)], client="kiosk")
    assert len(mem.identities()) == before  # nothing written
    assert status_of(refused.value) == 409 and readable(refused.value)[0] == "Too many people for this τ"
    assert mem.stats()["identification"][SYNTH]["max_enrolled"] == 2

    strict = report(100_000, 1e-5, seed=1)  # n = 100,000 impostors: FMR credited 3e-5 at a higher τ
    tau = save(strict, mem, which="fmr")
    assert tau > loose.at_fmr.tau
    mem.enroll("p2", [person(2)], client="kiosk")
    risk = mem.identification(SYNTH)
    assert risk["enrolled"] == 3 and risk["fmr"] == pytest.approx(3e-5)
    assert risk["max_enrolled"] == max_enrolled(3e-5, 0.01) == 335


def test_an_uncalibrated_tau_limits_nothing_and_says_so(make_memory):
    mem = make_memory(limits="off")
    mem.target_fpir = 1e-9
    mem.set_threshold(0.5, SYNTH, "manual")
    for n in range(4):
        mem.enroll(f"p{n}", [person(10 + n)])
    risk = mem.stats()["identification"][SYNTH]
    assert risk == {"enrolled": 4, "tau": 0.5, "status": "uncalibrated", "fmr": None, "fpir": None,
                    "max_enrolled": None, "target_fpir": 1e-9}
    default = mem.stats()["identification"][mem.modality]  # the face encoder's default τ, nobody enrolled
    assert default["status"] == "uncalibrated" and default["enrolled"] == 0


def test_adding_a_first_capture_of_a_modality_counts_as_one_more_person(make_memory):
    mem = make_memory(limits="off")
    save(report(1_000, 0.005), mem, which="fmr")
    people = [mem.enroll(f"p{n}", [person(20 + n)]) for n in range(2)]
    vector = np.random.default_rng(30).normal(size=mem.encoder().info.dim)
    third = mem.enroll("face only", [Probe(vector / np.linalg.norm(vector), mem.modality)])  # uncalibrated face τ
    with pytest.raises(EnrolmentLimitError):
        mem.add_templates(third.id, [person(31)])
    mem.add_templates(people[0].id, [person(20)])  # more captures of an enrolled person: N unchanged


# ---- settings, stats and health -------------------------------------------------------------------------


def test_the_target_is_a_setting():
    assert Settings.from_env({}).target_fpir == 0.01
    assert Settings.from_env({"BIOMEM_TARGET_FPIR": "0.001"}).target_fpir == 0.001
    for bad in ("0", "1", "-0.1", "one percent"):
        with pytest.raises(InvalidInputError, match="BIOMEM_TARGET_FPIR"):
            Settings.from_env({"BIOMEM_TARGET_FPIR": bad})


def test_stats_and_admin_health_show_what_tau_guards(make_memory):
    mem = make_memory(limits="off")
    save(report(1_000, 0.005), mem, which="fmr")
    mem.enroll("p0", [person(40)])
    expected = {"enrolled": 1, "tau": mem.threshold(SYNTH), "status": "calibrated", "fmr": pytest.approx(0.005),
                "fpir": pytest.approx(0.005), "max_enrolled": 2, "target_fpir": 0.01}
    assert mem.stats()["identification"][SYNTH] == expected
    admin = create_key(mem.store, "admin", "admin")[0]
    agent = create_key(mem.store, "agent", "agent")[0]
    with rest_service(mem, ui=False, mcp=False) as (_, http):
        shown = http.get("/v1/health", headers={"Authorization": f"Bearer {admin}"}).json()
        assert shown["store"]["identification"][SYNTH] == expected
        assert "store" not in http.get("/v1/health", headers={"Authorization": f"Bearer {agent}"}).json()


def test_the_calibrate_tab_says_what_tau_guards(make_memory):
    mem = make_memory(limits="off")
    mem.set_threshold(0.5, SYNTH, "manual")
    mem.enroll("p0", [person(50)])
    uncalibrated = render.identification_text({SYNTH: mem.identification(SYNTH)})
    assert f"`{SYNTH}`: 1 enrolled, τ 0.5000, uncalibrated" in uncalibrated
    save(report(1_000, 0.005), mem, which="fmr")
    line = render.identification_text({SYNTH: mem.identification(SYNTH)})
    assert "calibrated FMR 5.0e-03: expected FPIR 0.50%; at most 2 people stay under the target 1.00%" in line
    page = build_app(mem)
    assert any(getattr(block, "elem_id", None) == "bm-fpir" for block in page.blocks.values())


def test_the_calibrate_tab_s_table_is_at_the_store_s_n_and_target(make_memory):
    """The Calibrate tab's table gives the FPIR at the number of people this store enrolled with the report's
    encoder (beside the report's fixed sizes) and the largest N at this store's target FPIR."""
    mem = make_memory(limits="off")
    mem.target_fpir = 0.002
    mem.set_threshold(0.5, SYNTH, "manual")
    for n in range(3):
        mem.enroll(f"p{n}", [person(60 + n)])
    plot, text = Controller(mem).calibration.view(report(1_000, 0.005))
    assert plot.ndim == 3
    assert "FPIR N=3 (store)" in text and "largest N at FPIR ≤ 0.002 |" in text
    assert f"This store: 3 people enrolled with `{SYNTH}`" in text
    header = next(line for line in text.splitlines() if line.startswith("| τ rule | FMR credited"))
    assert header.count("FPIR N=") == 5  # 10, 100, 1,000, 10,000 and the store's 3
