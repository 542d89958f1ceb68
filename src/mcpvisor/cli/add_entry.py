"""What ``mcpvisor mcp add`` writes: a server's entry built from the command line and checked before anything
is written, and the values it would write in clear into a repository's file."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from mcpvisor.core.errors import ConfigError
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.settings.expand import variables_in
from mcpvisor.host.settings.servers import (
    REPOSITORY_RESERVED_NAMES,
    misspelt_servers_key_of,
    reserved_name,
    unshowable_name,
)

if TYPE_CHECKING:
    from mcpvisor.host.settings.loader import Settings

__all__ = ["check_name_free", "check_servers_key", "server_entry", "values_in_clear"]


def server_entry(
    name: str, *, command: Sequence[str], url: str | None, sse: bool, env_vars: Sequence[str], headers: Sequence[str]
) -> dict[str, Any]:
    """The entry of server ``name``; :class:`ConfigError` saying how to write what cannot be one."""
    if not name.strip():
        raise ConfigError("cannot add a server without a name: mcpvisor mcp add NAME -- CMD ARGS")
    if name.startswith("-"):
        raise ConfigError(f"cannot add server {name!r}: a server name cannot start with '-' (an option goes before --)")
    if (unshowable := unshowable_name(name)) is not None:
        raise ConfigError(f"cannot add server {name!r}: {unshowable}; pick another name")
    if sse and not url:
        raise ConfigError(f"cannot add server {name!r}: --sse says the --url is an SSE endpoint; give the --url")
    if url and command:
        raise ConfigError(f"cannot add server {name!r}: give either a command (after --) or --url, not both")
    entry: dict[str, Any] = {}
    if url:
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
            fix = f"; give it as --url {'https://' + url!r}" if "://" not in url and urlsplit("//" + url).netloc else ""
            raise ConfigError(f"cannot add server {name!r}: {url!r} is not an http:// or https:// URL{fix}")
        if env_vars:
            raise ConfigError(
                f"cannot add server {name!r}: --env sets the environment of a command the host starts; a remote "
                "server (--url) takes what it needs in headers: --header 'NAME: VALUE'"
            )
        entry["type"] = "sse" if sse else "http"
        entry["url"] = url
    elif command:
        if headers:
            raise ConfigError(
                f"cannot add server {name!r}: --header is sent to a remote server (--url); a command the host "
                "starts takes --env KEY=VALUE"
            )
        entry["command"] = command[0]
        if command[1:]:
            entry["args"] = list(command[1:])
    else:
        raise ConfigError(f"cannot add server {name!r}: give a command (mcpvisor mcp add {name} -- CMD ARGS) or --url")
    if env_vars:
        entry["env"] = dict(_pair(name, item, n, "=", "--env", "KEY=VALUE") for n, item in enumerate(env_vars, 1))
    if headers:
        entry["headers"] = dict(
            _pair(name, item, n, ":", "--header", "'NAME: VALUE'") for n, item in enumerate(headers, 1)
        )
    McpServerConfig.model_validate(entry)  # fail before writing anything
    return entry


def check_name_free(settings: Settings, scope: Literal["user", "workspace"], name: str, *, force: bool) -> None:
    """Refuse a name ``scope``'s file cannot take: one it defines already (unless ``force``), or, in a repository's
    file, one its servers may not have (the loader would skip the entry written)."""
    check_servers_key(settings, scope, f"cannot add server {name!r}")
    path = settings.paths.of(scope)
    existing = settings.data(scope).get("mcpServers")
    if not force and isinstance(existing, dict) and name in existing:
        raise ConfigError(
            f"cannot add server {name!r}: {path} already defines it; pass --force to replace it, or pick another name"
        )
    if (
        scope == "workspace"
        and name in REPOSITORY_RESERVED_NAMES
        and path.resolve() != settings.paths.of("user").resolve()
    ):
        raise ConfigError(
            f"cannot add server {name!r} to {path}: {reserved_name(name)}; pick another name, "
            "or add it with --scope user"
        )


def check_servers_key(settings: Settings, scope: Literal["user", "workspace"], failed: str) -> None:
    """Refuse to write a server into ``scope``'s file while its servers sit under a misspelling of ``mcpServers``
    (``failed``: what could not be done, "cannot add server 'a'"): a running host keeps them on their last good
    configuration until the key is fixed, and an ``mcpServers`` written beside it would stop them."""
    data = settings.data(scope)
    misspelt = misspelt_servers_key_of(data)
    if "mcpServers" in data or misspelt is None or not data[misspelt]:
        return
    names = ", ".join(repr(name) for name in data[misspelt])
    raise ConfigError(
        f"{failed}: {settings.paths.of(scope)} has its servers ({names}) under {misspelt!r}, which is not read (did "
        f"you mean 'mcpServers'?); rename {misspelt!r} to 'mcpServers' there first (nothing was written: "
        "'mcpServers' written beside it would stop those servers in a running mcpvisor, which keeps them until then)"
    )


def _pair(name: str, item: str, number: int, sep: str, option: str, shape: str) -> tuple[str, str]:
    """``item`` split at ``sep``; one that cannot be is refused without being shown, since it may be a value alone
    (a token pasted without its name): ``number`` says which of the ``option``s it is."""
    key, found, value = item.partition(sep)
    if not found or not key.strip():
        raise ConfigError(
            f"cannot add server {name!r}: {option} number {number} must look like {shape} (what was given is not "
            "shown: it may hold a secret)"
        )
    return key.strip(), value.strip() if sep == ":" else value


def values_in_clear(entry: Mapping[str, Any]) -> list[str]:
    """``env KEY``, ``headers NAME`` or ``oauth clientSecret`` for each value of ``entry`` written as it is (a
    ``${VAR}`` reference, which each machine fills from its own environment, is not a value)."""
    oauth = entry.get("oauth")
    return [
        f"{field} {key}"
        for field, values in (
            ("env", entry.get("env")),
            ("headers", entry.get("headers")),
            ("oauth", {"clientSecret": oauth.get("clientSecret")} if isinstance(oauth, Mapping) else None),
        )
        if isinstance(values, Mapping)
        for key, value in values.items()
        if isinstance(value, str) and value and not variables_in(value)
    ]
