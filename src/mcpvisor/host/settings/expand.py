"""``$VAR``, ``${VAR}`` and ``${VAR:-default}`` expansion from an explicitly passed environment."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------- $VAR expansion

_VAR = re.compile(
    r"\$(?:(?P<dollar>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


def expand_string(text: str, env: Mapping[str, str], missing: set[str] | None = None) -> str:
    """Expand ``$VAR``, ``${VAR}`` and ``${VAR:-default}`` in one string.

    ``${VAR:-default}`` uses the (literal) default when ``VAR`` is unset or empty. ``$$`` is a
    literal ``$``. An undefined variable without default expands to ``""`` and its *name* is added
    to ``missing``. Anything else after ``$`` (``$5``, an unclosed ``${``) stays as written.
    """

    spans = _unread_spans(text) if "${" in text else []  # a form not read (${env:X}, ${X:?err}, nested): kept
    if missing is not None:  # ... and said
        missing.update(text[start:end] for start, end in spans)

    def replace(match: re.Match[str]) -> str:
        if match["dollar"]:
            return "$"
        name = match["braced"] or match["bare"]
        value = env.get(name)
        if match["default"] is not None and not value:
            return match["default"]
        if value is None:
            if missing is not None:
                missing.add(name)
            return ""
        if len(value) >= _MIN_KEPT:
            _STOOD_FOR[value] = f"${{{name}}}"
        return value

    pieces, done = [], 0
    for start, end in spans:
        pieces += [_VAR.sub(replace, text[done:start]), text[start:end]]
        done = end
    return "".join([*pieces, _VAR.sub(replace, text[done:])])


def _unread_spans(text: str) -> list[tuple[int, int]]:
    """Where each ``${...}`` of ``text`` that is no ``${VAR}`` nor ``${VAR:-default}`` starts and ends (at the
    ``}`` that closes it: a nested default, ``${A:-${B}}``, is one form, kept whole)."""
    passed: set[int] = set()  # where a form that is read starts, or the ``${`` of an escaped ``$${``
    for match in _VAR.finditer(text):
        if match["dollar"]:
            passed.add(match.start() + 1)
        elif "${" not in (match["default"] or ""):
            passed.add(match.start())
    spans, start = [], text.find("${")
    while start >= 0:
        if start in passed:
            start = text.find("${", start + 2)
            continue
        after, depth = len(text), 0
        for at in range(start, len(text)):
            if text.startswith("${", at):
                depth += 1
            elif text[at] == "}":
                depth -= 1
                if depth == 0:
                    after = at + 1
                    break
        spans.append((start, after))
        start = text.find("${", after)
    return spans


def expansion_warnings(missing: AbstractSet[str], subject: object) -> list[str]:
    """What the expansion of ``subject``'s strings left to say: each undefined variable (expanded to ``""``), and
    each ``${...}`` form it does not read (kept as written: the server would get it literally)."""
    return [
        f"{var!r} in {subject} is kept as written: only ${{VAR}} and ${{VAR:-default}} are read (${{env:VAR}} is "
        "written ${VAR}); check what the server gets"
        if var.startswith("${")
        else f"undefined environment variable {var!r} in {subject} expanded to ''"
        for var in sorted(missing)
    ]


_MIN_KEPT = 4
_STOOD_FOR: dict[str, str] = {}
"""Each value a variable stood for in this process (of at least 4 characters), with the variable: what a log line
must not show (:func:`as_written`)."""


def as_written(text: str) -> str:
    """``text`` with each value a variable stood for in this process put back as that variable (``${NAME}``), the
    longest first: a log line of the SDK's, which names the URL it reaches as it is run, never shows what a
    ``${VAR}`` in it stood for."""
    for value, variable in sorted(_STOOD_FOR.items(), key=lambda item: -len(item[0])):
        text = text.replace(value, variable)
    return text


def variables_in(text: str) -> list[str]:
    """The names of the variables ``text`` refers to (``$VAR``, ``${VAR}``, ``${VAR:-default}``), in order."""
    return [match["braced"] or match["bare"] for match in _VAR.finditer(text) if not match["dollar"]]


def expand_vars(value: Any, env: Mapping[str, str], missing: set[str] | None = None) -> Any:
    """Expand variables in every string inside ``value`` (object values and array items; keys stay)."""
    if isinstance(value, str):
        return expand_string(value, env, missing)
    if isinstance(value, Mapping):
        return {key: expand_vars(item, env, missing) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [expand_vars(item, env, missing) for item in value]
    return value
