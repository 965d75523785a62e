"""Versioned schema upgrades of the SQLite store, each in one transaction that keeps every row.

Version 1 → 2: tables are rebuilt with AUTOINCREMENT ids (SQLite cannot add it in place),
labels get a unique key (biomem.stores.labels: a clash from version 1 is renamed "label (2)"),
templates are sealed under the store's key, thresholds gain the step-up columns.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import numpy as np

from ...errors import StoreCorruptError
from ..labels import unique_label_keys

_TABLES = ("identities", "templates", "notes", "links", "history", "thresholds")
_V1_TRIGGERS = ("notes_counted", "notes_uncounted", "links_same_owner")
_V1_INDEXES = ("templates_by_modality", "notes_by_owner", "links_by_target", "history_by_note")


def migrate_1_to_2(conn: sqlite3.Connection, create_schema: Callable[[], None],
                   seal: Callable[[np.ndarray, int, str], bytes]) -> None:
    """Rebuild a version-1 store as version 2 inside the caller's transaction."""
    for trigger in _V1_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    for index in _V1_INDEXES:
        conn.execute(f"DROP INDEX IF EXISTS {index}")
    for table in _TABLES:
        conn.execute(f"ALTER TABLE {table} RENAME TO {table}_v1")
    create_schema()
    identities = conn.execute("SELECT id, label FROM identities_v1 ORDER BY id").fetchall()
    created = dict(conn.execute("SELECT id, created FROM identities_v1").fetchall())
    generation = dict(conn.execute("SELECT id, generation FROM identities_v1").fetchall())
    conn.executemany("INSERT INTO identities (id, label, label_key, created, generation) VALUES (?, ?, ?, ?, ?)",
                     [(i, label, key, created[i], generation[i]) for i, label, key in unique_label_keys(identities)])
    conn.executemany(
        "INSERT INTO templates (id, identity_id, modality, embedding, created) VALUES (?, ?, ?, ?, ?)",
        [(t, owner, modality, seal(np.frombuffer(blob, dtype=np.float32), owner, modality), when)
         for t, owner, modality, blob, when in conn.execute(
             "SELECT id, identity_id, modality, embedding, created FROM templates_v1 ORDER BY id")])
    conn.execute("INSERT INTO notes (id, owner_id, content, timestamp, keywords, tags, context, embedding) "
                 "SELECT id, owner_id, content, timestamp, keywords, tags, context, embedding FROM notes_v1")
    conn.execute("INSERT INTO links SELECT owner_id, source_id, target_id FROM links_v1")
    conn.execute("INSERT INTO history (id, owner_id, note_id, event, before, after, at) "
                 "SELECT id, owner_id, note_id, event, before, after, at FROM history_v1")
    conn.execute("INSERT INTO thresholds (modality, tau, source, updated) "
                 "SELECT modality, tau, source, updated FROM thresholds_v1")
    for table in reversed(_TABLES):
        conn.execute(f"DROP TABLE {table}_v1")
    conn.execute("UPDATE meta SET value = (SELECT COUNT(*) FROM notes) WHERE key = 'note_total'")
    problems = conn.execute("PRAGMA foreign_key_check").fetchall()
    if problems:
        raise StoreCorruptError(f"the version-1 store has rows that point nowhere ({problems[:3]}); "
                                "it was left untouched")
