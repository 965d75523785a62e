"""Attempt limits that tell strangers from attackers (docs/gate.md): a kiosk's strangers never lock its
owners out; a near-miss climb towards one person is throttled per client and makes that person's matches need the
step-up τ, nobody else's; bulk guessing is bounded by a budget from the store's false-match risk; all of it lives in
the store. Every clock is injected: no test sleeps."""

from __future__ import annotations

import numpy as np
import pytest

from biomem import BioMemory
from biomem.errors import TooManyAttemptsError
from biomem.identity.calibrate import calibrate_scores, save
from biomem.identity.gate import Probe
from biomem.identity.limits import AttemptLimiter
from biomem.vocabulary import AttemptLimits

ANA, BEN = 0, 1  # people of biomem.identity.samples.face_crops(); the others are strangers here
STRANGERS = (2, 3, 4, 5, 6)


@pytest.fixture
def kiosk(make_memory, face_probe, clock):
    """Ana and Ben enrolled at one device, the default limits on a clock the test moves."""
    mem = make_memory()
    ana = mem.enroll("Ana", [face_probe(ANA, 0), face_probe(ANA, 1)])
    ben = mem.enroll("Ben", [face_probe(BEN, 0), face_probe(BEN, 1)])
    mem.limiter = AttemptLimiter(AttemptLimits(), mem.store, clock=clock)
    return mem, ana.id, ben.id


def aimed(mem: BioMemory, towards: Probe, away: Probe, identity: int, score: float) -> Probe:
    """A probe on the arc from `away` to `towards` whose best cosine with `identity` is `score` (bisection)."""
    low, high = 0.0, 1.0
    for _ in range(40):
        mid = (low + high) / 2
        probe = Probe(mid * towards.embedding + (1 - mid) * away.embedding, towards.modality)
        low, high = (mid, high) if mem.gate.decide(probe, 1.0).score_of(identity) < score else (low, mid)
    return Probe(high * towards.embedding + (1 - high) * away.embedding, towards.modality)


def test_a_flood_of_strangers_at_a_kiosk_never_locks_its_owners_out(kiosk, face_probe, clock):
    mem, ana, ben = kiosk
    client = ("session:kiosk", "address:203.0.113.9")
    strangers = [face_probe(p, n) for p in STRANGERS for n in range(4)]
    tau, band = mem.threshold(), mem.limiter.limits.near * (mem.threshold(step_up=True) - mem.threshold())
    assert all(mem.gate.decide(s, tau).best_scores.max() < tau - band for s in strangers)  # no near-miss
    served = 0
    for i in range(500):  # one stranger every 20 s, an owner every fifth ask: ~3 hours of a busy kiosk
        clock.now += 20
        assert mem.identify(strangers[i % len(strangers)], client=client).identity is None
        if i % 5 == 0:
            owner, capture = (ana, ANA) if i % 10 == 0 else (ben, BEN)
            assert mem.identify(face_probe(capture, 2), client=client).identity == owner
            served += 1
    assert served == 100
    assert mem.limiter.guarded([ana, ben]) == set()


def test_a_near_miss_climb_towards_ana_is_throttled_and_guards_ana_not_ben(kiosk, face_probe, clock):
    mem, ana, ben = kiosk
    limits = mem.limiter.limits
    tau, strict = mem.threshold(), mem.threshold(step_up=True)
    attacker, kiosk_client = ("address:198.51.100.7",), ("address:203.0.113.9",)
    start = face_probe(STRANGERS[0], 0)
    climb = [aimed(mem, face_probe(ANA, 2), start, ana, tau - 0.04 + 0.005 * k) for k in range(limits.near_misses)]
    for probe in climb:  # close below τ, towards Ana: near-misses
        clock.now += 5
        assert mem.identify(probe, client=attacker).identity is None
    with pytest.raises(TooManyAttemptsError):  # the climbing client cools down ...
        mem.identify(face_probe(ANA, 2), client=attacker)
    assert mem.limiter.guarded([ana, ben]) == {ana}  # ... and Ana is guarded, from every client
    weak_ana = aimed(mem, face_probe(ANA, 2), start, ana, (tau + strict) / 2)  # clears τ, not the step-up τ
    weak_ben = aimed(mem, face_probe(BEN, 2), start, ben, (tau + strict) / 2)
    assert mem.identify(weak_ana, client=kiosk_client).identity is None
    assert mem.identify(weak_ben, client=kiosk_client).identity == ben  # Ben at the same device: unaffected
    assert mem.identify(face_probe(ANA, 2), client=kiosk_client).score_of(ana) >= strict
    assert mem.identify(face_probe(ANA, 2), client=kiosk_client).identity == ana  # a clear capture still does
    clock.now += limits.guard + 1
    assert mem.limiter.guarded([ana]) == set()
    assert mem.identify(weak_ana, client=kiosk_client).identity == ana  # the guard ends


def test_far_misses_are_not_near_misses_and_a_climb_is_counted_per_target(kiosk, face_probe, clock):
    mem, ana, _ = kiosk
    tau = mem.threshold()
    start = face_probe(STRANGERS[1], 0)
    near = aimed(mem, face_probe(ANA, 2), start, ana, tau - 0.02)
    step_up = mem.threshold(step_up=True)
    assert mem.limiter.near_miss("x", mem.gate.decide(start, tau), lambda _: step_up) == []
    for i in range(mem.limiter.limits.near_misses):  # one near-miss each from many clients: Ana is still guarded
        clock.now += 1
        assert mem.identify(near, client=f"address:192.0.2.{i}").identity is None
    assert mem.limiter.guarded([ana]) == {ana}


def test_a_dictionary_of_faces_is_bounded_by_the_false_match_budget(kiosk, face_probe, clock):
    mem, ana, _ = kiosk
    limits = mem.limiter.limits
    budget = limits.budget_for(2)
    assert budget == int(limits.risk / (2 * limits.fmr)) == 2_500
    assert AttemptLimits().budget_for(10_000) == limits.misses  # never below the pace limit
    client = "address:198.51.100.9"
    rng = np.random.default_rng(0)
    served, refused_at = 0, None
    for query in range(1, budget + 200):  # a fresh face every 4 s: under the pace limit, over the budget
        clock.now += 4
        try:
            mem.identify(Probe(rng.normal(size=512), face_probe(ANA, 0).modality), client=client)
            served += 1
        except TooManyAttemptsError:
            refused_at = refused_at or query
    assert refused_at == budget + 1
    assert served == budget + 3  # past the budget, one guess per cool-down: after 60, 120 and 240 s, then 480 s
    assert mem.identify(face_probe(ANA, 2), client="address:203.0.113.9").identity == ana  # other devices: served


def test_the_budget_takes_the_false_match_rate_a_calibration_stored(kiosk, face_probe, clock):
    mem, _, _ = kiosk
    modality = face_probe(ANA, 0).modality
    rng = np.random.default_rng(1)
    report = calibrate_scores(rng.normal(0.75, 0.05, 300), rng.normal(0.05, 0.08, 3_000), modality=modality)
    save(report, mem)  # 3,000 impostor scores support no FMR below 3/3,000 = 1e-3: ten times the setting's 1e-4
    assert mem.identification(modality)["fmr"] == pytest.approx(1e-3)
    budget = int(mem.limiter.limits.risk / (2 * 1e-3))
    assert budget == 250
    refused_at = None
    for query in range(1, budget + 5):
        clock.now += 4
        try:
            mem.identify(Probe(rng.normal(size=512), modality), client="address:198.51.100.10")
        except TooManyAttemptsError:
            refused_at = refused_at or query
    assert refused_at == budget + 1


def test_a_cool_down_and_a_guard_outlive_a_new_process(database, text_encoder, face_encoder, face_probe, clock):
    limits = AttemptLimits(misses=3, window=60.0)

    def engine() -> BioMemory:
        mem = BioMemory(database(), text_model=text_encoder, encoder=face_encoder, limits=limits)
        mem.limiter.clock = clock
        return mem
    first = engine()
    ana = first.enroll("Ana", [face_probe(ANA, 0), face_probe(ANA, 1)]).id
    tau = first.threshold()
    near = aimed(first, face_probe(ANA, 2), face_probe(STRANGERS[2], 0), ana, tau - 0.02)
    for i in range(limits.near_misses):
        first.identify(near, client=f"address:192.0.2.{i}")
    for _ in range(3):
        first.identify(face_probe(STRANGERS[3], 0), client="address:198.51.100.1")
    first.close()
    again = engine()  # a new process on the same store
    with pytest.raises(TooManyAttemptsError):
        again.identify(face_probe(ANA, 2), client="address:198.51.100.1")
    assert again.limiter.guarded([ana]) == {ana}
    again.close()
