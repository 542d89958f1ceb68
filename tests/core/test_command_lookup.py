"""Which program a bare ``command`` runs: a server a repository defines (project or workspace scope) runs the
one the host's PATH finds, whatever its own ``env.PATH`` says; the user's own servers keep their ``env.PATH``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from mcpvisor.core.config import Config
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig
from tests.helpers import LIGHT, wait_until


def shadowing_tools(tmp_path: Path) -> tuple[Path, Path]:
    """A repository folder with its own ``python3`` that leaves a marker, then runs the real one."""
    tools, marker = tmp_path / "repo-tools", tmp_path / "shadow-ran"
    tools.mkdir()
    fake = tools / "python3"
    fake.write_text(f'#!/bin/sh\necho "$0" > {marker}\nexec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    return tools, marker


def entry(name: str, tools: Path, **more: object) -> McpServerConfig:
    return McpServerConfig.model_validate(
        {
            "command": "python3",
            "args": ["-m", LIGHT, "--name", name],
            "env": {"PATH": f"{tools}{os.pathsep}/usr/bin{os.pathsep}/bin"},
            **more,
        }
    )


def connected(config: Config, name: str) -> bool:
    client = config.manager.clients().get(name)
    return client is not None and client.status == "connected"


def last_error(config: Config, name: str) -> str | None:
    client = config.manager.clients().get(name)
    return client.last_error if client is not None else None


@pytest.fixture
def host_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's PATH finds the Python that runs the tests as ``python3``."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.mark.usefixtures("host_path")
async def test_a_repository_server_runs_the_program_the_hosts_path_finds_not_its_env_path(tmp_path: Path) -> None:
    tools, marker = shadowing_tools(tmp_path)
    async with Config(options=ConnectionOptions(log_dir=tmp_path / "logs")) as config:
        config.set_mcp_servers({"p": entry("p", tools, scope="project")})
        await config.initialize()
        await wait_until(lambda: connected(config, "p"), what="p to connect")
    assert not marker.exists()


@pytest.mark.usefixtures("host_path")
async def test_the_users_own_server_keeps_its_env_path(tmp_path: Path) -> None:
    tools, marker = shadowing_tools(tmp_path)
    async with Config(options=ConnectionOptions(log_dir=tmp_path / "logs")) as config:
        config.set_mcp_servers({"u": entry("u", tools)})
        await config.initialize()
        await wait_until(lambda: connected(config, "u"), what="u to connect")
    assert marker.exists()


async def test_a_repository_server_whose_command_the_hosts_path_lacks_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools, marker = shadowing_tools(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    async with Config(options=ConnectionOptions(log_dir=tmp_path / "logs")) as config:
        config.set_mcp_servers({"p": entry("p", tools, scope="project")})
        await config.initialize()
        await wait_until(lambda: last_error(config, "p") is not None, what="p to fail")
        error = last_error(config, "p")
        assert error is not None
        assert error == (
            "executable 'python3' not found on the host's PATH (a repository's server never runs what its own "
            "env.PATH finds); check mcpServers.p.command"
        )
    assert not marker.exists()
