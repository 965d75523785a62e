"""numpy's BLAS on one thread for the small products of a search.

A 10,000 x 128 gate product or one owner's partition scan is memory-bound: on 2 cores a
second BLAS thread only waits, and on a busy machine it made a 0.5 ms product take 7 ms.
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager

from threadpoolctl import ThreadpoolController


@functools.cache
def _blas() -> ThreadpoolController:
    return ThreadpoolController().select(user_api="blas")


def one_thread() -> AbstractContextManager:
    """Context manager limiting numpy's BLAS to one thread (about 12 µs per use)."""
    return _blas().limit(limits=1)
