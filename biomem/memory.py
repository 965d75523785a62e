"""BioMemory: the public engine. Identity comes from the biometric gate, never from a user_id.

    mem = BioMemory("biomem.db")                      # SQLite file + indexes beside it
    alice = mem.enroll("alice", ["alice1.jpg", "alice2.jpg"])
    mem.add("My PIN is 1234", identity=alice.id)       # trusted import
    mem.search("what is my PIN?", probe="alice3.jpg")  # only Alice's notes can come back
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import modalities

from .agent import MemoryAgent
from .errors import InvalidInputError, ModalityMismatchError, StoreCorruptError, UnknownIdentityError
from .gate import FUSIONS, POLICIES, Gate, GateResult, Probe, fuse
from .llm import LLM, answer_prompt, make_llm
from .partitions import Partitions
from .store import Identity, Note, Store
from .textenc import TextEncoder
from .timeparse import parse_timestamp

log = logging.getLogger(__name__)

DEFAULT_ENCODER = "face-dlib"


@dataclass
class SearchResult:
    """Retrieval under the gate: the decision, the admitted top-K, how many notes stayed out."""

    gate: GateResult
    notes: list[tuple[Note, float]]
    gated_out: int

    def as_dict(self) -> dict[str, Any]:
        return {"results": [{**n.as_dict(), "score": s} for n, s in self.notes],
                "gate": self.gate.as_dict(), "gated_out": self.gated_out}


@dataclass
class Answer:
    """An answer, the notes it was allowed to read, the gate decision and the exact prompt."""

    text: str
    notes: list[tuple[Note, float]]
    gate: GateResult
    prompt: str
    gated_out: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"answer": self.text, "results": [{**n.as_dict(), "score": s} for n, s in self.notes],
                "gate": self.gate.as_dict(), "gated_out": self.gated_out}


@dataclass
class _Probes:
    """Lazily created biometric encoders, one per modality name."""

    encoders: dict[str, modalities.Encoder] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, name: str) -> modalities.Encoder:
        with self.lock:
            if name not in self.encoders:
                self.encoders[name] = modalities.create(name)
            return self.encoders[name]


class BioMemory:
    """Identity-gated agentic memory over one SQLite file.

    path: the database file; derived indexes live in `<path>.index/`.
    encoder: default biometric modality (registry name, or a ready Encoder instance to reuse);
        stored in the DB on creation.
    text_model: sentence encoder (default all-MiniLM-L6-v2, offline first).
    llm: "offline" (default), "openai:<model>", "hf:<model-id>" or an LLM instance.
    policy: "best" admits only the best-matching identity; "all" every identity at or above τ.
    fusion: how a probe carrying several modalities is judged: "all" must match (default),
        "any" suffices, or "sum" of the margins above each τ.
    """

    def __init__(self, path: str | os.PathLike = "biomem.db", *,
                 encoder: str | modalities.Encoder | None = None,
                 text_model: str | TextEncoder | None = None, llm: str | LLM | None = None,
                 policy: str = "best", fusion: str = "all", k: int = 10,
                 hnsw_threshold: int = 20_000) -> None:
        if policy not in POLICIES:
            raise InvalidInputError(f"policy must be one of {POLICIES}, got {policy!r}")
        if fusion not in FUSIONS:
            raise InvalidInputError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
        self.fusion = fusion
        self.path = Path(path)
        self.store = Store(self.path)
        self.text = text_model if isinstance(text_model, TextEncoder) else TextEncoder(text_model)
        self._check_text_model()
        self._encoders = _Probes()
        if isinstance(encoder, modalities.Encoder):
            self._encoders.encoders[encoder.name] = encoder
            encoder = encoder.name
        stored_encoder = self.store.get_meta("default_modality")
        self.modality = encoder or stored_encoder or os.environ.get("BIOMEM_ENCODER") or DEFAULT_ENCODER
        if stored_encoder is None:
            self.store.set_meta("default_modality", self.modality)
        self.policy = policy
        self.k = k
        self.gate = Gate(self.store)
        self.partitions = Partitions(self.store, self.path.with_name(self.path.name + ".index"),
                                     self.text.dim, hnsw_threshold=hnsw_threshold)
        self.llm = make_llm(llm, self.text)
        self.agent = MemoryAgent(self.store, self.partitions, self.text, self.llm)

    def _check_text_model(self) -> None:
        dim = self.store.get_meta("text_dim")
        if dim is None:
            self.store.set_meta("text_dim", str(self.text.dim))
            self.store.set_meta("text_model", self.text.name)
        elif int(dim) != self.text.dim:
            raise StoreCorruptError(
                f"{self.path} holds {dim}-d text embeddings from {self.store.get_meta('text_model')!r};"
                f" {self.text.name!r} makes {self.text.dim}-d ones")

    def close(self) -> None:
        """Write changed hnsw indexes and checkpoint the database."""
        self.partitions.flush()
        self.store.close()

    def __enter__(self) -> BioMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- biometrics -------------------------------------------------------------------------

    def encoder(self, modality: str | None = None) -> modalities.Encoder:
        """The (cached) encoder of `modality`, default the store's."""
        return self._encoders.get(modality or self.modality)

    def probe(self, sample: Any, modality: str | None = None) -> Probe:
        """A Probe from an image (path, bytes, array, PIL) through the encoder, or as given."""
        if isinstance(sample, Probe):
            if modality and sample.modality != modality:
                raise ModalityMismatchError(f"probe is {sample.modality!r}, expected {modality!r}")
            return sample
        name = modality or self.modality
        return Probe(self.encoder(name).encode(sample), name)

    def threshold(self, modality: str | None = None) -> float:
        """τ of `modality`: the calibrated value stored in the DB, else the encoder's default."""
        name = modality or self.modality
        stored = self.store.threshold(name)
        return stored[0] if stored else modalities.info(name).default_threshold

    def set_threshold(self, tau: float, modality: str | None = None, source: str = "manual") -> None:
        """Store τ for `modality` (for example from calibration)."""
        if not -1.0 <= float(tau) <= 1.0:
            raise InvalidInputError(f"τ is a cosine and must lie in [-1, 1], got {tau}")
        self.store.set_threshold(modality or self.modality, float(tau), source)

    def probes(self, probe: Any) -> list[Probe]:
        """One or more Probes from a sample, a Probe, a list of them, or {modality: sample}."""
        if isinstance(probe, dict):
            probes = [self.probe(sample, modality) for modality, sample in probe.items()]
        elif isinstance(probe, (list, tuple)):
            probes = [self.probe(sample) for sample in probe]
        else:
            probes = [self.probe(probe)]
        if not probes:
            raise InvalidInputError("a probe is needed")
        return probes

    def identify(self, probe: Any, *, policy: str | None = None, fusion: str | None = None) -> GateResult:
        """Run the gate: which identities may this requester's notes come from.

        A probe of several modalities (a list, or {modality: sample}) is fused (`fusion`).
        """
        policy = policy or self.policy
        probes = self.probes(probe)
        enrolled = self.gate.modalities()
        for p in probes:
            if enrolled and p.modality not in enrolled:
                raise ModalityMismatchError(f"no {p.modality!r} templates in this store; "
                                            f"enrolled modalities: {', '.join(enrolled)}")
        if len(probes) == 1:
            result = self.gate.decide(probes[0], self.threshold(probes[0].modality), policy)
        else:
            parts = [self.gate.decide(p, self.threshold(p.modality), "all") for p in probes]
            result = fuse(parts, fusion or self.fusion, policy)
        result.labels = {i: self.store.identity(i).label for i in result.admitted}
        return result

    def _owner(self, probe: Any) -> int:
        gate = self.identify(probe, policy="best")
        if gate.identity is None:
            raise UnknownIdentityError("the probe matches no enrolled identity")
        return gate.identity

    def enroll(self, label: str, samples: Iterable[Any], modality: str | None = None) -> Identity:
        """Create an identity from one or more captures (images or Probes of one modality)."""
        if not isinstance(label, str) or not label.strip():
            raise InvalidInputError("an identity needs a non-empty label")
        probes = [self.probe(s, modality) for s in self._as_list(samples)]
        if not probes:
            raise InvalidInputError("enrolment needs at least one sample")
        names = {p.modality for p in probes}
        if len(names) > 1:
            raise ModalityMismatchError(f"enrol one modality at a time, got {sorted(names)}")
        return self.store.add_identity(label.strip(), names.pop(), np.stack([p.embedding for p in probes]))

    def add_templates(self, identity_id: int, samples: Iterable[Any], modality: str | None = None) -> None:
        """Add more captures (of any modality) to an existing identity."""
        probes = [self.probe(s, modality) for s in self._as_list(samples)]
        if not probes:
            raise InvalidInputError("add_templates needs at least one sample")
        for name in {p.modality for p in probes}:
            self.store.add_templates(identity_id, name,
                                     np.stack([p.embedding for p in probes if p.modality == name]))

    @staticmethod
    def _as_list(samples: Any) -> list[Any]:
        if isinstance(samples, (str, bytes, Path, Probe, np.ndarray)) or hasattr(samples, "getpixel"):
            return [samples]
        return list(samples)

    def identities(self) -> list[Identity]:
        return self.store.identities()

    def forget(self, identity_id: int) -> None:
        """Erase an identity: its notes, links, history, templates and index entries."""
        self.store.delete_identity(int(identity_id))
        self.partitions.drop(int(identity_id))

    # ---- memories -----------------------------------------------------------------------------

    @staticmethod
    def _check_text(text: Any) -> str:
        if not isinstance(text, str) or not text.strip():
            raise InvalidInputError("a memory needs non-empty text")
        return text.strip()

    def add(self, text: str, *, identity: int | None = None, probe: Any = None,
            timestamp: Any = None) -> Note:
        """Remember `text` for `identity` (trusted import) or for whoever `probe` matches."""
        text = self._check_text(text)
        when = parse_timestamp(timestamp)
        if (identity is None) == (probe is None):
            raise InvalidInputError("add() takes exactly one of identity= or probe=")
        owner = self.store.identity(identity).id if identity is not None else self._owner(probe)
        (note_id,) = self.agent.ingest(owner, [text], [when])
        return self.store.get_note(owner, note_id)

    def add_many(self, texts: Sequence[str], *, identity: int, timestamps: Sequence[Any] | None = None,
                 batch_size: int = 256) -> list[int]:
        """Trusted bulk import of one owner's history, embedded in batches; returns note ids."""
        owner = self.store.identity(identity).id
        texts = [self._check_text(t) for t in texts]
        stamps = [parse_timestamp(t) for t in (timestamps or [None] * len(texts))]
        if len(stamps) != len(texts):
            raise InvalidInputError("add_many needs one timestamp per text")
        ids: list[int] = []
        for start in range(0, len(texts), batch_size):
            ids += self.agent.ingest(owner, texts[start:start + batch_size], stamps[start:start + batch_size])
        return ids

    def search(self, query: str | np.ndarray, *, probe: Any, k: int | None = None,
               policy: str | None = None) -> SearchResult:
        """Gate the probe, then rank the admitted partitions' notes by cosine to `query`.

        `query` is a text or a precomputed unit-norm text embedding.
        """
        gate = self.identify(probe, policy=policy)
        return self._search_admitted(gate, query, k or self.k)

    def _search_admitted(self, gate: GateResult, query: str | np.ndarray, k: int) -> SearchResult:
        vector = self.text.encode_one(self._check_text(query)) if isinstance(query, str) \
            else np.asarray(query, dtype=np.float32)
        hits: list[tuple[int, int, float]] = []
        pool = 0
        for owner in gate.admitted:
            pool += self.partitions.size(owner)
            hits += [(owner, i, s) for i, s in self.partitions.search(owner, vector, k)]
        hits.sort(key=lambda h: -h[2])
        hits = hits[:k]
        notes: list[tuple[Note, float]] = []
        for owner in gate.admitted:
            mine = [(i, s) for o, i, s in hits if o == owner]
            scores = dict(mine)
            notes += [(n, scores[n.id]) for n in self.store.get_notes(owner, [i for i, _ in mine])]
        notes.sort(key=lambda pair: (-pair[1], pair[0].timestamp, pair[0].id))
        return SearchResult(gate=gate, notes=notes, gated_out=self.store.note_total() - pool)

    def ask(self, question: str, *, probe: Any, k: int | None = None, temporal: bool = False,
            policy: str | None = None) -> Answer:
        """Answer from the requester's own memories only; a stranger's LLM sees no memory."""
        result = self.search(question, probe=probe, k=k, policy=policy)
        notes = [n for n, _ in result.notes]
        return Answer(text=self.llm.answer(question, notes, temporal), notes=result.notes,
                      gate=result.gate, prompt=answer_prompt(question, notes, temporal),
                      gated_out=result.gated_out)

    def get(self, note_id: int, *, probe: Any) -> Note:
        """One of the requester's notes (another owner's id raises NoteNotFoundError)."""
        return self.store.get_note(self._owner(probe), note_id)

    def get_all(self, *, probe: Any) -> list[Note]:
        """Every note of the requester, oldest first."""
        return self.store.all_notes(self._owner(probe))

    def update(self, note_id: int, text: str, *, probe: Any) -> Note:
        """Rewrite one of the requester's notes (analysed and embedded again; history kept)."""
        text = self._check_text(text)
        return self.agent.rewrite(self._owner(probe), note_id, text)

    def delete(self, note_id: int, *, probe: Any) -> Note:
        """Delete one of the requester's notes; returns what was deleted."""
        owner = self._owner(probe)
        note, generation = self.store.delete_note(owner, note_id)
        self.partitions.deleted(owner, note_id, generation)
        return note

    def history(self, note_id: int, *, probe: Any) -> list[dict[str, Any]]:
        """Every add/update/evolve/delete of one of the requester's notes, oldest first."""
        return self.store.history(self._owner(probe), note_id)

    def gated_out_summary(self, gate: GateResult) -> list[dict[str, Any]]:
        """Owners the gate kept out: label, note count and latest time — never content."""
        labels = {i.id: i.label for i in self.store.identities()}
        return sorted(({"identity": owner, "label": labels[owner], "count": count, "latest": latest}
                       for owner, (count, latest) in self.store.note_summary().items()
                       if owner not in gate.admitted),
                      key=lambda row: (-row["count"], row["label"]))

    def stats(self) -> dict[str, Any]:
        """Counts, identities with their note counts, modalities and thresholds."""
        per_owner = {owner: count for owner, (count, _) in self.store.note_summary().items()}
        return {"path": str(self.path), **self.store.counts(),
                "per_identity": {i.label: per_owner.get(i.id, 0) for i in self.store.identities()},
                "default_modality": self.modality,
                "modalities": {m: self.threshold(m) for m in {self.modality, *self.store.modalities()}},
                "text_model": self.text.name, "llm": self.llm.name, "policy": self.policy}
