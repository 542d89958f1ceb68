"""Language server entries (SPEC §10): the shared .lsp.json format, fingerprints, sources and their order,
last good entries, and approvals of their own kind. Pure functions and real files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcpvisor.host.approvals import ApprovalStore
from mcpvisor.host.lsp.config import LspServerConfig, lsp_approval_hash
from mcpvisor.host.settings.lsp_servers import assemble_lsp_servers, load_lsp_file
from tests.layout import make_layout, replace_text

PYLSP: dict[str, Any] = {"command": "pylsp", "extensionToLanguage": {".py": "python"}}


def test_an_entry_in_the_claude_code_format_reads_with_its_defaults() -> None:
    cfg = LspServerConfig.from_entry(
        {
            "command": "pyright-langserver",
            "args": ["--stdio"],
            "extensionToLanguage": {"py": "python", ".PYI": "python"},
            "startupTimeout": 60000,
            "restartOnCrash": True,
        }
    )
    assert cfg.extension_to_language == {".py": "python", ".pyi": "python"}
    assert (cfg.startup_timeout_s, cfg.shutdown_timeout_s, cfg.restarts_allowed) == (60.0, 5.0, 3)
    assert cfg.target() == "pyright-langserver --stdio"
    assert cfg.languages() == ["python"]


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"command": "x"}, "extensionToLanguage: required"),
        ({"extensionToLanguage": {".py": "python"}}, "command: required for a stdio language server"),
        ({**PYLSP, "extensionToLanguage": {".py": ""}}, "map file extensions"),
        ({**PYLSP, "startupTimeout": 0}, "startupTimeout: must be a positive number of milliseconds"),
        ({**PYLSP, "maxRestarts": -1}, "maxRestarts: must be 0 or more"),
        ({**PYLSP, "transport": "tcp"}, "socket: required with transport 'tcp'"),
    ],
)
def test_an_invalid_entry_says_what_to_fix(entry: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        LspServerConfig.from_entry(entry)


@pytest.mark.parametrize(
    "key",
    ["LD_PRELOAD", "ld_library_path", "DYLD_INSERT_LIBRARIES", "NODE_OPTIONS", "PYTHONPATH"]
    + ["PYTHONHOME", "BASH_ENV", "NODE_PATH", "PERL5OPT", "RUBYOPT", "JAVA_TOOL_OPTIONS", "PYTHONUSERBASE", "HOME"]
    + ["GIT_CONFIG_VALUE_0", "npm_config_registry", "HTTPS_PROXY", "GOPATH", "CARGO_HOME", "KUBECONFIG", "GIT_ASKPASS"],
)
def test_a_repository_may_not_set_environment_that_injects_code(key: str) -> None:
    entry = {**PYLSP, "env": {key: "/tmp/evil"}}
    with pytest.raises(ValueError, match=f"a repository may not set {key}"):
        LspServerConfig.from_entry(entry, scope="project")
    assert LspServerConfig.from_entry(entry).env == {key: "/tmp/evil"}  # the user's own settings may


def test_a_repository_may_set_environment_that_chooses_no_code() -> None:
    env = {"CARGO_TARGET_DIR": "target/ra", "RUST_LOG": "info", "PYTHONUNBUFFERED": "1"}
    assert LspServerConfig.from_entry({**PYLSP, "env": env}, scope="project").env == env


@pytest.mark.parametrize("folder", ["..", "sub/../..", "/etc", "~/elsewhere"])
def test_a_repository_server_may_not_lead_its_workspace_folder_out_of_the_workspace(folder: str) -> None:
    entry = {**PYLSP, "workspaceFolder": folder}
    for scope in ("project", "workspace"):
        with pytest.raises(ValueError, match="must stay inside the workspace"):
            LspServerConfig.from_entry(entry, scope=scope)
    assert LspServerConfig.from_entry(entry).workspace_folder == folder  # the user's own settings may
    assert LspServerConfig.from_entry({**PYLSP, "workspaceFolder": "sub/pkg"}, scope="project").workspace_folder


def test_socket_transports_are_for_the_users_own_settings_only() -> None:
    entry = {"transport": "tcp", "socket": {"host": "127.0.0.1", "port": 9999}, "extensionToLanguage": {".x": "x"}}
    assert LspServerConfig.from_entry(entry).transport == "tcp"
    with pytest.raises(ValueError, match="'tcp' is allowed only in your own settings"):
        LspServerConfig.from_entry(entry, scope="workspace")


def test_what_restarts_what_applies_live_and_what_needs_approval_again() -> None:
    base = LspServerConfig.from_entry(PYLSP)
    live = LspServerConfig.from_entry({**PYLSP, "settings": {"pylsp": {"plugins": {}}}})
    routed = LspServerConfig.from_entry({**PYLSP, "extensionToLanguage": {".py": "python", ".pyi": "python"}})
    policy = LspServerConfig.from_entry({**PYLSP, "startupTimeout": 1000, "restartOnCrash": True})
    restart = [
        LspServerConfig.from_entry({**PYLSP, "args": ["-v"]}),
        LspServerConfig.from_entry({**PYLSP, "env": {"A": "1"}}),
        LspServerConfig.from_entry({**PYLSP, "initializationOptions": {"x": 1}}),
        LspServerConfig.from_entry({**PYLSP, "workspaceFolder": "sub"}),
    ]
    same = base.connection_id("p")
    assert live.connection_id("p") == routed.connection_id("p") == policy.connection_id("p") == same
    assert all(cfg.connection_id("p") != same for cfg in restart)
    # Everything a repository could use to run code is bound by the approval; timeouts are not.
    assert policy.approval_hash == base.approval_hash
    assert all(cfg.approval_hash != base.approval_hash for cfg in (live, routed, *restart))


def test_the_approval_hash_is_taken_before_variables_expand() -> None:
    entry = {**PYLSP, "env": {"TOKEN": "${TOKEN}"}}
    one = LspServerConfig.from_entry(entry, expand=lambda e: {**e, "env": {"TOKEN": "a"}})
    two = LspServerConfig.from_entry(entry, expand=lambda e: {**e, "env": {"TOKEN": "b"}})
    assert one.approval_hash == two.approval_hash == lsp_approval_hash(entry)


def test_sources_replace_entries_by_key_in_scope_order(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    replace_text(layout.paths.user, json.dumps({"lspServers": {"py": PYLSP, "ts": {**PYLSP, "command": "ts"}}}))
    replace_text(layout.root / ".lsp.json", json.dumps({"py": {**PYLSP, "command": "pyright"}, "go": {**PYLSP}}))
    cli = tmp_path / "cli.json"
    cli.write_text(json.dumps({"go": {**PYLSP, "command": "gopls"}}))
    settings = layout.settings()
    assembled = assemble_lsp_servers(
        settings.lsp_layers(), settings.lsp_project, [load_lsp_file(cli, layout.env)], env=layout.env
    )
    assert {n: c.command for n, c in assembled.servers.items()} == {"py": "pyright", "ts": "ts", "go": "gopls"}
    assert {n: e.source for n, e in assembled.sources.items()} == {"py": "project", "ts": "user", "go": "cli"}
    assert assembled.servers["py"].scope == "project"
    assert assembled.servers["ts"].scope is None


def test_a_language_server_with_a_blank_or_unshowable_name_is_skipped_with_a_warning_as_an_mcp_server_is(
    tmp_path: Path,
) -> None:
    """Before, it was configured: status and lsp list showed a row with no name, and lsp approve '' approved it."""
    layout = make_layout(tmp_path)
    replace_text(layout.paths.user, json.dumps({"lspServers": {"": PYLSP, "py": PYLSP}}))
    replace_text(layout.root / ".lsp.json", json.dumps({" ": PYLSP, "go": PYLSP, "a\nb": PYLSP}))
    settings = layout.settings()
    assembled = assemble_lsp_servers(settings.lsp_layers(), settings.lsp_project, env=layout.env)
    assert sorted(assembled.servers) == ["go", "py"]
    assert (
        f"skipped a language server named '' in {layout.paths.user}: a language server needs a name; fix lspServers"
    ) in assembled.warnings
    assert (
        f"skipped a language server named ' ' in {layout.root / '.lsp.json'}: a language server needs a name; "
        "give it a name (its key)"
    ) in assembled.warnings
    assert (
        f"skipped language server 'a\\nb' in {layout.root / '.lsp.json'}: its name holds \\n, which would show it as "
        "another name or split its line; rename it in the file"
    ) in assembled.warnings


def test_two_language_servers_whose_names_look_the_same_but_are_written_differently_are_warned_about(
    tmp_path: Path,
) -> None:
    layout = make_layout(tmp_path)
    replace_text(layout.root / ".lsp.json", json.dumps({"caf\u00e9": PYLSP, "cafe\u0301": PYLSP}))
    settings = layout.settings()
    assembled = assemble_lsp_servers(settings.lsp_layers(), settings.lsp_project, env=layout.env)
    assert len(assembled.servers) == 2
    assert assembled.warnings == (
        f"language servers 'cafe\u0301' and 'caf\u00e9' in {layout.root / '.lsp.json'} look the same but are written "
        "with different characters ('cafe\\u0301', 'caf\\xe9'): each is a server of its own; rename one of them",
    )


def test_a_bad_entry_keeps_its_last_good_one_and_a_broken_file_keeps_the_last_good_state(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    lsp_json = layout.root / ".lsp.json"
    replace_text(lsp_json, json.dumps({"a": PYLSP, "b": {**PYLSP, "command": "b"}}))
    settings = layout.settings()
    replace_text(lsp_json, json.dumps({"a": {**PYLSP, "extensionToLanguage": "oops"}, "b": {**PYLSP, "command": "c"}}))
    assert settings.reload_scope("lsp_project").changed
    servers = settings.lsp_project.servers
    assert (servers["a"].config.command, servers["b"].config.command) == ("pylsp", "c")
    notice = next(
        w for w in settings.warnings if "the last good configuration of language server 'a' stays in force" in w
    )
    assert "(a: extensionToLanguage: expected an object)" in notice
    replace_text(lsp_json, '{"a": {"command": ')  # half a save
    reload = settings.reload_scope("lsp_project")
    assert reload.error is not None
    assert (reload.error.line, reload.error.column) == (1, 19)
    assert set(settings.lsp_project.servers) == {"a", "b"}


def test_an_untrusted_folder_reads_no_lsp_json(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    replace_text(layout.paths.user, json.dumps({"security": {"folderTrust": {"enabled": True}}}))
    replace_text(layout.root / ".lsp.json", json.dumps({"a": PYLSP}))
    assert not layout.settings().lsp_project.servers


def test_language_servers_are_decided_apart_from_mcp_servers_of_the_same_name(tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path / "home" / "approvals.json")
    root = tmp_path / "ws"
    root.mkdir()
    cfg = LspServerConfig.from_entry(PYLSP, scope="project")
    assert store.get_state(root, "python", cfg, "lsp") == "pending"
    store.approve(root, "python", cfg, "lsp")
    assert store.get_state(root, "python", cfg, "lsp") == "approved"
    assert store.get_state(root, "python", cfg) == "pending"  # an MCP server named python is another matter
    edited = LspServerConfig.from_entry({**PYLSP, "args": ["-v"]}, scope="project")
    assert store.get_state(root, "python", edited, "lsp") == "pending"
    data = json.loads(store.path.read_text())
    assert set(data) == {f"lsp:{root.resolve()}"}
