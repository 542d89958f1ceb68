"""``mcpvisor mcp import``: each tool's files in their real format, translated and written with comments kept."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from mcpvisor.cli.main import app
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.importers import scan_source
from mcpvisor.host.oauth_settings import OAuthSettings, oauth_settings
from mcpvisor.host.settings.expand import expand_vars
from mcpvisor.host.settings.files import read_settings_file
from tests.layout import Layout, make_layout, write_json


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return make_layout(tmp_path, XDG_CONFIG_HOME=str(tmp_path.resolve() / "home" / ".config"))


def run(layout: Layout, *args: str) -> Result:
    return CliRunner().invoke(
        app,
        ["mcp", "import", *args, "--workspace", str(layout.root)],
        env={**layout.env, "COLUMNS": "80", "NO_COLOR": "1"},
    )


def servers(path: Path) -> dict[str, Any]:
    data = read_settings_file(path)
    assert data is not None, f"{path} was not written"
    result: dict[str, Any] = data["mcpServers"]
    return result


def import_json(layout: Layout, *args: str) -> dict[str, dict[str, Any]]:
    result = run(layout, *args, "--json")
    assert result.exit_code in (0, 1), result.output
    return {s["name"]: s for s in json.loads(result.stdout)["servers"]}


def test_claude_desktop_stdio_entries_land_in_user_settings(layout: Layout) -> None:
    source = layout.home / ".config" / "Claude" / "claude_desktop_config.json"
    write_json(
        source,
        {
            "mcpServers": {
                "filesystem": {
                    "command": "npx",
                    "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"],
                },
                "weather": {"command": "uv", "args": ["run", "weather.py"], "env": {"API_KEY": "k-$ecret"}},
            },
            "globalShortcut": "Ctrl+Space",
        },
    )
    result = run(layout, "--from", "claude-desktop")
    assert result.exit_code == 0, result.output
    assert "Imported 2 servers from Claude Desktop" in result.output
    assert "k-$ecret" not in result.output
    assert "env: API_KEY; values hidden" in result.output
    written = servers(layout.paths.user)
    assert written["filesystem"] == {
        "command": "npx",
        "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"],
    }
    # Claude Desktop expands nothing: a '$' stays literal through mcpvisor's own ${VAR} expansion.
    assert written["weather"]["env"] == {"API_KEY": "k-$$ecret"}
    listed = CliRunner().invoke(app, ["mcp", "list", "--json", "--workspace", str(layout.root)], env=layout.env)
    assert {s["name"]: s["source"] for s in json.loads(listed.stdout)["servers"]} == {
        "filesystem": "User",
        "weather": "User",
    }


def test_claude_desktop_location_follows_the_platform(layout: Layout) -> None:
    env = {**layout.env, "APPDATA": str(layout.home / "AppData" / "Roaming")}
    mac = scan_source("claude-desktop", env, layout.root, platform="darwin")
    win = scan_source("claude-desktop", env, layout.root, platform="win32")
    assert [f.path for f in mac.files] == [
        layout.home / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json"
    ]
    assert [f.path for f in win.files] == [
        layout.home / "AppData" / "Roaming" / "Claude" / "claude_desktop_config.json"
    ]


def test_a_projects_mcp_json_is_not_said_to_hold_no_servers_when_there_is_nothing_else_to_import(
    layout: Layout,
) -> None:
    """Before, with servers in .mcp.json and none in ~/.claude.json, the command said 'No MCP servers in
    ~/.claude.json, .mcp.json' right after saying it reads .mcp.json itself."""
    write_json(layout.home / ".claude.json", {"numStartups": 3})
    write_json(layout.paths.project, {"mcpServers": {"shared": {"command": "shared"}}})
    result = run(layout, "--from", "claude-code", "--dry-run")
    assert result.exit_code == 0, result.output
    said = "".join(result.output.split())  # as wrapped for 80 columns, paths included
    assert "mcpvisorreads.mcp.jsonitself" in said
    assert f"NoMCPserversin{layout.home / '.claude.json'}:nothingtoimportfromClaudeCode." in said
    assert str(layout.paths.project) + ":nothingtoimport" not in said
    (layout.home / ".claude.json").unlink()
    alone = "".join(run(layout, "--from", "claude-code", "--dry-run").output.split())
    assert "NoMCPserversin" not in alone
    assert "NothingelsetoimportfromClaudeCode." in alone


def test_claude_code_user_and_project_servers_go_to_user_and_workspace(layout: Layout) -> None:
    write_json(
        layout.home / ".claude.json",
        {
            "numStartups": 12,
            "mcpServers": {
                "sentry": {"type": "http", "url": "https://mcp.sentry.dev/mcp"},
                "api": {
                    "type": "sse",
                    "url": "${API_BASE:-https://api.example.com}/sse",
                    "headers": {"X-Key": "${KEY}"},
                },
                "helper": {"type": "http", "url": "https://x.example", "headersHelper": "/bin/get-token"},
            },
            "projects": {
                str(layout.root): {
                    "allowedTools": [],
                    "mcpServers": {"db": {"type": "stdio", "command": "db-mcp", "args": ["--price", "$5"], "env": {}}},
                },
                "/elsewhere": {"mcpServers": {"other": {"command": "other"}}},
            },
        },
    )
    write_json(layout.paths.project, {"mcpServers": {"shared": {"command": "shared"}}})
    result = run(layout, "--from", "claude-code")
    assert result.exit_code == 1, result.output  # 'helper' cannot be imported
    assert "mcpvisor reads .mcp.json itself" in result.output
    assert "it uses 'headersHelper'" in result.output
    user = servers(layout.paths.user)
    assert user == {
        "sentry": {"type": "http", "url": "https://mcp.sentry.dev/mcp"},
        "api": {"type": "sse", "url": "${API_BASE:-https://api.example.com}/sse", "headers": {"X-Key": "${KEY}"}},
    }
    # Local-scope servers of this project only, into the workspace (gated); '$5' is literal in Claude Code.
    assert servers(layout.paths.workspace) == {"db": {"command": "db-mcp", "args": ["--price", "$$5"], "env": {}}}
    assert "mcpvisor mcp approve --workspace" in result.output
    assert result.output.rstrip().endswith(" db")
    listed = CliRunner().invoke(app, ["mcp", "list", "--json", "--workspace", str(layout.root)], env=layout.env)
    db = next(s for s in json.loads(listed.stdout)["servers"] if s["name"] == "db")
    assert db["scope"] == "workspace"
    assert db["approval"] == "pending"


def test_vscode_inputs_env_file_and_variables(layout: Layout) -> None:
    (layout.root / ".vscode").mkdir()
    (layout.root / ".vscode" / "mcp.json").write_text(
        """{
  // Servers for this repository
  "inputs": [
    {"type": "promptString", "id": "gh-token", "description": "GitHub Personal Access Token", "password": true}
  ],
  "servers": {
    "github": {
      "type": "http",
      "url": "https://api.githubcopilot.com/mcp/",
      "headers": {"Authorization": "Bearer ${input:gh-token}"}
    },
    "fs": {
      "type": "stdio",
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "${workspaceFolder}", "${userHome}/notes"],
      "env": {"TOKEN": "${env:MY_TOKEN}"},
      "dev": {"watch": "src/**/*.ts"}
    },
    "dotenv": {"type": "stdio", "command": "node", "args": ["x.js"], "envFile": "${workspaceFolder}/.env"},
  },
}
"""
    )
    write_json(
        layout.home / ".config" / "Code" / "User" / "mcp.json",
        {"servers": {"here": {"type": "stdio", "command": "x", "args": ["${workspaceFolder}"]}}},
    )
    found = import_json(layout, "--from", "vscode")
    assert found["github"]["action"] == "skip"
    assert "${input:gh-token} ('GitHub Personal Access Token')" in found["github"]["reason"]
    assert found["dotenv"]["action"] == "skip"
    assert "'envFile'" in found["dotenv"]["reason"]
    assert found["here"]["action"] == "skip"
    assert "user-level server" in found["here"]["reason"]
    assert found["fs"]["action"] == "add"
    assert found["fs"]["notes"] == ["ignored 'dev' (no mcpvisor equivalent)"]
    assert servers(layout.paths.workspace) == {
        "fs": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", str(layout.root), f"{layout.home}/notes"],
            "env": {"TOKEN": "${MY_TOKEN}"},
        }
    }
    assert not layout.paths.user.exists()


def test_a_project_server_named_like_the_language_server_tools_is_not_imported_into_the_repository(
    layout: Layout,
) -> None:
    """Before, it was written into the workspace settings and said to start once approved; the loader then
    skipped it (a repository's server may not take mcp__lsp__*)."""
    write_json(layout.root / ".vscode" / "mcp.json", {"servers": {"lsp": {"command": "x"}, "ok": {"command": "y"}}})
    result = run(layout, "--from", "vscode", "--scope", "workspace")
    assert result.exit_code == 1
    said = " ".join(result.output.split())
    assert (
        "! lsp stdio: x 'lsp' names the language server tools (mcp__lsp__*), which a repository's server may not "
        "take; add it under another name"
    ) in said
    assert "1 not imported (reasons above)" in said
    assert "approve lsp" not in said
    assert servers(layout.paths.workspace) == {"ok": {"command": "y"}}


def test_cursor_url_without_type_and_secrets_never_shown(layout: Layout) -> None:
    write_json(
        layout.home / ".cursor" / "mcp.json",
        {
            "mcpServers": {
                "remote": {
                    "url": "https://user:S3CRET-PW@example.com/mcp?key=S3CRET-Q",
                    "headers": {"X-Key": "S3CRET-H"},
                },
                "legacy": {"url": "https://example.com/sse"},
                "off": {"command": "x", "disabled": True},
            }
        },
    )
    write_json(layout.root / ".cursor" / "mcp.json", {"mcpServers": {"proj": {"command": "proj-mcp"}}})
    result = run(layout, "--from", "cursor", "--scope", "user")
    assert result.exit_code == 1, result.output
    assert "S3CRET" not in result.output
    assert "taken as streamable HTTP" in result.output
    assert "turned off in Cursor" in result.output
    user = servers(layout.paths.user)
    assert user["remote"]["type"] == "http"
    assert user["legacy"] == {"url": "https://example.com/sse", "type": "sse"}
    assert "off" not in user
    assert not layout.paths.workspace.exists()  # --scope user leaves the project's servers alone


def test_values_written_into_the_repository_are_told_never_shown(layout: Layout) -> None:
    env = {"DB_PASSWORD": "S3CRET-DB", "FROM_ENV": "${env:HOME_TOKEN}"}
    project = {
        "db": {"command": "db-mcp", "env": env},
        "web": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer S3CRET-H"}},
        "clean": {"command": "clean-mcp", "env": {"A": "${env:A}"}},
    }
    write_json(layout.root / ".cursor" / "mcp.json", {"mcpServers": project})
    found = json.loads(run(layout, "--from", "cursor", "--scope", "workspace", "--json", "--dry-run").stdout)
    assert [w.split(" of server ")[1].split()[0] for w in found["warnings"]] == ["'db'", "'web'"]  # not 'clean'
    assert not any("FROM_ENV" in w or "S3CRET" in w for w in found["warnings"])  # a reference is no value
    assert all(" would get the value of " in w for w in found["warnings"])
    result = run(layout, "--from", "cursor", "--scope", "workspace")
    assert result.exit_code == 0, result.output
    assert "S3CRET" not in result.output
    warned = " ".join(result.output.split())  # as wrapped for 80 columns
    assert "gets the value of env DB_PASSWORD of server 'db' as written" in warned
    assert "gets the value of headers Authorization of server 'web'" in warned
    assert "write ${NAME} instead" in warned


@pytest.mark.parametrize("tool", ["gemini", "qwen"])
def test_gemini_and_qwen_settings_with_comments(layout: Layout, tool: str) -> None:
    text = """{
  // theme and other settings are not servers
  "ui": {"theme": "GitHub"},
  "mcpServers": {
    "py": {"command": "python", "args": ["-m", "srv"], "cwd": "./srv", "env": {"K": "$HOME/k"}, "timeout": 30000,
           "trust": false, "includeTools": ["a", "b"]},
    "remote": {"httpUrl": "https://example.com/mcp", "headers": {"Authorization": "Bearer $TOKEN"}},
  }
}
"""
    (layout.home / f".{tool}").mkdir(parents=True)
    (layout.home / f".{tool}" / "settings.json").write_text(text)
    result = run(layout, "--from", tool)
    assert result.exit_code == 0, result.output
    assert servers(layout.paths.user) == {
        "py": {
            "command": "python",
            "args": ["-m", "srv"],
            "cwd": "./srv",
            "env": {"K": "$HOME/k"},
            "timeout": 30000,
            "trust": False,
            "includeTools": ["a", "b"],
        },
        "remote": {"httpUrl": "https://example.com/mcp", "headers": {"Authorization": "Bearer $TOKEN"}},
    }


def test_dry_run_writes_nothing_and_existing_entries_are_compared(layout: Layout) -> None:
    layout.paths.user.parent.mkdir(parents=True)
    layout.paths.user.write_text(
        '{\n  // my servers\n  "mcpServers": {\n    "same": {"command": "a"},\n    "diff": {"command": "old"}\n  }\n}\n'
    )
    write_json(
        layout.home / ".cursor" / "mcp.json",
        {"mcpServers": {"same": {"command": "a"}, "diff": {"command": "new"}, "fresh": {"command": "f"}}},
    )
    before = layout.paths.user.read_text()
    dry = run(layout, "--from", "cursor", "--dry-run")
    assert "Would import 1 server from Cursor; 1 already present; 1 not imported" in dry.output
    assert "nothing written (dry run)" in dry.output
    assert "already has a different 'diff'; pass --force" in dry.output
    assert layout.paths.user.read_text() == before
    done = run(layout, "--from", "cursor")
    assert done.exit_code == 1
    assert servers(layout.paths.user) == {
        "same": {"command": "a"},
        "diff": {"command": "old"},
        "fresh": {"command": "f"},
    }
    assert "// my servers" in layout.paths.user.read_text()
    forced = run(layout, "--from", "cursor", "--force")
    assert forced.exit_code == 0, forced.output
    assert servers(layout.paths.user)["diff"] == {"command": "new"}
    assert "// my servers" in layout.paths.user.read_text()


def test_bad_input_names_the_file_and_writes_nothing(layout: Layout) -> None:
    missing = run(layout, "--from", "gemini")
    assert missing.exit_code == 1
    assert "no Gemini CLI configuration found; looked in:" in missing.output
    assert str(layout.home / ".gemini" / "settings.json") in missing.output
    claude = run(layout, "--from", "claude-code")
    assert claude.output.count(str(layout.home / ".claude.json")) == 1  # read for both levels, named once
    unknown = run(layout, "--from", "notepad")
    assert unknown.exit_code == 1
    assert "unknown source 'notepad' for --from: use one of claude-desktop" in unknown.output
    broken = layout.home / ".cursor" / "mcp.json"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"mcpServers": {"a": {"command": "x",}\n')
    result = run(layout, "--from", "cursor")
    assert result.exit_code == 1
    assert f"{broken}:2:1:" in "".join(result.output.split())  # as wrapped for 80 columns
    write_json(broken, {"mcpServers": {"mine": {"command": "mine-mcp"}}})
    project = layout.root / ".cursor" / "mcp.json"
    project.parent.mkdir(parents=True)
    project.write_text('{"mcpServers": {"proj": {"command": "uvx", "args": ["thing"],}, }')
    beside = run(layout, "--from", "cursor")  # one file that does not parse stops no other
    assert beside.exit_code == 1
    assert f"{project}:1:" in "".join(beside.output.split())
    assert "nothing imported from this file" in " ".join(beside.output.split())
    assert servers(layout.paths.user) == {"mine": {"command": "mine-mcp"}}
    assert not layout.paths.workspace.exists()
    layout.paths.user.unlink()
    project.unlink()
    write_json(broken, {"mcpServers": {"bad": {"command": "x", "args": "not-a-list"}, "ok": {"command": "y"}}})
    layout.paths.user.write_text("{ not json")
    into_broken = run(layout, "--from", "cursor")
    assert into_broken.exit_code == 1
    assert "fix that file first (nothing was written)" in into_broken.output
    assert layout.paths.user.read_text() == "{ not json"
    layout.paths.user.unlink()
    partly = import_json(layout, "--from", "cursor")
    assert partly["bad"]["action"] == "skip"
    assert "invalid entry: args" in partly["bad"]["reason"]
    assert servers(layout.paths.user) == {"ok": {"command": "y"}}


def test_nothing_is_imported_into_a_file_whose_servers_key_is_misspelt(layout: Layout) -> None:
    """Before, 'mcpServers' was written beside 'mcpservers', and a running host stopped the servers it had kept."""
    write_json(
        layout.home / ".config" / "Claude" / "claude_desktop_config.json", {"mcpServers": {"x": {"command": "x"}}}
    )
    write_json(layout.paths.user, {"mcpservers": {"a": {"command": "a"}}})
    result = run(layout, "--from", "claude-desktop")
    assert result.exit_code == 1
    assert (
        f"cannot import: {layout.paths.user} has its servers ('a') under 'mcpservers', which is not read (did you "
        "mean 'mcpServers'?); rename 'mcpservers' to 'mcpServers' there first"
    ) in " ".join(result.output.split())
    assert read_settings_file(layout.paths.user) == {"mcpservers": {"a": {"command": "a"}}}


def test_an_imported_server_runs(layout: Layout) -> None:
    """The translated entry is one mcpvisor starts: status connects it and lists its tools."""
    write_json(
        layout.home / ".config" / "Claude" / "claude_desktop_config.json",
        {
            "mcpServers": {
                "light": {
                    "command": sys.executable,
                    "args": ["-m", "mcpvisor.examples.light_server", "--name", "light", "--tools", "ping"],
                }
            }
        },
    )
    assert run(layout, "--from", "claude-desktop").exit_code == 0
    status = CliRunner().invoke(
        app,
        ["status", "--json", "--workspace", str(layout.root)],
        env={**layout.env, "MCPVISOR_LOG_DIR": str(layout.home)},
    )
    assert status.exit_code == 0, status.output
    (light,) = json.loads(status.stdout)["servers"]
    assert (light["name"], light["state"], light["tools"]) == ("light", "connected", 1)


def test_claude_code_brings_the_language_servers_of_its_enabled_plugins(layout: Layout) -> None:
    claude = layout.home / ".claude"
    write_json(
        claude / "settings.json",
        {"enabledPlugins": {"pyright@official": True, "gopls@community": True, "off@official": False, "cfg@x": True}},
    )
    pyright_root = claude / "plugins" / "store" / "pyright"
    write_json(
        claude / "plugins" / "installed_plugins.json",
        {"plugins": {"pyright@official": [{"installPath": str(pyright_root)}]}},
    )
    write_json(pyright_root / ".claude-plugin" / "plugin.json", {"name": "pyright", "lspServers": "./servers.json"})
    write_json(
        pyright_root / "servers.json",
        {
            "python": {
                "command": "${CLAUDE_PLUGIN_ROOT}/bin/pyright-langserver",
                "args": ["--stdio"],
                "extensionToLanguage": {".py": "python"},
            }
        },
    )
    gopls_root = claude / "plugins" / "cache" / "community" / "gopls" / "1.0.0"  # no install record: the cache
    write_json(gopls_root / ".lsp.json", {"go": {"command": "gopls", "extensionToLanguage": {".go": "go"}}})
    off_root = claude / "plugins" / "cache" / "official" / "off"
    write_json(off_root / ".lsp.json", {"off": {"command": "x", "extensionToLanguage": {".x": "x"}}})
    cfg_root = claude / "plugins" / "cache" / "x" / "cfg"
    write_json(
        cfg_root / ".claude-plugin" / "plugin.json",
        {"lspServers": {"cfg": {"command": "${user_config.binary}", "extensionToLanguage": {".c": "c"}}}},
    )
    result = run(layout, "--from", "claude-code")
    assert result.exit_code == 1, result.output  # one could not be imported
    assert "Language servers of enabled Claude Code plugins" in result.output
    assert "uses ${user_config.binary}, a plugin setting Claude Code asks for" in result.output
    data = read_settings_file(layout.paths.user)
    assert data is not None
    assert data["lspServers"] == {
        "python": {
            "command": f"{pyright_root}/bin/pyright-langserver",
            "args": ["--stdio"],
            "extensionToLanguage": {".py": "python"},
        },
        "go": {"command": "gopls", "extensionToLanguage": {".go": "go"}},
    }
    again = json.loads(run(layout, "--from", "claude-code", "--json").stdout)
    assert {s["name"]: s["action"] for s in again["language_servers"]} == {
        "python": "present",
        "go": "present",
        "cfg": "skip",
    }


def test_a_server_without_a_name_or_with_an_unshowable_one_is_listed_not_written(layout: Layout) -> None:
    """Before, an empty name stopped the import half-way with a traceback, and a name holding a zero-width joiner
    (an emoji's) was written and said imported, then skipped by every command that read the settings."""
    write_json(
        layout.home / ".cursor" / "mcp.json",
        {
            "mcpServers": {
                "ok": {"command": "a"},
                "": {"command": "b"},
                "dev 👨\u200d💻": {"command": "c"},
                "z": {"command": "d"},
            }
        },
    )
    result = run(layout, "--from", "cursor")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert "! '' it has no name, which mcpvisor needs: give it one in Cursor and import again" in said
    assert "! 'dev 👨\\u200d💻' its name holds \\u200d" in said
    assert "rename it in Cursor and import again" in said
    assert "Imported 2 servers from Cursor; 2 not imported" in said
    assert servers(layout.paths.user) == {"ok": {"command": "a"}, "z": {"command": "d"}}


def test_a_url_with_unbalanced_brackets_is_shown_without_its_secrets(layout: Layout) -> None:
    """Before, showing such a URL (an IPv6 address missing its ']') ended the import, and then 'mcp list', with a
    traceback: Invalid IPv6 URL."""
    write_json(
        layout.home / ".cursor" / "mcp.json",
        {"mcpServers": {"v6": {"url": "http://me:S3CRET-PW@[::1:8080/mcp?key=S3CRET-Q"}}},
    )
    result = run(layout, "--from", "cursor")
    assert result.exit_code == 0, result.exception
    assert "+ v6  http: http://[::1:8080/mcp?***" in result.output
    assert "S3CRET" not in result.output
    listed = CliRunner().invoke(app, ["mcp", "list", "--workspace", str(layout.root)], env=layout.env)
    assert listed.exit_code == 0, listed.exception
    assert "http://[::1:8080/mcp?***" in listed.output
    assert "S3CRET" not in listed.output


def test_nothing_to_import_names_every_file_read_and_the_fix(layout: Layout) -> None:
    """Before, a Claude Code file without this project's servers was left out of what was looked in, which said no
    configuration was found; and Claude Desktop with --scope workspace said it had looked in nothing."""
    write_json(layout.home / ".claude.json", {"mcpServers": {"mine": {"command": "a"}}, "projects": {}})
    claude = run(layout, "--from", "claude-code", "--scope", "workspace")
    assert claude.exit_code == 1
    assert f"no Claude Code MCP servers for {layout.root}; looked in:" in claude.output
    assert str(layout.home / ".claude.json") in claude.output
    write_json(layout.home / ".config" / "Code" / "User" / "settings.json", {"editor.fontSize": 14})
    vscode = run(layout, "--from", "vscode")
    assert f"no VS Code MCP servers for {layout.root}; looked in:" in vscode.output
    assert str(layout.home / ".config" / "Code" / "User" / "settings.json") in vscode.output
    write_json(
        layout.home / ".config" / "Claude" / "claude_desktop_config.json", {"mcpServers": {"d": {"command": "d"}}}
    )
    desktop = run(layout, "--from", "claude-desktop", "--scope", "workspace")
    assert desktop.exit_code == 1
    assert "Claude Desktop keeps no workspace servers, only your own" in " ".join(desktop.output.split())
    assert "import without --scope" in " ".join(desktop.output.split())
    assert not layout.paths.user.exists()
    assert not layout.paths.workspace.exists()


@pytest.mark.parametrize("tool", ["gemini", "qwen"])
def test_a_server_turned_off_in_gemini_or_qwen_settings_is_listed_not_imported(layout: Layout, tool: str) -> None:
    """Gemini CLI and Qwen Code turn a server off by listing it in 'mcp.excluded' (older versions: the top-level
    'excludeMCPServers'); the user's list applies to the project's servers too."""
    write_json(
        layout.home / f".{tool}" / "settings.json",
        {
            "mcp": {"excluded": ["off", "proj-off"]},
            "mcpServers": {"off": {"command": "off-mcp"}, "on": {"command": "on-mcp"}},
        },
    )
    write_json(
        layout.root / f".{tool}" / "settings.json",
        {
            "excludeMCPServers": ["legacy-off"],
            "mcpServers": {"legacy-off": {"command": "a"}, "proj-off": {"command": "b"}, "proj": {"command": "c"}},
        },
    )
    alone = import_json(layout, "--from", tool, "--scope", "workspace", "--dry-run")
    assert {name: s["action"] for name, s in alone.items()} == {"legacy-off": "skip", "proj-off": "skip", "proj": "add"}
    found = import_json(layout, "--from", tool)
    assert {name: s["action"] for name, s in found.items()} == {
        "off": "skip",
        "on": "add",
        "legacy-off": "skip",
        "proj-off": "skip",
        "proj": "add",
    }
    assert "turned off in" in found["off"]["reason"]
    assert "'mcp.excluded'" in found["off"]["reason"]
    assert "'excludeMCPServers'" in found["legacy-off"]["reason"]
    assert servers(layout.paths.user) == {"on": {"command": "on-mcp"}}
    assert servers(layout.paths.workspace) == {"proj": {"command": "c"}}


def test_an_entry_with_both_command_and_url_is_said_to_run_its_command(layout: Layout) -> None:
    """Before, the note said the entry was taken as streamable HTTP (and 'type' was written so), while the
    command runs."""
    write_json(
        layout.home / ".cursor" / "mcp.json",
        {"mcpServers": {"both": {"command": "both-mcp", "url": "https://example.com/mcp"}}},
    )
    found = import_json(layout, "--from", "cursor")
    assert found["both"]["transport"] == "stdio"
    (note,) = found["both"]["notes"]
    assert "'command' is used (stdio), 'url' ignored" in note
    assert "HTTP" not in note
    assert servers(layout.paths.user) == {"both": {"command": "both-mcp", "url": "https://example.com/mcp"}}


def test_the_plan_shows_what_the_server_is_given_and_the_file_gets_the_escape(layout: Layout) -> None:
    """Before, --json showed the '$$' written to the file while the text showed '$'; and a '$$' that Gemini CLI
    passes as it is was written unescaped (the server got '$') and shown as '$'."""
    write_json(
        layout.home / ".config" / "Claude" / "claude_desktop_config.json",
        {"mcpServers": {"shop": {"command": "shop-mcp", "args": ["--price", "$5"]}}},
    )
    write_json(
        layout.home / ".gemini" / "settings.json",
        {"mcpServers": {"pay": {"command": "pay-mcp", "args": ["--mark", "$$", "--home", "$HOME", "${X:?}"]}}},
    )
    shown = "pay-mcp --mark $$ --home $HOME ${X:?}"
    assert import_json(layout, "--from", "claude-desktop", "--dry-run")["shop"]["target"] == "shop-mcp --price $5"
    assert import_json(layout, "--from", "gemini", "--dry-run")["pay"]["target"] == shown
    text = run(layout, "--from", "claude-desktop")
    assert "stdio: shop-mcp --price $5\n" in text.output
    assert f"stdio: {shown}\n" in run(layout, "--from", "gemini").output
    assert servers(layout.paths.user) == {
        "shop": {"command": "shop-mcp", "args": ["--price", "$$5"]},
        "pay": {"command": "pay-mcp", "args": ["--mark", "$$$$", "--home", "$HOME", "$${X:?}"]},
    }


@pytest.mark.parametrize("tool", ["gemini", "qwen"])
def test_a_server_left_out_of_the_allow_list_of_gemini_or_qwen_is_listed_not_imported(
    layout: Layout, tool: str
) -> None:
    """Before, 'mcp.allowed' (older versions: the top-level 'allowMCPServers') was not read: a server the tool never
    connects was imported as active. As in the tool, an empty list restricts nothing, and the user's list applies to
    the project's servers too."""
    write_json(
        layout.home / f".{tool}" / "settings.json",
        {
            "mcp": {"allowed": ["github", "proj"]},
            "mcpServers": {"github": {"command": "gh-mcp"}, "rogue": {"command": "rogue-mcp"}},
        },
    )
    write_json(
        layout.root / f".{tool}" / "settings.json",
        {"mcpServers": {"proj": {"command": "p"}, "other": {"command": "o"}}},
    )
    found = import_json(layout, "--from", tool)
    assert {name: s["action"] for name, s in found.items()} == {
        "github": "add",
        "rogue": "skip",
        "proj": "add",
        "other": "skip",
    }
    assert f"not in 'mcp.allowed' in {layout.home / f'.{tool}' / 'settings.json'}" in found["rogue"]["reason"]
    assert servers(layout.paths.user) == {"github": {"command": "gh-mcp"}}
    assert servers(layout.paths.workspace) == {"proj": {"command": "p"}}

    layout.paths.user.unlink()
    layout.paths.workspace.unlink()
    write_json(
        layout.home / f".{tool}" / "settings.json",
        {"allowMCPServers": ["a"], "mcpServers": {"a": {"command": "a"}, "b": {"command": "b"}}},
    )
    write_json(layout.root / f".{tool}" / "settings.json", {"mcpServers": {"c": {"command": "c"}}})
    legacy = import_json(layout, "--from", tool)
    assert {name: s["action"] for name, s in legacy.items()} == {"a": "add", "b": "skip", "c": "skip"}
    assert "'allowMCPServers'" in legacy["b"]["reason"]
    # An empty list alone restricts nothing.
    write_json(
        layout.home / f".{tool}" / "settings.json", {"mcp": {"allowed": []}, "mcpServers": {"d": {"command": "d"}}}
    )
    assert import_json(layout, "--from", tool, "--scope", "user")["d"]["action"] == "add"


def test_a_gemini_server_that_signs_in_with_google_credentials_is_listed_not_imported(layout: Layout) -> None:
    """Before, a server Gemini CLI reaches with Google credentials ('authProviderType' google_credentials or
    service_account_impersonation) was imported as a plain remote server, which mcpvisor reached without them."""
    write_json(
        layout.home / ".gemini" / "settings.json",
        {
            "mcpServers": {
                "adc": {"httpUrl": "https://x.googleapis.com/mcp", "authProviderType": "google_credentials"},
                "run": {
                    "httpUrl": "https://svc-123.run.app/mcp",
                    "authProviderType": "service_account_impersonation",
                    "targetAudience": "123.apps.googleusercontent.com",
                    "targetServiceAccount": "mcp@proj.iam.gserviceaccount.com",
                },
                "oauth": {"httpUrl": "https://example.com/mcp", "authProviderType": "dynamic_discovery"},
            }
        },
    )
    found = import_json(layout, "--from", "gemini")
    assert {name: s["action"] for name, s in found.items()} == {"adc": "skip", "run": "skip", "oauth": "add"}
    assert "'authProviderType' 'google_credentials'" in found["adc"]["reason"]
    assert "'authProviderType' 'service_account_impersonation'" in found["run"]["reason"]
    assert servers(layout.paths.user) == {
        "oauth": {"httpUrl": "https://example.com/mcp", "authProviderType": "dynamic_discovery"}
    }


def test_a_server_turned_off_with_gemini_mcp_disable_is_listed_not_imported(layout: Layout) -> None:
    """Before, Gemini CLI's ~/.gemini/mcp-server-enablement.json ('gemini mcp disable NAME': the name lowercased and
    trimmed, '{"enabled": false}') was not read: a server Gemini CLI never connects was imported as active. The file
    is the user's and applies to the project's servers too."""
    write_json(
        layout.home / ".gemini" / "settings.json",
        {"mcpServers": {"GitHub": {"command": "gh-mcp"}, "on": {"command": "on-mcp"}}},
    )
    write_json(
        layout.root / ".gemini" / "settings.json",
        {"mcpServers": {"Proj-Off": {"command": "a"}, "proj": {"command": "b"}}},
    )
    enablement = layout.home / ".gemini" / "mcp-server-enablement.json"
    write_json(
        enablement,
        {"github": {"enabled": False}, "proj-off": {"enabled": False}, "on": {"enabled": True}, "gone": {}},
    )
    alone = import_json(layout, "--from", "gemini", "--scope", "workspace", "--dry-run")
    assert {name: s["action"] for name, s in alone.items()} == {"Proj-Off": "skip", "proj": "add"}
    found = import_json(layout, "--from", "gemini")
    assert {name: s["action"] for name, s in found.items()} == {
        "GitHub": "skip",
        "on": "add",
        "Proj-Off": "skip",
        "proj": "add",
    }
    assert "turned off in Gemini CLI" in found["GitHub"]["reason"]
    assert "'gemini mcp disable'" in found["GitHub"]["reason"]
    assert str(enablement) in found["GitHub"]["reason"]
    assert servers(layout.paths.user) == {"on": {"command": "on-mcp"}}
    assert servers(layout.paths.workspace) == {"proj": {"command": "b"}}
    # Qwen Code keeps no such file ('qwen mcp disable' writes 'mcp.excluded', read already): one there changes nothing.
    write_json(layout.home / ".qwen" / "settings.json", {"mcpServers": {"GitHub": {"command": "gh-mcp"}}})
    write_json(layout.home / ".qwen" / "mcp-server-enablement.json", {"github": {"enabled": False}})
    assert import_json(layout, "--from", "qwen", "--scope", "user", "--dry-run")["GitHub"]["action"] == "add"


def test_gemini_cli_home_is_where_gemini_cli_keeps_the_users_settings(layout: Layout, tmp_path: Path) -> None:
    """Before, ~/.gemini was read whatever GEMINI_CLI_HOME said: Gemini CLI's servers were not found (and those of a
    ~/.gemini it does not read were imported), nor the servers its 'gemini mcp disable' turned off there."""
    other = tmp_path / "gemini-home"
    write_json(layout.home / ".gemini" / "settings.json", {"mcpServers": {"unread": {"command": "u"}}})
    write_json(other / ".gemini" / "settings.json", {"mcpServers": {"used": {"command": "a"}, "off": {"command": "b"}}})
    write_json(other / ".gemini" / "mcp-server-enablement.json", {"off": {"enabled": False}})
    result = CliRunner().invoke(
        app,
        ["mcp", "import", "--from", "gemini", "--json", "--workspace", str(layout.root)],
        env={**layout.env, "GEMINI_CLI_HOME": str(other)},
    )
    assert result.exit_code == 1, result.output
    found = {s["name"]: s for s in json.loads(result.stdout)["servers"]}
    assert {name: s["action"] for name, s in found.items()} == {"used": "add", "off": "skip"}
    assert str(other / ".gemini" / "mcp-server-enablement.json") in found["off"]["reason"]
    assert servers(layout.paths.user) == {"used": {"command": "a"}}


def test_an_unreadable_gemini_enablement_file_imports_none_of_its_servers(layout: Layout) -> None:
    """Gemini CLI may leave any of them off; whether it does cannot be told, so none is taken as active."""
    write_json(layout.home / ".gemini" / "settings.json", {"mcpServers": {"a": {"command": "a"}}})
    (layout.home / ".gemini" / "mcp-server-enablement.json").write_text('{"a": {"enabled": fal')
    result = run(layout, "--from", "gemini")
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert "mcp-server-enablement.json" in said
    assert "fix the file and import again" in said
    assert not layout.paths.user.exists()


def test_a_cursor_pre_registered_oauth_client_becomes_the_oauth_block(layout: Layout) -> None:
    """Before, Cursor's 'auth' (a pre-registered OAuth client: CLIENT_ID, CLIENT_SECRET, scopes) was dropped with
    "ignored 'auth'": mcpvisor then registered a client of its own, which a server that takes only its pre-registered
    client refuses. Its ${env:NAME} become ${NAME}; its values are never shown."""
    auth = {"CLIENT_ID": "corp-client", "CLIENT_SECRET": "${env:CORP_SECRET}", "scopes": ["mcp", "offline_access"]}
    write_json(
        layout.home / ".cursor" / "mcp.json",
        {
            "mcpServers": {
                "corp": {"url": "https://mcp.example.com/mcp", "auth": auth},
                "bad": {"url": "https://bad.example.com/mcp", "auth": {"CLIENT_ID": 42}},
            }
        },
    )
    project = {"url": "https://p.example.com/mcp", "auth": {"CLIENT_ID": "${env:P_ID}", "CLIENT_SECRET": "S3CRET-CS"}}
    write_json(layout.root / ".cursor" / "mcp.json", {"mcpServers": {"proj": project}})
    planned = run(layout, "--from", "cursor", "--json", "--dry-run")
    assert "S3CRET" not in planned.stdout
    found = {s["name"]: s for s in json.loads(planned.stdout)["servers"]}
    assert found["corp"]["oauth"] == ["clientId", "clientSecret", "scopes"]
    assert not any("ignored" in note for note in found["corp"]["notes"])
    assert any("http://127.0.0.1/callback" in note for note in found["corp"]["notes"])
    assert found["bad"]["action"] == "skip"
    assert "'auth.CLIENT_ID' must be a string" in found["bad"]["reason"]
    result = run(layout, "--from", "cursor")
    assert result.exit_code == 1, result.output  # 'bad'
    assert "S3CRET" not in result.output
    said = " ".join(result.output.split())
    assert "oauth: clientId, clientSecret, scopes; values hidden" in said
    assert "gets the value of oauth clientSecret of server 'proj' as written" in said
    user = servers(layout.paths.user)
    assert user["corp"] == {
        "url": "https://mcp.example.com/mcp",
        "type": "http",
        "oauth": {"clientId": "corp-client", "clientSecret": "${CORP_SECRET}", "scopes": ["mcp", "offline_access"]},
    }
    assert servers(layout.paths.workspace)["proj"]["oauth"] == {"clientId": "${P_ID}", "clientSecret": "S3CRET-CS"}
    # mcpvisor signs in with it as the pre-registered client.
    cfg = McpServerConfig.model_validate(expand_vars(user["corp"], {"CORP_SECRET": "s"}))
    assert oauth_settings("corp", cfg) == OAuthSettings(
        client_id="corp-client", client_secret="s", scopes="mcp offline_access"
    )


def test_claude_code_servers_turned_off_in_this_folder_are_left_out_of_it_and_noted_for_the_user(
    layout: Layout,
) -> None:
    """Claude Code's ``/mcp`` disable lists a server in the folder's ``disabledMcpServers``: a local one was imported
    into the workspace as if it ran there, a user one without a word that it does not run in this folder."""
    write_json(
        layout.home / ".claude.json",
        {
            "mcpServers": {"sentry": {"type": "http", "url": "https://mcp.sentry.dev/mcp"}, "kept": {"command": "k"}},
            "projects": {
                str(layout.root): {
                    "mcpServers": {"db": {"command": "db-mcp"}, "cache": {"command": "cache-mcp"}},
                    "disabledMcpServers": ["db", "sentry"],
                },
                "/elsewhere": {"disabledMcpServers": ["kept", "cache"]},
            },
        },
    )
    result = run(layout, "--from", "claude-code")
    assert result.exit_code == 1, result.output  # 'db' is not imported
    found = import_json(layout, "--from", "claude-code")
    claude_json = layout.home / ".claude.json"
    assert found["db"]["reason"] == (
        "it is turned off here in Claude Code (listed in 'disabledMcpServers' of this folder's entry in "
        f"{claude_json}); add it by hand if you want it"
    )
    assert servers(layout.paths.workspace) == {"cache": {"command": "cache-mcp"}}
    # A user's server runs in the other folders: imported, with how to turn it off in this one too.
    assert set(servers(layout.paths.user)) == {"sentry", "kept"}
    assert found["sentry"]["notes"] == [
        f"turned off in this folder in Claude Code (listed in 'disabledMcpServers' of this folder's entry in "
        f"{claude_json}): to do the same, add it to 'mcp.excluded' in this folder's settings"
    ]
    assert found["kept"]["notes"] == []


def test_a_gemini_oauth_block_keeps_what_mcpvisor_reads_and_notes_what_it_drops(layout: Layout) -> None:
    """Gemini CLI's ``oauth`` (endpoints, a redirect, audiences, ``enabled``) was copied whole: mcpvisor read only its
    client and scopes, and said nothing of the rest, which looked as if it were in force."""
    write_json(
        layout.home / ".gemini" / "settings.json",
        {
            "mcpServers": {
                "corp": {
                    "httpUrl": "https://corp.example/mcp",
                    "oauth": {
                        "enabled": True,
                        "clientId": "corp-client",
                        "clientSecret": "${CORP_SECRET}",
                        "authorizationUrl": "https://auth.corp.example/authorize",
                        "tokenUrl": "https://auth.corp.example/token",
                        "scopes": ["mcp"],
                        "redirectUri": "http://localhost:7777/oauth/callback",
                        "audiences": ["corp-api"],
                    },
                },
                "plain": {"httpUrl": "https://plain.example/mcp", "oauth": {"clientId": "p"}},
            }
        },
    )
    found = import_json(layout, "--from", "gemini")
    assert found["corp"]["notes"] == [
        "ignored 'audiences', 'authorizationUrl', 'enabled', 'redirectUri', 'tokenUrl' of 'oauth' (mcpvisor finds the "
        "authorization server's endpoints from the server, and has its own redirect)"
    ]
    assert found["plain"]["notes"] == []
    written = servers(layout.paths.user)
    assert written["corp"]["oauth"] == {"clientId": "corp-client", "clientSecret": "${CORP_SECRET}", "scopes": ["mcp"]}
    assert written["plain"]["oauth"] == {"clientId": "p"}
    cfg = McpServerConfig.model_validate(expand_vars(written["corp"], {"CORP_SECRET": "s"}))
    assert oauth_settings("corp", cfg) == OAuthSettings("corp-client", "s", "mcp")


def test_a_websocket_entry_is_left_out_saying_mcpvisor_does_not_speak_websocket(layout: Layout) -> None:
    """An entry of ``type`` ``ws`` was left out as "unknown transport type 'ws'; use 'stdio', 'sse' or 'http'", as
    if changing the word would do."""
    write_json(layout.home / ".claude.json", {"mcpServers": {"ide": {"type": "ws", "url": "ws://127.0.0.1:9/x"}}})
    found = import_json(layout, "--from", "claude-code")
    assert found["ide"]["reason"] == (
        "it connects over WebSocket ('type': 'ws'), which mcpvisor does not speak (nor MCP's standard transports): "
        "add the server's stdio or HTTP form by hand"
    )
