"""The REST routes' typed dependencies (as the FastAPI full-stack template's deps.py): the app's engine and the
worker threads its calls run in, declared once and named by type in each route."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ..engine.aio import AsyncBioMemory
from ..engine.memory import BioMemory


def get_memory(request: Request) -> BioMemory:
    """The app's engine."""
    return request.app.state.mem


def get_workers(request: Request) -> AsyncBioMemory:
    """The same engine's calls as coroutines, each in a worker thread: the event loop never waits on it."""
    return request.app.state.amem


Memory = Annotated[BioMemory, Depends(get_memory)]
Workers = Annotated[AsyncBioMemory, Depends(get_workers)]
