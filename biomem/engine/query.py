"""A search or a question, checked once at the door: what to embed, how many notes, linked notes per hit, the
parsed filter and the score floor. Every surface (BioMemory, a session, the REST routes) builds one with
`Query.of` and the retrieval service reads it as it is (biomem.engine.retrieval)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidInputError
from ..notes.timeparse import parse_timestamp
from ..stores.filters import Filter, parse_filters
from .checks import check_k, check_links, check_question, check_threshold, is_listing


def parsed_filters(filters: Any) -> Filter | None:
    """`filters` parsed (biomem.stores.filters), timestamps read as the engine reads them; None for none."""
    return filters if isinstance(filters, Filter) else parse_filters(filters, timestamp=parse_timestamp)


def checked_query(query: Any, dim: int) -> str | np.ndarray:
    """A query's text (stripped), or its vector made unit-norm; InvalidInputError otherwise."""
    if isinstance(query, str):
        return check_question(query)
    vector = np.asarray(query, dtype=np.float32) if isinstance(query, (np.ndarray, list, tuple)) else None
    if vector is None or vector.shape != (dim,) or not np.isfinite(vector).all() or not np.any(vector):
        raise InvalidInputError(f"a query is a text or a finite non-zero {dim}-d vector")
    return vector / np.linalg.norm(vector)


@dataclass(frozen=True)
class Query:
    """What a read asks, valid by construction. `query` is what retrieves (a text or a unit vector); an ask's
    `question` is what the answer is written for (the same object when nothing else retrieves)."""

    query: str | np.ndarray
    k: int
    links: int = 0
    where: Filter | None = None
    threshold: float | None = None
    question: str | None = None

    @classmethod
    def of(cls, query: Any, *, dim: int, k: int, links: Any = 0, filters: Any = None, threshold: Any = None,
           question: Any = None) -> Query:
        """The checked Query: InvalidInputError (before any probe is encoded) for a bad text, vector, k, link
        count, filter or threshold. `question` makes it an ask's, retrieving by `query` if given, else by it."""
        k, links = check_k(k), check_links(links)
        asked = None if question is None else check_question(question)
        retrieve = asked if query is None else checked_query(query, dim)
        if retrieve is None:
            raise InvalidInputError("a query is needed")
        return cls(retrieve, k, links, parsed_filters(filters), check_threshold(threshold), asked)

    @property
    def listing(self) -> bool:
        """Whether this read lists the person's notes (biomem.engine.checks.is_listing): step-up τ then."""
        return is_listing(self.k, self.where)

    @property
    def texts(self) -> list[str | np.ndarray]:
        """What is embedded, the question first: its vector is the last one's unless something else retrieves."""
        return [self.query] if self.question is None or self.question is self.query else [self.question, self.query]
