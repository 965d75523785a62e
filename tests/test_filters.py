"""Metadata filters (biomem.stores.filters): the SQL each filter compiles to selects, on SQLite and on a real
PostgreSQL, exactly the notes the brute-force reference (tests/filter_reference.py) selects; hand-made notes
pin the semantics down; and every malformed filter or metadata is refused with a message a caller can act on."""

from __future__ import annotations

import json
import random
import sqlite3
from typing import Any

import pytest

from biomem.errors import InvalidInputError
from biomem.notes.timeparse import parse_timestamp
from biomem.stores.filter_sql import compile_filter
from biomem.stores.filters import (
    ALLOWED,
    FIELDS,
    MAX_CONDITIONS,
    MAX_DEPTH,
    OPERATORS,
    And,
    Condition,
    Not,
    Or,
    check_metadata,
    parse_filters,
)

from .filter_reference import matches
from .shared import create_database, drop_database

SEED = 20240611
PEOPLE = (1, 2, 3, 4)
GROUPS = (10, 11)
WORDS = ["work", "Work", "WORK", "family", "Café", "CAFÉ", "café", "straße", "STRASSE", "o'reilly", 'say "hi"',
         "x%_y", "ümlaut", "İstanbul", "", "beagle", "Beagle puppy", "10", "true", "null", "Zebra", "zebra", "Ä"]
NEEDLES = ["caf", "CAF", "É", "é", "ss", "SS", "'", '"', "%", "_", "", "work", "WoRk", "beag", "İ", "i", "ä", "x%"]
STRINGS = [*WORDS, "Dog", "dog", "DOG", "it's", "1", "1.0", "a", "b", "B", "aa"]
INTS = [-3, -1, 0, 1, 2, 3, 10, 2**53 - 1, -(2**53 - 1)]
FLOATS = [0.5, 1.0, 2.5, -0.0, 3.14, 1e15, -1e-7, 2.0, 0.1, 0.30000000000000004]
METADATA_KEYS = ["kind", "score", "flag", "n", "labels", "note", "z"]
STAMPS = ["2023-05-08T13:56:00", "2023-05-08T13:56:00+00:00", "2023-05-09T10:00:00", "2024-01-01T00:00:00",
          "2024-06-30T23:59:59+02:00", "2026-12-04T17:00:00+00:00", "2025-02-28T08:00:00"]
BOUNDS = [*STAMPS, "2023", "2024", "2024-06", "2023-05-08T13:56:00+", "2025-02-28T08:00:00Z", "1999", "3000"]


def random_scalar(rng: random.Random) -> Any:
    kind = rng.choice(["str", "str", "int", "float", "bool", "null"])
    if kind == "str":
        return rng.choice(STRINGS)
    if kind == "int":
        return rng.choice(INTS)
    if kind == "float":
        return rng.choice(FLOATS) if rng.random() < 0.7 else rng.uniform(-10, 10)
    return rng.choice([True, False]) if kind == "bool" else None


def random_note(rng: random.Random, note_id: int) -> dict:
    if rng.random() < 0.5:
        owner = author = rng.choice(PEOPLE)
    else:
        owner, author = rng.choice(GROUPS), rng.choice([*PEOPLE, None])
    metadata = {}
    for key in METADATA_KEYS:
        if rng.random() < 0.6:
            if rng.random() < 0.25:
                metadata[key] = [random_scalar(rng) for _ in range(rng.randint(0, 4))]
            else:
                metadata[key] = random_scalar(rng)
    return {"id": note_id, "owner_id": owner, "author_id": author,
            "tags": rng.sample(WORDS, rng.randint(0, 3)), "keywords": rng.sample(WORDS, rng.randint(0, 2)),
            "timestamp": rng.choice(STAMPS), "metadata": check_metadata(metadata)}


# Hand-made notes whose answers are written out below; the random notes follow them.
HAND = [
    {"id": 1, "owner_id": 1, "author_id": 1, "tags": ["Work", "Café"], "keywords": ["beagle"],
     "timestamp": "2023-05-08T13:56:00", "metadata": {"n": 1, "kind": "Dog", "labels": ["a", 2, True, None]}},
    {"id": 2, "owner_id": 10, "author_id": 1, "tags": ["work"], "keywords": [],
     "timestamp": "2023-05-09T10:00:00+00:00", "metadata": {"n": 1.0, "kind": "dog", "flag": True}},
    {"id": 3, "owner_id": 10, "author_id": None, "tags": [], "keywords": ["Beagle puppy"],
     "timestamp": "2024-01-01T00:00:00", "metadata": {"n": True, "kind": None, "quote": 'it\'s "quoted"'}},
    {"id": 4, "owner_id": 2, "author_id": 2, "tags": ["CAFÉ"], "keywords": [],
     "timestamp": "2026-12-04T17:00:00+00:00", "metadata": {"n": "1", "score": 2.5}},
    {"id": 5, "owner_id": 2, "author_id": 2, "tags": ["café"], "keywords": [],
     "timestamp": "2023-05-08T13:56:00", "metadata": {}},
]
HAND_IDS = {note["id"] for note in HAND}
NOTES = HAND + [random_note(random.Random(SEED + i), 100 + i) for i in range(400)]

SQLITE_TABLE = """CREATE TABLE notes (id INTEGER PRIMARY KEY, owner_id INTEGER NOT NULL, author_id INTEGER,
    tags TEXT NOT NULL DEFAULT '[]', keywords TEXT NOT NULL DEFAULT '[]', timestamp TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}')"""
POSTGRES_TABLE = """CREATE TABLE notes (id bigint PRIMARY KEY, owner_id bigint NOT NULL, author_id bigint,
    tags text NOT NULL DEFAULT '[]', keywords text NOT NULL DEFAULT '[]', timestamp text NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{}')"""


def rows() -> list[tuple]:
    return [(n["id"], n["owner_id"], n["author_id"], json.dumps(n["tags"]), json.dumps(n["keywords"]),
             n["timestamp"], json.dumps(n["metadata"])) for n in NOTES]


class Store:
    """One table of NOTES on one dialect: the ids a filter's SQL selects there."""

    def __init__(self, dialect: str, conn: Any) -> None:
        self.dialect, self.conn = dialect, conn

    def ids(self, tree) -> set[int]:
        sql, params = compile_filter(tree, self.dialect)
        return {row[0] for row in self.conn.execute(f"SELECT id FROM notes WHERE {sql}", params).fetchall()}


@pytest.fixture(scope="module")
def sqlite_store():
    conn = sqlite3.connect(":memory:")
    conn.execute(SQLITE_TABLE)
    conn.executemany("INSERT INTO notes VALUES (?, ?, ?, ?, ?, ?, ?)", rows())
    yield Store("sqlite", conn)
    conn.close()


@pytest.fixture(scope="module")
def postgres_store(postgres_server):
    psycopg = pytest.importorskip("psycopg")
    url = create_database(postgres_server, "filters")
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(POSTGRES_TABLE)
            with conn.cursor() as cursor:
                cursor.executemany("INSERT INTO notes VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb)", rows())
            yield Store("postgres", conn)
    finally:
        drop_database(postgres_server, url)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request) -> Store:
    """The notes on SQLite, then on PostgreSQL (the session's server: this runs in the normal suite)."""
    return request.getfixturevalue(f"{request.param}_store")


def reference(tree) -> set[int]:
    return {note["id"] for note in NOTES if matches(tree, note)}


# --- the semantics, by hand -----------------------------------------------------------------------------------

HAND_CASES = [
    ({"metadata.n": 1}, {1, 2}),  # 1 == 1.0; True and "1" are no numbers
    ({"metadata.n": 1.0}, {1, 2}),
    ({"metadata.n": True}, {3}),
    ({"metadata.n": "1"}, {4}),
    ({"metadata.n": {"ne": 1}}, {3, 4, 5}),  # a missing key is "not equal"
    ({"metadata.n": None}, {5}),
    ({"metadata.kind": None}, {3, 4, 5}),  # JSON null or missing
    ({"metadata.kind": {"ne": None}}, {1, 2}),
    ({"metadata.labels": None}, {2, 3, 4, 5}),  # a list holding null is not null
    ({"metadata.labels": 2}, {1}),
    ({"metadata.labels": True}, {1}),
    ({"metadata.labels": {"in": ["a", 99]}}, {1}),
    ({"metadata.labels": {"nin": ["b"]}}, {1, 2, 3, 4, 5}),
    ({"metadata.n": {"gte": 1}}, {1, 2}),
    ({"metadata.n": {"gt": 0, "lt": 1}}, set()),
    ({"metadata.n": {"gt": "0"}}, {4}),  # strings against strings only
    ({"metadata.n": {"in": [True, "1"]}}, {3, 4}),
    ({"metadata.n": {"nin": [None, 1]}}, {3, 4}),
    ({"metadata.kind": {"contains": "Do"}}, {1}),
    ({"metadata.kind": {"icontains": "DO"}}, {1, 2}),
    ({"metadata.kind": {"gte": "a"}}, {2}),  # "Dog" < "a" < "dog" in code point order
    ({"metadata.score": {"gt": 2, "lte": 2.5}}, {4}),
    ({"metadata.quote": 'it\'s "quoted"'}, {3}),  # quotes are matched literally
    ({"metadata.quote": {"contains": '\'s "q'}}, {3}),
    ({"metadata.quote": "x' OR '1'='1"}, set()),
    ({"scope": None}, {1, 4, 5}),  # one's own notes
    ({"scope": 10}, {2, 3}),
    ({"scope": {"in": [11, None]}}, {1, 4, 5}),
    ({"author": None}, {3}),
    ({"author": 1}, {1, 2}),
    ({"author": {"nin": [1]}}, {3, 4, 5}),  # a NULL author is not in [1]
    ({"author": {"ne": None}}, {1, 2, 4, 5}),
    ({"author": {"in": [None, 2]}}, {3, 4, 5}),
    ({"tags": "work"}, {2}),
    ({"tags": {"ne": "work"}}, {1, 3, 4, 5}),
    ({"tags": {"in": ["Work", "CAFÉ"]}}, {1, 4}),
    ({"tags": {"contains": "af"}}, {1, 5}),  # "CAFÉ" has no "af"
    ({"tags": {"icontains": "CAF"}}, {1, 4, 5}),
    ({"tags": {"icontains": "café"}}, {1, 5}),  # É folds to nothing but itself: ASCII only
    ({"tags": {"icontains": "CAFÉ"}}, {4}),
    ({"tags": {"icontains": ""}}, {1, 2, 4, 5}),  # the empty string is in every tag, and no tag is none
    ({"keywords": {"icontains": "BEAGLE"}}, {1, 3}),
    ({"keywords": {"nin": ["beagle"]}}, {2, 3, 4, 5}),
    ({"timestamp": "2023-05-08T13:56:00"}, {1, 5}),
    ({"timestamp": {"gte": "2023-05-09", "lt": "2024"}}, {2}),
    ({"timestamp": {"lte": "2023-05-09T10:00:00"}}, {1, 5}),  # the stamp with an offset sorts after
    ({"timestamp": {"in": ["2024-01-01T00:00:00", "2026-12-04T17:00:00+00:00"]}}, {3, 4}),
    ({"NOT": [{"tags": "work"}, {"scope": 10}]}, {1, 3, 4, 5}),
    ({"NOT": {"author": None}}, {1, 2, 4, 5}),
    ({"OR": [{"metadata.score": {"gt": 2}}, {"author": None}]}, {3, 4}),
    ({"AND": [{"scope": None}, {"tags": {"icontains": "caf"}}], "timestamp": {"lt": "2024"}}, {1, 5}),
    ({"OR": [{"metadata.n": 1}, {"metadata.n": True}], "NOT": {"tags": "work"}}, {1, 3}),
]


@pytest.mark.parametrize(("raw", "expected"), HAND_CASES, ids=[json.dumps(c[0]) for c in HAND_CASES])
def test_hand_made_notes(store, raw, expected):
    tree = parse_filters(raw)
    assert {i for i in reference(tree) if i in HAND_IDS} == expected
    assert {i for i in store.ids(tree) if i in HAND_IDS} == expected


def test_timestamps_go_through_the_hook(store):
    tree = parse_filters({"timestamp": {"gte": "2023-05-09", "lt": "9:00 am on 1 January, 2024"}},
                         timestamp=parse_timestamp)
    assert tree == And((Condition("timestamp", "gte", "2023-05-09T00:00:00"),
                        Condition("timestamp", "lt", "2024-01-01T09:00:00")))
    assert {i for i in store.ids(tree) if i in HAND_IDS} == {2, 3}
    with pytest.raises(InvalidInputError, match="unreadable timestamp"):
        parse_filters({"timestamp": "yesterday-ish"}, timestamp=parse_timestamp)

    def fussy(text: str) -> str:
        raise ValueError("no")
    with pytest.raises(InvalidInputError, match='"timestamp" eq: unreadable timestamp'):
        parse_filters({"timestamp": "x"}, timestamp=fussy)


# --- every operator on every field, and random trees, against the reference -----------------------------------

def operand(rng: random.Random, kind: str, op: str) -> Any:
    """A random value of a field kind for an operator, often one the notes hold."""
    if op in ("in", "nin"):
        return [operand(rng, kind, "eq") for _ in range(rng.randint(1, 4))]
    if kind in ("scope", "author"):
        return rng.choice([*PEOPLE, *GROUPS, None, 99])
    if op in ("contains", "icontains"):
        return rng.choice(NEEDLES + STRINGS)
    if kind in ("tags", "keywords"):
        return rng.choice(WORDS)
    if kind == "timestamp":
        return rng.choice(BOUNDS)
    if op in ("gt", "gte", "lt", "lte"):
        value = random_scalar(rng)
        return value if isinstance(value, (str, int, float)) and not isinstance(value, bool) else rng.choice(INTS)
    return random_scalar(rng)


def kind_of(field: str) -> str:
    return "metadata" if field.startswith("metadata.") else field


EVERY = [(field, op) for field in [*FIELDS, "metadata.n", "metadata.labels"] for op in ALLOWED[kind_of(field)]]


@pytest.mark.parametrize(("field", "op"), EVERY, ids=[f"{f}-{o}" for f, o in EVERY])
def test_every_operator_matches_the_reference(store, field, op):
    rng = random.Random(f"{SEED}-{field}-{op}")
    seen = set()
    for _ in range(12):
        tree = parse_filters({field: {op: operand(rng, kind_of(field), op)}})
        expected = reference(tree)
        assert store.ids(tree) == expected, tree
        seen.add(len(expected))
    assert len(seen) > 1, f"{field} {op}: every value selected {seen} notes; the test data says nothing"


def random_filter(rng: random.Random, depth: int = 0) -> dict:
    """A random filter: objects of one or two fields, AND, OR, NOT of one or several, and mixes of both."""
    choice = rng.random()
    if depth >= 3 or choice < 0.35:
        filter_ = {}
        for _ in range(rng.choice([1, 1, 2])):
            field = rng.choice([*FIELDS, *(f"metadata.{k}" for k in METADATA_KEYS)])
            ops = rng.sample(ALLOWED[kind_of(field)], rng.choice([1, 1, 2]))
            spec = {op: operand(rng, kind_of(field), op) for op in ops}
            filter_[field] = spec["eq"] if list(spec) == ["eq"] and rng.random() < 0.5 else spec
        return filter_
    children = [random_filter(rng, depth + 1) for _ in range(rng.randint(1, 3 if depth < 2 else 2))]
    if choice < 0.55:
        return {"AND": children}
    if choice < 0.75:
        return {"OR": children}
    if choice < 0.9:
        return {"NOT": children if len(children) > 1 else children[0]}
    return {"OR": children, "NOT": random_filter(rng, depth + 1)}


def conditions(raw: dict) -> int:
    """How many field-operator pairs a raw filter holds."""
    count = 0
    for name, value in raw.items():
        if name in ("AND", "OR", "NOT"):
            count += sum(conditions(child) for child in (value if isinstance(value, list) else [value]))
        else:
            count += len(value) if isinstance(value, dict) else 1
    return count


@pytest.fixture(scope="module")
def random_cases() -> list[tuple[dict, Any, set[int]]]:
    """300 random filters within the bounds (raw, tree, the reference's ids), once for both stores; a filter of
    too many conditions is refused on the way."""
    rng = random.Random(SEED)
    cases = []
    while len(cases) < 300:
        raw = random_filter(rng)
        if conditions(raw) > MAX_CONDITIONS:
            with pytest.raises(InvalidInputError, match="conditions"):
                parse_filters(raw)
            continue
        tree = parse_filters(raw)
        assert matches(raw, NOTES[-1]) == matches(tree, NOTES[-1])  # the reference takes either
        cases.append((raw, tree, reference(tree)))
    assert sum(0 < len(ids) < len(NOTES) for _, _, ids in cases) > 150, \
        "most random filters should select some notes and not others"
    return cases


def test_random_filters_match_the_reference(store, random_cases):
    for raw, tree, expected in random_cases:
        assert store.ids(tree) == expected, raw


# --- the SQL itself ---------------------------------------------------------------------------------------------

def test_values_and_keys_travel_as_parameters():
    tree = parse_filters({"metadata.secret_key": {"in": ["x' OR 1=1 --", 7]}, "tags": {"icontains": 'a"b'},
                          "scope": 4242, "timestamp": {"gt": "2023-01-01"}})
    for dialect, mark, other in (("sqlite", "?", "%s"), ("postgres", "%s", "?")):
        sql, params = compile_filter(tree, dialect)
        for value in ("secret_key", "OR 1=1", 'a"b', "4242", "2023"):
            assert value not in sql
        assert sql.count(mark) == len(params) and other not in sql
    assert compile_filter(tree, "postgresql") == compile_filter(tree, "postgres")
    with pytest.raises(ValueError, match="dialect"):
        compile_filter(tree, "mysql")


def test_the_tree():
    assert parse_filters(None) is None and parse_filters({}) is None
    assert parse_filters({"tags": "a"}) == Condition("tags", "eq", "a")
    assert parse_filters({"metadata.k": {"in": [1, None]}}) == Condition("metadata", "in", (1, None), "k")
    assert parse_filters({"AND": [{"author": 1}], "OR": [{"scope": None}, {"scope": 10}]}) == And((
        Condition("author", "eq", 1), Or((Condition("scope", "eq", None), Condition("scope", "eq", 10)))))
    assert parse_filters({"NOT": [{"tags": "a"}, {"tags": "b"}]}) == Not(And((Condition("tags", "eq", "a"),
                                                                              Condition("tags", "eq", "b"))))
    assert parse_filters({"keywords": {"ne": "a", "contains": "b"}}) == And((Condition("keywords", "ne", "a"),
                                                                             Condition("keywords", "contains", "b")))
    assert set(OPERATORS) == set(ALLOWED["metadata"])


# --- refusals ---------------------------------------------------------------------------------------------------

def nested(depth: int) -> dict:
    filter_: dict = {"tags": "a"}
    for _ in range(depth - 1):
        filter_ = {"NOT": filter_}
    return filter_


BAD_FILTERS = [
    ([{"tags": "a"}], "filters must be a JSON object"),
    ("tags = a", "filters must be a JSON object"),
    ({"AND": []}, '"AND" takes a non-empty list'),
    ({"OR": {"tags": "a"}}, '"OR" takes a non-empty list of filter objects, got an object'),
    ({"NOT": []}, '"NOT" takes a filter object'),
    ({"AND": [{}]}, "an item of \"AND\" is an empty object"),
    ({"AND": ["tags"]}, "an item of \"AND\" must be a JSON object"),
    ({"and": [{"tags": "a"}]}, 'write "AND"'),
    ({"colour": "red"}, "unknown filter field 'colour': the fields are scope, author, tags, keywords, timestamp"),
    ({"metadata": {"eq": 1}}, "unknown filter field 'metadata'"),
    ({"metadata.": 1}, "a metadata key is 1 to 64 ASCII letters"),
    ({"metadata.x') OR 1=1 --": 1}, "a metadata key is"),
    ({"metadata.1abc": 1}, "a metadata key is"),
    ({"metadata." + "k" * 65: 1}, "a metadata key is"),
    ({"metadata.clé": 1}, "a metadata key is"),
    ({"tags": {"has": "a"}}, "unknown operator 'has'"),
    ({"metadata.k": {"a": 1, "b": 2}}, "an object value maps operators to values"),
    ({"tags": {}}, "empty operator object"),
    ({"tags": {"gt": "a"}}, '"tags" does not take "gt"; it takes eq, ne, in, nin, contains, icontains'),
    ({"scope": {"contains": "1"}}, '"scope" does not take "contains"'),
    ({"author": {"lt": 3}}, '"author" does not take "lt"'),
    ({"timestamp": {"contains": "2023"}}, '"timestamp" does not take "contains"'),
    ({"scope": True}, "takes a group id (an integer) or null, got True"),
    ({"author": "1"}, "takes an identity id (an integer) or null"),
    ({"author": 1.0}, "takes an identity id"),
    ({"author": 2**63}, "takes an identity id"),
    ({"tags": 1}, '"tags" eq takes a string, got a number'),
    ({"tags": None}, '"tags" eq takes a string, got null'),
    ({"tags": ["a", "b"]}, "takes a string, got a list"),
    ({"metadata.k": ["a", "b"]}, 'use "in" for several values'),
    ({"metadata.k": {"eq": {"x": 1}}}, "takes a string, number, boolean or null, got an object"),
    ({"metadata.k": {"gt": True}}, '"metadata.k" gt takes a number or a string, got a boolean'),
    ({"metadata.k": {"lte": None}}, "takes a number or a string, got null"),
    ({"metadata.k": {"contains": 1}}, "contains takes a string, got a number"),
    ({"metadata.k": {"icontains": None}}, "icontains takes a string, got null"),
    ({"metadata.k": float("nan")}, "numbers must be finite"),
    ({"metadata.k": float("inf")}, "numbers must be finite"),
    ({"metadata.k": 2**53}, "below 2**53"),
    ({"metadata.k": {"in": []}}, "takes a non-empty list of values, got an empty list"),
    ({"metadata.k": {"nin": "a"}}, "takes a non-empty list of values, got a string"),
    ({"metadata.k": {"in": list(range(101))}}, "a list of 101 values; at most 100"),
    ({"metadata.k": {"in": [[1]]}}, "got a list"),
    ({"tags": "x" * 501}, "a string of 501 characters; at most 500"),
    ({"tags": "a\x00b"}, "NUL"),
    ({"tags": "\ud800"}, "lone surrogate"),
    (nested(MAX_DEPTH + 1), f"at most {MAX_DEPTH} objects deep"),
    ({"OR": [{"tags": str(i)} for i in range(MAX_CONDITIONS + 1)]}, f"at most {MAX_CONDITIONS} conditions"),
    ({"metadata.k": {op: 1 for op in ("eq", "ne", "gt", "gte")},
      "AND": [{"metadata.k": {"lt": i}} for i in range(MAX_CONDITIONS - 3)]}, "at most 64 conditions"),
]


@pytest.mark.parametrize(("raw", "message"), BAD_FILTERS, ids=[str(i) for i in range(len(BAD_FILTERS))])
def test_bad_filters_are_refused(raw, message):
    with pytest.raises(InvalidInputError) as caught:
        parse_filters(raw)
    assert message in str(caught.value)


def test_bounds_are_inclusive():
    assert parse_filters(nested(MAX_DEPTH)) is not None
    assert parse_filters({"OR": [{"tags": str(i)} for i in range(MAX_CONDITIONS)]}) is not None
    assert parse_filters({"metadata.k": {"in": list(range(100))}, "tags": "x" * 500}) is not None
    assert parse_filters({"metadata.k": -(2**53 - 1), "scope": -(2**63), "author": 2**63 - 1}) is not None


def test_check_metadata_copies_a_good_object():
    assert check_metadata(None) == {}
    given = {"kind": "Dog", "n": 3, "score": 0.5, "flag": False, "gone": None, "labels": ["a", 1, True, None],
             "_x9": (1, 2)}
    checked = check_metadata(given)
    assert checked == {**given, "_x9": [1, 2]}
    assert checked is not given and checked["labels"] is not given["labels"]
    check_metadata({f"k{i}": "x" * 100 for i in range(32)})  # 32 keys, under 4096 bytes
    assert str(check_metadata({"z": -0.0})["z"]) == "0.0"  # as PostgreSQL's jsonb gives it back


BAD_METADATA = [
    ([1, 2], "metadata must be a JSON object of key -> value, got a list"),
    ("colour=red", "got a string"),
    ({f"k{i}": 1 for i in range(33)}, "metadata has 33 keys; at most 32"),
    ({"": 1}, "metadata key '' is not allowed: a key is 1 to 64 ASCII letters"),
    ({"a-b": 1}, "metadata key 'a-b' is not allowed"),
    ({"x') OR 1=1 --": 1}, "is not allowed"),
    ({1: 1}, "metadata key 1 is not allowed"),
    ({"k": {"a": 1}}, "metadata 'k': values are strings, numbers, booleans, null or lists of those (not nested)"),
    ({"k": [[1]]}, "metadata 'k' (in its list): values are strings"),
    ({"k": list(range(33))}, "a list of 33 values; at most 32"),
    ({"k": "x" * 501}, "a string of 501 characters; at most 500"),
    ({"k": "a\x00"}, "NUL"),
    ({"k": 2**53}, "below 2**53"),
    ({"k": [-(2**60)]}, "below 2**53"),
    ({"k": 1e16}, "below 2**53"),  # PostgreSQL's jsonb would give it back as an integer
    ({"k": float("nan")}, "finite"),
    ({"k": b"bytes"}, "got bytes"),
    ({f"k{i}": "x" * 400 for i in range(11)}, "bytes as JSON; at most 4096"),
]


@pytest.mark.parametrize(("metadata", "message"), BAD_METADATA, ids=[str(i) for i in range(len(BAD_METADATA))])
def test_bad_metadata_is_refused(metadata, message):
    with pytest.raises(InvalidInputError) as caught:
        check_metadata(metadata)
    assert message in str(caught.value)
