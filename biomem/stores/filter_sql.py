"""A filter tree (biomem.stores.filters) as one boolean SQL expression over the columns of `notes`, in SQLite's
dialect ('?', JSON1) or PostgreSQL's ('%s', jsonb), every value a parameter and every metadata key a JSON path
parameter, never text of the statement. The semantics both dialects keep are filters.py's."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .filters import ASCII_UPPER, COMPARISONS, And, Condition, Filter, Not, Or, Sql, fold


def _join(separator: str, fragments: Sequence[Sql]) -> Sql:
    """Fragments joined by AND or OR, in parentheses when there are several."""
    if len(fragments) == 1:
        return fragments[0]
    return (f"({f' {separator} '.join(sql for sql, _ in fragments)})",
            [param for _, params in fragments for param in params])


class _Compiler:
    """The SQL of one dialect: '?' and SQLite's JSON1 functions, or '%s' and PostgreSQL's jsonb."""

    def __init__(self, dialect: str) -> None:
        if dialect == "sqlite":
            self.pg = False
        elif dialect in ("postgres", "postgresql"):
            self.pg = True
        else:
            raise ValueError(f"unknown SQL dialect {dialect!r}: 'sqlite' or 'postgres'")
        self.mark = "%s" if self.pg else "?"

    def marks(self, count: int, cast: str = "") -> str:
        return ", ".join([self.mark + cast] * count)

    def node(self, tree: Filter) -> Sql:
        if isinstance(tree, And):
            return _join("AND", [self.node(part) for part in tree.parts])
        if isinstance(tree, Or):
            return _join("OR", [self.node(part) for part in tree.parts])
        if isinstance(tree, Not):
            sql, params = self.node(tree.part)
            return f"(NOT {sql})", params
        if isinstance(tree, Condition):
            if tree.op in ("ne", "nin"):
                sql, params = self.condition(tree.field, "eq" if tree.op == "ne" else "in", tree.value, tree.key)
                return f"(NOT {sql})", params
            return self.condition(tree.field, tree.op, tree.value, tree.key)
        raise TypeError(f"not a filter tree: {tree!r}")

    def condition(self, field: str, op: str, value: Any, key: str | None) -> Sql:
        """A condition of a positive operator (eq, in, gt..lte, contains, icontains): always true or false."""
        values = list(value) if op == "in" else [value]
        if field in ("scope", "author", "timestamp"):
            column = {"scope": "NULLIF(owner_id, author_id)", "author": "author_id", "timestamp": "timestamp"}[field]
            if op in COMPARISONS:
                collated = f'{column} COLLATE "C"' if self.pg else column
                return f"({column} IS NOT NULL AND {collated} {COMPARISONS[op]} {self.mark})", [value]
            known = [v for v in values if v is not None]
            fragments: list[Sql] = []
            if known:
                test = f"= {self.mark}" if len(known) == 1 else f"IN ({self.marks(len(known))})"
                fragments.append((f"({column} IS NOT NULL AND {column} {test})", known))
            if None in values:
                fragments.append((f"({column} IS NULL)", []))
            return _join("OR", fragments)
        fragments = []
        if op in ("eq", "in") and None in values:  # only metadata takes null
            if self.pg:
                fragments.append(("(COALESCE(jsonb_typeof(metadata -> %s::text), 'null') = 'null')", [key]))
            else:
                fragments.append(("(COALESCE(json_type(metadata, ?), 'null') = 'null')", [f"$.{key}"]))
            values = [v for v in values if v is not None]
        if values:
            fragments.append(self.elements(field, key, self.element_test(op, values)))
        return _join("OR", fragments)

    def elements(self, field: str, key: str | None, test: Sql) -> Sql:
        """EXISTS an element of the field's value passing `test`: each element of a list, or the scalar itself;
        none for a missing key (e.v is the element in PostgreSQL, e.type and e.value in SQLite)."""
        sql, params = test
        if field != "metadata":
            source = f"jsonb_array_elements({field}::jsonb) AS e(v)" if self.pg else f"json_each({field}) AS e"
            return f"EXISTS (SELECT 1 FROM {source} WHERE {sql})", params
        if self.pg:  # lax mode: a scalar is its own single element, a missing key none
            return (f"EXISTS (SELECT 1 FROM jsonb_path_query(metadata, %s::jsonpath) AS e(v) WHERE {sql})",
                    [f'$."{key}"[*]', *params])
        # json_each on a scalar yields it (key NULL), on a list its elements (integer keys); an object's members
        # (text keys) are not elements, as in PostgreSQL's lax path
        return (f"EXISTS (SELECT 1 FROM json_each(metadata, ?) AS e WHERE typeof(e.key) <> 'text' AND {sql})",
                [f"$.{key}", *params])

    def element_test(self, op: str, values: list[Any]) -> Sql:
        """The test of one element `e` for an operator and its non-null values."""
        if op in ("contains", "icontains"):
            needle = values[0] if op == "contains" else fold(values[0])
            if self.pg:
                text = "e.v #>> '{}'"
                if op == "icontains":
                    text = f"translate({text}, '{ASCII_UPPER}', '{ASCII_UPPER.lower()}')"
                return f"(jsonb_typeof(e.v) = 'string' AND strpos({text}, %s) > 0)", [needle]
            text = "e.value" if op == "contains" else "lower(e.value)"
            return f"(e.type = 'text' AND instr({text}, ?) > 0)", [needle]
        if op in COMPARISONS:
            (value,) = values
            sign = COMPARISONS[op]
            if isinstance(value, str):
                if self.pg:
                    return f"""(jsonb_typeof(e.v) = 'string' AND (e.v #>> '{{}}') COLLATE "C" {sign} %s)""", [value]
                return f"(e.type = 'text' AND e.value {sign} ?)", [value]
            if self.pg:
                return f"(jsonb_typeof(e.v) = 'number' AND e.v {sign} %s::jsonb)", [json.dumps(value)]
            return f"(e.type IN ('integer', 'real') AND e.value {sign} ?)", [value]
        if self.pg:  # jsonb equality: same type, numbers numerically, strings byte for byte
            test = "= %s::jsonb" if len(values) == 1 else f"IN ({self.marks(len(values), '::jsonb')})"
            return f"(e.v {test})", [json.dumps(v) for v in values]
        strings = [v for v in values if isinstance(v, str)]
        numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        booleans = sorted({"true" if v else "false" for v in values if isinstance(v, bool)})
        fragments: list[Sql] = []
        for kinds, group in (("'text'", strings), ("'integer', 'real'", numbers)):
            if group:
                test = "= ?" if len(group) == 1 else f"IN ({self.marks(len(group))})"
                fragments.append((f"(e.type IN ({kinds}) AND e.value {test})", group))
        if booleans:
            fragments.append((f"(e.type IN ({', '.join(repr(b) for b in booleans)}))", []))
        return _join("OR", fragments)


def compile_filter(tree: Filter, dialect: str) -> tuple[str, list[Any]]:
    """A boolean SQL expression and its positional parameters: '?' placeholders for 'sqlite', '%s' for 'postgres'."""
    return _Compiler(dialect).node(tree)
