"""AsyncBioMemory: the same engine for async agent stacks, each call run in a worker thread.

    amem = AsyncBioMemory(BioMemory("biomem.db"))
    answer = await amem.ask("What is my PIN?", probe=image_bytes, client=["key:3", "address:…"])
    async with await amem.session(image_bytes) as me:
        await me.search("PIN")

Semantics are BioMemory's, call for call (the gate, disclosure, attempt limits, step-up); the
event loop never waits on an encoder, the store or the LLM. `workers` bounds the threads, and so
how many probes are encoded at once (more than the cores would only queue inside onnxruntime).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ..stores.records import Group, Identity, Note
from .memory import BioMemory
from .results import Answer, SearchResult
from .sessions import Session

T = TypeVar("T")


class AsyncBioMemory:
    """BioMemory's requester and operator calls as coroutines."""

    def __init__(self, mem: BioMemory, *, workers: int = 4) -> None:
        self.mem = mem
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="biomem")

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` in a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def enroll(self, label: str, samples: Any, modality: str | None = None, **kwargs: Any) -> Identity:
        return await self.run(self.mem.enroll, label, samples, modality, **kwargs)

    async def add(self, text: str, **kwargs: Any) -> Note:
        return await self.run(self.mem.add, text, **kwargs)

    async def search(self, query: Any, **kwargs: Any) -> SearchResult:
        return await self.run(self.mem.search, query, **kwargs)

    async def ask(self, question: str, **kwargs: Any) -> Answer:
        return await self.run(self.mem.ask, question, **kwargs)

    async def get(self, note_id: int, **kwargs: Any) -> Note:
        return await self.run(self.mem.get, note_id, **kwargs)

    async def get_all(self, **kwargs: Any) -> list[Note]:
        return await self.run(self.mem.get_all, **kwargs)

    async def update(self, note_id: int, text: str, **kwargs: Any) -> Note:
        return await self.run(self.mem.update, note_id, text, **kwargs)

    async def delete(self, note_id: int, **kwargs: Any) -> Note:
        return await self.run(self.mem.delete, note_id, **kwargs)

    async def history(self, note_id: int, **kwargs: Any) -> list[dict[str, Any]]:
        return await self.run(self.mem.history, note_id, **kwargs)

    async def forget(self, **kwargs: Any) -> int:
        return await self.run(self.mem.forget, **kwargs)

    async def session(self, probe: Any, **kwargs: Any) -> AsyncSession:
        return AsyncSession(self, await self.run(self.mem.session, probe, **kwargs))

    async def create_group(self, label: str, **kwargs: Any) -> Group:
        return await self.run(self.mem.create_group, label, **kwargs)

    async def add_member(self, group: int, **kwargs: Any) -> Group:
        return await self.run(self.mem.add_member, group, **kwargs)

    async def remove_member(self, group: int, member: int, **kwargs: Any) -> Group | None:
        return await self.run(self.mem.remove_member, group, member, **kwargs)

    async def groups(self, **kwargs: Any) -> list[Group]:
        return await self.run(self.mem.groups, **kwargs)

    async def delete_group(self, group: int, **kwargs: Any) -> int:
        return await self.run(self.mem.delete_group, group, **kwargs)

    def close(self) -> None:
        """Wait for running calls, then close the engine."""
        self._pool.shutdown(wait=True)
        self.mem.close()


class AsyncSession:
    """A requester Session whose calls are coroutines (see biomem.engine.sessions)."""

    def __init__(self, amem: AsyncBioMemory, session: Session) -> None:
        self.amem, self.session = amem, session

    @property
    def identity(self) -> int:
        return self.session.identity

    @property
    def label(self) -> str:
        return self.session.label

    async def search(self, query: Any, **kwargs: Any) -> SearchResult:
        return await self.amem.run(self.session.search, query, **kwargs)

    async def ask(self, question: str, **kwargs: Any) -> Answer:
        return await self.amem.run(self.session.ask, question, **kwargs)

    async def get(self, note_id: int) -> Note:
        return await self.amem.run(self.session.get, note_id)

    async def get_all(self, **kwargs: Any) -> list[Note]:
        return await self.amem.run(self.session.get_all, **kwargs)

    async def groups(self) -> list[Group]:
        return await self.amem.run(self.session.groups)

    async def add(self, text: str, **kwargs: Any) -> Note:
        return await self.amem.run(self.session.add, text, **kwargs)

    async def delete(self, note_id: int, **kwargs: Any) -> Note:
        return await self.amem.run(self.session.delete, note_id, **kwargs)

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.session.close()
