"""The SQLite store remembers the small rows every request reads (identities, generations, households, hidden notes,
thresholds, cool-downs) between writes: a write by another connection to the same file (another process, a replica
of the engine) must be seen by the very next read, or a forgotten person, a removed member or a new τ would linger."""

from __future__ import annotations

import numpy as np
import pytest

from biomem.errors import UnknownIdentityError
from biomem.stores.sqlite.store import Store

NOTE = {"content": "The spare key is under the mat", "timestamp": "2024-01-01T00:00:00", "keywords": ["key"],
        "tags": [], "context": ""}


@pytest.fixture
def two(tmp_path):
    """Two stores on one file: `a` reads (and remembers), `b` writes behind its back."""
    a, b = Store(tmp_path / "m.db"), Store(tmp_path / "m.db")
    yield a, b
    a.close()
    b.close()


def test_another_connection_s_writes_are_seen_by_the_next_read(two):
    a, b = two
    template = np.random.default_rng(0).standard_normal((1, 128)).astype(np.float32)
    vector = np.ones((1, 384), dtype=np.float32) / np.sqrt(384)
    ana, ben = (a.add_identity(name, "m", template).id for name in ("Ana", "Ben"))
    home = a.add_group("Home", [ana]).id
    a.insert_notes(home, [NOTE], vector)
    generation, cooldown = a.generation(home), a.attempt_wait(["kiosk"], 0.0)
    assert a.group_ids(ben) == [] and a.identity(ana).label == "Ana" and a.threshold("m") is None  # remembered now

    b.add_member(home, ben)
    assert a.group_ids(ben) == [home]
    ids, _ = b.insert_notes(home, [NOTE | {"author": ben, "hidden_from": [ana]}], vector)
    assert a.generation(home) == generation + 1 and a.hidden_notes([ana], [home]) == set(ids)
    assert a.get_notes_among([home], ids)[0].hidden_from == [ana]
    b.remove_member(home, ben)
    assert a.group_ids(ben) == []
    b.set_threshold("m", 0.5, "by hand")
    assert a.threshold("m") == (0.5, "by hand")
    b.delete_identity(ana)
    with pytest.raises(UnknownIdentityError):
        a.identity(ana)
    assert a.generation(ana) == -1
    assert cooldown == 0.0


def test_a_rolled_back_write_leaves_nothing_remembered(two):
    a, _ = two
    template = np.ones((1, 128), dtype=np.float32)
    with pytest.raises(RuntimeError), a.transaction():
        made = a.add_identity("Chloe", "m", template).id
        assert a.identity(made).label == "Chloe"  # read inside the transaction: never remembered
        raise RuntimeError("the enrolment failed half way")
    with pytest.raises(UnknownIdentityError):
        a.identity(made)
