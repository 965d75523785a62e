"""Inputs nobody typed, generated: hypothesis fuzzes the JSON body of every REST route and the arguments of
every MCP tool of a running `biomem serve`, and every answer is a typed 4xx or a success — never a 5xx, a
dropped connection or a logged traceback — and a refusal writes nothing to the store.

The routes come from the served OpenAPI document and the tools from the served tools/list, so a new route
or tool is fuzzed without touching this file. Values follow each field's schema or are any JSON at all (NaN
and Infinity included), objects gain unknown keys such as `user_id`, bodies are sometimes nested far past
any sane depth or not JSON; a probe is sometimes a real photo of an enrolled person, and a request
sometimes carries a live session, so the fuzzing reaches the engine behind the validation too.

    python -m pytest tests/test_fuzz.py -s --hypothesis-show-statistics   # prints the cases run per route
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import logging
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from biomem import BioMemory, Probe
from biomem.engine.demo import build_demo, demo_capture
from biomem.engine.keys import create_key
from biomem.errors import UnknownIdentityError
from biomem.stores.base import TABLES

from .shared import ANA, Tracebacks, rest_service

SESSION = "X-Biomem-Session"
settings.register_profile(
    "fuzz", max_examples=40, derandomize=True, database=None, deadline=None, print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FUZZ = settings.get_profile("fuzz")


def jpeg(image: Any) -> str:
    """An RGB array as base64 JPEG (small, so a failing example stays readable)."""
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=90)
    return base64.b64encode(buffer.getvalue()).decode()


def digest(mem: BioMemory) -> str:
    """Every row of every table of the store: a refusal must leave it as it was."""
    hashed = hashlib.sha256()
    for table in TABLES:
        for row in mem.store.export_rows(table):
            hashed.update(repr(row).encode())
    return hashed.hexdigest()


@pytest.fixture(scope="module")
def target(tmp_path_factory, text_encoder, face_encoder) -> Iterator[SimpleNamespace]:
    """The demo store served as `biomem serve` serves it, with an agent and an admin key; tracebacks
    logged while it runs are collected."""
    mem = BioMemory(tmp_path_factory.mktemp("fuzz") / "f.db", text_model=text_encoder, encoder=face_encoder,
                    limits="off")
    build_demo(mem)
    keys = {role: create_key(mem.store, role, role) for role in ("agent", "admin")}
    handler = Tracebacks()
    loggers = [logging.getLogger(), logging.getLogger("uvicorn")]
    with rest_service(mem, ui=False, timeout=120) as (_, http):
        for logger in loggers:
            logger.addHandler(handler)
        try:
            yield SimpleNamespace(
                mem=mem, http=http, keys=keys, tracebacks=handler.records,
                photo=jpeg(demo_capture(ANA, 1)),
                probe=Probe(face_encoder.encode(demo_capture(ANA, 0)), face_encoder.name))
        finally:
            for logger in loggers:
                logger.removeHandler(handler)
    mem.close()


# ---- values from a JSON schema, and values that break it ---------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
TEXT = st.text(st.characters(exclude_categories=()), max_size=40)  # NUL, controls, lone surrogates too
TIDY_TEXT = st.characters(exclude_categories=("Cs", "Cc"))  # what a form would send
UNKNOWN = st.dictionaries(st.sampled_from(["user_id", "agent_id", "run_id", "owner"]) | st.text(max_size=8),
                          JSON_VALUES, max_size=2)  # fields no route takes


def from_schema(schema: dict[str, Any], defs: dict[str, Any], photo: str) -> st.SearchStrategy[Any]:
    """Values for `schema`: a documented example with one field changed, ones that follow the schema, ones
    that break it anywhere (any JSON in a field's place, unknown keys, text with controls, numbers past the
    bounds)."""
    schema = defs[schema["$ref"].rsplit("/", 1)[-1]] if "$ref" in schema else schema
    return st.one_of(edited(schema, defs, photo), Schema(defs, photo, tidy=True).values(schema),
                     Schema(defs, photo, tidy=False).values(schema))


def edited(schema: dict[str, Any], defs: dict[str, Any], photo: str) -> st.SearchStrategy[dict[str, Any]]:
    """One of the schema's examples, its image a real photo, with one field (maybe) set to anything."""
    examples = [with_photo(example, photo) for example in schema.get("examples", [])]
    if not examples:
        return st.nothing()
    fields = schema.get("properties", {})
    anything = Schema(defs, photo, tidy=False)
    change = st.sampled_from(sorted(fields)).flatmap(
        lambda name: st.tuples(st.just(name), anything.values(fields[name])))
    return st.builds(lambda example, edit: {**example, **dict([edit] if edit else [])},
                     st.sampled_from(examples), st.none() | change)


def with_photo(value: Any, photo: str) -> Any:
    """`value` with every image object's data replaced by `photo`."""
    if isinstance(value, dict):
        if "data" in value and "mime_type" in value:
            return {**value, "data": photo, "mime_type": "image/jpeg"}
        return {key: with_photo(item, photo) for key, item in value.items()}
    if isinstance(value, list):
        return [with_photo(item, photo) for item in value]
    return value


@dataclasses.dataclass(frozen=True)
class Schema:
    """Values for JSON schemas with these `defs`: `tidy` ones follow the schema (a probe is a real photo
    of an enrolled person), the others may break it at any point."""

    defs: dict[str, Any]
    photo: str
    tidy: bool

    def values(self, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
        return self._following(schema) if self.tidy else st.one_of(self._following(schema), JSON_VALUES)

    def _following(self, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
        if "$ref" in schema:
            return self._following(self.defs[schema["$ref"].rsplit("/", 1)[-1]])
        if "anyOf" in schema or "oneOf" in schema:
            return st.one_of([self.values(option) for option in schema.get("anyOf", schema.get("oneOf"))])
        if "enum" in schema or "const" in schema:
            words = st.sampled_from(schema.get("enum", [schema.get("const")]))
            return words if self.tidy else words | TEXT
        kind = schema.get("type")
        if kind == "object":
            return self._object(schema)
        if kind == "array":
            items = self.values(schema["items"]) if schema.get("items") else JSON_VALUES
            low, high = schema.get("minItems", 0), schema.get("maxItems", 12)
            return st.lists(items, min_size=low, max_size=min(high, 4)) if self.tidy else \
                st.lists(items, max_size=min(high + 1, 12))
        if kind == "string":
            low, high = schema.get("minLength", 0), schema.get("maxLength", 60)
            tidy = st.text(TIDY_TEXT, min_size=low, max_size=min(high, 60)).filter(lambda text: text.strip())
            if self.tidy:
                return tidy
            return TEXT | st.text(min_size=high + 1, max_size=high + 1) if high < 200 else TEXT
        if kind == "integer":
            low = schema.get("minimum", schema.get("exclusiveMinimum", -(2**31) - 1) + 1)
            high = schema.get("maximum", schema.get("exclusiveMaximum", 2**31 + 1) - 1)
            return st.integers(low, min(high, low + 50)) if self.tidy else \
                st.integers() | st.sampled_from([low - 1, high + 1, 2**63, -(2**63) - 1, 2**70])
        if kind == "number":
            low, high = schema.get("minimum", -1e6), schema.get("maximum", 1e6)
            return st.floats(low, high) if self.tidy else st.floats() | st.sampled_from([low - 1, high + 1, 1e39])
        if kind == "boolean":
            return st.booleans()
        return JSON_VALUES

    def _object(self, schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
        properties = schema.get("properties", {})
        if "data" in properties and "mime_type" in properties and self.tidy:  # an image: a real photo
            return st.just({"data": self.photo, "mime_type": "image/jpeg"})
        fields = {name: self.values(sub) for name, sub in properties.items()}
        if "data" in fields:
            fields["data"] = st.sampled_from([self.photo, "%%%", base64.b64encode(b"not an image").decode()]) | TEXT
        required = [name for name in schema.get("required", []) if name in fields]
        known = st.fixed_dictionaries({name: fields.pop(name) for name in required}, optional=fields)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            known = st.dictionaries(TEXT, self.values(extra), max_size=3)
        if self.tidy:
            return known
        return st.builds(lambda a, b: {**a, **b}, known, UNKNOWN | st.just({}))


def raw(value: Any) -> bytes:
    """JSON as a client might send it: NaN and Infinity as the bare words Python writes."""
    return json.dumps(value, allow_nan=True).encode()


BODIES = st.one_of(
    st.integers(150, 20_000).map(lambda depth: b'{"text": ' + b"[" * depth + b"]" * depth + b"}"),
    st.binary(max_size=64),
)


# ---- REST ----------------------------------------------------------------------------------------------

def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, operation) of every route of the OpenAPI document."""
    return [(method.upper(), path, operation) for path, item in spec["paths"].items()
            for method, operation in item.items() if method in ("get", "post", "put", "patch", "delete")]


def request_strategy(operation: dict[str, Any], components: dict[str, Any], photo: str) -> st.SearchStrategy:
    """(path parameters, body bytes, key, with a session) for one route."""
    schema = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    body = (from_schema(schema, components, photo) if schema else JSON_VALUES).map(raw) | BODIES
    params = st.fixed_dictionaries({param["name"]: from_schema(param.get("schema", {}), components, photo)
                                    for param in operation.get("parameters", []) if param["in"] == "path"})
    return st.tuples(params, body, st.sampled_from(["agent", "admin"]), st.booleans())


def session_of(target: SimpleNamespace, tag: str) -> str:
    """A live session of Ana's bound to the key `tag`; Ana is enrolled again if a fuzzed call forgot her."""
    try:
        return target.mem.session(target.probe, bound_to=tag).token
    except UnknownIdentityError:
        target.mem.enroll("Ana", [demo_capture(ANA, 0), demo_capture(ANA, 1)], sample=True)
        return target.mem.session(target.probe, bound_to=tag).token


def test_every_rest_route_answers_fuzzed_bodies_with_a_typed_4xx_or_success(target):
    spec = target.http.get("/v1/openapi.json").json()
    components = spec["components"]["schemas"]
    routes = operations(spec)
    assert len(routes) >= 14  # every route of /v1 is in the document
    cases: dict[str, Counter[str]] = {}
    for method, path, operation in routes:
        route = f"{method} {path}"

        @FUZZ
        @given(request_strategy(operation, components, target.photo))
        def case(request: tuple) -> None:
            params, body, role, with_session = request
            secret, key = target.keys[role]
            headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
            if with_session:
                headers[SESSION] = session_of(target, key.tag)
            url = path.format(**{name: quote(str(value), safe="", errors="surrogatepass")
                                 for name, value in params.items()})
            before = digest(target.mem)
            response = target.http.request(method, url, content=body, headers=headers)
            assert response.status_code < 500 and not target.tracebacks, \
                (route, url, body[:200], response.status_code, response.text[:300])
            outcome = str(response.status_code)
            if response.status_code >= 400:
                error = response.json()["error"]
                assert all(isinstance(error[part], str) and error[part] for part in ("type", "title", "message"))
                assert digest(target.mem) == before, (route, body[:200], response.text[:300])
                outcome += f" {error['type']}"
            cases.setdefault(route, Counter())[outcome] += 1
        case()
    for route, outcomes in cases.items():
        print(f"{route}: {outcomes.total()} cases: {dict(outcomes)}")
    print(f"REST: {sum(c.total() for c in cases.values())} fuzzed requests, 0 server errors")
    assert set(cases) == {f"{method} {path}" for method, path, _ in routes}
    assert all(set(outcomes) != {"404 NotFound"} for outcomes in cases.values())  # the routes were reached


# ---- MCP -----------------------------------------------------------------------------------------------

def mcp(target: SimpleNamespace, method: str, params: dict[str, Any]) -> httpx.Response:
    """One JSON-RPC message to the stateless MCP endpoint, with the agent key."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, allow_nan=True).encode()
    return target.http.post("/mcp", content=body, headers={
        "Authorization": f"Bearer {target.keys['agent'][0]}", "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream"})


def test_every_mcp_tool_answers_fuzzed_arguments_with_a_refusal_or_success(target):
    tools = mcp(target, "tools/list", {}).json()["result"]["tools"]
    assert {tool["name"] for tool in tools} >= {"remember", "recall", "ask", "forget_note"}
    cases: dict[str, Counter[str]] = {}
    for tool in tools:
        schema = tool["inputSchema"]
        arguments = from_schema(schema, schema.get("$defs", {}), target.photo)

        @FUZZ
        @given(arguments)
        def case(args: Any) -> None:
            before = digest(target.mem)
            response = mcp(target, "tools/call", {"name": tool["name"], "arguments": args})
            assert response.status_code < 500 and not target.tracebacks, (tool["name"], args, response.text[:300])
            reply = response.json()
            if "error" in reply:  # a JSON-RPC refusal: invalid params, or text that is not UTF-8 (a lone surrogate)
                assert reply["error"]["code"] in (-32602, -32700), reply
                outcome = {-32602: "invalid params", -32700: "parse error"}[reply["error"]["code"]]
            elif reply["result"].get("isError"):
                outcome = reply["result"]["content"][0]["text"].split(":")[0]
                assert outcome not in ("Something went wrong", "Error executing tool " + tool["name"]), reply
            else:
                outcome = "success"
            if outcome != "success":
                assert digest(target.mem) == before, (tool["name"], args)
            if isinstance(args, dict) and set(args) - set(schema["properties"]):
                assert outcome != "success", (tool["name"], args)  # an argument the tool does not declare
            cases.setdefault(tool["name"], Counter())[outcome] += 1
        case()
    for name, outcomes in cases.items():
        print(f"{name}: {outcomes.total()} cases: {dict(outcomes)}")
    print(f"MCP: {sum(c.total() for c in cases.values())} fuzzed calls, 0 server errors")
    assert set(cases) == {tool["name"] for tool in tools}


# ---- households' bodies: filters and metadata from their grammar ------------------------------------------

SCALARS = st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats() | TEXT | \
    st.sampled_from(["2024-03-01", "2024-03-02T09:15:00", "hall", ""])
VALUES = SCALARS | st.lists(SCALARS, max_size=3)
FIELDS = st.sampled_from(["scope", "author", "tags", "keywords", "timestamp", "metadata.room", "metadata.n",
                          "metadata.", "metadata.a b", "owner", "AND", "NOT"]) | st.text(max_size=8)
OPERATORS = st.sampled_from(["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "icontains", "like"])
CONDITIONS = st.builds(lambda name, value: {name: value}, FIELDS,
                       VALUES | st.dictionaries(OPERATORS, VALUES, max_size=2))
FILTER_TREES = st.recursive(
    CONDITIONS, lambda inner: st.builds(lambda word, parts: {word: parts}, st.sampled_from(["AND", "OR"]),
                                        st.lists(inner, max_size=3))
    | st.builds(lambda part: {"NOT": part}, inner) | st.builds(lambda a, b: {**a, **b}, inner, inner),
    max_leaves=8)
METADATA = st.dictionaries(st.sampled_from(["room", "n", "a b", "", "x" * 70]) | st.text(max_size=6),
                           VALUES | st.dictionaries(st.text(max_size=3), SCALARS, max_size=2), max_size=4)


def test_filters_and_metadata_from_their_grammar_answer_with_a_typed_4xx_or_success(target):
    """Filter trees and metadata that look like the real thing (fields, operators, AND/OR/NOT, values of every
    JSON type) through search, the list-all route, add and MCP recall: a typed refusal or a success, never a
    5xx, and a refusal writes nothing."""
    secret, key = target.keys["agent"]
    auth = {"Authorization": f"Bearer {secret}"}
    photo = {"data": target.photo, "mime_type": "image/jpeg"}
    outcomes: Counter[str] = Counter()

    @FUZZ
    @given(FILTER_TREES, METADATA, st.none() | st.floats(-2, 2))
    def case(filters: dict[str, Any], metadata: dict[str, Any], threshold: float | None) -> None:
        token = session_of(target, key.tag)
        requests = [
            ("POST", "/v1/search", {"query": "PIN", "probe": photo, "filters": filters, "threshold": threshold}, {}),
            ("GET", "/v1/memories", None, {"params": {"filters": json.dumps(filters, allow_nan=True)},
                                           "headers": {SESSION: token}}),
            ("POST", "/v1/memories", {"text": "fuzzed note", "infer": False, "probe": photo, "metadata": metadata},
             {}),
        ]
        for method, path, body, extra in requests:
            before = digest(target.mem)
            content = raw(body) if body is not None else None
            headers = {**auth, "Content-Type": "application/json", **extra.pop("headers", {})}
            response = target.http.request(method, path, content=content, headers=headers, **extra)
            assert response.status_code < 500 and not target.tracebacks, (path, body, response.text[:300])
            if response.status_code >= 400:
                assert response.json()["error"]["type"] and digest(target.mem) == before, (path, response.text)
            outcomes[f"{method} {path} {response.status_code}"] += 1
        reply = mcp(target, "tools/call", {"name": "recall", "arguments": {
            "query": "PIN", "probe": photo, "filters": filters}}).json()
        assert "error" in reply or not reply["result"].get("isError") or \
            reply["result"]["content"][0]["text"].split(":")[0] != "Something went wrong", reply
    case()
    print(dict(outcomes))
    assert any(o.endswith(" 200") for o in outcomes) and any(o.endswith(" 422") for o in outcomes)
