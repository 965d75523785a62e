"""Bio-Memory beside what a user would install instead: Mem0, Chroma, LanceDB, pgvector (and Qdrant), on the same
memories, in one run.

    /tmp/peers-venv/bin/python -m benchmarks.peers --quick   # 10,000 / 100
    /tmp/peers-venv/bin/python -m benchmarks.peers           # 100k / 1k, 1M / 10k

The peers live in an optional extra (`pip install -e .[peers]`, or the venv of benchmarks/README.md); a peer
that is not installed is skipped with a line saying so. One data set per rung: corpus.py's SyntheticStore (N
notes spread evenly over U people, synthetic note texts, random unit-norm 384-d vectors standing in for
all-MiniLM-L6-v2 embeddings, which it also writes into Bio-Memory's SQLite store), the same texts, vectors and
owners loaded into every peer (person j is user_id "person-j") and into Bio-Memory on PostgreSQL
(pg_server.bulk_load). Every load uses the cached vectors (Mem0's embedder answers from them while loading).
Queries: random unit-norm vectors for random owners, timed two ways: from the cached vector, and from a text
through an embedder (the peers: sentence-transformers' all-MiniLM-L6-v2, Mem0 through its own huggingface
embedder; Bio-Memory: its own TextEncoder). Bio-Memory's search starts from a genuine probe of the owner (a
capture at the genuine scores' median, corpus.py's Gallery): the gate is timed with it. A second row times it
after the gate, in a session each person's probe opened once (untimed), as a caller holding a user_id would be.
Every system's searches are interleaved in rotating order, one query at a time; a lane (system, vector or text)
past --search-budget seconds takes no more queries, and a peer past its --load-budget stops loading and is not
searched, saying how far it got. Recall@10 is against numpy's exact top 10
within the owner's notes. Then the safety side, on the same stores: what a caller of each public API can do with
another user's memory id, and what a search names another, an unknown or no user returns, each cell the result
of running the call. Prints markdown tables; JSON with machine_info in benchmarks/results/peers.json.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import RESULTS, dir_mb, log, percentiles, rss_mb, status_mb, write_result
from benchmarks.corpus import (
    DEFAULT_SHAPE,
    TEXT_DIM,
    K,
    ScoreModel,
    Shape,
    SyntheticStore,
    calibration_scores,
    unit_rows,
)
from benchmarks.machine import pkg_version, search_machine_info
from biomem import BioMemory, Probe
from biomem.errors import AmbiguousProbeError, UnknownIdentityError
from biomem.notes.textenc import TextEncoder, shipped_minilm_dir

FULL_RUNGS = "100000:1000,1000000:10000"
QUICK_RUNGS = "10000:100"
PEERS = ("mem0", "chroma", "lancedb", "pgvector", "qdrant")
MODULE = {"mem0": "mem0", "chroma": "chromadb", "lancedb": "lancedb", "pgvector": "pgvector", "qdrant": "qdrant_client"}
DISTRIBUTION = {"mem0": "mem0ai", "chroma": "chromadb", "lancedb": "lancedb", "pgvector": "pgvector",
                "qdrant": "qdrant-client"}
BATCH = 5_000  # rows per batch of the peers with a batch write (Chroma, LanceDB, Qdrant)
SAFETY = ("get", "update", "delete", "history", "search_other_user", "search_unknown_user", "search_no_user")


def user(j: int) -> str:
    """The user_id string of person j in every peer."""
    return f"person-{j:05d}"


def reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux clear_refs 5), so each system's load has its own peak."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


class LoadStopped(Exception):
    """A peer's load ran past --load-budget: how many notes it had loaded."""

    def __init__(self, loaded: int) -> None:
        super().__init__(f"stopped after {loaded:,} notes")
        self.loaded = loaded


class System:
    """One memory system under test: load the data set, search one user's notes, answer the safety calls."""

    name = ""
    settings = ""

    def __init__(self, root: Path, embed: Callable[[str], np.ndarray]) -> None:
        self.root, self.embed = root, embed
        self.path = root / self.name
        self.row_of: dict[Any, int] = {}  # the system's note id -> data set row
        self.deadline = float("inf")  # time.perf_counter() past which load() stops (--load-budget)

    def check(self, loaded: int) -> None:
        """Stop the load (LoadStopped) once past the deadline."""
        if time.perf_counter() > self.deadline:
            raise LoadStopped(loaded)

    def load(self, data: SyntheticStore) -> None:
        raise NotImplementedError

    def prepare(self, owners: list[int]) -> None:
        """Anything a caller does once per person before asking (untimed): nothing, for a user_id."""

    def find(self, vector: np.ndarray, user_id: str) -> list[Any]:
        """Ids of the top 10 notes filed under `user_id` for a query vector: the peer's scoped search."""
        raise NotImplementedError

    def search(self, vector: np.ndarray, j: int) -> list[Any]:
        """Ids of the top 10 of person j's notes for a cached query vector."""
        return self.find(vector, user(j))

    def search_text(self, text: str, j: int) -> list[Any]:
        """The same from a text: the embedder, then the search."""
        return self.search(self.embed(text), j)

    def size_mb(self) -> float:
        return dir_mb(self.path)

    def safety(self, data: SyntheticStore, victim: int, attacker: int) -> dict[str, dict[str, str]]:
        """{call: {"result": yes/no/n/a..., "call": what was run, "saw": what came back}} for another user's id."""
        raise NotImplementedError

    def close(self) -> None:
        """Release files and connections."""


def found(result: Any) -> list[int]:
    """The note ids of a Bio-Memory SearchResult, best first."""
    return [note.id for note, _ in result.notes]


def outcome(call: str, run: Callable[[], Any], reached: Callable[[Any], bool]) -> dict[str, str]:
    """Run `call` on another user's memory id: "yes" when `reached(result)` says it read or changed that memory,
    "no" when not or when it raised (the exception is shown)."""
    try:
        result = run()
    except Exception as exc:  # every library raises its own types: the cell says which
        return {"result": "no", "call": call, "saw": f"raised {type(exc).__name__}: {str(exc)[:100]}"}
    return {"result": "yes" if reached(result) else "no", "call": call, "saw": repr(result)[:160]}


def search_cells(system: System, data: SyntheticStore, victim: int,
                 calls: dict[str, tuple[str, Callable[[], list[Any]]]]) -> dict[str, dict[str, str]]:
    """Run each search of `calls` ({column: (call, run)}) and say whose notes came back: for
    search_other_user "yes" when the victim's notes did; otherwise "empty", "error", "everyone's" (several
    people's notes), or "one person's"."""
    cells = {}
    for column, (call, run) in calls.items():
        try:
            ids = run()
        except Exception as exc:  # a refusal is an answer too
            cells[column] = {"result": "error", "call": call, "saw": f"raised {type(exc).__name__}: {str(exc)[:100]}"}
            continue
        owners = sorted({int(np.searchsorted(data.starts, system.row_of[i], side="right") - 1) for i in ids})
        saw = f"{len(ids)} notes of people {owners[:5]}{'...' if len(owners) > 5 else ''}"
        if column == "search_other_user":
            result = "yes" if victim in owners else "no"
        else:
            result = "empty" if not ids else "everyone's" if len(owners) > 1 else "one person's"
        cells[column] = {"result": result, "call": call, "saw": saw}
    return cells


def peer_searches(system: System, victim: int, attacker: int, q: np.ndarray, unscoped: Callable[[], list[Any]],
                  unscoped_call: str) -> dict[str, tuple[str, Callable[[], list[Any]]]]:
    """A user_id peer's three searches: as the victim's user_id, as an unknown one, and with none."""
    return {"search_other_user": (f"search as user_id {user(victim)!r} (the caller is {user(attacker)!r})",
                                  lambda: system.find(q, user(victim))),
            "search_unknown_user": ("search as user_id 'nobody'", lambda: system.find(q, "nobody")),
            "search_no_user": (unscoped_call, unscoped)}


class Mem0(System):
    name = "mem0"

    def __init__(self, root: Path, embed: Callable[[str], np.ndarray]) -> None:
        super().__init__(root, embed)
        os.environ.setdefault("MEM0_TELEMETRY", "False")  # read when mem0 is first imported
        os.environ.setdefault("MEM0_DIR", str(root / "mem0-home"))  # not ~/.mem0
        from mem0 import Memory

        model = str(shipped_minilm_dir())
        self.config = {
            "vector_store": {"provider": "qdrant", "config": {"collection_name": "notes", "embedding_model_dims":
                                                              TEXT_DIM, "path": str(self.path / "qdrant"),
                                                              "on_disk": True}},
            "embedder": {"provider": "huggingface", "config": {"model": model, "embedding_dims": TEXT_DIM}},
            # never called with infer=False; a local address that nothing serves, so a call would fail, not leak
            "llm": {"provider": "openai", "config": {"model": "never-called", "api_key": "unused",
                                                     "openai_base_url": "http://127.0.0.1:9/v1"}},
            "history_db_path": str(self.path / "history.db"),
        }
        self.settings = ("Memory.from_config: local Qdrant (on disk), huggingface embedder (the shipped MiniLM), "
                         "an OpenAI LLM at 127.0.0.1:9 never called; add(infer=False); search(top_k=10, "
                         "filters={'user_id': ...}, threshold=0: the default 0.1 cut drops random vectors' notes)")
        self.memory = Memory.from_config(self.config)
        self.cache: dict[str, list[float]] = {}
        real = self.memory.embedding_model.embed
        self.memory.embedding_model.embed = lambda text, action=None: self.cache.get(text) or real(text, action)

    def load(self, data: SyntheticStore) -> None:
        for j in range(data.n_ids):
            sl = data.owner_slice(j)
            for row, note in zip(range(sl.start, sl.stop), data.notes_for(j)):
                self.check(row)
                self.cache[note["content"]] = data.embeddings[row].tolist()
                added = self.memory.add(note["content"], user_id=user(j), infer=False)
                self.row_of[added["results"][0]["id"]] = row
        self.cache.clear()

    def hits(self, query: str, user_id: str) -> list[Any]:
        found = self.memory.search(query, top_k=K, filters={"user_id": user_id}, threshold=0.0)
        return [hit["id"] for hit in found["results"]]

    def find(self, vector: np.ndarray, user_id: str) -> list[Any]:
        self.cache["cached query"] = vector.tolist()
        return self.hits("cached query", user_id)

    def search_text(self, text: str, j: int) -> list[Any]:
        return self.hits(text, user(j))  # its own embedder

    def safety(self, data: SyntheticStore, victim: int, attacker: int) -> dict[str, dict[str, str]]:
        m, target = self.memory, next(i for i, r in self.row_of.items() if r == data.owner_slice(victim).start)
        cells = {"get": outcome(f"m.get({target!r})", lambda: m.get(target), lambda r: bool(r and r["memory"])),
                 "update": outcome(f"m.update({target!r}, text='overwritten')",
                                   lambda: (m.update(target, text="overwritten"), m.get(target))[1],
                                   lambda r: r["memory"] == "overwritten"),
                 "history": outcome(f"m.history({target!r})", lambda: m.history(target), bool),
                 "delete": outcome(f"m.delete({target!r})", lambda: (m.delete(target), m.get(target))[1],
                                   lambda r: r is None)}
        q = unit_rows(np.random.default_rng(7), 1, TEXT_DIM)[0]
        self.cache["cached query"] = q.tolist()
        return cells | search_cells(self, data, victim, peer_searches(
            self, victim, attacker, q, lambda: [h["id"] for h in m.search("cached query", top_k=K)["results"]],
            "m.search(query, top_k=10) without filters"))

    def close(self) -> None:
        self.memory.close()


class Chroma(System):
    name = "chroma"
    settings = ("PersistentClient, one collection (HNSW, cosine, Chroma's defaults), add in batches of 5,000, "
                "query(query_embeddings, where={'user_id': ...}, n_results=10)")

    def __init__(self, root: Path, embed: Callable[[str], np.ndarray]) -> None:
        super().__init__(root, embed)
        import chromadb
        from chromadb.config import Settings

        self.client = chromadb.PersistentClient(str(self.path), settings=Settings(anonymized_telemetry=False))
        self.notes = self.client.create_collection("notes", configuration={"hnsw": {"space": "cosine"}},
                                                   embedding_function=None)

    def load(self, data: SyntheticStore) -> None:
        batch = min(BATCH, self.client.get_max_batch_size())
        owner = np.repeat(np.arange(data.n_ids), data.counts)
        texts = [n["content"] for j in range(data.n_ids) for n in data.notes_for(j)]
        for start in range(0, data.n_notes, batch):
            self.check(start)
            rows = range(start, min(start + batch, data.n_notes))
            self.notes.add(ids=[f"n{r}" for r in rows], embeddings=data.embeddings[start:rows.stop],
                           documents=[texts[r] for r in rows], metadatas=[{"user_id": user(owner[r])} for r in rows])
        self.row_of = {f"n{r}": r for r in range(data.n_notes)}

    def find(self, vector: np.ndarray, user_id: str) -> list[Any]:
        return self.notes.query(query_embeddings=[vector], where={"user_id": user_id}, n_results=K)["ids"][0]

    def safety(self, data: SyntheticStore, victim: int, attacker: int) -> dict[str, dict[str, str]]:
        c, target = self.notes, f"n{data.owner_slice(victim).start}"
        cells = {"get": outcome(f"notes.get(ids=[{target!r}])", lambda: c.get(ids=[target]),
                                lambda r: bool(r["documents"])),
                 "update": outcome(f"notes.update(ids=[{target!r}], documents=['overwritten'], embeddings=[v])",
                                   lambda: (c.update(ids=[target], documents=["overwritten"], embeddings=[
                                       data.embeddings[data.owner_slice(attacker).start]]), c.get(ids=[target]))[1],
                                   lambda r: r["documents"] == ["overwritten"]),
                 "history": {"result": "n/a", "call": "no history call", "saw": ""},
                 "delete": outcome(f"notes.delete(ids=[{target!r}])",
                                   lambda: (c.delete(ids=[target]), c.get(ids=[target]))[1],
                                   lambda r: not r["ids"])}
        q = unit_rows(np.random.default_rng(7), 1, TEXT_DIM)[0]
        return cells | search_cells(self, data, victim, peer_searches(
            self, victim, attacker, q, lambda: c.query(query_embeddings=[q], n_results=K)["ids"][0],
            "notes.query(query_embeddings, n_results=10) without where"))


class Lance(System):
    name = "lancedb"
    settings = ("one table (id, user_id, text, vector), BTree scalar index on user_id, no vector index (flat "
                "search over the prefiltered rows, exact), search(q).distance_type('cosine')"
                ".where(\"user_id = '...'\", prefilter=True).limit(10)")

    def __init__(self, root: Path, embed: Callable[[str], np.ndarray]) -> None:
        super().__init__(root, embed)
        import lancedb

        self.db = lancedb.connect(str(self.path))

    def load(self, data: SyntheticStore) -> None:
        import pyarrow as pa

        owner = np.repeat(np.arange(data.n_ids), data.counts)
        texts = [n["content"] for j in range(data.n_ids) for n in data.notes_for(j)]
        self.table = None
        for start in range(0, data.n_notes, BATCH * 10):
            self.check(start)
            stop = min(start + BATCH * 10, data.n_notes)
            batch = pa.table({"id": pa.array(np.arange(start, stop)), "user_id": [user(o) for o in owner[start:stop]],
                              "text": texts[start:stop],
                              "vector": pa.FixedSizeListArray.from_arrays(
                                  pa.array(data.embeddings[start:stop].ravel()), TEXT_DIM)})
            if self.table is None:
                self.table = self.db.create_table("notes", data=batch)
            else:
                self.table.add(batch)
        from lancedb.index import BTree

        self.table.create_index("user_id", config=BTree())  # the scalar index for a filter on user_id
        self.row_of = {r: r for r in range(data.n_notes)}

    def query(self, vector: np.ndarray, where: str | None) -> list[Any]:
        q = self.table.search(vector).distance_type("cosine")
        if where is not None:
            q = q.where(where, prefilter=True)
        return q.limit(K).select(["id", "text", "_distance"]).to_arrow()["id"].to_pylist()

    def find(self, vector: np.ndarray, user_id: str) -> list[Any]:
        return self.query(vector, f"user_id = '{user_id}'")

    def safety(self, data: SyntheticStore, victim: int, attacker: int) -> dict[str, dict[str, str]]:
        t, target = self.table, data.owner_slice(victim).start
        read = lambda: t.search().where(f"id = {target}").to_list()  # noqa: E731
        version = t.version
        cells = {"get": outcome(f"table.search().where('id = {target}').to_list()", read,
                                lambda r: bool(r and r[0]["text"])),
                 "update": outcome(f"table.update(where='id = {target}', values={{'text': 'overwritten'}})",
                                   lambda: (t.update(where=f"id = {target}", values={"text": "overwritten"}),
                                            read())[1], lambda r: r[0]["text"] == "overwritten"),
                 "delete": outcome(f"table.delete('id = {target}')", lambda: (t.delete(f"id = {target}"), read())[1],
                                   lambda r: not r)}
        old = self.db.open_table("notes")
        cells["history"] = outcome(f"table.checkout({version}) then the same read (versions: table.list_versions())",
                                   lambda: (old.checkout(version), old.search().where(f"id = {target}").to_list())[1],
                                   lambda r: bool(r and r[0]["text"] != "overwritten"))
        q = unit_rows(np.random.default_rng(7), 1, TEXT_DIM)[0]
        return cells | search_cells(self, data, victim, peer_searches(
            self, victim, attacker, q, lambda: self.query(q, None), "table.search(q).limit(10) without where"))


class PgVector(System):
    name = "pgvector"
    settings = ("one table (id, user_id, content, embedding vector(384)), btree on user_id, HNSW "
                "(vector_cosine_ops, pgvector's defaults m 16, ef_construction 64) built after COPY, "
                "hnsw.iterative_scan = relaxed_order; WHERE user_id = %s ORDER BY embedding <=> %s LIMIT 10")

    def __init__(self, root: Path, embed: Callable[[str], np.ndarray], server: Any) -> None:
        super().__init__(root, embed)
        import psycopg
        from pgvector.psycopg import register_vector

        self.server, self.db = server, "peer_pgvector"
        url = server.database(self.db)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        self.settings = f"{PgVector.settings}; pgvector {server.pgvector(url)}"
        self.conn = psycopg.connect(url, autocommit=True)
        register_vector(self.conn)

    def load(self, data: SyntheticStore) -> None:
        from benchmarks.pg_server import index_build_settings

        owner = np.repeat(np.arange(data.n_ids), data.counts)
        texts = [n["content"] for j in range(data.n_ids) for n in data.notes_for(j)]
        c = self.conn
        c.execute("CREATE TABLE items (id bigint PRIMARY KEY, user_id text NOT NULL, content text NOT NULL, "
                  f"embedding vector({TEXT_DIM}) NOT NULL)")
        with c.cursor() as cursor, cursor.copy(
                "COPY items (id, user_id, content, embedding) FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "text", "text", "vector"])
            for r in range(data.n_notes):
                if r % BATCH == 0:
                    self.check(r)
                copy.write_row((r, user(owner[r]), texts[r], data.embeddings[r]))
        c.execute("CREATE INDEX ON items (user_id)")
        for name, value in index_build_settings(data.n_notes).items():
            c.execute(f"SET {name} = '{value}'")
        c.execute("CREATE INDEX ON items USING hnsw (embedding vector_cosine_ops)")
        c.execute("ANALYZE items")
        c.execute("SET hnsw.iterative_scan = relaxed_order")
        self.row_of = {r: r for r in range(data.n_notes)}

    def find(self, vector: np.ndarray, user_id: str) -> list[Any]:
        return [r[0] for r in self.conn.execute(
            "SELECT id, content FROM items WHERE user_id = %s ORDER BY embedding <=> %s LIMIT 10",
            (user_id, vector)).fetchall()]

    def plan(self, vector: np.ndarray, j: int) -> str:
        """EXPLAIN of the search (the query vector elided): which index the planner picked."""
        return "\n".join(re.sub(r"'\[[^\]]*\]'", "'[...]'", r[0]) for r in self.conn.execute(
            "EXPLAIN SELECT id, content FROM items WHERE user_id = %s ORDER BY embedding <=> %s LIMIT 10",
            (user(j), vector)).fetchall())

    def size_mb(self) -> float:
        return self.conn.execute("SELECT pg_total_relation_size('items')").fetchone()[0] / 1e6

    def safety(self, data: SyntheticStore, victim: int, attacker: int) -> dict[str, dict[str, str]]:
        c, target = self.conn, data.owner_slice(victim).start
        read = lambda: c.execute("SELECT content FROM items WHERE id = %s", (target,)).fetchall()  # noqa: E731
        cells = {"get": outcome(f"SELECT content FROM items WHERE id = {target}", read, bool),
                 "update": outcome(f"UPDATE items SET content = 'overwritten' WHERE id = {target}",
                                   lambda: (c.execute("UPDATE items SET content = 'overwritten' WHERE id = %s",
                                                      (target,)), read())[1],
                                   lambda r: r == [("overwritten",)]),
                 "history": {"result": "n/a", "call": "no history table in pgvector's schema", "saw": ""},
                 "delete": outcome(f"DELETE FROM items WHERE id = {target}",
                                   lambda: (c.execute("DELETE FROM items WHERE id = %s", (target,)), read())[1],
                                   lambda r: not r)}
        q = unit_rows(np.random.default_rng(7), 1, TEXT_DIM)[0]
        return cells | search_cells(self, data, victim, peer_searches(
            self, victim, attacker, q, lambda: [r[0] for r in c.execute(
                "SELECT id FROM items ORDER BY embedding <=> %s LIMIT 10", (q,)).fetchall()],
            "SELECT ... ORDER BY embedding <=> q LIMIT 10 without WHERE"))

    def close(self) -> None:
        self.conn.close()
        self.server.drop(self.db)


class Qdrant(System):
    name = "qdrant"
    settings = ("QdrantClient(path=...) local mode, one collection (cosine), payload index on user_id (keyword; "
                "local mode ignores payload indexes), upsert in batches of 5,000, query_points(query_filter="
                "user_id, limit=10)")

    def __init__(self, root: Path, embed: Callable[[str], np.ndarray]) -> None:
        super().__init__(root, embed)
        from qdrant_client import QdrantClient, models

        self.models = models
        self.client = QdrantClient(path=str(self.path))
        self.client.create_collection("notes", vectors_config=models.VectorParams(
            size=TEXT_DIM, distance=models.Distance.COSINE))
        self.client.create_payload_index("notes", "user_id", field_schema=models.PayloadSchemaType.KEYWORD)

    def load(self, data: SyntheticStore) -> None:
        owner = np.repeat(np.arange(data.n_ids), data.counts)
        texts = [n["content"] for j in range(data.n_ids) for n in data.notes_for(j)]
        for start in range(0, data.n_notes, BATCH):
            self.check(start)
            rows = range(start, min(start + BATCH, data.n_notes))
            self.client.upsert("notes", points=self.models.Batch(
                ids=list(rows), vectors=data.embeddings[start:rows.stop].tolist(),
                payloads=[{"user_id": user(owner[r]), "text": texts[r]} for r in rows]))
        self.row_of = {r: r for r in range(data.n_notes)}

    def query(self, vector: np.ndarray, name: str | None) -> list[Any]:
        m = self.models
        where = None if name is None else m.Filter(must=[m.FieldCondition(key="user_id",
                                                                          match=m.MatchValue(value=name))])
        return [p.id for p in self.client.query_points("notes", query=vector.tolist(), query_filter=where,
                                                       limit=K).points]

    def find(self, vector: np.ndarray, user_id: str) -> list[Any]:
        return self.query(vector, user_id)

    def safety(self, data: SyntheticStore, victim: int, attacker: int) -> dict[str, dict[str, str]]:
        c, target = self.client, data.owner_slice(victim).start
        read = lambda: c.retrieve("notes", ids=[target])  # noqa: E731
        cells = {"get": outcome(f"client.retrieve('notes', ids=[{target}])", read, bool),
                 "update": outcome(f"client.set_payload('notes', {{'text': 'overwritten'}}, points=[{target}])",
                                   lambda: (c.set_payload("notes", {"text": "overwritten"}, points=[target]),
                                            read())[1], lambda r: r[0].payload["text"] == "overwritten"),
                 "history": {"result": "n/a", "call": "no history call", "saw": ""},
                 "delete": outcome(f"client.delete('notes', points_selector=[{target}])",
                                   lambda: (c.delete("notes", points_selector=[target]), read())[1],
                                   lambda r: not r)}
        q = unit_rows(np.random.default_rng(7), 1, TEXT_DIM)[0]
        return cells | search_cells(self, data, victim, peer_searches(
            self, victim, attacker, q, lambda: self.query(q, None),
            "client.query_points('notes', query=q, limit=10) without query_filter"))

    def close(self) -> None:
        self.client.close()


class Gated(System):
    """Bio-Memory: the gated search from a probe of the owner, on SQLite (the store SyntheticStore wrote) or on
    PostgreSQL (pg_server.bulk_load of the same data)."""

    def __init__(self, root: Path, embed: Callable[[str], np.ndarray], *, name: str, location: Any,
                 encoder: TextEncoder, probes: Callable[[int], np.ndarray], modality: str) -> None:
        self.name = name
        super().__init__(root, embed)
        self.location, self.encoder, self.probes, self.modality = location, encoder, probes, modality
        self.settings = (f"BioMemory({'SQLite' if name.endswith('sqlite') else 'PostgreSQL'}) defaults, "
                         f"search(query, probe=Probe(a genuine {modality} capture), k=10): gate included")
        self.load_s: float | None = None
        self.disk_mb: Callable[[], float] = lambda: 0.0
        self.mem: BioMemory | None = None
        self.stranger: Probe | None = None  # a probe of somebody not enrolled (the safety calls)

    def open(self, note_ids: np.ndarray) -> None:
        self.mem = BioMemory(self.location, text_model=self.encoder, llm="offline")
        self.row_of = {int(n): r for r, n in enumerate(note_ids)}

    def probe(self, j: int) -> Probe:
        return Probe(self.probes(j), self.modality)

    def gate_admits(self, capture: np.ndarray, identity: int) -> bool:
        """Whether the gate admits `capture` as the identity `identity` (not a look-alike within δ, not below τ)."""
        assert self.mem is not None
        return self.mem.identify(Probe(capture, self.modality), policy="best").identity == identity

    def search(self, vector: np.ndarray, j: int) -> list[Any]:
        assert self.mem is not None
        return found(self.mem.search(vector, probe=self.probe(j), k=K))

    def search_text(self, text: str, j: int) -> list[Any]:
        assert self.mem is not None
        return found(self.mem.search(text, probe=self.probe(j), k=K))

    def size_mb(self) -> float:
        return self.disk_mb()

    def safety(self, data: SyntheticStore, victim: int, attacker: int) -> dict[str, dict[str, str]]:
        mem, other, stranger = self.mem, self.probe(attacker), self.stranger
        assert mem is not None and stranger is not None
        target = next(n for n, r in self.row_of.items() if r == data.owner_slice(victim).start)
        calls: dict[str, Callable[[Probe], Any]] = {
            "get": lambda p: mem.get(target, probe=p), "update": lambda p: mem.update(target, "overwritten", probe=p),
            "history": lambda p: mem.history(target, probe=p), "delete": lambda p: mem.delete(target, probe=p)}
        cells = {}
        for call, run in calls.items():  # with another enrolled person's probe, then with a stranger's
            tries = [outcome(f"mem.{call}({target}, probe={who})", lambda: run(p), bool)
                     for who, p in (("another person's", other), ("a stranger's", stranger))]
            cells[call] = {"result": "yes" if any(t["result"] == "yes" for t in tries) else "no",
                           "call": "; ".join(t["call"] for t in tries), "saw": "; ".join(t["saw"] for t in tries)}
        intact = mem.get(target, probe=self.probe(victim)).content  # the owner's note, unchanged
        cells["update"]["saw"] += f"; the owner's get afterwards: {intact[:50]!r}"
        q = unit_rows(np.random.default_rng(7), 1, TEXT_DIM)[0]
        return cells | search_cells(self, data, victim, {
            "search_other_user": ("mem.search(q, probe=the caller's own probe, k=10)",
                                  lambda: found(mem.search(q, probe=other, k=K))),
            "search_unknown_user": ("mem.search(q, probe=a stranger's probe, k=10)",
                                    lambda: found(mem.search(q, probe=stranger, k=K))),
            "search_no_user": ("mem.search(q, probe=None, k=10)",
                               lambda: found(mem.search(q, probe=None, k=K)))})

    def close(self) -> None:
        if self.mem is not None:
            self.mem.close()


class AfterGate(System):
    """Bio-Memory once the gate has run: the owner's probe opens a session (as a conversation starts), then
    session.search(query). What a caller holding a user_id already has; the session is still by presence."""

    TTL = 24 * 3600.0  # longer than any run: a session that expired mid-run would time an error

    def __init__(self, gated: Gated) -> None:
        self.name = f"{gated.name}-session"
        super().__init__(gated.root, gated.embed)
        self.gated, self.row_of = gated, gated.row_of
        self.settings = (f"the store of {gated.name}; session = mem.session(Probe(a genuine capture)) once per "
                         "person, untimed; then session.search(query, k=10)")
        self.sessions: dict[int, Any] = {}

    def prepare(self, owners: list[int]) -> None:
        """A session per person; none for a person the gate cannot tell from a look-alike (nothing is found)."""
        assert self.gated.mem is not None
        for j in owners:
            with contextlib.suppress(AmbiguousProbeError, UnknownIdentityError):
                self.sessions[j] = self.gated.mem.session(self.gated.probe(j), ttl=self.TTL)

    def search(self, vector: np.ndarray, j: int) -> list[Any]:
        return found(self.sessions[j].search(vector, k=K)) if j in self.sessions else []

    def search_text(self, text: str, j: int) -> list[Any]:
        return found(self.sessions[j].search(text, k=K)) if j in self.sessions else []

    def size_mb(self) -> float:
        return self.gated.size_mb()

    def safety(self, data: SyntheticStore, victim: int, attacker: int) -> dict[str, dict[str, str]]:
        mem, own = self.gated.mem, self.gated.probe(attacker)
        assert mem is not None and self.gated.stranger is not None
        session = mem.session(own, ttl=self.TTL)  # the caller's own session
        target = next(n for n, r in self.row_of.items() if r == data.owner_slice(victim).start)
        cells = {"get": outcome(f"session.get({target})", lambda: session.get(target), bool),
                 "update": outcome(f"session.update({target}, 'overwritten', probe=the caller's own)",
                                   lambda: session.update(target, "overwritten", probe=own), bool),
                 "history": outcome(f"session.history({target})", lambda: session.history(target), bool),
                 "delete": outcome(f"session.delete({target}, probe=the caller's own)",
                                   lambda: session.delete(target, probe=own), bool)}
        q = unit_rows(np.random.default_rng(7), 1, TEXT_DIM)[0]
        stranger = self.gated.stranger
        return cells | search_cells(self, data, victim, {
            "search_other_user": ("session.search(q, k=10) in the caller's own session",
                                  lambda: found(session.search(q, k=K))),
            "search_unknown_user": ("mem.session(a stranger's probe).search(q, k=10)",
                                    lambda: found(mem.session(stranger).search(q, k=K))),
            "search_no_user": ("mem.sessions.get(a guessed token).search(q, k=10)",
                               lambda: found(mem.sessions.get(secrets.token_urlsafe(32)).search(q, k=K)))})


def make_peer(name: str, root: Path, embed: Callable[[str], np.ndarray], server: Any) -> System | None:
    """The peer `name`, or None (with a line saying why) when its package is not installed."""
    if importlib.util.find_spec(MODULE[name]) is None or (name == "pgvector" and server is None):
        why = "no PostgreSQL server (--no-postgres)" if importlib.util.find_spec(MODULE[name]) else \
            f"{DISTRIBUTION[name]} is not installed (pip install -e .[peers], or the venv in benchmarks/README.md)"
        print(f"{name}: skipped, {why}", flush=True)
        return None
    kinds: dict[str, Callable[[], System]] = {
        "mem0": lambda: Mem0(root, embed), "chroma": lambda: Chroma(root, embed), "lancedb": lambda: Lance(root, embed),
        "pgvector": lambda: PgVector(root, embed, server), "qdrant": lambda: Qdrant(root, embed)}
    return kinds[name]()


def run_rung(n_notes: int, n_ids: int, *, peers: list[str], shape: Shape, model: ScoreModel | None,
             encoder: TextEncoder, queries: int, seed: int, workdir: Path | None, server: Any,
             load_budget: dict[str, float], search_budget: float) -> dict[str, Any]:
    """Load one data set into every system, time their searches interleaved, then run the safety calls.
    `load_budget`: seconds per peer ("" for any other); `search_budget`: seconds per system and way of searching,
    past which that lane takes no more queries (and its warm-up stops at a tenth of it)."""
    root = Path(tempfile.mkdtemp(prefix=f"biomem-peers-{n_notes}-{n_ids}-", dir=workdir))
    log(f"rung {n_notes:,} notes / {n_ids:,} people in {root}")
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(shipped_minilm_dir()), device="cpu")
    embed = lambda text: st.encode(text, normalize_embeddings=True, convert_to_numpy=True)  # noqa: E731
    out: dict[str, Any] = {"notes": n_notes, "people": n_ids, "shape": str(shape), "systems": {}, "skipped": {},
                           "stopped": {}}
    rng = np.random.default_rng(seed + 11)
    gallery_rng = np.random.default_rng(seed + 12)
    fixed: dict[int, np.ndarray] = {}

    reset_peak()
    rss0 = rss_mb()
    data = SyntheticStore(root / "biomem.db", n_notes, n_ids, seed, shape, model)
    arrays_mb = (data.embeddings.nbytes + data.note_biometrics.nbytes) / 1e6
    data.note_biometrics = np.empty(0)  # the paper baseline's N x template matrix: not used here (2 GB at 1M notes)
    recaptured: dict[int, float | None] = {}  # person -> the genuine quantile of the capture admitted (None: none)

    def probes(j: int) -> np.ndarray:
        """Person j's capture, the same for every Bio-Memory row: one at the genuine scores' median, or, when the
        gate does not admit it as j (a look-alike within δ), the person shows their face again: a clearer capture
        each time (quantiles 0.75, 0.9, 0.99). A person none of them admits keeps the last, and Bio-Memory's rows
        return nothing for them (counted in recall; listed in the JSON)."""
        if j not in fixed:
            for quantile in (0.5, 0.75, 0.9, 0.99):
                score = None if model is None else float(np.quantile(model.genuine, quantile))
                fixed[j] = data.gallery.genuine(gallery_rng, j, score)
                admitted = sqlite.gate_admits(fixed[j], int(data.owner_ids[j]))
                if admitted:
                    break
            if quantile != 0.5:
                recaptured[j] = quantile if admitted else None
        return fixed[j]

    systems: dict[str, System] = {}
    loads: dict[str, dict[str, float]] = {}
    sqlite = Gated(root, embed, name="biomem-sqlite", location=root / "biomem.db", encoder=encoder, probes=probes,
                   modality=shape.modality)
    sqlite.disk_mb = lambda: dir_mb(root / "biomem.db") + dir_mb(root / "biomem.db.index")
    loads[sqlite.name] = {"s": data.build_s, "peak_mb": status_mb("VmHWM") - rss0 - arrays_mb}
    systems[sqlite.name] = sqlite
    if server is not None:
        from benchmarks.pg_server import bulk_load

        pg = Gated(root, embed, name="biomem-postgresql", location=server.database("peer_biomem"), encoder=encoder,
                   probes=probes, modality=shape.modality)
        reset_peak()
        before = rss_mb()
        loaded = bulk_load(pg.location, data, dim=TEXT_DIM, modality=shape.modality)
        loads[pg.name] = {"s": loaded["build_s"], "peak_mb": status_mb("VmHWM") - before}
        pg.disk_mb = lambda: server.database_mb("peer_biomem")
        pg.open(loaded["note_ids"])
        systems[pg.name] = pg
    sqlite.open(data.note_ids)
    session = AfterGate(sqlite)
    systems[session.name], loads[session.name] = session, loads[sqlite.name]
    owners = rng.integers(0, n_ids, size=queries)
    vectors = unit_rows(rng, queries, TEXT_DIM)
    people = list(dict.fromkeys(owners.tolist()))
    for j in people:
        probes(j)  # before the peers load: a capture the gate refuses shows up now, not an hour in
    for name in peers:
        reset_peak()
        before = rss_mb()
        peer = make_peer(name, root, embed, server)
        if peer is None:
            out["skipped"][name] = DISTRIBUTION[name]
            continue
        t0 = time.perf_counter()
        budget = load_budget.get(name, load_budget[""])
        peer.deadline = t0 + budget
        try:
            peer.load(data)
        except LoadStopped as stop:
            seconds = time.perf_counter() - t0
            print(f"{name}: stopped, loaded {stop.loaded:,} of {n_notes:,} notes in {seconds:,.0f} s "
                  f"({stop.loaded / seconds:,.1f} notes/s) and ran past its load budget of {budget:g} s: "
                  "not searched on this rung", flush=True)
            out["stopped"][name] = {"loaded": stop.loaded, "seconds": seconds, "budget_s": budget}
            peer.close()
            continue
        loads[name] = {"s": time.perf_counter() - t0, "peak_mb": status_mb("VmHWM") - before}
        systems[name] = peer
        log(f"  {name}: loaded in {loads[name]['s']:.1f} s ({n_notes / loads[name]['s']:,.0f} notes/s)")

    texts = [f"What did I say about memory {i} last week?" for i in range(queries)]
    truth = [data.exact_top(int(j), q, K, np.arange(n_notes)) for j, q in zip(owners, vectors)]
    held: dict[str, float] = {}
    for name, system in systems.items():  # warm-up: one search per queried owner, untimed, within budget
        before = rss_mb()
        system.prepare(people)
        system.search_text("warm-up", people[0])
        t0 = time.perf_counter()
        for j in people:
            system.search(unit_rows(rng, 1, TEXT_DIM)[0], j)
            if time.perf_counter() - t0 > search_budget / 10:
                break
        held[name] = rss_mb() - before
    stranger = Probe(data.gallery.impostor(np.random.default_rng(seed + 13)), shape.modality)
    for system in systems.values():
        if isinstance(system, Gated):
            system.stranger = stranger

    lanes = [(name, how) for name in systems for how in ("vector", "text")]
    times: dict[tuple[str, str], list[float]] = {lane: [] for lane in lanes}
    recall: dict[str, list[float]] = {name: [] for name in systems}
    for i in range(queries):
        j = int(owners[i])
        for name, how in lanes[i % len(lanes):] + lanes[:i % len(lanes)]:  # rotating order
            if sum(times[name, how]) > search_budget * 1000:
                continue  # this lane has had its budget: the queries so far are its sample
            system = systems[name]
            t0 = time.perf_counter_ns()
            ids = system.search(vectors[i], j) if how == "vector" else system.search_text(texts[i], j)
            times[name, how].append((time.perf_counter_ns() - t0) / 1e6)
            if how == "vector":
                recall[name].append(len(truth[i] & {system.row_of[x] for x in ids}) / K)
    for name, system in systems.items():
        out["systems"][name] = {
            "settings": system.settings, "load_s": loads[name]["s"], "load_notes_per_s": n_notes / loads[name]["s"],
            "disk_mb": system.size_mb(), "load_peak_rss_mb": loads[name]["peak_mb"], "warm_rss_mb": held[name],
            "search": percentiles(times[name, "vector"]), "search_with_embedding": percentiles(times[name, "text"]),
            "recall_at_10": float(np.mean(recall[name])), "recall_at_10_min": float(np.min(recall[name]))}
        if isinstance(system, AfterGate):
            out["systems"][name]["store_of"] = system.gated.name
        if isinstance(system, PgVector):
            out["systems"][name]["plan"] = system.plan(vectors[0], int(owners[0]))
    out["recaptured"] = recaptured  # people whose median capture the gate did not admit as them
    out["load_rss_note"] = ("load_peak_rss_mb: VmHWM reset before each load (clear_refs), peak minus the RSS "
                            f"before it; biomem-sqlite's less the data set's arrays ({arrays_mb:.0f} MB) it draws "
                            "while writing; warm_rss_mb: RSS growth over the warm-up searches")
    victim, attacker = 0, 1 % n_ids
    out["safety"] = {name: system.safety(data, victim, attacker) for name, system in systems.items()}
    for system in systems.values():
        system.close()
    if server is not None:
        server.drop("peer_biomem")
    shutil.rmtree(root, ignore_errors=True)
    return out


def ratios(systems: dict[str, Any]) -> list[str]:
    """The fastest peer's search p50 over each Bio-Memory row's (the issue's target: at least 10x), and each
    peer's load rate over Bio-Memory's on SQLite."""
    peers = {name: s for name, s in systems.items() if not name.startswith("biomem")}
    if not peers:
        return []
    fastest = min(peers, key=lambda name: peers[name]["search"]["p50_ms"])
    best = peers[fastest]["search"]["p50_ms"]
    lines = [f"\nThe fastest peer's search: {fastest}, {best:.2f} ms p50."]
    lines += [f"- {name}: {s['search']['p50_ms']:.2f} ms, {best / s['search']['p50_ms']:.2f}x the fastest peer"
              for name, s in systems.items() if name.startswith("biomem")]
    if "biomem-sqlite" in systems:
        rate = systems["biomem-sqlite"]["load_notes_per_s"]
        lines += [f"- load: biomem-sqlite {rate:,.0f} notes/s, " + ", ".join(
            f"{rate / s['load_notes_per_s']:.1f}x {name}'s" for name, s in peers.items())]
    return lines


def report(results: dict[str, Any]) -> str:
    """Markdown: a speed table per rung, and the safety table of the last rung."""
    lines = []
    for rung in results["rungs"]:
        lines += [f"\n### {rung['notes']:,} notes / {rung['people']:,} people ({rung['shape']} templates)\n",
                  "| system | load notes/s (s) | disk MB | load peak RSS +MB | warm RSS +MB | search p50 / p95 ms (n) "
                  "| with embedding p50 / p95 ms (n) | recall@10 (min) |", "|---|---|---|---|---|---|---|---|"]
        for name, s in rung["systems"].items():
            loaded = f"{s['store_of']}'s store | | | " if "store_of" in s else (
                f"{s['load_notes_per_s']:,.0f} ({s['load_s']:.1f}) | {s['disk_mb']:,.0f} | "
                f"{s['load_peak_rss_mb']:,.0f} | ")
            lines.append(f"| {name} | {loaded}{s['warm_rss_mb']:,.0f} | " + " | ".join(
                f"{t['p50_ms']:.2f} / {t['p95_ms']:.2f} ({t['n']})" for t in (s["search"], s["search_with_embedding"]))
                + f" | {s['recall_at_10']:.3f} ({s['recall_at_10_min']:.1f}) |")
        lines += ratios(rung["systems"])
        lines += [f"\n{name}: skipped, {dist} is not installed" for name, dist in rung["skipped"].items()]
        lines += [f"\n{name}: stopped after {s['loaded']:,} notes in {s['seconds']:,.0f} s (a load budget of "
                  f"{s['budget_s']:g} s), not searched" for name, s in rung["stopped"].items()]
    if results["rungs"]:
        safety = results["rungs"][-1]["safety"]
        lines += ["\n### Another user's memory, through each public API\n",
                  "| system | " + " | ".join(SAFETY) + " |", "|---|" + "---|" * len(SAFETY)]
        lines += [f"| {name} | " + " | ".join(cells[c]["result"] for c in SAFETY) + " |"
                  for name, cells in safety.items()]
        lines += ["\nThe calls:\n"] + [f"- {name} {c}: `{cells[c]['call']}` -> {cells[c]['saw']}"
                                       for name, cells in safety.items() for c in SAFETY]
    return "\n".join(lines)


def parse_budget(spec: str) -> dict[str, float]:
    """"SECONDS[,PEER=SECONDS...]" as {"": the default, peer: its own}."""
    default, *own = spec.split(",")
    budget = {"": float(default)} | {peer: float(seconds) for peer, seconds in (part.split("=") for part in own)}
    unknown = set(budget) - set(PEERS) - {""}
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown peers {sorted(unknown)}: {', '.join(PEERS)}")
    return budget


def parse_rungs(spec: str) -> list[tuple[int, int]]:
    """"NOTES:PEOPLE,..." as pairs of ints."""
    return [(int(a), int(b)) for a, b in (part.split(":") for part in spec.split(","))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rungs", default=None, help=f"NOTES:PEOPLE list (default {FULL_RUNGS}, quick {QUICK_RUNGS})")
    ap.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK_RUNGS}, 100 queries")
    ap.add_argument("--queries", type=int, default=None, help="timed queries per rung (default 200, quick 100)")
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma list of {', '.join(PEERS)} ('' for none)")
    ap.add_argument("--shape", default=DEFAULT_SHAPE, help=f"CAPTURESxDIM of the templates (default {DEFAULT_SHAPE})")
    ap.add_argument("--no-postgres", action="store_true", help="no embedded PostgreSQL: no pgvector, no "
                                                                 "Bio-Memory on PostgreSQL")
    ap.add_argument("--load-budget", type=parse_budget, default=parse_budget("3600"),
                    help="seconds a peer may take to load a rung, as SECONDS[,PEER=SECONDS...]; past them it "
                         "stops, says how far it got, and is not searched on that rung (default 3600)")
    ap.add_argument("--search-budget", type=float, default=600.0,
                    help="seconds of searching per system and way (vector, text) on a rung; past them that lane "
                         "takes no more queries, and reports how many it took (default 600)")
    ap.add_argument("--workdir", type=Path, default=None, help="where the stores go (default $TMPDIR)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS / "peers.json")
    args = ap.parse_args(argv)
    peers = [p for p in args.peers.split(",") if p]
    unknown = set(peers) - set(PEERS)
    if unknown:
        raise SystemExit(f"unknown peers {sorted(unknown)}: {', '.join(PEERS)}")
    rungs = parse_rungs(args.rungs or (QUICK_RUNGS if args.quick else FULL_RUNGS))
    queries = args.queries or (100 if args.quick else 200)
    shape = Shape.parse(args.shape)
    calibration = None if shape.legacy else calibration_scores(shape.modality)
    model = None if calibration is None else ScoreModel(np.asarray(calibration["genuine_scores"]),
                                                        np.asarray(calibration["impostor_scores"]), shape.dim,
                                                        args.seed + 2)
    encoder = TextEncoder()
    server = None
    if not args.no_postgres:
        from benchmarks.pg_server import Server

        server = Server(Path(tempfile.mkdtemp(prefix="biomem-peers-pg-", dir=args.workdir)))
    results: dict[str, Any] = {"rungs": []}
    try:
        for n_notes, n_ids in rungs:
            results["rungs"].append(run_rung(n_notes, n_ids, peers=peers, shape=shape, model=model, encoder=encoder,
                                             queries=queries, seed=args.seed, workdir=args.workdir, server=server,
                                             load_budget=args.load_budget, search_budget=args.search_budget))
    finally:
        if server is not None:
            results["postgresql"] = server.version
            server.close()
    results["machine"] = search_machine_info() | {d: pkg_version(d) for d in DISTRIBUTION.values()}
    results["args"] = {k: str(v) for k, v in vars(args).items()}
    print(report(results), flush=True)
    write_result(args.out, results, indent=1, default=str)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
