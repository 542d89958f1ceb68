"""How a failure of the fleet store is said: what the store did, in a few plain words, in place of the Redis
client's own text (``Error 111 connecting to 127.0.0.1:6379. Connection refused.``, ``Connection closed by
server.``), so that a message reads as one sentence: what failed, the store (its URL without its password),
what it did, and what happens now (:func:`store_failure`), or what to do (:func:`fleet_unreachable`)."""

from __future__ import annotations

import errno
import re
import socket
from urllib.parse import parse_qsl, urlsplit

from mcpvisor.core.errors import ConfigError

__all__ = ["NAMED_BY_OPTION", "fleet_unreachable", "redact", "sign_in_refused", "store_failure", "what_the_store_did"]

NAMED_BY_OPTION = "--fleet / MCPVISOR_FLEET"
"""Where a fleet store's URL is fixed unless it came from a settings file."""

SIGNED_IN: str = "refused the connection's sign-in"
TIMED_OUT: str = "did not answer in time"
CLOSED: str = "closed the connection"
UNTRUSTED: str = "showed a certificate that could not be verified"
UNRESOLVED: str = "has a host name that does not resolve"
LOADING: str = "is still loading its data"
READ_ONLY: str = "is a read-only replica (name the primary)"

_SAID: tuple[tuple[tuple[str, ...], str], ...] = (
    (("NOAUTH", "WRONGPASS", "invalid username-password", "Authentication", "HELLO must be called"), SIGNED_IN),
    (("Timeout", "timed out"), TIMED_OUT),
    (("closed by server", "reset by peer", "Broken pipe", "Connection closed"), CLOSED),
    (("CERTIFICATE_VERIFY_FAILED",), UNTRUSTED),
    (("Connection refused", "Connect call failed"), "refused the connection (is it running?)"),
    (("No such file or directory",), "has no socket there (is it running?)"),
    (("Name or service not known", "nodename nor servname", "Temporary failure in name resolution"), UNRESOLVED),
    (("LOADING",), LOADING),
    (("READONLY",), READ_ONLY),
)  # fmt: skip

_REFUSED_SIGN_IN = ("NOAUTH", "HELLO must be called", "invalid username-password", "WRONGPASS", "Authentication")
_PASSWORD_IN_URL = (
    "percent-encoded: redis://:${REDIS_PASSWORD}@HOST:6379/0 with REDIS_PASSWORD set (an ACL user: "
    "redis://${REDIS_USER}:${REDIS_PASSWORD}@HOST:6379/0)"
)


def what_the_store_did(exc: BaseException) -> str:
    """What the store did, as the clause after its name (``closed the connection``), from the Redis client's
    (or the socket's) exception ``exc``."""
    said = f"{type(exc).__name__} {exc}"
    for marks, clause in _SAID:
        if any(mark in said for mark in marks):
            return clause
    import redis

    if isinstance(exc, redis.ResponseError):  # the store's own words: they say what it refused, and why
        return f"refused the command ({str(exc).strip() or type(exc).__name__})"
    code = getattr(exc, "errno", None)
    if isinstance(exc, TimeoutError | socket.timeout) or code == errno.ETIMEDOUT:
        return TIMED_OUT
    if code == errno.ECONNREFUSED:
        return "refused the connection (is it running?)"
    return "could not be reached"


def _named(fleet: str) -> str:
    return "" if fleet == "default" else f" (fleet {fleet})"


def store_failure(url: str, exc: BaseException, fleet: str = "default") -> str:
    """``the fleet store <URL, password hidden>[ (fleet NAME)] <what it did>``."""
    return f"the fleet store {redact(url)}{_named(fleet)} {what_the_store_did(exc)}"


def fleet_unreachable(
    url: str, exc: BaseException, named_in: str = NAMED_BY_OPTION, *, fleet: str = "default"
) -> ConfigError:
    """Why the store at ``url`` (named in ``named_in``: where to fix it) cannot be used, in the words of
    :func:`store_failure`, with the fix for what it did."""
    did, url_in = what_the_store_did(exc), f"the URL ({named_in})"
    tls = urlsplit(url).scheme == "rediss"
    if did == SIGNED_IN:
        fix = _password_fix(url, url_in)
    elif did == TIMED_OUT:
        fix = f"check that it runs and that this host reaches it at the URL's address ({named_in})" + (
            ", or use redis:// if it does not speak TLS (rediss:// is TLS)" if tls else ""
        )
    elif did == CLOSED:
        fix = (
            "use redis:// if it does not speak TLS (rediss:// is TLS)" if tls else "use rediss:// if it speaks TLS only"
        )
        fix += f", or check {url_in}"
    elif did == UNTRUSTED:
        fix = f"name the CA that signed its certificate in {url_in}: rediss://HOST:6379/0?ssl_ca_certs=/path/to/ca.pem"
    elif did == UNRESOLVED:
        fix = f"check the host name in {url_in}"
    elif did == LOADING:
        fix = "wait until it has loaded its data"
    elif did == READ_ONLY:
        fix = f"name its primary in {url_in}"
    else:  # not running, not there, or refused a command
        fix = f"start it, or check {url_in}" + (
            ", or use redis:// if it does not speak TLS (rediss:// is TLS)" if tls else ""
        )
    return ConfigError(f"cannot use the fleet store {redact(url)}{_named(fleet)}: it {did}; {fix}, and try again")


def _has_password(url: str) -> bool:
    """Whether ``url`` gives a password (in its user part or as a ``password`` parameter)."""
    try:
        parts = urlsplit(url)
        return bool(parts.password) or any(
            name.lower() == "password" and value for name, value in parse_qsl(parts.query, keep_blank_values=True)
        )
    except ValueError:
        return "@" in url


def _password_fix(url: str, url_in: str) -> str:
    """What to do about a refused sign-in: check the password ``url`` gives, or give one (``url_in``: where)."""
    if _has_password(url):
        return (
            f"check the password in {url_in}, percent-encoded: redis://:${{REDIS_PASSWORD}}@HOST:6379/0 with "
            "REDIS_PASSWORD set"
        )
    return f"give its password in {url_in}, {_PASSWORD_IN_URL}"


def sign_in_refused(exc: BaseException, url: str) -> str:
    """What to say when the store at ``url`` answered but refused the connection's sign-in (``exc``), with the fix;
    else ""."""
    said = f"{type(exc).__name__} {exc}"
    if not any(mark in said for mark in _REFUSED_SIGN_IN):
        return ""
    return f"{SIGNED_IN}; {_password_fix(url, 'the URL')}"


def _secret_parameter(name: str) -> bool:
    return "password" in name.lower() or name.lower() == "username"


def redact(url: str) -> str:
    """The URL without its secrets: a password in its user part (``redis://:***@host``, whatever characters
    it holds and however the rest parses) and the values of the ``username`` query parameter and of every one
    named like a password (``password``, ``ssl_password``: redis-py reads them all)."""
    head, at, tail = url.rpartition("@")
    if at:
        scheme, sep, userinfo = head.partition("://")
        if not sep:  # no scheme, or a mistyped one: all before the last @ may hold the password
            scheme, userinfo = "", head
        user, colon, _ = userinfo.partition(":")
        if re.search(r"[/?#&=]", user):  # no user name: a path or query (with a password=) swallowed: hide it all
            head = f"{scheme}{sep}***{at}"
        else:
            head = f"{scheme}{sep}{user}{':***' if colon else ''}{at}"
    else:
        head, tail = "", url
    where, question, rest = tail.partition("?")
    query, hash_, fragment = rest.partition("#")
    if question:
        where += "?" + "&".join(
            f"{name}=***" if _secret_parameter(name) else f"{name}={value}" if value else name
            for name, value in parse_qsl(query, keep_blank_values=True)
        )
    return head + where + (f"#{fragment}" if hash_ else "")
