"""The engine's checks of what a caller passes: texts and their bounds, k, links, thresholds, pages, budgets.
Each returns the value as the engine uses it or raises InvalidInputError (TextTooLongError past a bound)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidInputError, TextTooLongError
from ..settings import MIN_PROMPT_TOKENS

# A memory is refused past MAX_NOTE_CHARS characters rather than split: a split would make one text
# several notes that the LLM analyses, links and evolves apart, and one add would return many ids.
# 2,000 characters is a long paragraph (LoCoMo's longest turn is 454); the text encoder reads about
# the first 1,000 of it anyway. A question or query is refused past MAX_QUESTION_CHARS.
MAX_NOTE_CHARS = 2_000
MAX_QUESTION_CHARS = 1_000
MAX_PAGE_SIZE = 1_000  # notes per page of get_all
# One search or ask returns at most MAX_K notes, on every surface. One that asks for more than BROAD_K, or
# that carries filters (a window of time pages through everything), lists a person's notes as get_all does:
# it needs the step-up match. The default k (10) stays under it.
MAX_K = 100
BROAD_K = 20


def check_text(text: Any, limit: int, what: str, advice: str) -> str:
    """`text` stripped; InvalidInputError when it is not a non-blank string, TextTooLongError past `limit`."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError(f"a {what} needs non-empty text")
    text = text.strip()
    if len(text) > limit:
        raise TextTooLongError(f"a {what} has at most {limit:,} characters and this one has {len(text):,}: {advice}")
    return text


def check_note(text: Any) -> str:
    """A memory's text, stripped; refused when blank or longer than MAX_NOTE_CHARS."""
    return check_text(text, MAX_NOTE_CHARS, "memory", "split it into several memories")


def check_question(text: Any) -> str:
    """A question's or query's text, stripped; refused when blank or longer than MAX_QUESTION_CHARS."""
    return check_text(text, MAX_QUESTION_CHARS, "question or query", "ask something shorter")


def check_budget(tokens: Any) -> int:
    """The answer prompt's budget as an int of at least MIN_PROMPT_TOKENS; InvalidInputError otherwise."""
    if isinstance(tokens, bool) or not isinstance(tokens, (int, np.integer)) or tokens < MIN_PROMPT_TOKENS:
        raise InvalidInputError(f"prompt_tokens is the answer prompt's budget in word pieces, an integer of at "
                                f"least {MIN_PROMPT_TOKENS}; got {tokens!r}")
    return int(tokens)


def check_links(links: Any) -> int:
    """links as a non-negative int; InvalidInputError otherwise."""
    if isinstance(links, bool) or not isinstance(links, (int, np.integer)) or links < 0:
        raise InvalidInputError(f"links is the number of linked notes per hit, a non-negative integer; got {links!r}")
    return int(links)


def check_threshold(threshold: Any) -> float | None:
    """A minimum cosine similarity in [-1, 1] (None: no minimum); InvalidInputError otherwise."""
    if threshold is None:
        return None
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.floating, np.integer)) \
            or not -1.0 <= float(threshold) <= 1.0:
        raise InvalidInputError(f"threshold is a minimum cosine similarity between -1 and 1; got {threshold!r}")
    return float(threshold)



def check_page(page: Any, page_size: Any) -> tuple[int, int | None]:
    """(offset, limit) of page `page` (from 1) of `page_size` notes (None: everything, page 1 only)."""
    for name, value in (("page", page), ("page_size", 1 if page_size is None else page_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise InvalidInputError(f"{name} is a positive integer; got {value!r}")
    if page_size is None:
        if page != 1:
            raise InvalidInputError("page needs a page_size")
        return 0, None
    if page_size > MAX_PAGE_SIZE or page > 2**31:
        raise InvalidInputError(f"page_size is at most {MAX_PAGE_SIZE:,}; got {page_size!r}")
    return (int(page) - 1) * int(page_size), int(page_size)


def check_k(k: Any) -> int:
    """k as an int from 1 to MAX_K; InvalidInputError otherwise."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 < k <= MAX_K:
        raise InvalidInputError(f"k is the number of notes to retrieve, an integer from 1 to {MAX_K}; got {k!r} "
                                "(get_all lists every note, page by page)")
    return int(k)


def is_listing(k: int, where: Any) -> bool:
    """Whether a search of `k` notes narrowed by `where` (a parsed filter, or None) could page through a
    person's notes: more than BROAD_K of them, or any filter. It then needs the step-up match."""
    return k > BROAD_K or where is not None
