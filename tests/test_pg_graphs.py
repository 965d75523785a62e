"""Per-owner HNSW graphs on a real PostgreSQL (biomem.stores.pg.graphs, biomem.stores.pg.search): a large
partition walks a partial index of its own, its results match the exact scan's, filters, hidden notes and
audiences apply before the top K as on the exact path, a forgotten or shrunken owner's graph goes, and
builds are settled once however many sessions try."""

import threading

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from biomem import BioMemory
from biomem.stores.base import Within
from biomem.stores.filters import parse_filters
from biomem.stores.pg import PostgresStore
from biomem.stores.pg.graphs import GRAPH_FLOOR, KEEP_FROM, index_name
from biomem.stores.pg.schema import APP_ROLE
from biomem.stores.pg.search import DatabaseSearch

MODALITY = "face-test"
THRESHOLD = GRAPH_FLOOR  # the smallest partition that may have a graph: quick builds


def text_like(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """Unit vectors with the low intrinsic dimension of sentence embeddings (uniformly random 384-d vectors
    are the one distribution on which no graph beats a scan: benchmarks/pg_retrieval.py)."""
    basis = np.random.default_rng(0).standard_normal((24, dim))
    vectors = (rng.standard_normal((n, 24)) @ basis + 0.3 * rng.standard_normal((n, dim))).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def fill(store: PostgresStore, owner: int, vectors: np.ndarray, first: int = 0) -> list[int]:
    notes = [{"content": f"note {first + i} of {owner}", "timestamp": f"2024-01-01T{(first + i) // 3600:02d}:"
              f"{(first + i) // 60 % 60:02d}:{(first + i) % 60:02d}", "keywords": [], "tags": [], "context": "",
              "metadata": {"room": ["hall", "kitchen", "garage"][(first + i) % 3], "n": first + i}}
             for i in range(len(vectors))]
    return store.insert_notes(owner, notes, vectors)[0]


@pytest.fixture
def graphed(postgres_database, text_encoder):
    """A store with two large partitions (1,500 and 1,100 notes) and a small one (300), opened with a
    threshold at the floor, their graphs built."""
    url = postgres_database("graphs")
    mem = BioMemory(url, encoder=MODALITY, text_model=text_encoder, llm="offline", limits="off",
                    hnsw_threshold=THRESHOLD)
    rng = np.random.default_rng(11)
    owners = [mem.store.add_identity(name, MODALITY, rng.standard_normal((1, 64)).astype(np.float32)).id
              for name in ("big", "other", "small")]
    for owner, n in zip(owners, (1500, 1100, 300)):
        fill(mem.store, owner, text_like(rng, n, text_encoder.dim))
    assert mem.partitions.index_partitions() == {owners[0]: "built", owners[1]: "built"}
    yield url, mem, owners, rng
    mem.close()


def graph_of(url: str, owner: int) -> bool | None:
    """Whether the owner's graph is valid (None: there is none), read as the tables' owner."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)",
                           [f"biomem.{index_name(owner)}"]).fetchone()
    return None if row is None else row[0]


def test_a_large_partition_walks_its_own_graph_and_finds_the_exact_top_10(graphed):
    url, mem, (big, other, small), rng = graphed
    exact = DatabaseSearch(mem.store.connections)  # no threshold: always the exact scan
    queries = text_like(rng, 30, mem.text.dim)
    plan = mem.partitions.explain(big, queries[0], 10)
    assert f"Index Scan using {index_name(big)} on notes" in plan and index_name(other) not in plan
    assert "hnsw" not in mem.partitions.explain(small, queries[0], 10)  # under the threshold: scanned
    assert "hnsw" not in exact.explain(big, queries[0], 10)
    mine = {n.id for n in mem.store.all_notes(big)}
    recalls = []
    for q in queries:
        found = mem.partitions.search(big, q, 10)
        truth = exact.search(big, q, 10)
        assert len(found) == 10 and {i for i, _ in found} <= mine  # never another owner's note
        assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
        recalls.append(len({i for i, _ in found} & {i for i, _ in truth}) / 10)
        assert mem.partitions.search(small, q, 10) == exact.search(small, q, 10)
    assert np.mean(recalls) >= 0.95, recalls


def test_the_graph_statement_names_the_owner_literally_and_row_level_security_still_holds(graphed):
    url, mem, (big, other, small), rng = graphed
    q = text_like(rng, 1, mem.text.dim)[0]
    with mem.store.transaction() as conn:
        sql, args, walks = mem.partitions._query(conn, big, q, 10)
    assert walks and f"owner_id = {big} " in sql and "%s" in sql
    # the same statement on a connection that admitted somebody else returns nothing: RLS under the graph
    with psycopg.connect(url) as conn:
        conn.execute(f"SET ROLE {APP_ROLE}")
        conn.execute("SET search_path = biomem, public")
        register_vector(conn)
        conn.execute("SELECT set_config('biomem.admitted', %s, true)", [f"{{{other}}}"])
        assert conn.execute(sql, args).fetchall() == []
        conn.execute("SELECT set_config('biomem.admitted', %s, true)", [f"{{{big}}}"])
        assert len(conn.execute(sql, args).fetchall()) == 10


def test_filters_hidden_notes_and_audiences_apply_before_the_top_k_on_the_graph(graphed):
    url, mem, (big, other, small), rng = graphed
    exact = DatabaseSearch(mem.store.connections)
    notes = {n.id: n for n in mem.store.all_notes(big)}
    hall = Within(where=parse_filters({"metadata.room": "hall"}))
    recalls = []
    for q in text_like(rng, 15, mem.text.dim):
        found, truth = mem.partitions.search(big, q, 10, hall), exact.search(big, q, 10, hall)
        assert len(found) == 10 and all(notes[i].metadata["room"] == "hall" for i, _ in found)
        recalls.append(len({i for i, _ in found} & {i for i, _ in truth}) / 10)
        hidden = Within(excluded=frozenset(i for i, _ in exact.search(big, q, 10)))  # the best 10 hidden:
        shown, truth = mem.partitions.search(big, q, 10, hidden), exact.search(big, q, 10, hidden)  # the next 10
        assert len(shown) == 10 and not hidden.excluded & {i for i, _ in shown}
        recalls.append(len({i for i, _ in shown} & {i for i, _ in truth}) / 10)
    assert np.mean(recalls) >= 0.95, recalls
    assert f"Index Scan using {index_name(big)}" in mem.partitions.explain(big, q, 10, hall)

    # a filter that three notes pass: the walk gives up short of 10, the exact scan answers with all three
    rare = Within(where=parse_filters({"metadata.n": {"in": [5, 700, 1400]}}))
    assert sorted(i for i, _ in mem.partitions.search(big, q, 10, rare)) == \
        sorted(i for i, _ in exact.search(big, q, 10, rare)) == \
        sorted(i for i, n in notes.items() if n.metadata["n"] in (5, 700, 1400))
    # an audience smaller than the threshold is scanned exactly from the start
    audience = Within(only=frozenset(list(notes)[:200]))
    assert "hnsw" not in mem.partitions.explain(big, q, 10, audience)
    assert mem.partitions.search(big, q, 10, audience) == exact.search(big, q, 10, audience)


def test_a_forgotten_owner_loses_their_graph_and_a_growing_or_shrinking_one_gains_or_loses_it(graphed):
    url, mem, (big, other, small), rng = graphed
    assert graph_of(url, big) is True and graph_of(url, other) is True and graph_of(url, small) is None
    mem.forget(identity=big)
    assert mem.partitions.wait(60)
    assert graph_of(url, big) is None  # dropped with the notes, not left for a vacuum
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM biomem.notes WHERE owner_id = %s", [big]).fetchone() == (0,)
        assert not conn.execute("SELECT count(*) FROM pg_class WHERE relname LIKE %s",
                                [f"{index_name(big)}%"]).fetchone()[0]
    q = text_like(rng, 1, mem.text.dim)[0]
    assert f"Index Scan using {index_name(other)}" in mem.partitions.explain(other, q, 10)  # the others keep theirs

    # the small partition grows past the threshold through the engine's write path: built in the background
    ids = fill(mem.store, small, text_like(rng, THRESHOLD - 300, mem.text.dim), first=300)
    mem.partitions.added(small, ids, np.zeros((len(ids), mem.text.dim)), mem.store.generation(small))
    assert mem.partitions.wait(120) and graph_of(url, small) is True
    assert f"Index Scan using {index_name(small)}" in mem.partitions.explain(small, q, 10)

    # 'other' shrinks: the graph stays down to KEEP_FROM notes, then goes
    mine = [n.id for n in mem.store.all_notes(other)]
    for note_id in mine[:1100 - KEEP_FROM]:
        _, generation = mem.store.delete_note(other, note_id)
        mem.partitions.deleted(other, note_id, generation)
    assert mem.partitions.wait(60) and graph_of(url, other) is True
    _, generation = mem.store.delete_note(other, mine[1100 - KEEP_FROM])
    mem.partitions.deleted(other, mine[1100 - KEEP_FROM], generation)
    assert mem.partitions.wait(60) and graph_of(url, other) is None
    assert "hnsw" not in mem.partitions.explain(other, q, 10)
    assert mem.partitions.search(other, q, 10) == DatabaseSearch(mem.store.connections).search(other, q, 10)


def test_graphs_are_settled_once_across_sessions_and_an_interrupted_build_is_rebuilt(postgres_database,
                                                                                      text_encoder):
    url = postgres_database("settle")
    stores = [PostgresStore(url) for _ in range(3)]
    stores[0].search_index(text_encoder.dim)  # types the column
    rng = np.random.default_rng(5)
    owners = [stores[0].add_identity(f"p{j}", MODALITY, rng.standard_normal((1, 64)).astype(np.float32)).id
              for j in range(2)]
    for owner in owners:
        fill(stores[0], owner, text_like(rng, THRESHOLD, text_encoder.dim))
    searches = [DatabaseSearch(store.connections, hnsw_threshold=THRESHOLD) for store in stores]
    results: list[dict[int, str]] = []
    threads = [threading.Thread(target=lambda s=s: results.append(s.index_partitions())) for s in searches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted(action for result in results for action in result.values()) == \
        ["built", "built", "kept", "kept", "kept", "kept"]  # each graph built by one session, kept by the others
    # a build interrupted half-way leaves an invalid index: the next settle drops and rebuilds it
    with psycopg.connect(url, autocommit=True) as conn:  # (as the test server's superuser)
        conn.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass(%s)",
                     [f"biomem.{index_name(owners[0])}"])
    assert graph_of(url, owners[0]) is False
    q = text_like(rng, 1, text_encoder.dim)[0]
    assert "hnsw" not in searches[1].explain(owners[0], q, 10)  # an invalid graph is never walked
    assert searches[1].index_partitions() == {owners[0]: "built", owners[1]: "kept"}
    assert graph_of(url, owners[0]) is True
    # a process opened to scan only (a threshold above every partition) keeps the others' graphs, walks none
    scanner = stores[2].search_index(text_encoder.dim, hnsw_threshold=10**9)
    assert scanner.index_partitions() == {owners[0]: "kept", owners[1]: "kept"} and graph_of(url, owners[1]) is True
    assert "hnsw" not in scanner.explain(owners[0], q, 10) and "hnsw" in searches[2].explain(owners[0], q, 10)
    for store in stores:
        store.close()


def test_a_replica_that_does_not_own_the_tables_walks_the_graphs_the_owner_built(postgres_database, text_encoder):
    url = postgres_database("replica")
    owner_store = PostgresStore(url)
    owner_store.search_index(text_encoder.dim)
    rng = np.random.default_rng(8)
    person = owner_store.add_identity("p", MODALITY, rng.standard_normal((1, 64)).astype(np.float32)).id
    fill(owner_store, person, text_like(rng, THRESHOLD, text_encoder.dim))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS graph_kiosk")
        conn.execute(f"CREATE ROLE graph_kiosk LOGIN IN ROLE {APP_ROLE}")
    try:
        kiosk = PostgresStore(url.replace("postgres:@", "graph_kiosk:@"))
        assert not kiosk.connections.owns_notes and owner_store.connections.owns_notes
        replica = kiosk.search_index(text_encoder.dim, hnsw_threshold=THRESHOLD)
        assert graph_of(url, person) is None  # the replica may not build: nothing happened
        q = text_like(rng, 1, text_encoder.dim)[0]
        assert "hnsw" not in replica.explain(person, q, 10)
        owner_store.search_index(text_encoder.dim, hnsw_threshold=THRESHOLD)  # the owner's open builds it
        assert graph_of(url, person) is True
        assert f"Index Scan using {index_name(person)}" in replica.explain(person, q, 10)
        assert len(replica.search(person, q, 10)) == 10
        kiosk.close()
    finally:
        owner_store.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP ROLE IF EXISTS graph_kiosk")
