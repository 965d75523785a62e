"""API keys on PostgreSQL are the tables' owner's to write: SQL run as the engine's role `biomem_app` (a bug, an
injected statement, a replica's login) can neither add an admin key, nor revive a revoked one, nor read a digest,
while the service still authenticates keys and the operator still creates, lists and revokes them."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import httpx
import psycopg
import pytest

from biomem.engine.keys import any_keys, authenticate, create_key, digest, list_keys, revoke_key
from biomem.server import create_app, served
from biomem.settings import Settings
from biomem.stores import open_store
from biomem.stores.pg.schema import APP_ROLE
from biomem.stores.pg.schema import SCHEMA_VERSION as PG_VERSION
from biomem.stores.sqlite.schema import SCHEMA_VERSION as SQLITE_VERSION

from .conftest import BOTH_STORES
from .test_memory import run_as_owner
from .test_postgres import app_connection, memory

FORGED = "bm_forged-by-sql"


def refused(url: str, statement: str, params: list) -> None:
    """`statement`, run as the engine's role, is refused for want of privilege (and so writes nothing)."""
    with closing(app_connection(url)) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement, params)


def test_the_engines_role_can_neither_write_nor_read_api_keys(postgres_database):
    url = postgres_database("keys")
    with closing(open_store(url)) as store:
        _, agent = create_key(store, "kiosk", "agent")
        _, revoked = create_key(store, "old admin", "admin")
        revoke_key(store, revoked.id)
    for statement, params in (
            ("INSERT INTO api_keys (name, role, digest, prefix, created) VALUES ('mallory', 'admin', %s, 'bm_for', "
             "'2024-01-01')", [digest(FORGED)]),
            ("UPDATE api_keys SET revoked = NULL WHERE id = %s", [revoked.id]),
            ("UPDATE api_keys SET role = 'admin' WHERE id = %s", [agent.id]),
            ("DELETE FROM api_keys WHERE id = %s", [agent.id]),
            ("SELECT digest FROM api_keys", []),
            ("SELECT count(*) FROM api_keys", [])):
        refused(url, statement, params)
    with closing(open_store(url)) as store:
        assert authenticate(store, FORGED) is None
        assert [(k["id"], k["role"], k["revoked"] is None) for k in list_keys(store)] == [
            (agent.id, "agent", True), (revoked.id, "admin", False)]


def test_the_service_authenticates_keys_the_operator_creates_lists_and_revokes(postgres_database, text_encoder):
    url = postgres_database("service")
    mem = memory(url, text_encoder)
    try:
        admin, admin_key = create_key(mem.store, "ops", "admin")
        agent, agent_key = create_key(mem.store, "kiosk", "agent")
        assert authenticate(mem.store, admin) == admin_key and any_keys(mem.store)
        with closing(app_connection(url)) as conn:  # the lookup the engine's role may make: by digest, unrevoked
            assert conn.execute("SELECT * FROM api_key(%s)", [digest(agent)]).fetchall() == [
                (agent_key.id, "kiosk", "agent")]
        settings = Settings.from_env().model_copy(update={"host": "127.0.0.1"})
        with served(create_app(mem, settings, ui=False, mcp=False)) as url_of_service, \
                httpx.Client(base_url=url_of_service, timeout=60) as http:
            def refusal(secret: str) -> str:  # a route for keys only: a known key is refused for want of a session
                return http.get("/v1/memories", headers={"Authorization": f"Bearer {secret}"}).json()["error"]["type"]
            assert http.get("/v1/health", headers={"Authorization": f"Bearer {admin}"}).json()["store"]["people"] == 0
            assert refusal(agent) == "SessionExpiredError" and refusal(FORGED) == "AuthenticationError"
            assert revoke_key(mem.store, agent_key.id) and not revoke_key(mem.store, agent_key.id)
            assert refusal(agent) == "AuthenticationError"
        assert [k["revoked"] is not None for k in list_keys(mem.store)] == [False, True]
        revoke_key(mem.store, admin_key.id)
        assert not any_keys(mem.store)
    finally:
        mem.close()


@pytest.mark.parametrize("old_version", [6, 7])
@BOTH_STORES
def test_a_store_of_an_earlier_version_keeps_its_keys_and_postgresql_takes_the_engines_grants(
        database, backend, old_version):
    """A version-6 or version-7 store opens as the current version; its keys still authenticate, and on PostgreSQL
    the engine's role loses the INSERT and UPDATE it had on api_keys."""
    location = str(database("old.db"))
    with closing(open_store(location)) as store:
        secret, key = create_key(store, "kiosk", "agent")
    older = [f"UPDATE meta SET value = '{old_version}' WHERE key = 'schema_version'"]
    if backend == "postgresql":  # as versions 3 to 7 left it (version 9 adds sources)
        older += ["DROP TABLE sources",
                  f"GRANT SELECT, INSERT, UPDATE ON api_keys TO {APP_ROLE}", "DROP FUNCTION api_key(text)",
                  "DROP FUNCTION api_keys_in_use()"]
    run_as_owner(backend, location, older)
    if backend == "postgresql":
        with closing(app_connection(location)) as conn:  # what the attacker could do before the upgrade
            conn.execute("UPDATE api_keys SET role = 'admin' WHERE id = %s", [key.id])
            conn.rollback()

    with closing(open_store(location)) as store:
        assert store.get_meta("schema_version") == str(PG_VERSION if backend == "postgresql" else SQLITE_VERSION)
        assert authenticate(store, secret) == key and any_keys(store)
    if backend == "postgresql":
        refused(location, "UPDATE api_keys SET role = 'admin' WHERE id = %s", [key.id])
    else:
        with closing(sqlite3.connect(location)) as conn:
            assert conn.execute("SELECT name, role FROM api_keys").fetchall() == [("kiosk", "agent")]
