"""Where mcpvisor keeps its files: a scratch ``MCPVISOR_HOME`` keeps everything inside it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mcpvisor.core.server_log import log_file
from mcpvisor.host import paths
from mcpvisor.host.host import Host, HostOptions
from mcpvisor.host.watcher import SettingsChanged
from tests.helpers import LIGHT, wait_until
from tests.layout import make_layout, replace_text


def test_server_logs_follow_mcpvisor_home_unless_a_log_dir_is_named(tmp_path: Path) -> None:
    home = tmp_path / "scratch"
    assert paths.log_dir({"HOME": str(tmp_path), "MCPVISOR_HOME": str(home)}) == home / "logs"
    named = {"HOME": str(tmp_path), "MCPVISOR_HOME": str(home), "MCPVISOR_LOG_DIR": str(tmp_path / "elsewhere")}
    assert paths.log_dir(named) == tmp_path / "elsewhere"
    assert paths.log_dir({"HOME": str(tmp_path)}) == tmp_path / ".local" / "state" / "mcpvisor" / "logs"
    xdg = {"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state")}
    assert paths.log_dir(xdg) == tmp_path / "state" / "mcpvisor" / "logs"


def test_every_server_name_gets_a_log_file_of_its_own_that_the_file_system_takes() -> None:
    """Before, ``a/b`` and ``a_b`` shared ``a_b.log``, an empty name logged to the hidden ``.log``, and a 300-letter
    name could not start ("File name too long"; set MCPVISOR_LOG_DIR, it said)."""
    logs = Path("/logs")
    assert log_file(logs, "github") == logs / "github.log"
    assert log_file(logs, "my-server.v2") == logs / "my-server.v2.log"
    names = ["a/b", "a_b", "", ".hidden", "x" * 300, "é"]
    files = [log_file(logs, name) for name in names]
    assert len(set(files)) == len(names)
    assert files[1] == logs / "a_b.log"
    assert all(len(f.name) <= 120 and not f.name.startswith(".") for f in files)


async def test_a_scratch_home_gets_the_server_logs_and_they_are_no_settings_event(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    server = {"command": sys.executable, "args": ["-m", LIGHT, "--name", "a", "--stderr", "hello from a"]}
    replace_text(layout.paths.user, json.dumps({"mcpServers": {"a": server}}))
    changed: list[SettingsChanged] = []

    async def heard(event: SettingsChanged) -> None:
        changed.append(event)

    async with Host(HostOptions(env=layout.env, workspace=layout.root, watch=True)) as host:
        assert host.watcher is not None
        host.watcher.add_change_listener(heard)
        log = Path(layout.env["MCPVISOR_HOME"]) / "logs" / "a.log"
        await wait_until(lambda: log.is_file() and "hello from a" in log.read_text(), what="a's log")
        replace_text(layout.paths.workspace, json.dumps({"mcp": {"excluded": ["nothing"]}}))  # a real change
        await wait_until(lambda: bool(changed), what="the workspace edit")
    assert [e.scope for e in changed] == ["workspace"]  # the log writes in the user folder were none
    assert not (tmp_path / "home" / ".local").exists()
