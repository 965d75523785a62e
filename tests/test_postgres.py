"""The PostgreSQL + pgvector store on a real server: row-level security, search in the database,
migrations, copies from and to SQLite, and two engine processes sharing one database."""

import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing

import numpy as np
import psycopg
import pytest

from biomem import BioMemory, InvalidInputError, NoteNotFoundError, Probe, StoreCorruptError
from biomem.engine.keys import any_keys, authenticate, create_key, list_keys, revoke_key
from biomem.errors import NotAuthorisedError
from biomem.stores import open_store
from biomem.stores.base import TABLES
from biomem.stores.copying import copy_store, table_checksum
from biomem.stores.pg.graphs import GRAPH_FLOOR, HNSW_THRESHOLD
from biomem.stores.pg.schema import APP_ROLE
from biomem.stores.pg.schema import SCHEMA_VERSION as PG_VERSION
from biomem.stores.sqlite.schema import SCHEMA_VERSION as SQLITE_VERSION

MODALITY = "face-test"  # precomputed probes: these tests exercise storage, not a camera
DIM = 64


def person(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)


def probe(seed: int, noise: float = 0.05) -> Probe:
    jitter = np.random.default_rng(seed + 1000).standard_normal(DIM).astype(np.float32)
    return Probe(person(seed) + noise * np.linalg.norm(person(seed)) / np.sqrt(DIM) * jitter, MODALITY)


def memory(location, text_encoder, **kwargs) -> BioMemory:
    mem = BioMemory(location, encoder=MODALITY, text_model=text_encoder, llm="offline", limits="off", **kwargs)
    if mem.store.threshold(MODALITY) is None:
        mem.set_threshold(0.8, MODALITY)
    return mem


@pytest.fixture
def household(postgres_database, text_encoder):
    """Ana and Ben in a PostgreSQL store, three notes each."""
    url = postgres_database("household")
    mem = memory(url, text_encoder)
    ana = mem.enroll("Ana", [Probe(person(1), MODALITY)])
    ben = mem.enroll("Ben", [Probe(person(2), MODALITY)])
    mem.add_many(["My PIN is 1234", "I adopted a beagle called Rex", "My sister lives in Lisbon"], identity=ana.id)
    mem.add_many(["My PIN is 9876", "I run the Berlin marathon", "My brother lives in Porto"], identity=ben.id)
    yield url, mem, ana, ben
    mem.close()


def app_connection(url: str) -> psycopg.Connection:
    """A raw connection acting as the engine's role, as a bug or an injected statement would run."""
    conn = psycopg.connect(url, autocommit=False)
    conn.execute(f"SET ROLE {APP_ROLE}")
    conn.execute("SET search_path = biomem, public")
    conn.commit()  # else a rollback would undo the role too
    return conn


def test_row_level_security_hides_every_row_without_the_right_owner_even_from_raw_sql(household):
    url, mem, ana, ben = household
    with app_connection(url) as conn:
        for table in ("notes", "links", "history", "templates"):
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0, f"{table} without an owner"
        assert conn.execute("DELETE FROM identities WHERE id = %s", [ana.id]).rowcount == 0  # no forget of Ana
        assert conn.execute("UPDATE identities SET label = 'x'").rowcount == 0
        conn.execute("SELECT set_config('biomem.admitted', %s, true)", [f"{{{ben.id}}}"])
        assert {r[0] for r in conn.execute("SELECT content FROM notes")} == \
            {"My PIN is 9876", "I run the Berlin marathon", "My brother lives in Porto"}
        assert conn.execute("SELECT count(*) FROM notes WHERE owner_id = %s", [ana.id]).fetchone()[0] == 0
        assert conn.execute("UPDATE notes SET content = 'x' WHERE owner_id = %s", [ana.id]).rowcount == 0
        assert conn.execute("DELETE FROM history WHERE owner_id = %s", [ana.id]).rowcount == 0
        assert conn.execute("DELETE FROM identities WHERE id = %s", [ana.id]).rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # nor can it write into Ana's partition
            conn.execute("INSERT INTO notes (owner_id, content, timestamp, embedding) "
                         "VALUES (%s, 'planted', 'now', %s)",
                         [ana.id, "[" + ",".join(["0.1"] * 384) + "]"])
        conn.rollback()
        conn.execute("SELECT set_config('biomem.admitted', 'not a list', true)")
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):  # a garbled setting admits nobody
            conn.execute("SELECT count(*) FROM notes")
        conn.rollback()
        assert conn.execute("SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user").fetchone() \
            == (False,)
    assert len(mem.get_all(probe=probe(1))) == 3  # the store's own reads are untouched by all this


def test_a_store_query_that_forgot_its_owner_check_still_returns_only_the_admitted_owner(household):
    url, mem, ana, ben = household
    with mem.store.transaction([ben.id]) as conn:  # as if a method had lost its WHERE owner_id = ...
        leaked = [r[0] for r in conn.execute("SELECT content FROM notes ORDER BY id")]
        leaked += [r[0] for r in conn.execute("SELECT after FROM history")]
    assert leaked and not any("1234" in (text or "") or "Lisbon" in (text or "") for text in leaked)
    with pytest.raises(NoteNotFoundError):
        mem.store.get_note(ben.id, mem.store.all_notes(ana.id)[0].id)


def test_the_engine_behaves_the_same_over_postgresql(household):
    url, mem, ana, ben = household
    result = mem.search("what is my PIN?", probe=probe(1), k=2)
    assert result.gate.identity == ana.id and result.notes[0][0].content == "My PIN is 1234"
    assert all(n.owner == ana.id for n, _ in result.notes) and result.gated_out == 3
    stranger = mem.search("what is my PIN?", probe=probe(7))
    assert stranger.gate.identity is None and stranger.notes == []
    note = mem.add("I moved to Faro", probe=probe(2))
    assert note.owner == ben.id and mem.get(note.id, probe=probe(2)).content == "I moved to Faro"
    with pytest.raises(NoteNotFoundError):
        mem.get(note.id, probe=probe(1))
    mem.update(note.id, "I moved to Lagos", probe=probe(2))
    mem.delete(note.id, probe=probe(2))
    assert [h["event"] for h in mem.history(note.id, probe=probe(2))] == ["add", "update", "delete"]
    assert "1234" in mem.ask("What is my PIN?", probe=probe(1)).text


def test_database_search_gives_the_sqlite_engines_top_k(postgres_database, tmp_path, text_encoder):
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((300, text_encoder.dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors[10] = vectors[20]  # a tie: the older note first, on both stores
    stores = [memory(tmp_path / "a.db", text_encoder), memory(postgres_database("b"), text_encoder)]
    queries = rng.standard_normal((20, text_encoder.dim)).astype(np.float32)
    queries[0] = vectors[10]
    results = []
    for mem in stores:
        owner = mem.store.add_identity("owner", MODALITY, person(1)[None, :])
        notes = [{"content": f"note {i}", "timestamp": f"2024-01-01T00:{i // 60:02d}:{i % 60:02d}",
                  "keywords": [], "tags": [], "context": ""} for i in range(300)]
        ids, _ = mem.store.insert_notes(owner.id, notes, vectors)
        order = {note_id: i for i, note_id in enumerate(ids)}
        results.append([[(order[n], s) for n, s in mem.partitions.search(owner.id, q, 10)] for q in queries])
        mem.close()
    for sqlite_hits, pg_hits in zip(*results):
        assert [i for i, _ in sqlite_hits] == [i for i, _ in pg_hits]
        assert np.allclose([s for _, s in sqlite_hits], [s for _, s in pg_hits], atol=1e-5)
    assert [i for i, _ in results[1][0][:2]] == [10, 20]


def test_partitions_under_the_graph_floor_are_scanned_however_low_the_threshold(postgres_database, text_encoder):
    """hnsw_threshold=200 is raised to GRAPH_FLOOR: no graph for 400 notes, nor one over every owner (the
    per-owner graphs themselves: tests/test_pg_graphs.py)."""
    url = postgres_database("floor")
    with memory(url, text_encoder) as default:
        assert default.partitions.hnsw_threshold == HNSW_THRESHOLD  # 10,000
    mem = memory(url, text_encoder, hnsw_threshold=200)
    assert mem.partitions.hnsw_threshold == GRAPH_FLOOR
    rng = np.random.default_rng(9)
    owners = [mem.store.add_identity(f"p{j}", MODALITY, person(j)[None, :]).id for j in range(2)]
    for owner in owners:
        vectors = rng.standard_normal((400, text_encoder.dim)).astype(np.float32)
        mem.store.insert_notes(owner, [{"content": f"n{i}", "timestamp": "2024-01-01", "keywords": [], "tags": [],
                                        "context": ""} for i in range(400)], vectors)
    assert mem.partitions.index_partitions() == {}
    exact = type(mem.partitions)(mem.store)
    q = rng.standard_normal(text_encoder.dim).astype(np.float32)
    assert mem.partitions.search(owners[1], q, 10) == exact.search(owners[1], q, 10)
    assert "hnsw" not in mem.partitions.explain(owners[1], q, 10)
    with psycopg.connect(mem.store.url) as conn:
        assert conn.execute("SELECT count(*) FROM pg_indexes WHERE schemaname = 'biomem' AND indexdef LIKE "
                            "'%USING hnsw%'").fetchone() == (0,)
    mem.close()


def test_schema_versions_match_sqlite_and_a_newer_database_is_refused(postgres_database, text_encoder):
    assert PG_VERSION == SQLITE_VERSION
    url = postgres_database("versions")
    memory(url, text_encoder).close()
    memory(url, text_encoder).close()  # opening again migrates nothing
    with psycopg.connect(url, autocommit=True) as conn:
        version = conn.execute("SELECT value FROM biomem.meta WHERE key = 'schema_version'").fetchone()[0]
        assert version == str(PG_VERSION)
        conn.execute("UPDATE biomem.meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreCorruptError, match="schema version 99"):
        open_store(url)


def test_an_unreachable_server_or_a_user_outside_the_engine_role_is_a_clear_error(tmp_path, postgres_database):
    with pytest.raises(StoreCorruptError, match="cannot reach PostgreSQL"):
        open_store(f"postgresql://nobody@/nowhere?host={tmp_path}&connect_timeout=2")
    url = postgres_database("outsider")
    open_store(url).close()  # the schema exists
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS stranger")
        conn.execute("CREATE ROLE stranger LOGIN")
    try:
        with pytest.raises(StoreCorruptError, match=f"GRANT {APP_ROLE} TO"):
            open_store(url.replace("postgres:@", "stranger:@"))
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP ROLE stranger")


def test_migrate_copies_sqlite_to_postgresql_and_back_with_every_row_checked(tmp_path, postgres_database,
                                                                            text_encoder):
    source = tmp_path / "home.db"
    mem = memory(source, text_encoder)
    ana = mem.enroll("Ana", [Probe(person(1), MODALITY)])
    ben = mem.enroll("Ben", [Probe(person(2), MODALITY)])
    mem.add_many(["I love hiking in the Alps", "Hiking in the Alps is my favourite holiday",
                  "My PIN is 1234"], identity=ana.id)
    mem.add_many(["Ben drinks coffee"], identity=ben.id)
    last = mem.add("A note deleted before the copy", identity=ben.id)
    mem.delete(last.id, probe=probe(2))
    chloe = mem.enroll("Chloe", [Probe(person(3), MODALITY)])
    home = mem.create_group("Home", identity=ana.id)
    for member in (ben, chloe):
        mem.add_member(home.id, identity=member.id)
    mem.add("The Wi-Fi password is sunflower", identity=ana.id, scope=home.id,
            metadata={"room": "hall", "priority": 2, "checked": 0.5, "tags": ["net", 1, None]})  # keys jsonb reorders
    mem.add("Chloe's surprise party is on Saturday", identity=ben.id, scope=home.id, hidden_from=[chloe.id])
    mem.close()
    url = postgres_database("copy")

    result = subprocess.run([sys.executable, "-m", "biomem.cli", "migrate", f"sqlite:///{source}", url],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "every table's count and checksum match" in result.stdout and "notes" in result.stdout

    moved = memory(url, text_encoder)
    assert moved.search("my PIN", probe=probe(1), k=1).notes[0][0].content == "My PIN is 1234"  # templates open
    assert moved.store.counts()["links"] > 0 and moved.store.note_total() == 6
    assert (moved.store.counts()["identities"], moved.store.counts()["groups"]) == (3, 1)  # people, households
    party = moved.search("surprise party", probe=probe(2), k=10).notes
    assert "Chloe's surprise party is on Saturday" in [n.content for n, _ in party]  # the household moved
    assert "Chloe's surprise party is on Saturday" not in [n.content for n, _ in
                                                           moved.search("surprise party", probe=probe(3)).notes]
    wifi = moved.search("wifi password", probe=probe(3), k=1, filters={"metadata.priority": {"gte": 2}}).notes
    assert [n.metadata["room"] for n, _ in wifi] == ["hall"]
    assert moved.add("A new note after the move", identity=ben.id).id > last.id  # no id given twice
    moved.close()

    back = tmp_path / "back.db"
    checks = copy_store(url, f"sqlite:///{back}")
    assert [c.table for c in checks] == list(TABLES)
    with closing(open_store(url)) as pg, closing(open_store(back)) as lite:
        assert all(table_checksum(pg, t) == table_checksum(lite, t) for t in TABLES)

    with pytest.raises(InvalidInputError, match="must be empty"):
        copy_store(source, url)
    failed = subprocess.run([sys.executable, "-m", "biomem.cli", "migrate", str(source), url],
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == 2 and "must be empty" in failed.stderr and "Traceback" not in failed.stderr


ENGINE_B = textwrap.dedent("""
    import json, sys
    import numpy as np
    from biomem import BioMemory, Probe
    mem = BioMemory(sys.argv[1], encoder="face-test", llm="offline", limits="off")
    def person(seed):
        return np.random.default_rng(seed).standard_normal(64).astype(np.float32)
    for line in sys.stdin:
        command = json.loads(line)
        if command["do"] == "add":
            note = mem.add(command["text"], probe=Probe(person(command["who"]), "face-test"))
            reply = {"id": note.id}
        else:
            found = mem.search(command["text"], probe=Probe(person(command["who"]), "face-test"))
            reply = {"identity": found.gate.identity, "notes": [n.content for n, _ in found.notes]}
        print(json.dumps(reply), flush=True)
""")


def test_two_engine_processes_see_each_others_writes_and_forget_is_final_for_both(household):
    import json
    url, mem, ana, ben = household
    engine = subprocess.Popen([sys.executable, "-c", ENGINE_B, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})

    def other(**command):
        engine.stdin.write(json.dumps(command) + "\n")
        engine.stdin.flush()
        return json.loads(engine.stdout.readline())
    try:
        assert "My PIN is 1234" in other(do="search", who=1, text="PIN")["notes"]
        written = other(do="add", who=1, text="I parked on level 3")
        assert mem.get(written["id"], probe=probe(1)).content == "I parked on level 3"  # at once, no stale cache
        assert "I parked on level 3" in [n.content for n, _ in mem.search("parking", probe=probe(1)).notes]
        mem.add("Ben's bike lock code is 4411", probe=probe(2))
        assert "Ben's bike lock code is 4411" in other(do="search", who=2, text="bike lock")["notes"]

        mem.forget(identity=ana.id)
        after = other(do="search", who=1, text="PIN")
        assert after == {"identity": None, "notes": []}
        engine.stdin.write(json.dumps({"do": "add", "who": 1, "text": "still here?"}) + "\n")
        engine.stdin.flush()
        assert engine.stdout.readline() == ""  # the add raised: nobody matches Ana's face any more
    finally:
        engine.kill()
        engine.wait()
    assert mem.store.counts()["notes"] == 4


def test_an_add_linking_a_note_whose_delete_is_in_flight_waits_for_it_and_leaves_that_link_out(household):
    """Another process has deleted Ana's note, not yet committed, when an add writes its links to it: the add waits
    for that delete, then stores the note with its other links (never a foreign-key error, never a dangling link)."""
    url, mem, ana, _ = household
    going, staying = (n.id for n in mem.store.all_notes(ana.id)[:2])
    note = {"content": "My PIN changed", "timestamp": "2024-05-01T09:00:00", "keywords": [], "tags": [],
            "context": "", "links": [going, staying]}
    with psycopg.connect(url) as deleting, ThreadPoolExecutor(1) as pool:
        deleting.execute("DELETE FROM biomem.notes WHERE owner_id = %s AND id = %s", [ana.id, going])
        adding = pool.submit(mem.store.insert_notes, ana.id, [note], mem.text.encode([note["content"]]))
        deadline = time.monotonic() + 30
        while not deleting.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0]:
            assert time.monotonic() < deadline, "the add never reached the deleted note's lock"
        deleting.commit()
        (added,), _ = adding.result(timeout=30)
    assert mem.store.get_note(ana.id, added).links == [staying]
    with pytest.raises(NoteNotFoundError):
        mem.store.get_note(ana.id, going)


def test_forget_leaves_no_row_of_the_person_and_their_id_is_never_given_again(household):
    url, mem, ana, ben = household
    assert mem.forget(probe=probe(1)) == ana.id
    with psycopg.connect(url) as conn:  # as the tables' owner, whom row-level security does not restrict
        for table, column in (("identities", "id"), ("templates", "identity_id"), ("notes", "owner_id"),
                              ("links", "owner_id"), ("history", "owner_id")):
            assert conn.execute(f"SELECT count(*) FROM biomem.{table} WHERE {column} = %s",
                                [ana.id]).fetchone()[0] == 0, table
    gate = mem.identify(probe(1))
    assert gate.identity is None and ana.id not in gate.scores
    again = mem.enroll("Ana", [Probe(person(1), MODALITY)])
    assert again.id > ben.id and mem.search("PIN", probe=probe(1)).notes == []


def test_the_cli_manages_keys_in_a_postgresql_store(postgres_database):
    url = postgres_database("cli")
    env = {**os.environ, "BIOMEM_DB": url}
    created = subprocess.run([sys.executable, "-m", "biomem.cli", "keys", "create", "kiosk"],
                             capture_output=True, text=True, timeout=120, env=env)
    assert created.returncode == 0, created.stderr
    listed = subprocess.run([sys.executable, "-m", "biomem.cli", "keys", "list"], capture_output=True, text=True,
                            timeout=120, env=env)
    assert '"kiosk"' in listed.stdout and created.stdout.strip() not in listed.stdout
    with closing(open_store(url)) as store:
        assert [k["name"] for k in store.api_keys()] == ["kiosk"]


def test_an_existing_server_set_up_as_the_readme_says_runs_with_no_superuser(postgres_server, postgres_database,
                                                                              text_encoder):
    """README, Storage: a superuser adds pgvector; an ordinary owner creates the schema; a kiosk login that
    may only act as the engine's role serves from it."""
    open_store(postgres_database("role")).close()  # the cluster has the engine's role from now on
    admin = postgres_server.get_uri()
    database = f"existing_{os.getpid()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        for statement in ("DROP DATABASE IF EXISTS {db} WITH (FORCE)", "DROP ROLE IF EXISTS kiosk",
                          "DROP ROLE IF EXISTS memory_owner", "CREATE ROLE memory_owner LOGIN",
                          "CREATE DATABASE {db} OWNER memory_owner", f"GRANT {APP_ROLE} TO memory_owner",
                          f"CREATE ROLE kiosk LOGIN IN ROLE {APP_ROLE}"):
            conn.execute(statement.format(db=database))
    with psycopg.connect(postgres_server.get_uri(database), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
    as_user = {user: postgres_server.get_uri(database).replace("postgres:@", f"{user}:@")
               for user in ("memory_owner", "kiosk")}
    try:
        owner = memory(as_user["memory_owner"], text_encoder)
        ana = owner.enroll("Ana", [Probe(person(1), MODALITY)])
        owner.add("My PIN is 1234", identity=ana.id)
        secret, key = create_key(owner.store, "kiosk", "agent")  # keys are the owner's to create
        owner.close()
        kiosk = memory(as_user["kiosk"], text_encoder)
        assert kiosk.search("PIN", probe=probe(1)).notes[0][0].content == "My PIN is 1234"
        assert kiosk.add("I parked on level 3", probe=probe(1)).owner == ana.id
        assert authenticate(kiosk.store, secret) == key and any_keys(kiosk.store)  # and the replica's to check
        for manage in (lambda: create_key(kiosk.store, "mallory", "admin"), lambda: revoke_key(kiosk.store, key.id),
                       lambda: list_keys(kiosk.store)):
            with pytest.raises(NotAuthorisedError, match="owns the store's tables"):
                manage()
        kiosk.close()
        with psycopg.connect(as_user["kiosk"]) as conn:  # the login itself, by hand: row-level security holds
            assert conn.execute("SELECT count(*) FROM biomem.notes").fetchone() == (0,)
        with psycopg.connect(postgres_server.get_uri(database)) as conn:
            assert conn.execute("SELECT tableowner FROM pg_tables WHERE schemaname = 'biomem' AND tablename = 'notes'",
                                ).fetchone() == ("memory_owner",)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
            conn.execute("DROP ROLE IF EXISTS kiosk")
            conn.execute("DROP ROLE IF EXISTS memory_owner")
