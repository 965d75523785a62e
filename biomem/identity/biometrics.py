"""The biometric service: encoders, thresholds (τ) and margins (δ), probes, the gate's identify and step-up
verify, enrolment and added captures."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import modalities

from ..errors import (
    AlreadyEnrolledError,
    AmbiguousProbeError,
    DuplicateLabelError,
    InconsistentSamplesError,
    InvalidInputError,
    ModalityMismatchError,
    ModelUnavailableError,
    SampleCaptureError,
    StepUpRequiredError,
    UnknownIdentityError,
    UnknownModalityError,
)
from ..stores import MemoryStore
from ..stores.records import Identity
from .bursts import Burst, fuse_frames
from .disclosure import AMBIGUOUS
from .encoders import EncoderCache
from .enrolment import (
    FACE_TAKEN_MISSES,
    Reserved,
    check_captures_fit,
    check_distinct,
    check_label,
    check_not_reserved,
    check_one_person,
    check_room,
    closeness,
    identification_risk,
    refusal,
)
from .gate import DEFAULT_MARGIN, DEFAULT_MARGINS, Gate, GateResult, Probe, fuse
from .limits import AttemptLimiter
from .samples import sample_people_captures

Clients = str | Sequence[str] | None  # a requester's keys for attempt limits: session, address
SOFT_KINDS = frozenset({"voice"})  # encoder kinds that attribute a request but never clear a step-up alone


class Biometrics:
    """Who a probe is, and who may enrol: the encoders, τ and δ, the gate's identify and step-up verify,
    enrolment and added captures, over one store. BioMemory (biomem.engine.memory) composes one; its attempt
    limiter is read through `limiter`, which a caller may replace (a test's clock)."""

    def __init__(self, store: MemoryStore, limiter: AttemptLimiter, *, modality: str, policy: str, fusion: str,
                 disclosure: str, target_fpir: float, encoders: EncoderCache | None = None,
                 reserved: Reserved | None = None) -> None:
        self.store = store
        self.gate = Gate(store)
        self.limiter = limiter
        self.modality = modality  # the default modality of a probe that names none
        self.policy = policy
        self.fusion = fusion
        self.disclosure = disclosure  # "private" or "demo" (biomem.identity.disclosure): "demo" shows every score
        self.target_fpir = target_fpir  # the false-positive identification rate enrolment keeps (enrolment)
        self.encoders = encoders or EncoderCache()
        self.reserved = reserved or Reserved(sample_people_captures)  # encoded at a requester's first enrolment
        self._enrolling = threading.Lock()  # check-then-insert of enrolments is one step

    def encoder(self, modality: str | None = None) -> modalities.Encoder:
        """The (cached) encoder of `modality`, default the store's."""
        return self.encoders.get(modality or self.modality)

    def probe(self, sample: Any, modality: str | None = None, *, quality: str = "probe") -> Probe:
        """A Probe from an image (path, bytes, array, PIL) or a Burst of them through the encoder, held to the
        `quality` bar ("probe", or "enrol": PoorCaptureError with a hint below it), or a Probe as given."""
        if isinstance(sample, Probe):
            if modality and sample.modality != modality:
                raise ModalityMismatchError(f"probe is {sample.modality!r}, expected {modality!r}")
            return sample
        name = modality or self.modality
        encoder = self.encoder(name)
        if isinstance(sample, Burst):
            return Probe(fuse_frames(sample, lambda frame: encoder.capture(frame, quality), self.threshold(name)), name)
        return Probe(encoder.capture(sample, quality), name)

    def threshold(self, modality: str | None = None, *, step_up: bool = False) -> float:
        """τ of `modality`: the calibrated value stored in the DB, else the encoder's default.

        step_up: the stricter τ that destructive or broad actions need (never below τ).
        """
        name = modality or self.modality
        stored = self.store.threshold(name)
        tau = stored[0] if stored else self.encoders.info(name).default_threshold
        if not step_up:
            return tau
        strict = self.store.threshold(name, step_up=True)
        if strict:
            return max(tau, strict[0])
        try:
            default = self.encoders.info(name).step_up_threshold
        except UnknownModalityError:  # precomputed probes of an unregistered modality
            default = None
        return max(tau, tau if default is None else default)

    def set_threshold(self, tau: float, modality: str | None = None, source: str = "manual", *,
                      step_up: bool = False) -> None:
        """Store τ (or the step-up τ) for `modality`, for example from calibration."""
        if not -1.0 <= float(tau) <= 1.0:
            raise InvalidInputError(f"τ is a cosine and must lie in [-1, 1], got {tau}")
        name = modality or self.modality
        self.store.set_threshold(name, float(tau), source, step_up=step_up)

    def identification(self, modality: str | None = None) -> dict[str, Any]:
        """What `modality`'s τ guards in 1:N identification: people enrolled, τ, its calibrated FMR, the
        expected FPIR at that N and the largest N under the target (biomem.identity.enrolment)."""
        name = modality or self.modality
        stored = self.store.threshold(name)
        enrolled = len(np.unique(self.store.templates(name)[0])) if name in self.gate.modalities() else 0
        return identification_risk(self.threshold(name), stored[1] if stored else None, enrolled, self.target_fpir)

    def _check_room(self, probe: Probe) -> None:
        """One more person of the probe's modality must keep the FPIR within target (EnrolmentLimitError)."""
        stored = self.store.threshold(probe.modality)
        check_room(len(self.gate.scores(probe)[0]), self.threshold(probe.modality), stored[1] if stored else None,
                   self.target_fpir)

    def margin(self, modality: str | None = None) -> float:
        """δ of `modality`: the calibrated ambiguity margin stored beside τ, else the encoder's default
        (biomem.identity.gate.DEFAULT_MARGINS): a runner-up this close to the best admits nobody."""
        name = modality or self.modality
        stored = self.store.margin(name)
        return stored[0] if stored else DEFAULT_MARGINS.get(name, DEFAULT_MARGIN)

    def set_margin(self, delta: float, modality: str | None = None, source: str = "manual") -> None:
        """Store δ for `modality`, for example from calibration (a cosine gap in [0, 2])."""
        if not 0.0 <= float(delta) <= 2.0:
            raise InvalidInputError(f"δ is a gap between cosines and must lie in [0, 2], got {delta}")
        self.store.set_margin(modality or self.modality, float(delta), source)

    def probes(self, probe: Any) -> list[Probe]:
        """One or more Probes from a sample, a Probe, a Burst, a list of them, or {modality: sample}, where a
        list or tuple of frames under a modality is a Burst (biomem.identity.bursts), except under a voice, where a
        tuple is one recording as Gradio gives it: (sample rate, samples)."""
        if probe is None:
            raise InvalidInputError("a probe is needed")
        if isinstance(probe, dict):
            probes = [self.probe(Burst(sample) if isinstance(sample, (list, tuple)) and not self._soft(modality)
                                 else sample, modality) for modality, sample in probe.items()]
        elif isinstance(probe, (list, tuple)):
            probes = [self.probe(sample) for sample in probe]
        else:
            probes = [self.probe(probe)]
        if not probes:
            raise InvalidInputError("a probe is needed")
        enrolled = self.gate.modalities()
        for p in probes:
            if enrolled and p.modality not in enrolled:
                raise ModalityMismatchError(f"no {p.modality!r} templates in this store; "
                                            f"enrolled modalities: {', '.join(enrolled)}")
        return probes

    def identify(self, probe: Any, *, policy: str | None = None, fusion: str | None = None,
                 client: Clients = None) -> GateResult:
        """Run the gate: which identities may this requester's notes come from.

        A probe of several modalities (a list, or {modality: sample}) is fused (`fusion`).
        client: the requester's keys (session, address) for attempt limits: a client in
        cool-down is refused before any encoder runs (one past its pace is admitted only at the step-up τ),
        a non-match counts as a miss (and a near-miss
        towards whoever it came close to), and an identity targeted by near-misses matches only at
        the step-up τ for a while (biomem.identity.limits). An ambiguous
        probe (`GateResult.ambiguous`: two enrolled people within δ) admits nobody and counts as a miss
        too, so look-alike probes are no free oracle.
        """
        policy = policy or self.policy
        strict = self.limiter.check(client)  # past its pace: only the step-up τ admits
        probes = self.probes(probe)
        step_up = functools.partial(self.threshold, step_up=True)
        if len(probes) == 1:
            name = probes[0].modality
            tau = self.threshold(name)
            reads = self._reads(name, tau, client)
            result = self.limiter.protect(self.gate.decide(probes[0], tau, policy, self.margin(name), reads), step_up,
                                          strict)
            if not result.matched and reads is not None and result.floor > reads:  # a match protect took back
                result = self.limiter.protect(self.gate.decide(probes[0], tau, policy, self.margin(name)), step_up,
                                              strict)
        else:  # fusion reads every identity's margin in every modality: the exact scan
            parts = [self.gate.decide(p, self.threshold(p.modality), "all", self.margin(p.modality)) for p in probes]
            result = self.limiter.protect(fuse(parts, fusion or self.fusion, policy), step_up, strict)
        result.labels = {i: self.store.identity(i).label for i in result.admitted}
        if not result.matched:
            self.limiter.miss(client)
            self.limiter.near_miss(client, result, step_up)
        return result

    def _reads(self, modality: str, tau: float, client: Clients) -> float | None:
        """The lowest score identify reads of a probe that matches nobody (Gate.decide's floor): the attempt
        limiter's near-miss band below τ, near × (step-up τ − τ), for a call with a client (limits.near_miss),
        else τ itself; None (every score of every result: the exact scan) under the demo disclosure, which
        shows them. What the gate's own rule reads (a runner-up within δ of the best) is the gate's to know."""
        if self.disclosure == "demo":
            return None
        limits = self.limiter.limits
        return tau if limits is None or not client else \
            tau - limits.near * (self.threshold(modality, step_up=True) - tau)

    @staticmethod
    def owner_of(gate: GateResult) -> int:
        """The one person `gate` admitted, for a probe-keyed write or session; AmbiguousProbeError (naming
        nobody) when two enrolled people were too close to tell, UnknownIdentityError when nobody matched."""
        if gate.ambiguous:
            raise AmbiguousProbeError(AMBIGUOUS)
        if gate.identity is None:
            raise UnknownIdentityError("the probe matches no enrolled identity")
        return gate.identity

    def verify(self, probe: Any, action: str = "this action", *, client: Clients = None) -> int:
        """Step-up: the identity a fresh probe proves at the stricter τ, with a probe of every modality that identity
        enrolled other than a voice; StepUpRequiredError otherwise, and for a voice alone, which never proves
        anyone (a recording or an imitation passes it), before any encoder runs."""
        self.limiter.check(client)
        if isinstance(probe, dict) and probe and all(self._soft(name) for name in probe):
            raise StepUpRequiredError(f"{action} needs your face or palm: a voice alone never proves who you are "
                                      "(a recording of it would pass): nothing was changed")
        probes = self.probes(probe)
        owner = self.stepped_up(probes)
        if owner is None:
            self.limiter.miss(client)
            raise StepUpRequiredError(f"{action} needs a fresh, clear probe of you (a stricter match than "
                                      "asking): nothing was changed")
        missing = self._unproved(owner, probes)
        if missing:
            raise StepUpRequiredError(f"{action} needs a probe of each kind you enrolled "
                                      f"({', '.join(sorted(missing))} missing): nothing was changed")
        return owner

    def clears_step_up(self, gate: GateResult, probes: list[Probe]) -> bool:
        """Whether the one person `gate` admitted is also proved at the step-up τ by `probes`, a probe of every
        modality they enrolled (a voice aside) among them: what a broad read (a listing) asks."""
        return len(gate.admitted) == 1 and self.stepped_up(probes) == gate.identity and \
            not self._unproved(gate.identity, probes)

    def _unproved(self, owner: int, probes: list[Probe]) -> set[str]:
        """The modalities `owner` enrolled that a step-up needs and `probes` lack: every one but a voice, and, when
        the probes hold only voices, a kind that proves (a voice is attribution, never proof)."""
        given = {p.modality for p in probes}
        missing = {m for m in self.store.modalities(owner) if not self._soft(m)} - given
        if all(self._soft(m) for m in given):
            missing |= {"a face or palm"}
        return missing

    def _soft(self, modality: str | None) -> bool:
        """Whether `modality` is a voice: a soft biometric that attributes a request, never proves it (SOFT_KINDS)."""
        return self._kind(modality or self.modality) in SOFT_KINDS

    def stepped_up(self, probes: list[Probe]) -> int | None:
        """The one identity the probes prove at the stricter step-up τ, else None (no miss counted): a probe of one
        modality by the gate's rule; probes of several by every modality's at once (fusion "all"), so a look-alike
        relative whom the face alone cannot tell apart is proved by face and palm together."""
        if len(probes) == 1:
            tau = self.threshold(probes[0].modality, step_up=True)
            return self.gate.decide(probes[0], tau, "best", self.margin(probes[0].modality), floor=tau).identity
        parts = [self.gate.decide(p, self.threshold(p.modality, step_up=True), "all", self.margin(p.modality))
                 for p in probes]
        return fuse(parts, "all", "best").identity

    def enroll(self, label: str, samples: Iterable[Any] | dict[str, Iterable[Any]], modality: str | None = None, *,
               sample: bool = False, client: Clients = None, admin: bool = False) -> Identity:
        """Create an identity from captures (images or Probes) of one modality, or of several at once as
        {modality: captures}.

        Refused, with nothing written, when the label is blank, too long or holds hidden characters
        (InvalidInputError), when the samples of a modality do not all show one person (InconsistentSamplesError),
        when they come within the gate's margin of someone enrolled (LookAlikeError, an AlreadyEnrolledError:
        that person, or a look-alike relative the operator may enrol with a second kind of capture, see
        enrolment.check_distinct), when the label is taken (DuplicateLabelError) or when one more person
        would take the false-positive identification rate at a calibrated τ past the target (EnrolmentLimitError,
        never a miss). sample: mark a demo person, whom the "demo" disclosure may show and whose memories no
        probe may change.
        client: a requester's keys for attempt limits: the enrolment is then a gated attempt (refused
        before any encoding in a cool-down; each refusal a miss, captures close to an enrolled person
        FACE_TAKEN_MISSES), a capture of one of the demo's sample people is refused (SampleCaptureError, whether or
        not they are enrolled), and a taken label and a close capture are both EnrolmentRefusedError unless
        `admin` (the caller holds an admin key or the admin page): the operator and an admin are told which.
        """
        label = check_label(label)
        self.limiter.check(client)
        groups = self._enrolment(samples, modality)
        operator = client is None or admin
        for probes in groups.values():
            try:
                check_one_person(probes, self.threshold(probes[0].modality))
            except InconsistentSamplesError:
                self.limiter.miss(client)
                raise
            if client is not None and not sample:
                self._check_not_reserved(probes, client)
        with self._enrolling:
            close = [closeness(self.gate, probes, self.threshold(name), self.margin(name))
                     for name, probes in groups.items()]
            try:
                check_distinct(close, self.store.modalities, operator=operator)
            except AlreadyEnrolledError as exc:
                self.limiter.miss(client, FACE_TAKEN_MISSES)
                raise refusal(exc, precise=operator) from None
            for probes in groups.values():
                self._check_room(probes[0])
            (first, probes), *more = groups.items()
            try:
                with self.store.transaction():
                    identity = self.store.add_identity(label, first, np.stack([p.embedding for p in probes]),
                                                       sample=sample)
                    for name, rest in more:
                        self.store.add_templates(identity.id, name, np.stack([p.embedding for p in rest]))
            except DuplicateLabelError as exc:
                self.limiter.miss(client)
                raise refusal(exc, precise=operator) from None
            return identity

    def _enrolment(self, samples: Any, modality: str | None) -> dict[str, list[Probe]]:
        """An enrolment's captures as Probes grouped by modality (the encoder's "enrol" quality bar), every
        modality with at least one, of its encoder's dimension."""
        given = samples if isinstance(samples, dict) else {modality: samples}
        groups: dict[str, list[Probe]] = {}
        for name, captures in given.items():
            probes = [self.probe(s, name, quality="enrol") for s in self._as_list(captures)]
            if not probes:
                raise InvalidInputError(f"enrolment needs at least one sample{f' of {name}' if name else ''}")
            for probe in probes:
                groups.setdefault(probe.modality, []).append(probe)
        if not groups:
            raise InvalidInputError("enrolment needs at least one sample")
        if len(groups) > len(given):
            raise ModalityMismatchError(f"enrol one modality at a time, or name each: {{modality: samples}}, "
                                        f"got {sorted(groups)}")
        for probes in groups.values():
            self._check_dims(probes)
        return groups

    def add_templates(self, identity_id: int, samples: Iterable[Any], modality: str | None = None, *,
                      probe: Any = None, client: Clients = None) -> None:
        """Add captures to an identity: each must be that person's and nobody else's.

        With `probe`, the requester proves by step-up that they are `identity_id` (the way to
        add a first palm to a face-enrolled identity), and no capture may be a sample person's
        (SampleCaptureError); without it, a trusted operator call.
        """
        identity_id = self.store.identity(identity_id).id
        if probe is not None and self.verify(probe, "Adding captures", client=client) != identity_id:
            raise StepUpRequiredError("the probe does not prove this identity: nothing was added")
        probes = [self.probe(s, modality, quality="enrol") for s in self._as_list(samples)]
        if not probes:
            raise InvalidInputError("add_templates needs at least one sample")
        self._check_dims(probes)
        if probe is not None:
            for name in {p.modality for p in probes}:
                self._check_not_reserved([p for p in probes if p.modality == name], client)
        with self._enrolling:
            own = set(self.store.modalities(identity_id))
            for name in {p.modality for p in probes}:
                group = [p for p in probes if p.modality == name]
                check_one_person(group, self.threshold(name))
                check_captures_fit(self.gate, identity_id, group, self.threshold(name), self.margin(name),
                                   has_templates=name in own)
                if name not in own:  # a first capture of this modality: one more person it identifies
                    self._check_room(group[0])
            with self.store.transaction():
                for name in {p.modality for p in probes}:
                    self.store.add_templates(identity_id, name,
                                             np.stack([p.embedding for p in probes if p.modality == name]))

    def _check_not_reserved(self, probes: list[Probe], client: Clients) -> None:
        """A requester's captures of one modality must show none of the demo's sample people, whose captures anyone
        can show (SampleCaptureError, a miss); the sample people's templates are encoded on first need."""
        name = probes[0].modality
        try:
            encoder = self.encoder(name)
        except (UnknownModalityError, ModelUnavailableError):
            return  # precomputed templates of a modality this server cannot encode: no sample of it to compare
        try:
            check_not_reserved(probes, self.reserved.templates(encoder), self.threshold(name), encoder.info.kind)
        except SampleCaptureError:
            self.limiter.miss(client)
            raise

    def _check_dims(self, probes: Sequence[Probe]) -> None:
        """Templates of a registered encoder have its dimension: a first, wrong-sized template would
        lock every real capture of that modality out (ModalityMismatchError)."""
        for probe in probes:
            try:
                dim = self.encoders.info(probe.modality).dim
            except UnknownModalityError:
                continue  # an evaluation's own modality: its stored templates decide
            if probe.embedding.shape != (dim,):
                raise ModalityMismatchError(f"a {probe.modality} template has {dim} values, got "
                                            f"{probe.embedding.shape[0]}: nothing was enrolled")

    @staticmethod
    def _as_list(samples: Any) -> list[Any]:
        if isinstance(samples, (str, bytes, Path, Probe, np.ndarray)) or hasattr(samples, "getpixel"):
            return [samples]
        return list(samples)

    def identities(self) -> list[Identity]:
        return self.store.identities()

    def other_kind(self, modality: str | None = None) -> str | None:
        """A modality enrolled in this store of another kind than `modality` (a face's palm, say), never a voice: the
        encoder of a second step-up probe; None when nobody enrolled one."""
        kind = self.encoders.info(modality or self.modality).kind
        return next((m for m in self.store.modalities() if self._kind(m) not in (kind, None) and not self._soft(m)),
                    None)

    def _kind(self, modality: str) -> str | None:
        try:
            return self.encoders.info(modality).kind
        except UnknownModalityError:  # precomputed probes of an unregistered modality
            return None
