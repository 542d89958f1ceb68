"""How a failure of the fleet store is said: what the store did, in a few plain words, in place of the Redis
client's own text (``Error 111 connecting to 127.0.0.1:6379. Connection refused.``, ``Connection closed by
server.``), so that a message reads as one sentence: what failed, the store (its URL without its password),
what it did, and what happens now."""

from __future__ import annotations

import errno
import socket

from mcpvisor.fleet.store import redact

__all__ = ["store_failure", "what_the_store_did"]

_SAID: tuple[tuple[tuple[str, ...], str], ...] = (
    (("NOAUTH", "WRONGPASS", "invalid username-password", "Authentication"), "refused the connection's sign-in"),
    (("Timeout", "timed out"), "did not answer in time"),
    (("closed by server", "reset by peer", "Broken pipe", "Connection closed"), "closed the connection"),
    (("Connection refused", "Connect call failed"), "refused the connection (is it running?)"),
    (("No such file or directory",), "has no socket there (is it running?)"),
    (("Name or service not known", "nodename nor servname", "Temporary failure in name resolution"),
     "has a host name that does not resolve"),
    (("LOADING",), "is still loading its data"),
    (("READONLY",), "is a read-only replica (name the primary)"),
)  # fmt: skip


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
        return "did not answer in time"
    if code == errno.ECONNREFUSED:
        return "refused the connection (is it running?)"
    return "could not be reached"


def store_failure(url: str, exc: BaseException, fleet: str = "default") -> str:
    """``the fleet store <URL, password hidden>[ (fleet NAME)] <what it did>``."""
    named = "" if fleet == "default" else f" (fleet {fleet})"
    return f"the fleet store {redact(url)}{named} {what_the_store_did(exc)}"
