"""Helpers several test files share: the cast of sample people; images as PNG bytes, probes and uploads; a REST
error checked; what a store has written, to prove a refusal wrote nothing; the files that hold given bytes, to prove
an erasure left none; the tests' PostgreSQL databases; and a store served over real HTTP."""

from __future__ import annotations

import base64
import contextlib
import io
import logging
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

import app
from biomem import BioMemory
from biomem.identity import samples
from biomem.server import create_app, served
from biomem.settings import Settings
from biomem.stores.base import COUNTED
from biomem.stores.sqlite import Store as SqliteStore
from modalities.images import load_image

# The cast: the seven people of biomem.identity.samples.face_crops(), by index, under one name in every test file.
# Ana, Ben and Chloe are the demo's sample people; STRANGER is the one the demo never enrols. A test that enrols
# only some of them meets the others as strangers to its store.
ANA, BEN, CHLOE, DAN, EVE, FINN = range(6)
STRANGER = samples.STRANGER


def png(image: np.ndarray) -> bytes:
    """`image` (an RGB or grey array) encoded as PNG."""
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def b64(data: bytes, mime: str = "image/png") -> dict[str, str]:
    """An image probe as REST's JSON bodies and MCP's tools take it."""
    return {"data": base64.b64encode(data).decode(), "mime_type": mime}


def upload(cache: Path, image: np.ndarray, name: str) -> str:
    """A file where Gradio would put an upload of `image`: its own folder inside the upload cache."""
    folder = cache / name
    folder.mkdir()
    Image.fromarray(image).save(folder / f"{name}.png")
    return str(folder / f"{name}.png")


def error_of(response: httpx.Response, status: int, kind: str) -> dict:
    """The JSON error of `response`, checked: status, type, a title and message, no internals."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == kind and error["title"] and error["message"]
    assert not any(leak in response.text for leak in ("Traceback", ".py", "/tmp", "/root", "/work"))
    return error


class Tracebacks(logging.Handler):
    """Every log record that carries a traceback, from the root logger and uvicorn's (which does not propagate)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(record)


def written(mem: BioMemory) -> dict[str, Any]:
    """Everything a refused call must leave as it was: row counts, the note total, the templates' version, the
    stored thresholds, every household with its members, the API keys, and on SQLite the highest id each table
    ever gave (a refusal uses up none there; a PostgreSQL sequence moves on even when its insert rolls back, which
    leaves a gap, never a reused id)."""
    store = mem.store
    state = {"rows": store.counts(), "notes": store.note_total(), "templates": store.templates_version(),
             "thresholds": store.calibrated(), "groups": [g.as_dict() for g in store.all_groups()],
             "keys": store.api_keys()}
    if isinstance(store, SqliteStore):
        state["ids"] = {table: store.id_floor(table) for table in COUNTED}
    return state


def files_holding(folder: Path, needles: dict[str, bytes]) -> dict[str, list[str]]:
    """{file: [names of the needles found in its raw bytes]} for every file under `folder`."""
    holding = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            hits = [name for name, needle in needles.items() if needle in data]
            if hits:
                holding[str(path.relative_to(folder))] = hits
    return holding


def create_database(server, name: str) -> str:
    """A fresh, empty database on the test server; its URL."""
    import psycopg
    database = f"t_{os.getpid()}_{re.sub(r'[^a-z0-9]', '_', name.lower())}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    return server.get_uri(database)


def drop_database(server, url: str) -> None:
    """Drop the test server's database at `url`, connections and all."""
    import psycopg
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {psycopg.conninfo.conninfo_to_dict(url)['dbname']} WITH (FORCE)")


def vacuumed_database_files_holding(mem: BioMemory, needles: dict[str, bytes]) -> dict[str, list[str]]:
    """files_holding() over the data files of the PostgreSQL database `mem` is stored in (the test server's, whose
    user may read them), after the operator's erasure step: VACUUM FULL, which rewrites every table and index
    without the dead rows a delete leaves, then a CHECKPOINT, which writes every page out. The WAL (pg_wal) is not
    looked at: it keeps every write until the server recycles the segment, whatever was deleted since."""
    import psycopg
    with psycopg.connect(mem.store.url, autocommit=True) as conn:
        conn.execute("VACUUM FULL")
        conn.execute("CHECKPOINT")
        folder = Path(conn.execute("SHOW data_directory").fetchone()[0])
        oid = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[0]
    return files_holding(folder / "base" / str(oid), needles)


def left_on_disk(mem: BioMemory, backend: str, folder: Path, needles: dict[str, bytes]) -> dict[str, list[str]]:
    """files_holding() once an erasure is through, wherever the store keeps its bytes: on SQLite every file under
    `folder`, the store closed (which empties its WAL); on PostgreSQL the database's files, vacuumed."""
    if backend == "sqlite":
        mem.close()
        return files_holding(folder, needles)
    return vacuumed_database_files_holding(mem, needles)


def note_blobs(mem: BioMemory, note_ids: list[int]) -> dict[str, bytes]:
    """The stored vectors of notes, as SQLite and hnswlib hold them (SQLite stores only)."""
    marks = ", ".join("?" * len(note_ids))
    return {f"vector-{i}": bytes(blob) for i, blob in
            mem.store.db.execute(f"SELECT id, embedding FROM notes WHERE id IN ({marks})", note_ids)}


def module_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, name: str) -> Path | str:
    """Where a module-scoped fixture parametrised over "sqlite" and "postgresql" keeps its store: a file, or a fresh
    database on the test server, dropped when the fixture ends."""
    if request.param == "sqlite":
        return tmp_path_factory.mktemp(name) / f"{name}.db"
    server = request.getfixturevalue("postgres_server")
    url = create_database(server, name)
    request.addfinalizer(lambda: drop_database(server, url))
    return url


@contextlib.contextmanager
def rest_service(mem: BioMemory, *, ui: bool = True, mcp: bool = True,
                 **client: Any) -> Iterator[tuple[str, httpx.Client]]:
    """`mem` served as `biomem serve` serves it, by uvicorn in a thread on 127.0.0.1 (REST, with MCP and the page
    unless `mcp` or `ui` is off): its base URL and an httpx client of it (`client`: more httpx.Client options)."""
    settings = Settings.from_env().model_copy(update={"host": "127.0.0.1"})
    with served(create_app(mem, settings, ui=ui, mcp=mcp)) as url, \
            httpx.Client(base_url=url, **{"timeout": 60, **client}) as http:
        yield url, http


IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp"}


@contextlib.contextmanager
def served_app(mem: BioMemory, cache: Path, **build: object) -> Iterator[SimpleNamespace]:
    """The app over `mem` on a free localhost port, Gradio's cache in `cache`; closed afterwards."""
    with app.served(mem, cache, **build) as (url, demo):
        yield SimpleNamespace(url=url, demo=demo, ui=demo.biomem_app, mem=mem, cache=cache)


def cached_images(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES]


def personal_images(server: SimpleNamespace) -> list[Path]:
    """The images left in the page's cache but the sample captures it handed out (public, never a visitor's:
    a Compare's boxes get fresh ones, which Gradio's own sweep removes)."""
    return [path for path in cached_images(server.cache) if server.ui.samples.which(load_image(path)) is None]
