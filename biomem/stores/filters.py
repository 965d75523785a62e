"""Mem0-style metadata filters: an API caller's `filters` validated into a small tree, which biomem.stores.filter_sql
compiles into one boolean SQL expression over the columns of `notes`, for SQLite and for PostgreSQL, with every
value a parameter.

The engine ANDs the expression into its per-owner search (`... WHERE owner_id = ANY(...) AND (<expr>)`), so a
filter only narrows what the gate admitted; it never widens it.

Grammar (https://docs.mem0.ai, "metadata filtering"): a filter is a JSON object whose keys are ANDed. A key is
a logical operator, `"AND": [f, ...]`, `"OR": [f, ...]` (non-empty lists), `"NOT": f` or `"NOT": [f, ...]` (not
of their AND), or a field: `"<field>": value` (shorthand for `{"eq": value}`) or `"<field>": {"op": value, ...}`
(the operators ANDed). Fields and the operators each takes:

    scope          NULLIF(owner_id, author_id): a group's id for a group note, null for one's own note
                   eq ne in nin (integers or null)
    author         author_id (null for an operator's import into a group)          eq ne in nin (integers or null)
    tags, keywords the JSON arrays of strings      eq ne in nin contains icontains (strings, tested on each element)
    timestamp      the ISO 8601 text                             eq ne gt gte lt lte in nin (strings)
    metadata.<key> one key of the note's metadata object           every operator

Semantics, identical on both stores and in the reference evaluator of the tests (tests/filter_reference.py):

- Every condition is true or false, never SQL NULL, so NOT, ne and nin are exact complements: a missing
  metadata key is "not equal" to anything but null, and `nin` keeps it.
- eq v: the same JSON type and equal. Numbers compare numerically (1 == 1.0) and a boolean is not a number;
  strings compare code point by code point. null matches a missing key or a JSON null (metadata), NULL (scope,
  author), and never an element of a list. On a list (tags, keywords, a metadata list) some element must equal v.
- gt, gte, lt, lte v (a number or a string): true only when the value is of the same kind and compares so;
  strings compare by code point (PostgreSQL with COLLATE "C", SQLite's BINARY, Python's str order: all three
  are the order of UTF-8 bytes), numbers exactly. A missing key, null or another type is false. On a metadata
  list: some element compares so.
- in [v, ...]: eq any of them; nin: not in. contains s: the value is a string that contains s (on a list:
  some element does); the empty string is in every string.
- icontains folds ASCII letters A-Z only, on both sides, in every store: PostgreSQL's lower() follows the
  database's ctype and SQLite's ASCII-only lower() would disagree on "É", so PostgreSQL uses translate() over
  A-Z and SQLite its built-in lower() (ASCII-only: a SQLite that loaded the ICU extension would fold more).
  "CAFÉ" icontains "café" is false, "Café" icontains "CAFÉ" is false, "Beagle" icontains "bEAG" is true.
- timestamp values go through the `timestamp` hook of parse_filters (the engine passes its ISO parser, so
  "2023-05-08" becomes "2023-05-08T00:00:00") and compare with the stored ISO text as text: a UTC offset is
  not applied ("...T17:00:00+02:00" sorts by its text) and a stamp with an offset sorts just after the same
  stamp without one. contains is not offered on timestamps: gte/lt give a day, a month or a year.

Bounds (InvalidInputError): nesting depth at most 8 filter objects, at most 64 conditions, strings of at most
500 characters (no NUL, valid Unicode), in/nin lists of 1 to 100 values, integers below 2**53 in magnitude
(metadata) or within 64 bits (ids), finite floats. Metadata keys, in filters and in notes, match
KEY_PATTERN; a key reaches the SQL only as a parameter (a JSON path), never as text of the statement.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInputError

FIELDS = ("scope", "author", "tags", "keywords", "timestamp")  # plus "metadata.<key>"
OPERATORS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "icontains")
LOGICAL = ("AND", "OR", "NOT")
KEY_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")  # a metadata key (fullmatch)

MAX_DEPTH = 8  # nested filter objects, the outermost counting 1
MAX_CONDITIONS = 64  # field-operator pairs in one filter
MAX_STRING = 500  # characters of a string value, in a filter or in metadata
MAX_VALUES = 100  # values of one in/nin list
MAX_METADATA_KEYS = 32
MAX_METADATA_LIST = 32  # elements of one metadata list
MAX_METADATA_BYTES = 4096  # the metadata object as compact UTF-8 JSON
MAX_NUMBER = 2**53  # |int| < 2**53 in metadata and metadata filters: exact in a double, in JSON and in both stores
MAX_ID = 2**63  # ids are 64-bit integers

_IDS_OPS = ("eq", "ne", "in", "nin")
_LIST_OPS = ("eq", "ne", "in", "nin", "contains", "icontains")
ALLOWED = {"scope": _IDS_OPS, "author": _IDS_OPS, "tags": _LIST_OPS, "keywords": _LIST_OPS,
           "timestamp": ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin"), "metadata": OPERATORS}
COMPARISONS = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
ASCII_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
ASCII_FOLD = str.maketrans(ASCII_UPPER, ASCII_UPPER.lower())
_FIELD_LIST = "scope, author, tags, keywords, timestamp and metadata.<key>"
_KEY_RULE = "1 to 64 ASCII letters, digits or underscores, not starting with a digit"


@dataclass(frozen=True)
class Condition:
    """One test of one field: `field` is one of FIELDS or "metadata" (then `key` names the key); `value` is a
    scalar, or a tuple of scalars for in/nin (timestamps already normalised, icontains' needle as given)."""

    field: str
    op: str
    value: Any
    key: str | None = None


@dataclass(frozen=True)
class And:
    """True when every part is (two or more parts)."""

    parts: tuple[Filter, ...]


@dataclass(frozen=True)
class Or:
    """True when some part is (two or more parts)."""

    parts: tuple[Filter, ...]


@dataclass(frozen=True)
class Not:
    """True when its part is false."""

    part: Filter


Filter = Condition | And | Or | Not


def fold(text: str) -> str:
    """`text` with ASCII letters lower-cased and every other character kept: icontains' folding, the same in
    both stores whatever their locale."""
    return text.translate(ASCII_FOLD)


def _show(value: Any) -> str:
    """A value for a message, cut short: a caller's mistake is quoted, not echoed at any length."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    """The JSON name of a value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _check_string(value: str, where: str) -> str:
    """`value` if it is a string both stores can hold and compare: at most MAX_STRING characters, no NUL, no
    lone surrogate."""
    if len(value) > MAX_STRING:
        raise InvalidInputError(f"{where}: a string of {len(value)} characters; at most {MAX_STRING}")
    if "\x00" in value:
        raise InvalidInputError(f"{where}: a string may not contain the NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"{where}: the string is not valid Unicode (a lone surrogate)") from None
    return value


def _check_number(value: int | float, where: str) -> int | float:
    """`value` if it is a number below 2**53 in magnitude (a float finite, -0.0 as 0.0): what both stores keep
    exactly and write back alike (PostgreSQL's jsonb would print 1e16 as an integer and -0.0 as 0)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInputError(f"{where}: numbers must be finite, got {value!r}")
    if not -MAX_NUMBER < value < MAX_NUMBER:
        raise InvalidInputError(f"{where}: numbers must be below 2**53 in magnitude, got {_show(value)}")
    return value + 0.0 if isinstance(value, float) else value


def _metadata_scalar(value: Any, where: str) -> Any:
    """A metadata scalar checked: a string, number, boolean or null."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return _check_number(value, where)
    if isinstance(value, str):
        return _check_string(value, where)
    raise InvalidInputError(f"{where}: values are strings, numbers, booleans, null or lists of those (not nested), "
                            f"got {_kind(value)}")


def check_metadata(metadata: Any) -> dict[str, Any]:
    """A note's metadata, validated and copied (None -> {}); InvalidInputError with a clear message otherwise."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise InvalidInputError(f"metadata must be a JSON object of key -> value, got {_kind(metadata)}")
    if len(metadata) > MAX_METADATA_KEYS:
        raise InvalidInputError(f"metadata has {len(metadata)} keys; at most {MAX_METADATA_KEYS}")
    checked: dict[str, Any] = {}
    for key, value in metadata.items():
        if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key):
            raise InvalidInputError(f"metadata key {_show(key)} is not allowed: a key is {_KEY_RULE}")
        where = f"metadata {key!r}"
        if isinstance(value, (list, tuple)):
            if len(value) > MAX_METADATA_LIST:
                raise InvalidInputError(f"{where}: a list of {len(value)} values; at most {MAX_METADATA_LIST}")
            checked[key] = [_metadata_scalar(item, f"{where} (in its list)") for item in value]
        else:
            checked[key] = _metadata_scalar(value, where)
    size = len(json.dumps(checked, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise InvalidInputError(f"metadata takes {size} bytes as JSON; at most {MAX_METADATA_BYTES}: "
                                "keep it to short labels and numbers")
    return checked


class _Parser:
    """One filter's parse: the hook for timestamps and the count of conditions so far."""

    def __init__(self, timestamp: Callable[[str], str]) -> None:
        self.timestamp = timestamp
        self.conditions = 0

    def node(self, raw: Any, depth: int, where: str) -> Filter:
        """The tree of one filter object (`where` names it in messages)."""
        if not isinstance(raw, dict):
            raise InvalidInputError(f"{where} must be a JSON object such as {{\"tags\": \"work\"}}, "
                                    f"got {_kind(raw)}")
        if not raw:
            raise InvalidInputError(f"{where} is an empty object: give it a condition, or leave it out")
        if depth > MAX_DEPTH:
            raise InvalidInputError(f"filters nest at most {MAX_DEPTH} objects deep")
        parts: list[Filter] = []
        for name, value in raw.items():
            if name in ("AND", "OR"):
                if not isinstance(value, (list, tuple)) or not value:
                    got = "an empty list" if isinstance(value, (list, tuple)) else _kind(value)
                    raise InvalidInputError(f'"{name}" takes a non-empty list of filter objects, got {got}')
                children = tuple(self.node(child, depth + 1, f'an item of "{name}"') for child in value)
                parts.append(children[0] if len(children) == 1 else (And if name == "AND" else Or)(children))
            elif name == "NOT":
                items = value if isinstance(value, (list, tuple)) else [value]
                if not items:
                    raise InvalidInputError('"NOT" takes a filter object or a non-empty list of them')
                children = tuple(self.node(child, depth + 1, '"NOT"' if items is not value else 'an item of "NOT"')
                                 for child in items)
                parts.append(Not(children[0] if len(children) == 1 else And(children)))
            elif isinstance(name, str) and name.upper() in LOGICAL:
                raise InvalidInputError(f'logical operators are upper case: write "{name.upper()}", not "{name}"')
            else:
                parts.extend(self.field(name, value))
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def field(self, name: Any, value: Any) -> list[Condition]:
        """The conditions of one `"<field>": value` entry."""
        if not isinstance(name, str):
            raise InvalidInputError(f"filter keys are strings, got {_show(name)}")
        if name in FIELDS:
            field, key = name, None
        elif name.startswith("metadata."):
            field, key = "metadata", name[len("metadata."):]
            if not KEY_PATTERN.fullmatch(key):
                raise InvalidInputError(f"filter field {_show(name)}: a metadata key is {_KEY_RULE}")
        else:
            raise InvalidInputError(f"unknown filter field {_show(name)}: the fields are {_FIELD_LIST}, "
                                    "and the logical operators AND, OR, NOT")
        if isinstance(value, dict):
            if not value:
                raise InvalidInputError(f'"{name}" has an empty operator object: give one of {", ".join(OPERATORS)}')
            for op in value:
                if op not in OPERATORS:
                    raise InvalidInputError(f'"{name}": unknown operator {_show(op)} (an object value maps '
                                            f'operators to values); the operators are {", ".join(OPERATORS)}')
            items = list(value.items())
        else:
            items = [("eq", value)]
        conditions = []
        for op, operand in items:
            if op not in ALLOWED[field]:
                raise InvalidInputError(f'"{name}" does not take "{op}"; it takes {", ".join(ALLOWED[field])}')
            self.conditions += 1
            if self.conditions > MAX_CONDITIONS:
                raise InvalidInputError(f"a filter has at most {MAX_CONDITIONS} conditions")
            conditions.append(Condition(field, op, self.operand(name, field, op, operand), key))
        return conditions

    def operand(self, name: str, field: str, op: str, value: Any) -> Any:
        """The checked value of one operator: a scalar, or a tuple for in/nin."""
        where = f'"{name}" {op}'
        if op in ("in", "nin"):
            if not isinstance(value, (list, tuple)) or not value:
                raise InvalidInputError(f"{where} takes a non-empty list of values, got "
                                        + ("an empty list" if isinstance(value, (list, tuple)) else _kind(value)))
            if len(value) > MAX_VALUES:
                raise InvalidInputError(f"{where}: a list of {len(value)} values; at most {MAX_VALUES}")
            return tuple(self.scalar(where, field, op, item) for item in value)
        return self.scalar(where, field, op, value)

    def scalar(self, where: str, field: str, op: str, value: Any) -> Any:
        """One checked value of `field` for `op`."""
        if field in ("scope", "author"):
            if value is None or (isinstance(value, int) and not isinstance(value, bool) and -MAX_ID <= value < MAX_ID):
                return value
            what = "a group id" if field == "scope" else "an identity id"
            raise InvalidInputError(f"{where} takes {what} (an integer) or null, got {_show(value)}")
        if field in ("tags", "keywords", "timestamp") or op in ("contains", "icontains"):
            if not isinstance(value, str):
                raise InvalidInputError(f"{where} takes a string, got {_kind(value)}")
            value = _check_string(value, where)
            return self.moment(where, value) if field == "timestamp" else value
        if op in COMPARISONS:  # metadata
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise InvalidInputError(f"{where} takes a number or a string, got {_kind(value)}")
        elif isinstance(value, (list, tuple, dict)):
            raise InvalidInputError(f"{where} takes a string, number, boolean or null, got {_kind(value)}"
                                    + ('; use "in" for several values' if op in ("eq", "ne") and
                                       isinstance(value, (list, tuple)) else ""))
        return _metadata_scalar(value, where)

    def moment(self, where: str, value: str) -> str:
        """A timestamp value normalised by the hook (the engine's ISO parser)."""
        try:
            moment = self.timestamp(value)
        except InvalidInputError as exc:
            raise InvalidInputError(f"{where}: {exc}") from exc
        except (ValueError, TypeError) as exc:
            raise InvalidInputError(f"{where}: unreadable timestamp {_show(value)} ({exc})") from exc
        if not isinstance(moment, str):
            raise InvalidInputError(f"{where}: unreadable timestamp {_show(value)}")
        return _check_string(moment, where)


def parse_filters(filters: Any, *, timestamp: Callable[[str], str] = lambda s: s) -> Filter | None:
    """The validated filter tree of an API caller's `filters` (None or {} -> None). `timestamp` normalises
    timestamp values (the engine passes its ISO parser)."""
    if filters is None or (isinstance(filters, dict) and not filters):
        return None
    return _Parser(timestamp).node(filters, 1, "filters")


Sql = tuple[str, list[Any]]  # a fragment of SQL and its parameters, in order
