"""BioMemory: the public engine. Identity comes from the biometric gate, never from a user_id.

    mem = BioMemory("biomem.db")                      # SQLite file + indexes beside it
    mem = BioMemory("postgresql://biomem@db/memory")  # or PostgreSQL + pgvector, shared by replicas
    alice = mem.enroll("alice", ["alice1.jpg", "alice2.jpg"])
    mem.add("My PIN is 1234", identity=alice.id)       # trusted import
    mem.search("what is my PIN?", probe="alice3.jpg")  # only Alice's notes can come back

The biometric calls (enroll, identify, verify, threshold…) are biomem.identity.biometrics'; the result
types SearchResult and Answer, biomem.engine.results', are re-exported here.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

import modalities

from ..errors import (
    DisclosureError,
    InvalidInputError,
    NotAuthorisedError,
    NoteNotFoundError,
    StepUpRequiredError,
    StoreCorruptError,
)
from ..identity.biometrics import Biometrics, Clients
from ..identity.disclosure import gate_view, kept_out_view, people_view
from ..identity.encoders import EncoderCache
from ..identity.enrolment import Reserved
from ..identity.gate import Gate, GateResult
from ..identity.limits import AttemptLimiter
from ..identity.samples import sample_people_captures
from ..notes.agent import MemoryAgent
from ..notes.llm import LLM, answer_prompt, fit_notes, make_llm
from ..notes.textenc import TextEncoder, default_onnx_cache
from ..notes.timeparse import parse_timestamp
from ..settings import Settings
from ..stores import MemoryStore, is_postgres, open_store, sqlite_path
from ..stores.base import Within
from ..stores.filters import Filter, check_metadata, parse_filters
from ..stores.records import Identity, Note, check_id
from ..vocabulary import DISCLOSURES, FUSIONS, POLICIES, AttemptLimits
from .access import check_writer
from .checks import (
    BROAD_K,
    check_budget,
    check_k,
    check_links,
    check_note,
    check_page,
    check_question,
    check_threshold,
    is_listing,
)
from .households import Households
from .results import Answer, SearchResult
from .sessions import DEFAULT_TTL, Session, Sessions

DEFAULT_ENCODER = "face-arcface-s"  # the paper's face encoder (ArcFace, insightface buffalo_s)


def beside(call: Callable[[], Any]) -> Future:
    """`call()` on a thread of its own, its value or exception in the Future: work that overlaps the caller's."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as error:  # the caller's result() raises it
            future.set_exception(error)

    threading.Thread(target=run, name="biomem-beside", daemon=True).start()
    return future


log = logging.getLogger(__name__)


class BioMemory(Households, Biometrics):
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
        self.fusion = fusion
        self.path = path if is_postgres(path) else sqlite_path(path)
        self.store: MemoryStore = open_store(self.path, key=key, settings=settings)
        try:  # a store this opened is closed again when loading the rest fails (its SQLite WAL checkpointed)
            self.disclosure = self._check_disclosure(disclosure or settings.disclosure, force_disclosure)
            self.limiter = AttemptLimiter(AttemptLimits.parse(limits) if isinstance(limits, str)
                                          else limits if limits is not None else settings.attempts, self.store)
            self.text = (text_model if isinstance(text_model, TextEncoder)
                         else TextEncoder(text_model or settings.text_model, onnx_cache=default_onnx_cache(settings)))
            self._check_text_model()
            self._encoders = EncoderCache()
            if isinstance(encoder, modalities.Encoder):
                self._encoders.encoders[encoder.name] = encoder
                encoder = encoder.name
            stored_encoder = self.store.get_meta("default_modality")
            self.modality = encoder or stored_encoder or settings.encoder or DEFAULT_ENCODER
            if stored_encoder is None and (self.modality in self._encoders.encoders
                                           or modalities.known(self.modality)):
                # A misspelt --encoder must not become the store's encoder for good; an unregistered
                # name (precomputed probes in the evaluation) is used for this session only.
                self.store.set_meta("default_modality", self.modality)
            self.policy = policy
            self.target_fpir = settings.target_fpir
            self.k = check_k(k)
            self.prompt_tokens = check_budget(settings.prompt_tokens if prompt_tokens is None else prompt_tokens)
            self.gate = Gate(self.store)
            self.partitions = self.store.search_index(self.text.dim, hnsw_threshold=hnsw_threshold)
            self.llm = make_llm(llm, self.text, settings)
            self.agent = MemoryAgent(self.store, self.partitions, self.text, self.llm)
            self._enrolling = threading.Lock()  # check-then-insert of enrolments is one step
            self.reserved = Reserved(sample_people_captures)  # encoded at a requester's first enrolment, not here
            self.sessions = Sessions()  # open requester sessions (see session())
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

    def _check_disclosure(self, mode: str, force: bool) -> str:
        if mode not in DISCLOSURES:
            raise InvalidInputError(f"disclosure must be one of {DISCLOSURES}, got {mode!r}")
        real = [i for i in self.store.identities() if not i.sample]
        if mode == "demo" and real and not force:
            raise DisclosureError(f"disclosure 'demo' shows labels and scores, and this store holds "
                                  f"{len(real)} real enrolment(s); use 'private', or force it")
        return mode

    def _check_text_model(self) -> None:
        dim = self.store.get_meta("text_dim")
        if dim is None:
            self.store.set_meta("text_dim", str(self.text.dim))
            self.store.set_meta("text_model", self.text.name)
        elif int(dim) != self.text.dim:
            raise StoreCorruptError(
                f"{self.store.location} holds {dim}-d text embeddings from {self.store.get_meta('text_model')!r};"
                f" {self.text.name!r} makes {self.text.dim}-d ones")

    def close(self) -> None:
        """Write changed hnsw indexes and checkpoint the database."""
        self.partitions.flush()
        self.store.close()

    def __enter__(self) -> BioMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def forget(self, *, probe: Any = None, identity: int | None = None, client: Clients = None,
               timeout: float = 10.0) -> int:
        """Erase the requester (step-up `probe`) or, as the operator, person `identity`: notes, links,
        history, templates and index files, their memberships and every note they wrote in a group (a group
        left without members goes too). Returns the erased id once no byte of it is left in the database,
        its WAL or the index folder (ForgetIncompleteError otherwise)."""
        if (identity is None) == (probe is None):
            raise InvalidInputError("forget() takes exactly one of probe= or identity=")
        if self.store.erasure_pending:
            self.finish_erasure(timeout)
        owner = self.prove(probe, "Forgetting you", client=client) if probe is not None \
            else self.store.person(identity).id
        self.sessions.end_all(owner)
        touched: list[int] = []
        try:
            touched = self.store.delete_identity(owner)
        finally:
            for erased in (owner, *touched):  # their groups' indexes held their notes' vectors too
                self.partitions.drop(erased)
                self.llm.drop_owner(erased)
        self.store.checkpoint(timeout)
        return owner

    def prove(self, probe: Any, action: str = "this change", *, client: Clients = None) -> int:
        """The person a fresh step-up `probe` proves, for a change it asks (verify); SampleReadOnlyError for one of
        the demo's sample people, whose captures anyone can show (biomem.engine.access.check_writer)."""
        return check_writer(self.store.identity(self.verify(probe, action, client=client)))

    def add_templates(self, identity_id: int, samples: Iterable[Any], modality: str | None = None, *,
                      probe: Any = None, client: Clients = None) -> None:
        """Biometrics.add_templates; with `probe`, refused first when `identity_id` is a sample person, whose
        captures no probe may change (biomem.engine.access.check_writer)."""
        if probe is not None:
            check_writer(self.store.identity(identity_id))
        super().add_templates(identity_id, samples, modality, probe=probe, client=client)

    def finish_erasure(self, timeout: float = 10.0) -> None:
        """Finish a forget that ForgetIncompleteError interrupted: wait up to `timeout` s for other
        readers, then empty the write-ahead log that still held the erased pages."""
        self.store.checkpoint(timeout)

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
        writer = self.store.identity(identity if identity is not None else self._owner(probe, client))
        if probe is not None:
            check_writer(writer)
        owner, author, hidden = self._placement(writer, scope, hidden_from)
        (note_id,) = self.agent.ingest(owner, [text], [when], infer=bool(infer), author=author,
                                       metadata=metadata, hidden_from=hidden)
        return self.store.get_note(owner, note_id)

    def _placement(self, writer: Identity, scope: int | None, hidden_from: Sequence[int]) -> tuple[int, int | None,
                                                                                                    list[int]]:
        """(owner, author, hidden member ids) of a note `writer` writes into `scope`."""
        if writer.kind == "group":  # the operator's import into a group: nobody wrote it
            if scope is not None:
                raise InvalidInputError("a note imported into a group takes no scope")
            return writer.id, None, self.check_audience(self.store.group(writer.id), None, hidden_from)
        if scope is None:
            if hidden_from:
                raise InvalidInputError("hidden_from applies to a household's note: give its scope too")
            return writer.id, writer.id, []
        group = self._member_group(writer.id, check_id(scope, "group"))
        return group.id, writer.id, self.check_audience(group, writer.id, hidden_from)

    def add_many(self, texts: Sequence[str], *, identity: int, timestamps: Sequence[Any] | None = None,
                 batch_size: int = 256) -> list[int]:
        """Trusted bulk import of one owner's history, embedded in batches; returns note ids."""
        owner = self.store.identity(identity)  # a person, or a group (its shared notes, author unknown)
        author = owner.id if owner.kind == "person" else None
        texts = [check_note(t) for t in texts]
        stamps = [parse_timestamp(t) for t in (timestamps or [None] * len(texts))]
        if len(stamps) != len(texts):
            raise InvalidInputError("add_many needs one timestamp per text")
        ids: list[int] = []
        for start in range(0, len(texts), batch_size):
            ids += self.agent.ingest(owner.id, texts[start:start + batch_size], stamps[start:start + batch_size],
                                     author=author)
        return ids

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
        k = check_k(self.k if k is None else k)
        check_links(links)
        checked = self._checked_query(query)  # a bad query costs no probe encoding
        where, threshold = self.parsed_filters(filters), check_threshold(threshold)
        embedding = self._embedding_beside([checked])  # the query embeds while the probe encodes
        gate = self._gate(probe, policy, client, is_listing(k, where))
        return self.search_as(gate, embedding.result()[0], k=k, links=links,
                              filters=where, threshold=threshold)

    def _gate(self, probe: Any, policy: str | None, client: Clients, listing: bool) -> GateResult:
        """The gate's decision for a read; for a listing, StepUpRequiredError (a miss) unless the person it
        admitted is proved at the step-up τ. A probe that matches nobody gets its empty result either way."""
        self.limiter.check(client)  # a client in cool-down is refused before any encoder runs
        probes = self.probes(probe)
        gate = self.identify(probes, policy=policy, client=client)
        if listing and gate.matched and not self.clears_step_up(gate, probes):
            self.limiter.miss(client)
            raise StepUpRequiredError(f"a search of more than {BROAD_K} notes, or with filters, lists your notes: it "
                                      "needs a fresh, clear probe of you (the stricter match, of every kind you "
                                      "enrolled). Ask for fewer notes without filters, or show a clearer probe")
        return gate

    def search_as(self, gate: GateResult, query: str | np.ndarray, *, k: int | None = None,
                  links: int = 0, filters: dict[str, Any] | Filter | None = None,
                  threshold: float | None = None) -> SearchResult:
        """search() for a gate decision already made (a requester session's)."""
        k, links = check_k(self.k if k is None else k), check_links(links)
        where = filters if isinstance(filters, Filter) else self.parsed_filters(filters)
        return self._search_admitted(gate, self._query_vector(query), k, links, where, check_threshold(threshold))

    def parsed_filters(self, filters: Any) -> Filter | None:
        """`filters` parsed (biomem.stores.filters), timestamps read as the engine reads them; None for none."""
        return parse_filters(filters, timestamp=parse_timestamp)

    def session(self, probe: Any, *, client: Clients = None, ttl: float = DEFAULT_TTL,
                bound_to: str | None = None) -> Session:
        """Run the gate once: a Session that acts as the matched person for `ttl` seconds
        (UnknownIdentityError when the probe matches nobody). See biomem.engine.sessions."""
        self.limiter.check(client)
        probes = self.probes(probe)
        gate = self.identify(probes, policy="best", client=client)
        self.owner_of(gate)  # AmbiguousProbeError or UnknownIdentityError unless one person was admitted
        broad = self.clears_step_up(gate, probes)
        return self.sessions.open(self, gate, gate.labels[gate.identity], broad, ttl, bound_to=bound_to,
                                  client=client)

    def _linked(self, hits: Sequence[tuple[Note, float]], per_hit: int,
                excluded: frozenset[int]) -> list[tuple[Note, int]]:
        """Notes the hits link to, up to `per_hit` each, not already shown nor hidden from the requester; read
        under the hit's owner, so a link to another owner's note (which the store refuses) could never return it."""
        seen = {note.id for note, _ in hits} | excluded
        linked: list[tuple[Note, int]] = []
        for hit, _ in hits:
            for note in self.store.get_notes(hit.owner, [i for i in hit.links if i not in seen])[:per_hit]:
                linked.append((note, hit.id))
                seen.add(note.id)
        return linked

    def _query_vector(self, query: str | np.ndarray) -> np.ndarray:
        return self._embedded(self._checked_query(query))

    def _checked_query(self, query: Any) -> str | np.ndarray:
        """A query's text (stripped), or its vector made unit-norm; InvalidInputError otherwise."""
        if isinstance(query, str):
            return check_question(query)
        vector = np.asarray(query, dtype=np.float32) if isinstance(query, (np.ndarray, list, tuple)) else None
        if vector is None or vector.shape != (self.text.dim,) or not np.isfinite(vector).all() \
                or not np.any(vector):
            raise InvalidInputError(f"a query is a text or a finite non-zero {self.text.dim}-d vector")
        return vector / np.linalg.norm(vector)

    def _embedded(self, checked: str | np.ndarray) -> np.ndarray:
        return self.text.encode_one(checked) if isinstance(checked, str) else checked

    def _embedding_beside(self, queries: list[str | np.ndarray]) -> Future:
        """The checked queries' vectors, embedded on a thread of their own when one is a text: the text encoder
        and the face encoder each run on one onnxruntime thread, so on two cores the question costs no time
        beside the probe's encoding (benchmarks/ask_latency.py)."""
        if all(isinstance(q, np.ndarray) for q in queries):
            done: Future = Future()
            done.set_result(queries)
            return done
        return beside(lambda: [self._embedded(q) for q in queries])

    def _search_admitted(self, gate: GateResult, vector: np.ndarray, k: int, links: int, where: Filter | None,
                         threshold: float | None) -> SearchResult:
        owners, excluded = self.reach(gate.admitted)
        hits: list[tuple[int, int, float]] = []
        pool = -len(excluded)  # notes hidden from the requester count as kept out
        for owner in owners:
            pool += self.partitions.size(owner)
            within = Within(where, excluded) if where is not None or (excluded and owner not in gate.admitted) \
                else None
            hits += [(owner, i, s) for i, s in self.partitions.search(owner, vector, k, within)
                     if threshold is None or s >= threshold]
        hits.sort(key=lambda h: -h[2])
        scores = {i: s for _, i, s in hits[:k]}
        notes = [(n, scores[n.id]) for n in self.store.get_notes_among(owners, list(scores))]
        notes.sort(key=lambda pair: (-pair[1], pair[0].timestamp, pair[0].id))
        outside = self.store.note_total() - pool
        return SearchResult(gate=gate, notes=notes, gated_out=outside, view=self.disclose(gate, outside),
                            linked=self._linked(notes, links, excluded) if links else [])

    def disclose(self, gate: GateResult, outside: int) -> dict[str, Any]:
        """The gate decision and the kept-out summary (`outside` notes in all) as this store's disclosure
        policy allows. Under "private" it reads only the admitted identities (no scan of every note)."""
        if self.disclosure == "demo":
            people = {i.id: i for i in self.store.identities()}
            summary = self.store.note_summary([i for i, person in people.items() if person.sample])
        else:
            people, summary = {i: self.store.identity(i) for i in gate.admitted}, {}
        return {"gate": gate_view(gate, people, self.disclosure),
                "gated_out": kept_out_view(gate, outside, summary, people, self.disclosure)}

    def ask(self, question: str, *, probe: Any, k: int | None = None, links: int = 0, temporal: bool = False,
            query: str | None = None, policy: str | None = None, client: Clients = None) -> Answer:
        """Answer from the requester's own memories only; a stranger's LLM sees no memory.
        With `links`, the notes linked to the hits follow them in the context (A-Mem). `query`
        retrieves instead of the question, e.g. A-Mem's `mem.llm.query_keywords(question)`. More than
        BROAD_K notes need the step-up match, as for search."""
        k = check_k(self.k if k is None else k)
        check_links(links)
        checked = [check_question(question)] + ([] if query is None else [self._checked_query(query)])
        embedding = self._embedding_beside(checked)  # a bad question costs no probe encoding; a good one
        gate = self._gate(probe, policy, client, is_listing(k, None))  # embeds while the probe encodes
        vectors = embedding.result()
        return self._answer(gate, question, vectors[0], vectors[-1], k=k, links=links, temporal=temporal)

    def ask_as(self, gate: GateResult, question: str, *, k: int | None = None, links: int = 0,
               temporal: bool = False, query: str | None = None) -> Answer:
        """ask() for a gate decision already made (a requester session's)."""
        vector = self._query_vector(question)
        retrieve = vector if query is None else self._query_vector(query)
        return self._answer(gate, question, vector, retrieve, k=k, links=links, temporal=temporal)

    def _answer(self, gate: GateResult, question: str, vector: np.ndarray, retrieve: np.ndarray, *,
                k: int | None, links: int, temporal: bool) -> Answer:
        result = self.search_as(gate, retrieve, k=k, links=links)
        ranked = [n for n, _ in result.notes] + [n for n, _ in result.linked]  # hits by score, then links
        notes = fit_notes(question, ranked, temporal, self.prompt_tokens, self.text.count_tokens)
        hits = result.notes[:len(notes)]
        return Answer(text=self.llm.answer(question, notes, temporal, vector), notes=hits,
                      gate=result.gate, prompt=answer_prompt(question, notes, temporal),
                      gated_out=result.gated_out, view=result.view, linked=result.linked[:len(notes) - len(hits)],
                      omitted=len(ranked) - len(notes))

    def get(self, note_id: int, *, probe: Any, client: Clients = None) -> Note:
        """One of the notes the requester may read (anyone else's id raises NoteNotFoundError)."""
        note_id = check_id(note_id)
        return self.get_as(self._owner(probe, client), note_id)

    def get_as(self, person: int, note_id: int) -> Note:
        """get() for a person the gate already admitted (a requester session's)."""
        owners, excluded = self.reach([person])
        note = self.store.find_note(owners, check_id(note_id))
        if note.id in excluded:
            raise NoteNotFoundError(f"no note {note_id} among your memories")
        return note

    def get_all(self, *, probe: Any, filters: dict[str, Any] | None = None, page: int = 1,
                page_size: int | None = None, client: Clients = None) -> list[Note]:
        """The notes the requester may read (their own and their groups'), oldest first, that match `filters`;
        page `page` of `page_size` (default: all). A broad read: step-up probe."""
        where, (offset, limit) = self.parsed_filters(filters), check_page(page, page_size)
        return self.get_all_as(self.verify(probe, "Listing all your notes", client=client), where, offset, limit)

    def get_all_as(self, person: int, filters: dict[str, Any] | Filter | None = None, offset: int = 0,
                   limit: int | None = None) -> list[Note]:
        """get_all() for a person a step-up probe already proved (a requester session's)."""
        where = filters if isinstance(filters, Filter) else self.parsed_filters(filters)
        owners, excluded = self.reach([person])
        return self.store.list_notes(owners, where=where, excluded=excluded, offset=offset, limit=limit)[0]

    def update(self, note_id: int, text: str, *, probe: Any, client: Clients = None) -> Note:
        """Rewrite one of the requester's notes, or a group note they wrote (step-up probe; analysed and
        embedded again)."""
        note_id, text = check_id(note_id), check_note(text)  # bad input costs no probe encoding
        return self.update_as(self.prove(probe, "Changing a note", client=client), note_id, text)

    def update_as(self, person: int, note_id: int, text: str) -> Note:
        """update() for a person a fresh step-up probe already proved (a requester session's)."""
        note = self.get_as(person, note_id)
        if note.author != person:
            raise NotAuthorisedError("only the member who wrote a household's note may change it")
        note = self.agent.rewrite(note.owner, note.id, check_note(text), actor=person)
        self.llm.drop_owner(note.owner)
        return note

    def delete(self, note_id: int, *, probe: Any, client: Clients = None, keep_history: bool = False,
               timeout: float = 10.0) -> Note:
        """Delete one of the requester's notes, or a note of one of their groups (step-up probe); returns what
        was deleted.

        Its text goes from the history too (only the events and their times stay) unless
        `keep_history=True`, and from the write-ahead log before this returns (waiting up to
        `timeout` s for other connections' readers, as forget does).
        """
        note_id = check_id(note_id)  # a bad id costs no probe encoding
        return self.delete_as(self.prove(probe, "Deleting a note", client=client), note_id,
                              keep_history=keep_history, timeout=timeout)

    def delete_as(self, person: int, note_id: int, *, keep_history: bool = False, timeout: float = 10.0) -> Note:
        """delete() for a person a fresh step-up probe already proved (a requester session's)."""
        owner = self.get_as(person, note_id).owner
        self.agent.take_back(owner, note_id)  # no derived copy of its words outlives it (docs/gate.md)
        note, generation = self.store.delete_note(owner, note_id, keep_history=keep_history, actor=person)
        self.partitions.deleted(owner, note_id, generation)
        self.llm.drop_owner(owner)
        self.store.checkpoint(timeout)
        return note

    def history(self, note_id: int, *, probe: Any, client: Clients = None) -> list[dict[str, Any]]:
        """Every add/update/evolve/unevolve/delete of a note the requester may read, oldest first, with the note's
        fields before and after each and who made it (`actor`); for a deleted note only events and times
        (before/after None) unless it was deleted with keep_history=True."""
        note_id = check_id(note_id)
        return self.history_as(self._owner(probe, client), note_id)

    def history_as(self, person: int, note_id: int) -> list[dict[str, Any]]:
        """history() for a person the gate already admitted. A group's deleted note keeps no list of whom it
        was hidden from, so its history is shown to nobody; a person's own deleted note's is."""
        try:
            owner = self.get_as(person, note_id).owner
        except NoteNotFoundError:
            owner = person
        return self.store.history(owner, note_id)

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
