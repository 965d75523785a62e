"""The meta, threshold, identity, attempt-limit and group logic both stores share, over the hooks of
biomem.stores.dialect.Dialect: each statement is written once, with MARK as its placeholder."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import UnknownIdentityError
from ..vocabulary import AttemptLimits
from .attempts import record_misses
from .base import THRESHOLD_COLUMNS
from .dialect import Dialect
from .groups import emptied_groups, erase_from_groups, erase_unreadable
from .records import GROUP_KEY_PREFIX, Group, Identity, check_id, now_iso
from .sealing import Sealer


class StoreLogic(Dialect):
    """Meta, thresholds, identities and templates, attempt limits. The store supplies, besides the Dialect
    hooks: the sealer and template context (SealedTemplates), `_bump_templates` (a template changed), what a
    forget admits (`_admit_erasure`) and `checkpoint` (after a rekey, the old sealed bytes leave the log)."""

    sealer: Sealer
    _context: Callable[[int, str], bytes]
    _seal_row: Callable[[np.ndarray, int, str], bytes]
    _bump_templates: Callable[[Any], None]
    _admit_erasure: Callable[[Any, int], None]
    checkpoint: Callable[..., None]

    # meta and thresholds
    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self.memo(("meta", key), lambda: self._fetch_one(f"SELECT value FROM meta WHERE key = {self.MARK}",
                                                                [key]))
        return row[0] if row else default

    def set_meta(self, key: str, value: str) -> None:
        with self._writing() as conn:
            conn.execute(f"INSERT INTO meta VALUES ({self.MARK}, {self.MARK}) ON CONFLICT (key) "
                         "DO UPDATE SET value = excluded.value", [key, value])

    def threshold(self, modality: str, *, step_up: bool = False) -> tuple[float, str] | None:
        """(τ, provenance) stored for `modality` (the step-up τ with `step_up`), else None."""
        return self._threshold_row("tau_strict" if step_up else "tau", modality)

    def margin(self, modality: str) -> tuple[float, str] | None:
        """(δ, provenance) of the gate's ambiguity margin stored for `modality`, else None."""
        return self._threshold_row("delta", modality)

    def _threshold_row(self, column: str, modality: str) -> tuple[float, str] | None:
        """(value, provenance) of one THRESHOLD_COLUMNS entry of `modality`, else None."""
        columns = ", ".join(THRESHOLD_COLUMNS[column])
        row = self.memo(("thresholds", columns, modality), lambda: self._fetch_one(
            f"SELECT {columns} FROM thresholds WHERE modality = {self.MARK}", [modality]))
        return (float(row[0]), row[1]) if row and row[0] is not None else None

    def calibrated(self) -> list[str]:
        """Modalities with a stored τ (calibrated or set by hand)."""
        with self._reading() as conn:
            return [r[0] for r in conn.execute("SELECT modality FROM thresholds ORDER BY 1")]

    def set_threshold(self, modality: str, tau: float, source: str, *, step_up: bool = False,
                      column: str | None = None) -> None:
        """Store τ (the step-up τ with `step_up`; `column="delta"`: the ambiguity margin) and its provenance."""
        value, provenance = THRESHOLD_COLUMNS[column or ("tau_strict" if step_up else "tau")]
        m = self.MARK
        with self._writing() as conn:
            conn.execute(f"INSERT INTO thresholds (modality, {value}, {provenance}, updated) "
                         f"VALUES ({m}, {m}, {m}, {m}) ON CONFLICT (modality) DO UPDATE SET {value} = "
                         f"excluded.{value}, {provenance} = excluded.{provenance}, updated = excluded.updated",
                         [modality, float(tau), source, now_iso()])

    def set_margin(self, modality: str, delta: float, source: str) -> None:
        """Store the gate's ambiguity margin δ of `modality` beside its τ."""
        self.set_threshold(modality, delta, source, column="delta")

    # identities and templates
    def identity(self, identity_id: int) -> Identity:
        """The owner `identity_id`, a person or a group; UnknownIdentityError when there is none."""
        identity_id = check_id(identity_id, "identity")
        row = self.memo(("identity", identity_id), lambda: self._fetch_one(
            f"SELECT id, label, sample, kind FROM identities WHERE id = {self.MARK}", [identity_id]))
        if row is None:
            raise UnknownIdentityError(f"no identity with id {identity_id}")
        return Identity(row[0], row[1], bool(row[2]), row[3])

    def person(self, identity_id: int) -> Identity:
        """The enrolled person `identity_id`; UnknownIdentityError for a group or nobody."""
        found = self.identity(identity_id)
        if found.kind != "person":
            raise UnknownIdentityError(f"no person with id {identity_id}")
        return found

    def identities(self) -> list[Identity]:
        """Every enrolled person (groups are not people: all_groups lists them)."""
        with self._reading() as conn:
            return [Identity(i, label, bool(sample)) for i, label, sample in
                    conn.execute("SELECT id, label, sample FROM identities WHERE kind = 'person' ORDER BY id")]

    def add_templates(self, identity_id: int, modality: str, templates: np.ndarray) -> None:
        m = self.MARK
        with self._writing([identity_id]) as conn:
            self.person(identity_id)  # a group is never enrolled, so never matched
            self._execute_many(
                conn, f"INSERT INTO templates (identity_id, modality, embedding, created) VALUES ({m}, {m}, {m}, {m})",
                [(identity_id, modality, self._seal_row(t, identity_id, modality), now_iso()) for t in templates])
            self._bump_templates(conn)

    def templates_version(self) -> str:
        return self.get_meta("templates_version", "0")

    def delete_identity(self, identity_id: int) -> list[int]:
        """Delete a person or a group and, by cascade, their templates, notes, links and history (SQLite's
        secure_delete zeroes the file's pages, checkpoint() then empties the WAL). A person's notes in groups go
        too, with their history, and a group they leave empty goes with its notes. Returns the other owners whose
        notes changed or went (their search indexes must be dropped)."""
        m = self.MARK
        with self._writing() as conn:
            self.identity(identity_id)
            self._admit_erasure(conn, int(identity_id))
            touched, member_of = erase_from_groups(conn.execute, int(identity_id), m)
            conn.execute(f"DELETE FROM identities WHERE id = {m}", [int(identity_id)])
            for group in touched:
                conn.execute(f"UPDATE identities SET generation = generation + 1 WHERE id = {m}", [group])
            for group in member_of:  # (each in touched already) no one is left alone with a note kept from them
                erase_unreadable(conn.execute, group, m)
            emptied = emptied_groups(conn.execute, member_of, m)
            for group in emptied:
                conn.execute(f"DELETE FROM identities WHERE id = {m}", [group])
            self._bump_templates(conn)
        return sorted(set(touched) | set(emptied))

    def rekey(self, key: bytes) -> None:
        """Re-seal every template (and the check value) under `key`, in one transaction admitting every person."""
        new, m = Sealer(key), self.MARK
        with self._writing(owner.id for owner in self.identities()) as conn:
            rows = conn.execute("SELECT id, identity_id, modality, embedding FROM templates").fetchall()
            for template_id, owner, modality, blob in rows:
                context = self._context(owner, modality)
                conn.execute(f"UPDATE templates SET embedding = {m} WHERE identity_id = {m} AND id = {m}",
                             [new.seal(self.sealer.open(blob, context), context), owner, template_id])
            conn.execute(f"UPDATE meta SET value = {m} WHERE key = 'key_check'", [new.check_value(b"key-check").hex()])
            self._bump_templates(conn)
        self.sealer = new
        self.checkpoint()

    # attempt limits (biomem.identity.limits.AttemptLimiter), over keyed digests of client keys
    def attempt_wait(self, clients: list[str], now: float) -> float:
        """Seconds the longest cool-down of these client digests still lasts at `now` (0 if none)."""
        among, args = self._among("client", clients)
        (end,) = self.memo(("cooldowns", *clients), lambda: self._fetch_one(
            f"SELECT max(ends) FROM cooldowns WHERE {among}", args))
        return max(0.0, (end or 0.0) - now)

    def attempt_miss(self, clients: list[str], now: float, limits: AttemptLimits,
                     misses: int = 1) -> list[tuple[str, float]]:
        """`misses` misses for each client digest; (client, end) of those they sent into a cool-down."""
        with self._writing() as conn:
            return record_misses(lambda sql, params: conn.execute(sql.replace("?", self.MARK), params), clients,
                                 now, limits, misses)


class GroupLogic(Dialect):
    """Groups (households: owners of notes with members and no templates) and their members. The store
    supplies, besides the Dialect hooks, `_groups(where, args, admitted)` (the groups matching `where`, with
    their members), `person` and `add_member`."""

    _groups: Callable[..., list[Group]]
    person: Callable[[int], Identity]
    add_member: Callable[[int, int], bool]

    def add_group(self, label: str, members: Sequence[int] = ()) -> Identity:
        """A new group (an owner of notes with no templates) with `members`; labels need not be unique."""
        m = self.MARK
        with self._writing() as conn:
            group_id = self._inserted_id(conn, f"INSERT INTO identities (label, label_key, created, kind) "
                                               f"VALUES ({m}, {m}, {m}, 'group')",
                                         [label, GROUP_KEY_PREFIX + secrets.token_hex(16), now_iso()])
            for member in members:
                self.add_member(group_id, member)
        return Identity(group_id, label, False, "group")

    def remove_member(self, group_id: int, identity_id: int) -> list[int]:
        """Take a person out of a group and erase the notes no member left may read; returns their ids."""
        m = self.MARK
        with self._writing([group_id, identity_id]) as conn:
            conn.execute(f"DELETE FROM members WHERE group_id = {m} AND identity_id = {m}",
                         [int(group_id), int(identity_id)])
            erased = erase_unreadable(conn.execute, int(group_id), m)
            if erased:
                self._bump_generation(conn, group_id)
            return erased

    def group(self, group_id: int) -> Group:
        """The group `group_id` with its members; UnknownIdentityError when there is no such group."""
        found = self._groups(f"id = {self.MARK}", [check_id(group_id, "group")])
        if not found:
            raise UnknownIdentityError(f"no group with id {group_id}")
        return found[0]

    def groups_of(self, identity_id: int) -> list[Group]:
        """The groups a person is a member of, with their members, oldest first."""
        return self._groups(f"id IN (SELECT group_id FROM members WHERE identity_id = {self.MARK})",
                            [int(identity_id)], admitted=[int(identity_id)])

    def all_groups(self) -> list[Group]:
        """Every group with its members (the operator's view)."""
        return self._groups("true", [])
