"""Attempt limits that tell strangers from attackers (docs/gate-limits.md): a kiosk's strangers never lock its
owners out, however fast they come; a near-miss climb towards one person is throttled per client and makes that
person's matches need the step-up τ, nobody else's, for a while that one client cannot stretch; bulk guessing is
bounded by a budget from the store's false-match risk, per address; all of it lives in the store. Every clock is
injected: no test sleeps."""

from __future__ import annotations

import numpy as np
import pytest

from biomem import BioMemory
from biomem.errors import TooManyAttemptsError
from biomem.identity.calibrate import calibrate_scores, save
from biomem.identity.gate import Probe
from biomem.identity.limits import AttemptLimiter
from biomem.vocabulary import AttemptLimits

from .conftest import BOTH_STORES
from .shared import ANA, BEN, CHLOE, DAN, EVE, FINN, STRANGER

STRANGERS = (CHLOE, DAN, EVE, FINN, STRANGER)  # never enrolled here

KIOSK = ("session:kiosk", "address:203.0.113.9")


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


def climb_towards(mem: BioMemory, face_probe, ana: int) -> tuple[Probe, list[Probe]]:
    """A stranger's capture, and one near-miss probe per step of a climb from it towards Ana (the near-miss count
    that guards her), each a little closer, all below τ."""
    start, tau = face_probe(STRANGERS[0], 0), mem.threshold()
    return start, [aimed(mem, face_probe(ANA, 2), start, ana, tau - 0.04 + 0.005 * k)
                   for k in range(mem.limiter.limits.near_misses)]


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
    start, climb = climb_towards(mem, face_probe, ana)
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


def test_a_dictionary_of_faces_at_a_bots_pace_is_bounded_by_the_false_match_budget(kiosk, face_probe, clock):
    mem, ana, _ = kiosk
    limits = mem.limiter.limits
    budget = limits.budget_for(2)
    assert budget == int(limits.risk / (2 * limits.fmr)) == 2_500
    assert budget * 2 * limits.fmr <= limits.risk  # expected false matches a day the budget buys
    assert AttemptLimits().budget_for(10_000) == limits.misses  # never below the pace limit
    client = "address:198.51.100.9"
    rng = np.random.default_rng(0)
    served, refused_at = 0, None
    for query in range(1, budget + 200):  # a fresh face every second: over the pace limit and over the budget
        clock.now += 1
        try:
            mem.identify(Probe(rng.normal(size=512), face_probe(ANA, 0).modality), client=client)
            served += 1
        except TooManyAttemptsError:
            refused_at = refused_at or query
    assert refused_at == budget + 1
    assert served == budget  # no guess past the budget until the day's first miss ages out
    clock.now += limits.budget_window - budget - 200 + 2
    mem.identify(Probe(rng.normal(size=512), face_probe(ANA, 0).modality), client=client)  # one more fits ...
    with pytest.raises(TooManyAttemptsError):  # ... and no second
        mem.identify(Probe(rng.normal(size=512), face_probe(ANA, 0).modality), client=client)
    assert mem.identify(face_probe(ANA, 2), client="address:203.0.113.9").identity == ana  # other devices: served


def test_past_its_pace_a_client_is_admitted_only_at_the_step_up_threshold(kiosk, face_probe, clock):
    mem, ana, _ = kiosk
    limits = mem.limiter.limits
    tau, strict = mem.threshold(), mem.threshold(step_up=True)
    weak_ana = aimed(mem, face_probe(ANA, 2), face_probe(STRANGERS[0], 0), ana, (tau + strict) / 2)
    for n in range(limits.misses):  # a bot's pace: 20 misses in 20 s
        clock.now += 1
        mem.identify(face_probe(STRANGERS[n % len(STRANGERS)], n // len(STRANGERS)), client=KIOSK)
    assert mem.identify(weak_ana, client=KIOSK).identity is None  # clears τ, not the step-up τ: not now
    assert mem.identify(face_probe(ANA, 2), client=KIOSK).identity == ana  # a clear capture: served
    assert mem.identify(weak_ana, client="address:192.0.2.1").identity == ana  # another device: as before
    clock.now += limits.cooldown + 1
    assert mem.identify(weak_ana, client=KIOSK).identity == ana  # the pace's cool-down ends, and does not double


@BOTH_STORES
def test_a_crowd_of_300_strangers_back_to_back_never_locks_the_owners_out(kiosk, face_probe, clock):
    mem, ana, ben = kiosk
    strict = mem.threshold(step_up=True)
    owners = [(ana, face_probe(ANA, 2)), (ben, face_probe(BEN, 2))]
    assert all(mem.gate.decide(p, strict).identity == i for i, p in owners)  # clear captures
    strangers = [face_probe(p, n) for p in STRANGERS for n in range(4)]
    served = 0
    for i in range(1, 301):  # one stranger every 2 s (30 a minute, past the pace), an owner after every 15th
        clock.now += 2
        assert mem.identify(strangers[i % len(strangers)], client=KIOSK).identity is None  # answered, not refused
        if i % 15 == 0:
            owner, capture = owners[(i // 15) % 2]
            clock.now += 2
            served += mem.identify(capture, client=KIOSK).identity == owner
    assert served == 20
    assert mem.limiter.guarded([ana, ben]) == set()


def test_one_client_cannot_stretch_a_guard_and_the_victims_retries_do_not_lock_the_kiosk(kiosk, face_probe, clock):
    mem, ana, ben = kiosk
    limits = mem.limiter.limits
    tau, strict = mem.threshold(), mem.threshold(step_up=True)
    attacker = "address:198.51.100.7"
    start, climb = climb_towards(mem, face_probe, ana)
    for _ in range(6):  # six batches of near-misses towards Ana, each after the attacker's own cool-down
        for probe in climb:
            clock.now += 5
            assert mem.identify(probe, client=attacker).identity is None
        with pytest.raises(TooManyAttemptsError) as refused:
            mem.identify(start, client=attacker)
        last = clock.now
        clock.now += refused.value.retry_after + 1
    assert refused.value.retry_after >= 32 * limits.cooldown  # the attacker's cool-downs doubled ...
    clock.now = last + limits.guard + 1
    assert mem.limiter.guarded([ana]) == set()  # ... Ana's guard did not: an hour after the last batch
    for probe in climb:  # guarded again
        clock.now += 5
        mem.identify(probe, client=attacker)
    assert mem.limiter.guarded([ana]) == {ana}
    weak_ana = aimed(mem, face_probe(ANA, 2), start, ana, (tau + strict) / 2)
    for _ in range(2 * limits.near_misses):  # Ana's own ordinary captures at the kiosk, refused while guarded
        clock.now += 5
        assert mem.identify(weak_ana, client=KIOSK).identity is None
    assert mem.identify(face_probe(BEN, 2), client=KIOSK).identity == ben  # the kiosk is not locked for Ben
    clock.now += limits.guard
    assert mem.identify(weak_ana, client=KIOSK).identity == ana  # her retries did not extend her guard


@BOTH_STORES
def test_misses_at_one_address_never_lock_out_another_address_with_the_same_key(make_memory, face_probe, clock):
    mem = make_memory()
    ana = mem.enroll("Ana", [face_probe(ANA, 0), face_probe(ANA, 1)]).id
    mem.limiter = AttemptLimiter(AttemptLimits(budget=20), mem.store, clock=clock)  # the floor of a large store
    attacker, kiosk = ["key:7", "address:198.51.100.7"], ["key:7", "address:203.0.113.9"]
    for n in range(20):  # the kiosk's agent key at another address spends its budget
        clock.now += 4
        mem.identify(face_probe(STRANGERS[n % len(STRANGERS)], n // len(STRANGERS)), client=attacker)
    for _ in range(360):  # then tries again every minute for 6 hours; Ana at the kiosk is served every time
        clock.now += 60
        with pytest.raises(TooManyAttemptsError):
            mem.identify(face_probe(STRANGERS[0], 0), client=attacker)
        assert mem.identify(face_probe(ANA, 2), client=kiosk).identity == ana
    clock.now += mem.limiter.limits.budget_window - 360 * 60
    mem.identify(face_probe(STRANGERS[0], 0), client=attacker)  # the day's first miss aged out: one more fits


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
    limits = AttemptLimits(misses=3, window=60.0, budget=3)

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
