"""A brute-force Python evaluator of biomem.stores.filters' trees: what each condition means, written out
plainly over a note dict, for the tests to compare with the SQL both stores run. Tests only."""

from __future__ import annotations

from typing import Any

from biomem.stores.filters import And, Condition, Filter, Not, Or, parse_filters

MISSING = object()  # a metadata key the note does not have


def ascii_lower(text: str) -> str:
    """A-Z to a-z, every other character as is: icontains' folding."""
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def same(element: Any, wanted: Any) -> bool:
    """eq on one element: the same JSON type and equal (numbers numerically; a boolean is no number)."""
    if isinstance(wanted, bool) or isinstance(element, bool):
        return isinstance(wanted, bool) and isinstance(element, bool) and element == wanted
    if is_number(wanted):
        return is_number(element) and element == wanted
    if isinstance(wanted, str):
        return isinstance(element, str) and element == wanted
    raise AssertionError(f"no element test for {wanted!r}")


def compares(element: Any, op: str, bound: Any) -> bool:
    """gt/gte/lt/lte on one element: only a string against a string, a number against a number."""
    if isinstance(bound, str):
        if not isinstance(element, str):
            return False
    elif not is_number(element):
        return False
    return {"gt": element > bound, "gte": element >= bound, "lt": element < bound, "lte": element <= bound}[op]


def element_matches(element: Any, op: str, value: Any) -> bool:
    if op == "eq":
        return same(element, value)
    if op in ("gt", "gte", "lt", "lte"):
        return compares(element, op, value)
    if op == "contains":
        return isinstance(element, str) and value in element
    if op == "icontains":
        return isinstance(element, str) and ascii_lower(value) in ascii_lower(element)
    raise AssertionError(op)


def condition(cond: Condition, note: dict) -> bool:
    op, value = cond.op, cond.value
    if op == "ne":
        return not condition(Condition(cond.field, "eq", value, cond.key), note)
    if op == "nin":
        return not condition(Condition(cond.field, "in", value, cond.key), note)
    if op == "in":
        return any(condition(Condition(cond.field, "eq", v, cond.key), note) for v in value)
    if cond.field in ("scope", "author"):
        if cond.field == "scope":
            actual = None if note["owner_id"] == note["author_id"] else note["owner_id"]
        else:
            actual = note["author_id"]
        assert op == "eq"
        return actual is None if value is None else actual == value
    if cond.field == "timestamp":
        stamp = note["timestamp"]
        return stamp == value if op == "eq" else compares(stamp, op, value)
    if cond.field in ("tags", "keywords"):
        return any(element_matches(tag, op, value) for tag in note[cond.field])
    assert cond.field == "metadata"
    actual = note["metadata"].get(cond.key, MISSING)
    if value is None:
        assert op == "eq"
        return actual is MISSING or actual is None
    elements = [] if actual is MISSING else actual if isinstance(actual, list) else [actual]
    return any(element_matches(element, op, value) for element in elements)


def evaluate(tree: Filter, note: dict) -> bool:
    if isinstance(tree, And):
        return all(evaluate(part, note) for part in tree.parts)
    if isinstance(tree, Or):
        return any(evaluate(part, note) for part in tree.parts)
    if isinstance(tree, Not):
        return not evaluate(tree.part, note)
    return condition(tree, note)


def matches(tree_or_raw_filter: Filter | dict | None, note: dict) -> bool:
    """Whether `note` (owner_id, author_id, tags, keywords, timestamp, metadata) passes a filter tree or a raw
    filter (parsed first; None or {} passes every note)."""
    tree = tree_or_raw_filter
    if not isinstance(tree, (Condition, And, Or, Not)):
        tree = parse_filters(tree)
    return True if tree is None else evaluate(tree, note)
