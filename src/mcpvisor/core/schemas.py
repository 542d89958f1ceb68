"""Whether a tool's ``inputSchema`` or ``outputSchema`` is a valid JSON Schema, as clients will check it (LLM APIs
refuse a whole tool list for one invalid schema).

``jsonschema`` decides, against the metaschema of the draft the schema's ``$schema`` names (2020-12 when it names
none, as MCP says). Most tools list schemas valid in every draft by their shape alone — types, properties, required
names, descriptions, bounds, enums, ``anyOf``, ``$defs`` and local ``$ref`` s (what pydantic writes), and keywords
JSON Schema does not know (``discriminator``, ``x-…``: valid anywhere) — and those are recognised here in
microseconds, so that a host whose servers list only such schemas never loads ``jsonschema`` (about 3 MB and 80 ms)
nor spends milliseconds per schema. Whatever this module does not recognise as plainly valid goes to
``jsonschema``, which has the last word; a bounded number of its verdicts are kept, by the schema's digest."""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["SCHEMA_VERDICTS_KEPT", "plainly_valid", "schema_problem"]

SCHEMA_VERDICTS_KEPT: Final = 10_000
"""How many distinct schemas' verdicts :func:`schema_problem` keeps (the oldest goes first): a server listing a
thousand tools re-listed unchanged costs lookups only."""

_verdicts: dict[bytes, str | None] = {}
"""A schema's digest -> its verdict (the checks of two servers' listings may run side by side in worker threads)."""
_verdicts_lock = threading.Lock()

_TYPES: Final = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
_TEXT: Final = frozenset({"title", "description", "$comment", "format"})
_ANY: Final = frozenset({"default", "const", "deprecated", "readOnly", "writeOnly"})
_NUMBERS: Final = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_COUNTS: Final = frozenset({"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"})
_LISTS: Final = frozenset({"enum", "examples"})
_ALTERNATIVES: Final = frozenset({"anyOf", "oneOf", "allOf"})
_DEFINITIONS: Final = frozenset({"$defs", "definitions"})
_LOCAL_REF: Final = re.compile(r"#(/([A-Za-z0-9_.~$-]|%[0-9A-Fa-f]{2})+)*")
_KNOWN: Final = frozenset(
    # Every keyword the 2020-12 metaschema and its vocabularies know (a keyword it does not know may hold anything).
    "$id $schema $ref $anchor $dynamicRef $dynamicAnchor $vocabulary $comment $defs $recursiveAnchor $recursiveRef "
    "prefixItems items contains additionalProperties properties patternProperties dependentSchemas propertyNames "
    "if then else allOf anyOf oneOf not unevaluatedItems unevaluatedProperties type const enum multipleOf maximum "
    "exclusiveMaximum minimum exclusiveMinimum maxLength minLength pattern maxItems minItems uniqueItems maxContains "
    "minContains maxProperties minProperties required dependentRequired title description default deprecated "
    "readOnly writeOnly examples format contentEncoding contentMediaType contentSchema definitions dependencies".split()
)
_DEEPEST: Final = 32
_HTTPS_DRAFTS: Final = tuple(f"https://json-schema.org/draft-0{n}/" for n in (3, 4, 6, 7))


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
        elif key in _DEFINITIONS:
            ok = isinstance(value, Mapping) and all(plainly_valid(s, depth + 1) for s in value.values())
        elif key == "$ref":
            ok = isinstance(value, str) and _LOCAL_REF.fullmatch(value) is not None
        elif key == "pattern":
            ok = isinstance(value, str) and _regex(value)
        else:  # ($schema, not, if, prefixItems, …: for jsonschema to judge); a keyword it does not know is valid
            ok = key not in _KNOWN
        if not ok:
            return False
    return True


def _type(value: Any) -> bool:
    if isinstance(value, str):
        return value in _TYPES
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        return False
    return set(value) <= _TYPES and len(set(value)) == len(value)


def _regex(pattern: str) -> bool:
    """Whether ``pattern`` compiles, as ``jsonschema``'s check of the ``regex`` format asks."""
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return False
    return True


def _number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)  # (an int too large for a float is a number too)


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why ``schema`` is not a valid JSON Schema of the draft its ``$schema`` names (2020-12 when it names none, or
    one unknown, as MCP says), or None. A verdict is kept per distinct schema: a re-listing costs a digest. May take
    milliseconds for a schema that is not plainly valid: call it off the event loop unless :func:`plainly_valid`."""
    if plainly_valid(schema):
        return None
    key = hashlib.blake2b(json.dumps(schema, sort_keys=True, default=repr).encode(), digest_size=16).digest()
    with _verdicts_lock:
        if key in _verdicts:
            return _verdicts[key]
    verdict = _checked(schema)
    with _verdicts_lock:
        if len(_verdicts) >= SCHEMA_VERDICTS_KEPT:
            del _verdicts[next(iter(_verdicts))]  # (the oldest)
        _verdicts[key] = verdict
    return verdict


def _checked(schema: Mapping[str, Any]) -> str | None:
    """``jsonschema``'s verdict (loaded only for a schema that needs it)."""
    from jsonschema import Draft202012Validator
    from jsonschema.validators import validator_for

    named = schema.get("$schema")
    if not isinstance(named, str):
        return _said(Draft202012Validator, schema)
    if named.startswith(_HTTPS_DRAFTS):  # (drafts 3 to 7 name themselves with http://)
        named = "http://" + named.removeprefix("https://")
    return _said(validator_for({"$schema": named}, default=Draft202012Validator), schema)


def _said(checker: Any, schema: Mapping[str, Any]) -> str | None:
    from jsonschema import SchemaError

    try:
        checker.check_schema(dict(schema))
    except SchemaError as exc:
        said = f"{exc.json_path}: {exc.message}"
        return said if len(said) <= 120 else f"{said[:119]}…"
    except RecursionError:
        return "it is nested too deeply to be checked"
    return None
