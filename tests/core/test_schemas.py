"""The shapes of schema :mod:`mcpvisor.core.schemas` calls plainly valid are valid: jsonschema agrees on every one
of them (hypothesis draws schemas from the keywords it knows, with values of the right and of the wrong kind)."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from mcpvisor.core import schemas as schemas_module
from mcpvisor.core.schemas import plainly_valid, schema_problem

ANYTHING = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-2, 2) | st.sampled_from(["", "x", "string", "object"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b", "type"]), inner, max_size=2),
    max_leaves=6,
)
KINDS = st.sampled_from(["string", "number", "integer", "boolean", "object", "array", "null"])
NUMBER = st.integers(-5, 5) | st.floats(-5, 5, allow_nan=False) | st.just(10**400)


def right(keyword: str, sub: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A value of the kind ``keyword`` takes (or one near it: a negative count, a zero multipleOf, a repeat)."""
    if keyword == "type":
        return KINDS | st.lists(KINDS, max_size=3)
    if keyword in ("title", "description", "$comment", "format", "pattern", "$ref"):
        texts = ["", "x", "date-time", "(", "^a+$", "#/$defs/a", "#", "#/a b", "http://x/s#", "[z-a]", "#/%41", "#/%zz"]
        return st.sampled_from(texts)
    if keyword in ("deprecated", "readOnly", "writeOnly", "uniqueItems"):
        return st.booleans()
    if keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
        return NUMBER
    if keyword.startswith(("min", "max")):
        return st.integers(-1, 3) | st.just(1.0)
    if keyword in ("enum", "examples"):
        return st.lists(ANYTHING, max_size=3)
    if keyword == "required":
        return st.lists(st.sampled_from(["a", "b", "c"]), max_size=3)
    if keyword == "properties":
        return st.dictionaries(st.sampled_from(["p", "q"]), sub, max_size=2)
    if keyword in ("anyOf", "oneOf", "allOf"):
        return st.lists(sub, max_size=2)
    if keyword in ("$defs", "definitions"):
        return st.dictionaries(st.sampled_from(["a", "B"]), sub, max_size=2)
    return sub  # items, additionalProperties


KEYWORDS = [
    "type", "title", "description", "$comment", "format", "default", "const", "deprecated", "readOnly", "writeOnly",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "minItems",
    "maxItems", "minProperties", "maxProperties", "enum", "examples", "uniqueItems", "required", "properties",
    "items", "additionalProperties", "anyOf", "oneOf", "allOf", "pattern", "$ref", "$defs", "definitions",
    "discriminator", "x-note", "not", "prefixItems",
]  # fmt: skip


def schemas(depth: int = 2) -> st.SearchStrategy[Any]:
    """Schemas of up to three keywords, each with a value of its kind nine times in ten, of any kind else."""
    sub = schemas(depth - 1) | st.booleans() if depth else st.booleans() | st.just({"type": "string"})
    pairs = st.sampled_from(KEYWORDS).flatmap(
        lambda k: st.tuples(st.just(k), st.one_of(*[right(k, sub)] * 9, ANYTHING | sub))
    )
    return st.lists(pairs, max_size=3).map(dict)


@settings(max_examples=1000, deadline=None)
@given(schemas())
def test_a_schema_called_plainly_valid_is_valid_by_jsonschema_too(schema: dict[str, Any]) -> None:
    if plainly_valid(schema):
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:  # (said with the schema, for the record)
            raise AssertionError(f"{schema!r} called plainly valid: {exc.message}") from exc


def test_the_schemas_most_tools_list_are_plainly_valid() -> None:
    text = {"type": "string", "description": "The text.", "minLength": 1}
    common = {
        "type": "object",
        "title": "echoArguments",
        "properties": {
            "text": text,
            "count": {"type": "integer", "minimum": 0, "default": 1},
            "mode": {"enum": ["a", "b"]},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "when": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]},
        },
        "required": ["text"],
        "additionalProperties": False,
    }
    assert plainly_valid(common)
    assert schema_problem(common) is None
    pydantic = {  # (what pydantic writes for a model with a nested model and an optional field)
        "$defs": {
            "Point": {"properties": {"x": {"title": "X", "type": "integer"}}, "required": ["x"], "type": "object"}
        },
        "properties": {
            "at": {"$ref": "#/$defs/Point"},
            "note": {"anyOf": [{"type": "string", "pattern": "^[a-z]+$"}, {"type": "null"}], "default": None},
        },
        "required": ["at"],
        "discriminator": {"propertyName": "kind"},
        "type": "object",
    }
    assert plainly_valid(pydantic)


def test_a_schema_naming_an_older_draft_with_https_is_checked_by_that_draft() -> None:
    tuple_items = {"type": "object", "properties": {"p": {"type": "array", "items": [{"type": "string"}]}}}
    assert schema_problem(tuple_items) is not None  # (2020-12: items is one schema)
    for spelling in ("http://json-schema.org/draft-07/schema#", "https://json-schema.org/draft-07/schema#"):
        assert schema_problem({"$schema": spelling, **tuple_items}) is None, spelling


def test_verdicts_are_kept_up_to_their_bound_when_servers_are_checked_side_by_side(monkeypatch: Any) -> None:
    """Before: the oldest verdict was dropped without a lock, and two checks at once could fail with "dictionary
    changed size during iteration" (the server's listing then failed) or keep more than the bound."""
    monkeypatch.setattr(schemas_module, "SCHEMA_VERDICTS_KEPT", 20)
    failures: list[BaseException] = []

    def check(n: int) -> None:
        try:
            for i in range(150):
                schema_problem({"type": "object", "not": {"const": f"{n}-{i}"}})
        except BaseException as exc:  # (said by the assertion below)
            failures.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=check, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert failures == []
    assert len(schemas_module._verdicts) <= 20


def test_plain_schemas_are_judged_without_loading_jsonschema() -> None:
    code = (
        "import sys, mcp_types as t\n"
        "from mcpvisor.core.listing import usable_tools\n"
        "tool = t.Tool(name='e', inputSchema={'type': 'object', 'properties': {'x': {'type': 'string'}}})\n"
        "assert usable_tools([tool]) == ([tool], ())\n"
        "print('jsonschema' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


def test_a_ref_with_a_stray_percent_sign_or_a_bound_too_large_for_a_float_is_judged_by_jsonschema() -> None:
    """Before: ``#/%zz`` was called plainly valid (jsonschema refuses it where it checks URI references), and an
    integer bound too large for a float raised OverflowError, which failed the server's whole listing."""
    assert not plainly_valid({"type": "object", "properties": {"a": {"$ref": "#/%zz"}}})
    assert plainly_valid({"$defs": {"A%20B": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/A%20B"}}})
    huge = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 10**400}}}
    assert plainly_valid(huge)
    assert schema_problem(huge) is None
