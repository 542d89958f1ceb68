"""Where a command finds its fleet: ``--fleet`` / ``MCPVISOR_FLEET``, else the enforced (system) settings,
else the user's — never a workspace's or a repository's."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcpvisor.cli.fleet import fleet_store
from mcpvisor.core.errors import ConfigError
from tests.layout import make_layout, write_json


def test_the_fleet_comes_from_the_environment_then_enforced_then_user_settings(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    assert fleet_store(layout.env) is None
    write_json(layout.paths.workspace, {"fleet": {"url": "redis://repo.example:6379/0"}})
    write_json(layout.root / ".mcp.json", {"fleet": {"url": "redis://repo.example:6379/0"}, "mcpServers": {}})
    assert fleet_store(layout.env) is None  # a repository never names the fleet
    write_json(layout.paths.user, {"fleet": {"url": "redis://user.example:6379/0", "name": "team"}})
    store = fleet_store(layout.env)
    assert store is not None
    assert (store.url, store.keys.fleet) == ("redis://user.example:6379/0", "team")
    write_json(layout.paths.system, {"fleet": {"url": "redis://enforced.example:6379/0"}})
    store = fleet_store(layout.env)
    assert store is not None
    assert (store.url, store.keys.fleet) == ("redis://enforced.example:6379/0", "default")
    store = fleet_store({**layout.env, "MCPVISOR_FLEET": "unix:///run/r.sock", "MCPVISOR_FLEET_NAME": "x"})
    assert store is not None
    assert (store.url, store.keys.fleet) == ("unix:///run/r.sock", "x")


def test_a_fleet_block_that_cannot_be_read_is_an_error_naming_the_file(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    write_json(layout.paths.user, {"fleet": "redis://x"})
    with pytest.raises(ConfigError, match="'fleet' must be an object with a 'url'"):
        fleet_store(layout.env)
    layout.paths.user.write_text('{"fleet": {"url": "redis://x"},')  # half a save that names a fleet
    with pytest.raises(ConfigError, match=str(layout.paths.user)):
        fleet_store(layout.env)
    layout.paths.user.write_text('{"mcpServers": {')  # half a save of something else: no fleet, no error here
    assert fleet_store(layout.env) is None


def test_a_password_in_the_users_fleet_url_is_written_as_a_variable(tmp_path: Path) -> None:
    """The user's settings text is what a publisher shares through the store: a password there would reach
    Redis in clear, so it is refused; ``${VAR}`` expands from this process's environment."""
    layout = make_layout(tmp_path)
    for url in ("redis://:hunter2@db:6379/0", "redis://:${REDIS_PASSWORD:-hunter2}@db:6379/0"):  # a default too
        write_json(layout.paths.user, {"fleet": {"url": url}})
        with pytest.raises(ConfigError, match=r"password in clear.*\$\{VAR\}"):
            fleet_store(layout.env)
    write_json(layout.paths.user, {"fleet": {"url": "redis://:${REDIS_PASSWORD}@db:6379/0"}})
    with pytest.raises(ConfigError, match="REDIS_PASSWORD"):
        fleet_store(layout.env)
    store = fleet_store({**layout.env, "REDIS_PASSWORD": "hunter2"})
    assert store is not None
    assert store.url == "redis://:hunter2@db:6379/0"
    for written in ("redis://:${REDIS_PASSWORD:-}@db:6379/0", "redis://:$REDIS_PASSWORD@db:6379/0"):  # no default
        write_json(layout.paths.user, {"fleet": {"url": written}})
        store = fleet_store({**layout.env, "REDIS_PASSWORD": "hunter2"})
        assert store is not None
        assert store.url == "redis://:hunter2@db:6379/0"
    assert "hunter2" not in repr(store)
    write_json(layout.paths.system, {"fleet": {"url": "redis://:enforced@db:6379/0"}})  # never published
    store = fleet_store(layout.env)
    assert store is not None
    assert store.url == "redis://:enforced@db:6379/0"


def test_a_half_saved_file_naming_its_fleet_without_quotes_is_an_error(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    layout.paths.user.parent.mkdir(parents=True, exist_ok=True)
    layout.paths.user.write_text("{fleet: {url: 'redis://db'},")  # JSON5 keys, cut short
    with pytest.raises(ConfigError, match=str(layout.paths.user)):
        fleet_store(layout.env)
