"""Whether a tool's ``inputSchema`` or ``outputSchema`` is a valid JSON Schema, as clients will check it (LLM APIs
refuse a whole tool list for one invalid schema).

``jsonschema`` decides, against the metaschema of the draft the schema's ``$schema`` names (2020-12 when it names
none, as MCP says). Most tools list plain schemas — types, properties, required names, descriptions, bounds — that
are valid in every draft by their shape alone: those are recognised here in microseconds, so that a host whose
servers list only such schemas never loads ``jsonschema`` (about 3 MB and 80 ms) nor spends a millisecond per
schema. Whatever this module does not recognise as plainly valid goes to ``jsonschema``, which has the last word."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = ["SCHEMA_VERDICTS_KEPT", "needs_checking", "plainly_valid", "schema_problem"]

SCHEMA_VERDICTS_KEPT: Final = 10_000
"""How many distinct schemas' verdicts :func:`schema_problem` keeps (the oldest goes first): a server listing a
thousand tools re-listed unchanged costs lookups only."""

_verdicts: dict[str, str | None] = {}

_TYPES: Final = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
_TEXT: Final = frozenset({"title", "description", "$comment", "format"})
_ANY: Final = frozenset({"default", "const", "deprecated", "readOnly", "writeOnly"})
_NUMBERS: Final = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_COUNTS: Final = frozenset({"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"})
_LISTS: Final = frozenset({"enum", "examples"})
_ALTERNATIVES: Final = frozenset({"anyOf", "oneOf", "allOf"})
_DEEPEST: Final = 32


def plainly_valid(schema: Any, depth: int = 0) -> bool:
    """Whether ``schema`` is valid JSON Schema 2020-12 by its shape alone: only the keywords most tools use, each
    with a value of its kind. False says nothing (it may be valid): :func:`schema_problem` asks ``jsonschema``."""
    if isinstance(schema, bool):
        return depth > 0  # (a subschema may be true or false; a tool's schema is an object)
    if not isinstance(schema, Mapping) or depth > _DEEPEST:
        return False
    for key, value in schema.items():
        if key in _TEXT:
            ok = isinstance(value, str)
        elif key in _ANY:
            ok = key in ("default", "const") or isinstance(value, bool)
        elif key == "type":
            ok = _type(value)
        elif key in _NUMBERS or key == "multipleOf":
            ok = _number(value) and (key != "multipleOf" or value > 0)
        elif key in _COUNTS:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        elif key in _LISTS:
            ok = isinstance(value, list)
        elif key == "uniqueItems":
            ok = isinstance(value, bool)
        elif key == "required":
            ok = isinstance(value, list) and all(isinstance(n, str) for n in value) and len(set(value)) == len(value)
        elif key == "properties":
            ok = isinstance(value, Mapping) and all(plainly_valid(s, depth + 1) for s in value.values())
        elif key in ("items", "additionalProperties"):
            ok = plainly_valid(value, depth + 1)
        elif key in _ALTERNATIVES:
            ok = isinstance(value, list) and bool(value) and all(plainly_valid(s, depth + 1) for s in value)
        else:  # ($schema, $ref, $defs, pattern, not, if, …: for jsonschema to judge)
            ok = False
        if not ok:
            return False
    return True


def _type(value: Any) -> bool:
    if isinstance(value, str):
        return value in _TYPES
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        return False
    return set(value) <= _TYPES and len(set(value)) == len(value)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why ``schema`` is not a valid JSON Schema of the draft its ``$schema`` names (2020-12 when it names none, or
    one unknown, as MCP says), or None. A verdict is kept per distinct schema: a re-listing costs a lookup. May take
    a millisecond for a schema that is not plainly valid: call it off the event loop when :func:`needs_checking`."""
    if plainly_valid(schema):
        return None
    key = _key(schema)
    if key in _verdicts:
        return _verdicts[key]
    verdict = _checked(schema)
    if len(_verdicts) >= SCHEMA_VERDICTS_KEPT:
        _verdicts.pop(next(iter(_verdicts), key), None)  # (checks of two servers' listings may run side by side)
    _verdicts[key] = verdict
    return verdict


def needs_checking(schemas: Sequence[Mapping[str, Any] | None]) -> bool:
    """Whether any of ``schemas`` is neither plainly valid nor judged before (its check may take a millisecond)."""
    return any(s is not None and not plainly_valid(s) and _key(s) not in _verdicts for s in schemas)


def _key(schema: Mapping[str, Any]) -> str:
    return json.dumps(schema, sort_keys=True, default=repr)


def _checked(schema: Mapping[str, Any]) -> str | None:
    from jsonschema import Draft202012Validator, SchemaError  # (loaded only for a schema that needs it)
    from jsonschema.validators import validator_for

    named = schema.get("$schema")
    checker = validator_for(schema, default=Draft202012Validator) if isinstance(named, str) else Draft202012Validator
    try:
        checker.check_schema(dict(schema))
    except SchemaError as exc:
        said = f"{exc.json_path}: {exc.message}"
        return said if len(said) <= 120 else f"{said[:119]}…"
    except RecursionError:
        return "it is nested too deeply to be checked"
    return None
