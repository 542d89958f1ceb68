"""Credentials kept out of what people read: URLs without their user info and query values, the values of a
configuration's secrets replaced by ``***``, and a command line's URL passwords hidden.

Everything here is pure: no I/O, no environment reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlsplit, urlunsplit

__all__ = ["passwords_hidden", "redact_url", "redact_urls", "redact_values"]


def redact_url(url: str) -> str:
    """``url`` without user info and with every query value replaced by ``***``; user info made of ``${VAR}``
    references only (``:${REDIS_PASSWORD}@``, as a fix tells how to write it) is no secret and stays."""
    try:
        parts = urlsplit(url)
    except ValueError:  # brackets that hold no IPv6 address ("http://[::1:8080/mcp"): cut by hand
        head, question, _ = url.partition("#")[0].partition("?")
        return _USERINFO.sub(r"\1", head) + ("?***" if question else "")
    userinfo, at, netloc = parts.netloc.rpartition("@")
    if at and _REFERENCES_ONLY.fullmatch(userinfo):
        netloc = parts.netloc
    query = "&".join(f"{k}=***" for k, _ in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


_USERINFO = re.compile(r"^([^:/?#]*://)?[^/?#]*@")
_REFERENCES_ONLY = re.compile(r"(\$\{[A-Za-z_][A-Za-z0-9_]*\})?:?(\$\{[A-Za-z_][A-Za-z0-9_]*\})?")
_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Za-z_][A-Za-z0-9_]*")

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
"""A URL in a message: up to a space, a quote or an angle bracket. Parentheses may be part of it (a password,
a query value); one that closes more than the URL opened is the text's (:func:`_url_and_tail`)."""
_MIN_SECRET_LEN = 4


def _url_and_tail(found: str) -> tuple[str, str]:
    """A URL found in a text, and what follows it that is the text's: a closing parenthesis the URL did not open
    ("(reaching http://h/mcp?k=v)"), and the punctuation after the URL ("...; check the URL")."""
    url, tail = found, ""
    while url.endswith((";", ",", ".", ":")) or (url.endswith(")") and url.count(")") > url.count("(")):
        url, tail = url[:-1], url[-1] + tail
    return url, tail


def _redact_url_in_text(match: re.Match[str]) -> str:
    url, tail = _url_and_tail(match.group(0))
    return redact_url(url) + tail


def redact_urls(text: str) -> str:
    """``text`` with every URL in it redacted (:func:`redact_url`)."""
    return _URL.sub(_redact_url_in_text, text)


def _password_hidden(match: re.Match[str]) -> str:
    url, tail = _url_and_tail(match.group(0))
    userinfo, at, _ = url.partition("://")[2].partition("/")[0].partition("?")[0].rpartition("@")
    password = userinfo.partition(":")[2] if at else ""
    return (redact_url(url) if _REFERENCE.sub("", password) else url) + tail


def passwords_hidden(text: str) -> str:
    """``text`` (an argument of a command line) with each URL that holds a password (``postgres://app:PW@db/x``)
    redacted (:func:`redact_url`); a password written as a ``${VAR}`` reference is no secret, and a URL without a
    password stays as written."""
    return _URL.sub(_password_hidden, text)


def redact_values(text: str, expansions: Iterable[tuple[str, str]], secrets: Iterable[str]) -> str:
    """:func:`~mcpvisor.core.server_config.redact_text` for any configuration: each ``(value as run, as written)``
    of ``expansions`` put back as written, every URL redacted, each of ``secrets`` replaced by ``***``."""
    for run, written in expansions:
        if len(run) >= _MIN_SECRET_LEN:  # (not inside the written form, where a message may show it already)
            text = written.join(part.replace(run, written) for part in text.split(written))
    text = redact_urls(text)
    for value in secrets:
        if len(value) >= _MIN_SECRET_LEN:
            text = text.replace(value, "***")
    return text
