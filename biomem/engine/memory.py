"""BioMemory: the public engine. Identity comes from the biometric gate, never from a user_id.

    mem = BioMemory("biomem.db")                      # SQLite file + indexes beside it
    mem = BioMemory("postgresql://biomem@db/memory")  # or PostgreSQL + pgvector, shared by replicas
    alice = mem.enroll("alice", ["alice1.jpg", "alice2.jpg"])
    mem.add("My PIN is 1234", identity=alice.id)       # trusted import
    mem.search("what is my PIN?", probe="alice3.jpg")  # only Alice's notes can come back

A thin façade over services that each own one job: biometrics (biomem.identity.biometrics: probes, τ, δ, identify,
verify, enrol), requesters (a probe → an admitted person), retrieval (search, ask, over a Query checked once here),
the notebook (a person's notes), households and erasure (biomem.engine.*). Input is checked at this door.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

import modalities

from ..errors import DisclosureError, InvalidInputError
from ..identity.biometrics import Biometrics, Clients
from ..identity.disclosure import people_view
from ..identity.encoders import EncoderCache
from ..identity.gate import GateResult, Probe
from ..identity.limits import AttemptLimiter
from ..notes.agent import MemoryAgent
from ..notes.llm import LLM, make_llm
from ..notes.textenc import TextEncoder, default_onnx_cache
from ..notes.timeparse import parse_timestamp
from ..settings import Settings
from ..stores import MemoryStore, is_postgres, open_store, sqlite_path
from ..stores.filters import check_metadata
from ..stores.records import Group, Identity, Note, check_id
from ..vocabulary import FUSIONS, POLICIES, AttemptLimits
from .access import check_writer
from .checks import check_budget, check_k, check_note, check_page
from .erasure import Erasure
from .households import Households
from .notebook import Notebook
from .opening import check_disclosure, check_text_model, default_modality
from .query import parsed_filters
from .requesters import Requesters
from .results import Answer, SearchResult
from .retrieval import Retrieval
from .sessions import DEFAULT_TTL, Session, Sessions

DEFAULT_ENCODER = "face-arcface-s"  # the paper's face encoder (ArcFace, insightface buffalo_s)


log = logging.getLogger(__name__)


class BioMemory:
    """Identity-gated agentic memory over one store: an SQLite file or a PostgreSQL database.

    path: the database: an SQLite file (derived indexes in `<path>.index/`; also `sqlite:///path`) or a
        `postgresql://` URL (biomem.stores.pg: search in the database, row-level security per owner).
    encoder: default biometric modality (registry name, or a ready Encoder instance to reuse);
        stored in the DB on creation (default: the stored one, else $BIOMEM_ENCODER, else face-arcface-s).
    text_model: sentence encoder (default $BIOMEM_TEXT_MODEL or all-MiniLM-L6-v2, offline first).
    llm: "offline" (default, or $BIOMEM_LLM), "openai:<model>", "hf:<model-id>" or an LLM instance.
    policy: "best" admits only the best-matching identity; "all" every identity at or above τ.
    hnsw_threshold: notes per owner from which a partition is searched through an HNSW graph instead
        of exactly; default the store's: 20,000 on SQLite (hnswlib per owner), 10,000 on PostgreSQL (a partial
        pgvector index per owner, docs/storage.md).
    fusion: how a probe carrying several modalities is judged: "all" must match (default),
        "any" suffices, or "sum" of the margins above each τ.
    disclosure: "private" or "demo" (see biomem.identity.disclosure; default $BIOMEM_DISCLOSURE, else "private",
        "demo" on a Space); "demo" on a store with real enrolments needs force_disclosure=True.
    limits: attempt limits per client (default $BIOMEM_ATTEMPTS or 20 misses a minute, a daily budget and
        near-miss guards, see biomem.identity.limits),
        "off" for none; they apply to calls that pass client=.
    prompt_tokens: the answer prompt's budget in the text encoder's word pieces (default
        $BIOMEM_PROMPT_TOKENS or 4,096): the lowest-ranked notes are left out first (Answer.omitted).
    The target false-positive identification rate enrolment keeps is `mem.target_fpir` ($BIOMEM_TARGET_FPIR,
        default 0.01; see biomem.identity.enrolment).
    key: the 32-byte template key (default $BIOMEM_KEY or the key file, see biomem.stores.sealing).
    settings: where the $-defaults above come from (biomem.settings); default Settings.from_env(),
        read once here. Explicit arguments win over it.

    Calls keyed by a probe are the requester's surface (the UI and API use only these);
    calls keyed by identity= (add, add_many, add_templates without probe, forget) are the
    trusted operator's, for imports and administration. A probe of one of the demo's sample people
    reads as them but changes nothing (biomem.engine.access.check_writer), and no requester enrols a
    sample person's capture (biomem.identity.enrolment.Reserved).
    """

    def __init__(self, path: str | os.PathLike = "biomem.db", *,
                 encoder: str | modalities.Encoder | None = None,
                 text_model: str | TextEncoder | None = None, llm: str | LLM | None = None,
                 policy: str = "best", fusion: str = "all", k: int = 10,
                 hnsw_threshold: int | None = None, disclosure: str | None = None,
                 force_disclosure: bool = False, limits: AttemptLimits | str | None = None,
                 prompt_tokens: int | None = None, key: bytes | None = None,
                 settings: Settings | None = None) -> None:
        if policy not in POLICIES:
            raise InvalidInputError(f"policy must be one of {POLICIES}, got {policy!r}")
        if fusion not in FUSIONS:
            raise InvalidInputError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
        settings = settings or Settings.from_env()
        self.path = path if is_postgres(path) else sqlite_path(path)
        self.store: MemoryStore = open_store(self.path, key=key, settings=settings)
        try:  # a store this opened is closed again when loading the rest fails (its SQLite WAL checkpointed)
            mode = check_disclosure(self.store, disclosure or settings.disclosure, force_disclosure)
            limiter = AttemptLimiter(AttemptLimits.parse(limits) if isinstance(limits, str)
                                     else limits if limits is not None else settings.attempts, self.store)
            self.text = (text_model if isinstance(text_model, TextEncoder)
                         else TextEncoder(text_model or settings.text_model, onnx_cache=default_onnx_cache(settings)))
            check_text_model(self.store, self.text)
            encoders = EncoderCache()
            if isinstance(encoder, modalities.Encoder):
                encoders.encoders[encoder.name] = encoder
                encoder = encoder.name
            modality = default_modality(self.store, encoder, settings.encoder or DEFAULT_ENCODER, encoders)
            self.biometrics = Biometrics(self.store, limiter, modality=modality, policy=policy, fusion=fusion,
                                         disclosure=mode, target_fpir=settings.target_fpir, encoders=encoders)
            self.partitions = self.store.search_index(self.text.dim, hnsw_threshold=hnsw_threshold)
            self.llm = make_llm(llm, self.text, settings)
            self.agent = MemoryAgent(self.store, self.partitions, self.text, self.llm)
            self.requesters = Requesters(self.biometrics)
            self.erasure = Erasure(self.store, self.partitions, self.llm)
            self.households = Households(self.store, self.requesters, self.erasure)
            self.retrieval = Retrieval(self.store, self.partitions, self.text, self.llm, self.households, k=check_k(k),
                                       prompt_tokens=check_budget(settings.prompt_tokens if prompt_tokens is None
                                                                  else prompt_tokens), disclosure=mode)
            self.notebook = Notebook(self.store, self.agent, self.partitions, self.llm, self.households)
        except BaseException:
            self.store.close()
            raise

    @classmethod
    def from_settings(cls, settings: Settings | None = None, **overrides: Any) -> BioMemory:
        """The BioMemory the CLI and the app serve: `settings.db` (default Settings.from_env()) with its
        policy and defaults, then BIOMEM_TAU stored. `overrides` go to BioMemory as they are (tests pass
        loaded models). A "demo" disclosure on a store that holds real enrolments falls back to
        "private" (logged)."""
        settings = settings or Settings.from_env()
        options: dict[str, Any] = {"policy": settings.policy, "settings": settings, **overrides}
        try:
            mem = cls(settings.db, **options)
        except DisclosureError as exc:
            log.warning("%s: serving with the private disclosure", exc)
            mem = cls(settings.db, **{**options, "disclosure": "private"})
        for modality, tau in settings.tau.items():
            mem.set_threshold(tau, modality, source="env BIOMEM_TAU")
        return mem

    def close(self) -> None:
        """Write changed hnsw indexes and checkpoint the database."""
        self.partitions.flush()
        self.store.close()

    def __enter__(self) -> BioMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the services' settings, read and (for tests and tools) replaced here --------------------

    modality = property(lambda self: self.biometrics.modality, doc="The default modality of a probe that names none.")
    policy = property(lambda self: self.biometrics.policy, doc='"best" or "all": whom a matching probe admits.')
    fusion = property(lambda self: self.biometrics.fusion, doc="How a probe of several modalities is judged.")
    disclosure = property(lambda self: self.biometrics.disclosure, doc='"private" or "demo".')
    gate = property(lambda self: self.biometrics.gate, doc="The gate over the enrolled templates.")
    k = property(lambda self: self.retrieval.k, doc="Notes a read returns when it names no k.")
    prompt_tokens = property(lambda self: self.retrieval.prompt_tokens, doc="The answer prompt's budget.")

    @property
    def limiter(self) -> AttemptLimiter:
        """The attempt limiter every gated call asks first (biomem.identity.limits)."""
        return self.biometrics.limiter

    @limiter.setter
    def limiter(self, limiter: AttemptLimiter) -> None:
        self.biometrics.limiter = limiter

    @property
    def sessions(self) -> Sessions:
        """The open requester sessions (biomem.engine.sessions)."""
        return self.requesters.sessions

    @sessions.setter
    def sessions(self, sessions: Sessions) -> None:
        self.requesters.sessions = sessions

    @property
    def target_fpir(self) -> float:
        """The false-positive identification rate enrolment keeps (biomem.identity.enrolment)."""
        return self.biometrics.target_fpir

    @target_fpir.setter
    def target_fpir(self, rate: float) -> None:
        self.biometrics.target_fpir = rate

    # ---- who is asking: biomem.identity.biometrics and biomem.engine.requesters --------------

    def encoder(self, modality: str | None = None) -> modalities.Encoder:
        """The (cached) encoder of `modality`, default the store's."""
        return self.biometrics.encoder(modality)

    def probe(self, sample: Any, modality: str | None = None, *, quality: str = "probe") -> Probe:
        """Biometrics.probe: a capture (or a Burst of frames) through its encoder, held to the `quality` bar."""
        return self.biometrics.probe(sample, modality, quality=quality)

    def probes(self, probe: Any) -> list[Probe]:
        """Biometrics.probes: one or more Probes from a sample, a list, or {modality: sample}."""
        return self.biometrics.probes(probe)

    def threshold(self, modality: str | None = None, *, step_up: bool = False) -> float:
        """τ of `modality` (Biometrics.threshold); `step_up`: the stricter τ of destructive or broad actions."""
        return self.biometrics.threshold(modality, step_up=step_up)

    def set_threshold(self, tau: float, modality: str | None = None, source: str = "manual", *,
                      step_up: bool = False) -> None:
        """Store τ (or the step-up τ) for `modality`, for example from calibration."""
        self.biometrics.set_threshold(tau, modality, source, step_up=step_up)

    def margin(self, modality: str | None = None) -> float:
        """δ of `modality` (Biometrics.margin): a runner-up this close to the best admits nobody."""
        return self.biometrics.margin(modality)

    def set_margin(self, delta: float, modality: str | None = None, source: str = "manual") -> None:
        """Store δ for `modality`, for example from calibration."""
        self.biometrics.set_margin(delta, modality, source)

    def identification(self, modality: str | None = None) -> dict[str, Any]:
        """What `modality`'s τ guards in 1:N identification (Biometrics.identification)."""
        return self.biometrics.identification(modality)

    def identify(self, probe: Any, *, policy: str | None = None, fusion: str | None = None,
                 client: Clients = None) -> GateResult:
        """Run the gate (Biometrics.identify): which identities may this requester's notes come from."""
        return self.biometrics.identify(probe, policy=policy, fusion=fusion, client=client)

    owner_of = staticmethod(Biometrics.owner_of)

    def verify(self, probe: Any, action: str = "this action", *, client: Clients = None) -> int:
        """Step-up (Biometrics.verify): the identity a fresh probe proves at the stricter τ."""
        return self.biometrics.verify(probe, action, client=client)

    def prove(self, probe: Any, action: str = "this change", *, client: Clients = None) -> int:
        """The person a fresh step-up `probe` proves, for a change it asks (Requesters.prove)."""
        return self.requesters.prove(probe, action, client=client)

    def enroll(self, label: str, samples: Iterable[Any] | dict[str, Iterable[Any]], modality: str | None = None, *,
               sample: bool = False, client: Clients = None, admin: bool = False) -> Identity:
        """Create an identity from captures of one modality, or of several as {modality: captures}
        (Biometrics.enroll: what is refused, and why)."""
        return self.biometrics.enroll(label, samples, modality, sample=sample, client=client, admin=admin)

    def add_templates(self, identity_id: int, samples: Iterable[Any], modality: str | None = None, *,
                      probe: Any = None, client: Clients = None) -> None:
        """Biometrics.add_templates; with `probe`, refused first for a sample person (access.check_writer)."""
        if probe is not None:
            check_writer(self.store.identity(identity_id))
        self.biometrics.add_templates(identity_id, samples, modality, probe=probe, client=client)

    def identities(self) -> list[Identity]:
        """The enrolled people."""
        return self.store.identities()

    def other_kind(self, modality: str | None = None) -> str | None:
        """A modality enrolled here of another kind than `modality` (Biometrics.other_kind)."""
        return self.biometrics.other_kind(modality)

    def session(self, probe: Any, *, client: Clients = None, ttl: float = DEFAULT_TTL,
                bound_to: str | None = None) -> Session:
        """Run the gate once: a Session that acts as the matched person for `ttl` seconds
        (UnknownIdentityError when the probe matches nobody). See biomem.engine.sessions."""
        return self.requesters.open(self, probe, client=client, ttl=ttl, bound_to=bound_to)

    # ---- erasure ------------------------------------------------------------------------------

    def forget(self, *, probe: Any = None, identity: int | None = None, client: Clients = None,
               timeout: float = 10.0) -> int:
        """Erase the requester (step-up `probe`) or, as the operator, person `identity`: notes, links,
        history, templates and index files, their memberships and every note they wrote in a group (a group
        left without members goes too). Returns the erased id once no byte of it is left in the database,
        its WAL or the index folder (ForgetIncompleteError otherwise)."""
        if (identity is None) == (probe is None):
            raise InvalidInputError("forget() takes exactly one of probe= or identity=")
        if self.store.erasure_pending:
            self.erasure.finish(timeout)
        owner = self.prove(probe, "Forgetting you", client=client) if probe is not None \
            else self.store.person(identity).id
        self.sessions.end_all(owner)
        self.erasure.erase(owner, timeout)
        return owner

    def finish_erasure(self, timeout: float = 10.0) -> None:
        """Finish a forget that ForgetIncompleteError interrupted (Erasure.finish)."""
        self.erasure.finish(timeout)

    # ---- memories -----------------------------------------------------------------------------

    def add(self, text: str, *, identity: int | None = None, probe: Any = None, scope: int | None = None,
            hidden_from: Sequence[int] = (), metadata: dict[str, Any] | None = None,
            timestamp: Any = None, client: Clients = None, infer: bool = True) -> Note:
        """Remember `text` for `identity` (trusted import: a person, or a group straight into its notes) or for
        whoever `probe` matches; infer=False stores the text as given (embedded; no LLM analysis, links or
        evolution). `scope`: a group of the writer's to write into instead of their own notes, `hidden_from`
        members of it who must never retrieve the note; `metadata` a small JSON object that filters read."""
        text = check_note(text)
        when = parse_timestamp(timestamp)
        metadata = check_metadata(metadata)
        if (identity is None) == (probe is None):
            raise InvalidInputError("add() takes exactly one of identity= or probe=")
        writer = self.store.identity(identity if identity is not None else self.requesters.owner(probe, client))
        if probe is not None:
            check_writer(writer)
        return self.notebook.add(writer, text, when, scope=scope, hidden_from=hidden_from, metadata=metadata,
                                 infer=infer)

    def add_many(self, texts: Sequence[str], *, identity: int, timestamps: Sequence[Any] | None = None,
                 batch_size: int = 256) -> list[int]:
        """Trusted bulk import of one owner's history, embedded in batches; returns note ids."""
        owner = self.store.identity(identity)  # a person, or a group (its shared notes, author unknown)
        texts = [check_note(t) for t in texts]
        stamps = [parse_timestamp(t) for t in (timestamps or [None] * len(texts))]
        if len(stamps) != len(texts):
            raise InvalidInputError("add_many needs one timestamp per text")
        return self.notebook.add_many(owner, texts, stamps, batch_size)

    def search(self, query: str | np.ndarray, *, probe: Any, k: int | None = None, links: int = 0,
               filters: dict[str, Any] | None = None, threshold: float | None = None,
               policy: str | None = None, client: Clients = None) -> SearchResult:
        """Gate the probe, then rank the notes the admitted people may read (their own and their groups', less
        those hidden from them) by cosine to `query`.

        `query` is a text or a precomputed unit-norm text embedding. `filters` (biomem.stores.filters: fields
        scope, author, tags, keywords, timestamp, metadata.<key>; AND/OR/NOT) narrow the notes before the top
        K; `threshold` drops hits below that cosine. `links`: up to that many linked notes per hit are added
        as `linked` (A-Mem expands each hit by its links, up to k; 0, the default, expands nothing). The gate
        and `gated_out` depend on none of these. More than BROAD_K notes, or any filter, lists the person's
        notes (biomem.engine.checks.is_listing): the probe must then clear the step-up τ, as for get_all.
        """
        asked = self.retrieval.query(query, k=k, links=links, filters=filters, threshold=threshold)
        embedding = self.retrieval.embedding(asked)  # the query embeds while the probe encodes
        gate = self.requesters.admit(probe, policy=policy, client=client, listing=asked.listing)
        return self.retrieval.search(gate, asked, embedding.result())

    def ask(self, question: str, *, probe: Any, k: int | None = None, links: int = 0, temporal: bool = False,
            query: str | None = None, policy: str | None = None, client: Clients = None) -> Answer:
        """Answer from the requester's own memories only; a stranger's LLM sees no memory.
        With `links`, the notes linked to the hits follow them in the context (A-Mem). `query`
        retrieves instead of the question, e.g. A-Mem's `mem.llm.query_keywords(question)`. More than
        BROAD_K notes need the step-up match, as for search."""
        asked = self.retrieval.query(query, k=k, links=links, question=question)  # a bad question costs no probe
        embedding = self.retrieval.embedding(asked)  # encoding; a good one embeds while the probe encodes
        gate = self.requesters.admit(probe, policy=policy, client=client, listing=asked.listing)
        return self.retrieval.answer(gate, asked, embedding.result(), temporal=temporal)

    def disclose(self, gate: GateResult, outside: int) -> dict[str, Any]:
        """The gate decision and the kept-out summary as this store's disclosure allows (Retrieval.disclose)."""
        return self.retrieval.disclose(gate, outside)

    def get(self, note_id: int, *, probe: Any, client: Clients = None) -> Note:
        """One of the notes the requester may read (anyone else's id raises NoteNotFoundError)."""
        note_id = check_id(note_id)
        return self.notebook.get(self.requesters.owner(probe, client), note_id)

    def get_all(self, *, probe: Any, filters: dict[str, Any] | None = None, page: int = 1,
                page_size: int | None = None, client: Clients = None) -> list[Note]:
        """The notes the requester may read (their own and their groups'), oldest first, that match `filters`;
        page `page` of `page_size` (default: all). A broad read: step-up probe."""
        where, (offset, limit) = parsed_filters(filters), check_page(page, page_size)
        return self.notebook.listing(self.verify(probe, "Listing all your notes", client=client), where, offset, limit)

    def update(self, note_id: int, text: str, *, probe: Any, client: Clients = None) -> Note:
        """Rewrite one of the requester's notes, or a group note they wrote (step-up probe; analysed and
        embedded again)."""
        note_id, text = check_id(note_id), check_note(text)  # bad input costs no probe encoding
        return self.notebook.update(self.prove(probe, "Changing a note", client=client), note_id, text)

    def delete(self, note_id: int, *, probe: Any, client: Clients = None, keep_history: bool = False,
               timeout: float = 10.0) -> Note:
        """Delete one of the requester's notes, or a note of one of their groups (step-up probe); returns what
        was deleted.

        Its text goes from the history too (only the events and their times stay) unless
        `keep_history=True`, and from the write-ahead log before this returns (waiting up to
        `timeout` s for other connections' readers, as forget does).
        """
        note_id = check_id(note_id)  # a bad id costs no probe encoding
        return self.notebook.delete(self.prove(probe, "Deleting a note", client=client), note_id,
                                    keep_history=keep_history, timeout=timeout)

    def history(self, note_id: int, *, probe: Any, client: Clients = None) -> list[dict[str, Any]]:
        """Every add/update/evolve/unevolve/delete of a note the requester may read, oldest first, with the note's
        fields before and after each and who made it (`actor`); for a deleted note only events and times
        (before/after None) unless it was deleted with keep_history=True."""
        note_id = check_id(note_id)
        return self.notebook.history(self.requesters.owner(probe, client), note_id)

    # ---- households: biomem.engine.households -------------------------------------------------

    def create_group(self, label: str, *, probe: Any = None, identity: int | None = None,
                     client: Clients = None) -> Group:
        """A new group founded by the requester (step-up `probe`) or the operator's person `identity`."""
        return self.households.create_group(label, probe=probe, identity=identity, client=client)

    def add_member(self, group: int, *, probe: Any = None, member_probe: Any = None, identity: int | None = None,
                   client: Clients = None) -> Group:
        """Add a person to a group: a member's and the newcomer's step-up probes, or the operator's `identity`."""
        return self.households.add_member(group, probe=probe, member_probe=member_probe, identity=identity,
                                          client=client)

    def remove_member(self, group: int, member: int, *, probe: Any = None, operator: bool = False,
                      client: Clients = None) -> Group | None:
        """Take `member` out of a group (a member's step-up probe, or the operator); None when none is left."""
        return self.households.remove_member(group, member, probe=probe, operator=operator, client=client)

    def groups(self, *, probe: Any = None, identity: int | None = None, client: Clients = None) -> list[Group]:
        """The requester's groups (or person `identity`'s, for the operator) with their members' labels."""
        return self.households.groups(probe=probe, identity=identity, client=client)

    def delete_group(self, group: int, *, probe: Any = None, operator: bool = False, client: Clients = None,
                     timeout: float = 10.0) -> int:
        """Erase a group and its notes, links and history (a member's step-up probe, or the operator)."""
        return self.households.delete_group(group, probe=probe, operator=operator, client=client, timeout=timeout)

    def overview(self) -> dict[str, Any]:
        """Public view of the store: totals, the default encoder and its τ, the LLM and policy, and
        (under the "demo" disclosure only) the sample people with their note counts."""
        people = self.store.identities()
        return {"people": len(people), "notes": self.store.note_total(), "modality": self.modality,
                "threshold": self.threshold(), "llm": self.llm.name, "policy": self.policy,
                "samples": people_view(people, self.store.note_summary([p.id for p in people if p.sample])
                                       if self.disclosure == "demo" else {}, self.disclosure)}

    def stats(self) -> dict[str, Any]:
        """Operator view: counts, identities with their note counts, modalities and thresholds, and per
        modality what its τ guards in 1:N identification (`identification`: N, FMR, FPIR, largest N)."""
        per_owner = {owner: count for owner, (count, _) in self.store.note_summary().items()}
        modalities = sorted({self.modality, *self.store.modalities(), *self.store.calibrated()})
        return {"path": self.store.location, **self.store.counts(),
                "per_identity": {f"{i.id}: {i.label}": per_owner.get(i.id, 0) for i in self.store.identities()},
                "per_group": {f"{g.id}: {g.label}": {"notes": per_owner.get(g.id, 0), "members": g.members}
                              for g in self.store.all_groups()},
                "default_modality": self.modality,
                "modalities": {m: self.threshold(m) for m in modalities},
                "identification": {m: self.identification(m) for m in modalities},
                "text_model": self.text.name, "llm": self.llm.name, "policy": self.policy,
                "disclosure": self.disclosure}
