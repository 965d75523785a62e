"""Requesters: a probe or a session in, an admitted person out. The attempt limiter is asked first (a client in
cool-down costs no encoding), the gate decides, and what a read or a change needs is checked: a listing the
step-up τ, a change a fresh step-up probe of someone who is not a demo sample person."""

from __future__ import annotations

from typing import Any

from ..errors import StepUpRequiredError
from ..identity.biometrics import Biometrics, Clients
from ..identity.gate import GateResult, Probe
from ..identity.limits import AttemptLimiter
from .access import check_writer
from .checks import BROAD_K
from .sessions import DEFAULT_TTL, Engine, Session, Sessions


class Requesters:
    """Who is asking: the gate's decision for a probe, the person a step-up probe proves, and open sessions."""

    def __init__(self, biometrics: Biometrics, sessions: Sessions | None = None) -> None:
        self.biometrics = biometrics
        self.sessions = sessions or Sessions()

    @property
    def limiter(self) -> AttemptLimiter:
        return self.biometrics.limiter

    def admit(self, probe: Any, *, policy: str | None = None, client: Clients = None,
              listing: bool = False) -> GateResult:
        """The gate's decision for a read; for a listing, StepUpRequiredError (a miss) unless the person it
        admitted is proved at the step-up τ. A probe that matches nobody gets its empty result either way."""
        gate, probes = self._decide(probe, policy, client)
        if listing and gate.matched and not self.biometrics.clears_step_up(gate, probes):
            self.limiter.miss(client)
            raise StepUpRequiredError(f"a search of more than {BROAD_K} notes, or with filters, lists your notes: it "
                                      "needs a fresh, clear probe of you (the stricter match, of every kind you "
                                      "enrolled). Ask for fewer notes without filters, or show a clearer probe")
        return gate

    def _decide(self, probe: Any, policy: str | None, client: Clients) -> tuple[GateResult, list[Probe]]:
        """The gate's decision and the probes it read; a client in cool-down is refused before any encoder runs."""
        self.limiter.check(client)
        probes = self.biometrics.probes(probe)
        return self.biometrics.identify(probes, policy=policy, client=client), probes

    def owner(self, probe: Any, client: Clients = None) -> int:
        """The one person `probe` admits under the "best" policy (AmbiguousProbeError, UnknownIdentityError)."""
        return self.biometrics.owner_of(self.biometrics.identify(probe, policy="best", client=client))

    def prove(self, probe: Any, action: str = "this change", *, client: Clients = None) -> int:
        """The person a fresh step-up `probe` proves, for a change it asks (verify); SampleReadOnlyError for one of
        the demo's sample people, whose captures anyone can show (biomem.engine.access.check_writer)."""
        return check_writer(self.biometrics.store.identity(self.biometrics.verify(probe, action, client=client)))

    def open(self, engine: Engine, probe: Any, *, client: Clients = None, ttl: float = DEFAULT_TTL,
             bound_to: str | None = None) -> Session:
        """Run the gate once: a Session of `engine` that acts as the matched person for `ttl` seconds
        (UnknownIdentityError when the probe matches nobody). See biomem.engine.sessions."""
        gate, probes = self._decide(probe, "best", client)
        self.biometrics.owner_of(gate)  # AmbiguousProbeError or UnknownIdentityError unless one person was admitted
        broad = self.biometrics.clears_step_up(gate, probes)
        return self.sessions.open(engine, gate, gate.labels[gate.identity], broad, ttl, bound_to=bound_to,
                                  client=client)
