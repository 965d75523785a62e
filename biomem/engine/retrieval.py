"""Retrieval: rank what the admitted people may read by a checked Query (biomem.engine.query) and answer from it.
The gate has decided before a call reaches here; the partitions searched are the admitted people's own and their
groups', less the group notes hidden from them, so no other owner's note can be ranked, linked or shown."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from ..identity.disclosure import gate_view, kept_out_view
from ..identity.gate import GateResult
from ..notes.llm import LLM, answer_prompt, fit_notes
from ..notes.textenc import TextEncoder
from ..stores import MemoryStore, SearchIndex
from ..stores.base import Within
from ..stores.records import Note
from .households import Households
from .query import Query
from .results import Answer, SearchResult


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


class Retrieval:
    """Search and ask for a gate decision already made."""

    def __init__(self, store: MemoryStore, partitions: SearchIndex, text: TextEncoder, llm: LLM,
                 households: Households, *, k: int, prompt_tokens: int, disclosure: str) -> None:
        self.store = store
        self.partitions = partitions
        self.text = text
        self.llm = llm
        self.households = households
        self.k = k  # notes a read returns when it names no k
        self.prompt_tokens = prompt_tokens  # the answer prompt's budget in the text encoder's word pieces
        self.disclosure = disclosure

    def query(self, query: Any, *, k: Any = None, links: Any = 0, filters: Any = None, threshold: Any = None,
              question: Any = None) -> Query:
        """`Query.of` with this engine's text dimension and default k."""
        return Query.of(query, dim=self.text.dim, k=self.k if k is None else k, links=links, filters=filters,
                        threshold=threshold, question=question)

    def embedding(self, asked: Query) -> Future:
        """The query's vectors (Query.texts), embedded on a thread of their own when one is a text: the text encoder
        and the face encoder each run on one onnxruntime thread, so on two cores the question costs no time beside
        the probe's encoding (benchmarks/ask_latency.py)."""
        if all(isinstance(t, np.ndarray) for t in asked.texts):
            done: Future = Future()
            done.set_result(asked.texts)
            return done
        return beside(lambda: self.vectors(asked))

    def vectors(self, asked: Query) -> list[np.ndarray]:
        """The query's vectors (Query.texts) on this thread."""
        return [self.text.encode_one(t) if isinstance(t, str) else t for t in asked.texts]

    def search(self, gate: GateResult, asked: Query, vectors: Sequence[np.ndarray] | None = None) -> SearchResult:
        """The notes `gate`'s admitted people may read, ranked by cosine to the query (top k above its threshold,
        filtered), with up to `links` linked notes per hit and the disclosure view."""
        vector = (vectors or self.vectors(asked))[-1]
        owners, excluded = self.households.reach(gate.admitted)
        hits: list[tuple[int, int, float]] = []
        pool = -len(excluded)  # notes hidden from the requester count as kept out
        for owner in owners:
            pool += self.partitions.size(owner)
            within = Within(asked.where, excluded) \
                if asked.where is not None or (excluded and owner not in gate.admitted) else None
            hits += [(owner, i, s) for i, s in self.partitions.search(owner, vector, asked.k, within)
                     if asked.threshold is None or s >= asked.threshold]
        hits.sort(key=lambda h: -h[2])
        scores = {i: s for _, i, s in hits[:asked.k]}
        notes = [(n, scores[n.id]) for n in self.store.get_notes_among(owners, list(scores))]
        notes.sort(key=lambda pair: (-pair[1], pair[0].timestamp, pair[0].id))
        outside = self.store.note_total() - pool
        return SearchResult(gate=gate, notes=notes, gated_out=outside, view=self.disclose(gate, outside),
                            linked=self._linked(notes, asked.links, excluded) if asked.links else [])

    def answer(self, gate: GateResult, asked: Query, vectors: Sequence[np.ndarray] | None = None, *,
               temporal: bool = False) -> Answer:
        """The LLM's answer to the ask's question from the notes `search` finds (hits by score, then links) that fit
        the prompt budget; a stranger's LLM sees no memory."""
        vectors = vectors or self.vectors(asked)
        question = asked.question or ""
        result = self.search(gate, asked, vectors)
        ranked = [n for n, _ in result.notes] + [n for n, _ in result.linked]
        notes = fit_notes(question, ranked, temporal, self.prompt_tokens, self.text.count_tokens)
        hits = result.notes[:len(notes)]
        return Answer(text=self.llm.answer(question, notes, temporal, vectors[0]), notes=hits,
                      gate=result.gate, prompt=answer_prompt(question, notes, temporal),
                      gated_out=result.gated_out, view=result.view, linked=result.linked[:len(notes) - len(hits)],
                      omitted=len(ranked) - len(notes))

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
