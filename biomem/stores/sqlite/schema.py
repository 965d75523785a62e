"""The SQLite schema of the store, version 9, as one script and as the statements it runs."""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 9

# Version 2: ids are AUTOINCREMENT (never reused, so nothing keyed by an id can reach a later
# person), labels are unique case-insensitively, templates are sealed, thresholds carry a
# stricter step-up τ, identities say whether they are sample people (see disclosure).
# Version 3: service API keys (biomem.engine.keys), kept as SHA-256 digests only.
# Version 4: attempt limits (biomem.identity.limits) in the store, shared by every process serving it.
# Version 5: groups (households) own notes as people do: identities.kind, members, notes' author and
# metadata, notes hidden from some members, and who made each history event (V5_COLUMNS on upgrade).
# Version 6: the gate's ambiguity margin δ per modality beside τ, and which note's evolution caused an
# "evolve" event (so deleting or rewriting that note undoes what it wrote into its neighbours) (V6_COLUMNS).
# Version 7: a person's label_key is the look-alike key of biomem.stores.labels (NFKC, case fold, the Unicode
# TS #39 skeleton), no longer the casefolded label; the upgrade renames a later look-alike "label (2)".
# Version 8: nothing changes here. PostgreSQL's version 8 lets only the tables' owner write API keys, its engine's
# role only look one up; a file has no roles (whoever may read it may write it), so its keys stay as they are.
# Version 9: which notes each note's evolve prompt showed (sources), so that deleting or rewriting one takes back
# what was derived from it down the chain (biomem.stores.derivations); a note's own strengthened tags are an
# "evolve" event it caused itself. Notes stored before have no sources: their chain ends at the first step.
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS identities (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    label TEXT NOT NULL,
    label_key TEXT NOT NULL UNIQUE,  -- a person's: label_key(label) (biomem.stores.labels); a group's: random
    created TEXT NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0,  -- bumped on every change to the owner's notes
    sample INTEGER NOT NULL DEFAULT 0,  -- 1: a demo/sample person, not a real enrolment
    kind TEXT NOT NULL DEFAULT 'person' CHECK (kind IN ('person', 'group'))  -- a group has no templates
);
CREATE TABLE IF NOT EXISTS members (
    group_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
    identity_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
    added TEXT NOT NULL,
    PRIMARY KEY (group_id, identity_id)
);
CREATE INDEX IF NOT EXISTS members_by_identity ON members(identity_id);
CREATE TABLE IF NOT EXISTS templates (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    identity_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
    modality TEXT NOT NULL,
    embedding BLOB NOT NULL,  -- AES-GCM sealed float32 vector (biomem.stores.sealing)
    created TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS templates_by_modality ON templates(modality, identity_id);
CREATE TABLE IF NOT EXISTS notes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    owner_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
    content TEXT NOT NULL,
    timestamp TEXT NOT NULL,
    keywords TEXT NOT NULL DEFAULT '[]',
    tags TEXT NOT NULL DEFAULT '[]',
    context TEXT NOT NULL DEFAULT '',
    embedding BLOB NOT NULL,
    -- who wrote it: the owner for a person's note, a member for a group's (NULL: an operator's import);
    -- forgetting the author erases it
    author_id INTEGER REFERENCES identities(id) ON DELETE CASCADE,
    metadata TEXT NOT NULL DEFAULT '{}'  -- a JSON object (biomem.stores.filters.check_metadata)
);
CREATE INDEX IF NOT EXISTS notes_by_owner ON notes(owner_id, timestamp);
CREATE INDEX IF NOT EXISTS notes_by_author ON notes(author_id);
-- every column a filter reads (biomem.stores.filters), so a filtered search reads this index, not the rows
-- with their inline embeddings (1.5 KB each): 0.17-0.20 ms per partition at 1M notes without it
CREATE INDEX IF NOT EXISTS notes_filtered ON notes(owner_id, author_id, timestamp, tags, keywords, metadata);
-- a group's note that some of its members never retrieve ("everyone but Chloe")
CREATE TABLE IF NOT EXISTS hidden (
    owner_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
    note_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
    identity_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
    PRIMARY KEY (note_id, identity_id)
);
CREATE INDEX IF NOT EXISTS hidden_by_identity ON hidden(identity_id, owner_id);
CREATE TRIGGER IF NOT EXISTS hidden_same_owner BEFORE INSERT ON hidden
WHEN (SELECT owner_id FROM notes WHERE id = NEW.note_id) IS NOT NEW.owner_id
BEGIN SELECT RAISE(ABORT, 'a hidden row names the owner of its note'); END;
INSERT OR IGNORE INTO meta VALUES ('note_total', '0');
CREATE TRIGGER IF NOT EXISTS notes_counted AFTER INSERT ON notes
BEGIN UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'note_total'; END;
CREATE TRIGGER IF NOT EXISTS notes_uncounted AFTER DELETE ON notes
BEGIN UPDATE meta SET value = CAST(value AS INTEGER) - 1 WHERE key = 'note_total'; END;
CREATE TABLE IF NOT EXISTS links (
    owner_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
    source_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
    target_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
    PRIMARY KEY (source_id, target_id)
);
CREATE INDEX IF NOT EXISTS links_by_target ON links(target_id);
CREATE TABLE IF NOT EXISTS sources (  -- note_id's evolve prompt showed source_id's text (biomem.stores.derivations)
    owner_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
    note_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
    source_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
    PRIMARY KEY (note_id, source_id)
);
CREATE INDEX IF NOT EXISTS sources_by_owner ON sources(owner_id, note_id);
CREATE TRIGGER IF NOT EXISTS links_same_owner BEFORE INSERT ON links
WHEN (SELECT owner_id FROM notes WHERE id = NEW.source_id) IS NOT NEW.owner_id
  OR (SELECT owner_id FROM notes WHERE id = NEW.target_id) IS NOT NEW.owner_id
BEGIN SELECT RAISE(ABORT, 'links must join two notes of the same owner'); END;
CREATE TABLE IF NOT EXISTS history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    owner_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
    note_id INTEGER NOT NULL,
    event TEXT NOT NULL,          -- add | update | evolve | delete
    before TEXT,
    after TEXT,
    at TEXT NOT NULL,
    actor_id INTEGER,  -- who made the change (NULL: the operator, or the LLM's evolution)
    cause_id INTEGER  -- an "evolve" event: the note whose evolution wrote it
);
CREATE INDEX IF NOT EXISTS history_by_note ON history(owner_id, note_id);
CREATE INDEX IF NOT EXISTS history_by_cause ON history(owner_id, cause_id);
CREATE TABLE IF NOT EXISTS thresholds (
    modality TEXT PRIMARY KEY,
    tau REAL,  -- the gate's τ
    source TEXT,
    tau_strict REAL,  -- step-up τ (lower false-match rate) for destructive or broad actions
    strict_source TEXT,
    updated TEXT NOT NULL,
    delta REAL,  -- ambiguity margin: nobody is admitted when the runner-up is within δ of the best
    delta_source TEXT
);
CREATE TABLE IF NOT EXISTS api_keys (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('agent', 'admin')),
    digest TEXT NOT NULL UNIQUE,  -- SHA-256 of the key; the key itself is shown once, never stored
    prefix TEXT NOT NULL,  -- its first characters, to tell keys apart in a listing
    created TEXT NOT NULL,
    revoked TEXT
);
CREATE TABLE IF NOT EXISTS attempts (
    client TEXT NOT NULL,  -- keyed digest of a client key (session, address), never the key itself
    at REAL NOT NULL  -- when a probe of that client matched nobody (seconds since the epoch)
);
CREATE INDEX IF NOT EXISTS attempts_by_client ON attempts(client);
CREATE INDEX IF NOT EXISTS attempts_by_time ON attempts(at);
CREATE TABLE IF NOT EXISTS cooldowns (
    client TEXT PRIMARY KEY,
    ends REAL NOT NULL,  -- refused until then
    strikes INTEGER NOT NULL  -- cool-downs earned so far (each doubles the next)
);
"""

# Columns version 5 adds to tables that exist (before its new tables are created), and the rows it fills.
V5_COLUMNS = (
    "ALTER TABLE identities ADD COLUMN kind TEXT NOT NULL DEFAULT 'person' CHECK (kind IN ('person', 'group'))",
    "ALTER TABLE notes ADD COLUMN author_id INTEGER REFERENCES identities(id) ON DELETE CASCADE",
    "ALTER TABLE notes ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}'",
    "ALTER TABLE history ADD COLUMN actor_id INTEGER",
    "UPDATE notes SET author_id = owner_id",
)

V6_COLUMNS = (
    "ALTER TABLE thresholds ADD COLUMN delta REAL",
    "ALTER TABLE thresholds ADD COLUMN delta_source TEXT",
    "ALTER TABLE history ADD COLUMN cause_id INTEGER",
)


def statements(script: str) -> list[str]:
    """Split the schema into statements (triggers contain ';' inside BEGIN ... END)."""
    parts, current = [], ""
    for line in script.splitlines():
        current += line + "\n"
        if sqlite3.complete_statement(current):
            parts.append(current.strip())
            current = ""
    return parts
