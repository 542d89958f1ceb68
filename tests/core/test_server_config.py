"""McpServerConfig and the three fingerprints (SPEC §2.1, §3)."""

from __future__ import annotations

import re
from functools import partial
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from mcpvisor.core.exposure import exposure_of
from mcpvisor.core.server_config import (
    McpServerConfig,
    approval_hash,
    connection_id_of,
    normalize_server_entry,
    redact_text,
)
from mcpvisor.host.settings.expand import expand_vars

BASE: dict[str, Any] = {
    "command": "node",
    "args": ["server.js", "--port", "1"],
    "env": {"TOKEN": "secret", "MODE": "x"},
    "cwd": "/srv",
    "timeout": 5000,
    "trust": False,
    "includeTools": ["a"],
    "description": "d",
}


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"httpUrl": "http://h/mcp"}, {"http_url": "http://h/mcp"}),
        ({"type": "http", "url": "http://h/mcp"}, {"http_url": "http://h/mcp"}),
        ({"type": "streamable-http", "url": "http://h/mcp"}, {"http_url": "http://h/mcp"}),
        ({"type": "sse", "url": "http://h/sse"}, {"url": "http://h/sse"}),
        ({"type": "stdio", "command": "x"}, {"command": "x"}),
        ({"includeTools": ["a"], "excludeTools": ["b"]}, {"include_tools": ["a"], "exclude_tools": ["b"]}),
    ],
)
def test_common_spellings_normalise_to_canonical_fields(entry: dict[str, Any], expected: dict[str, Any]) -> None:
    assert normalize_server_entry(entry) == expected


def test_transport_kind_follows_the_fields() -> None:
    assert McpServerConfig(command="x").transport == "stdio"
    assert McpServerConfig.model_validate({"type": "http", "url": "http://h"}).transport == "http"
    assert McpServerConfig(url="http://h/sse").transport == "sse"


def test_a_server_without_transport_is_a_clear_error() -> None:
    with pytest.raises(ValidationError, match="no transport"):
        McpServerConfig.model_validate({"description": "nothing to run"})


@pytest.mark.parametrize(
    ("kind", "needed"),
    [("http", "'url' (the server's address)"), ("sse", "'url'"), ("stdio", "'command' (the program to run)")],
)
def test_a_typed_server_without_its_field_is_told_the_field_its_type_needs(kind: str, needed: str) -> None:
    """Before: a Claude Code entry ``{"type": "http"}`` without its url was told "set 'command' (stdio), 'url' (SSE) or
    'httpUrl' (streamable HTTP)": 'url' is its streamable HTTP address, and the type it gave went unread."""
    with pytest.raises(ValidationError, match=f"no transport: type '{kind}' needs {re.escape(needed)}"):
        McpServerConfig.model_validate({"type": kind, "headers": {"A": "b"}})


def test_an_unknown_type_is_a_clear_error() -> None:
    with pytest.raises(ValidationError, match="unknown transport type 'carrier-pigeon'"):
        McpServerConfig.model_validate({"type": "carrier-pigeon", "url": "x"})


def test_unknown_fields_are_kept_for_the_approval_hash_only() -> None:
    a = McpServerConfig.model_validate({"command": "x", "futureField": 1})
    b = McpServerConfig.model_validate({"command": "x", "futureField": 2})
    assert connection_id_of("s", a) == connection_id_of("s", b)
    assert a.approval_hash != b.approval_hash


def test_connection_id_has_the_name_and_sixteen_hex_digits() -> None:
    cid = connection_id_of("github", McpServerConfig.model_validate(BASE))
    name, fp = cid.split("::")
    assert name == "github"
    assert len(fp) == 16
    int(fp, 16)


def test_null_is_distinct_from_absent_in_the_approval_hash() -> None:
    assert approval_hash({"command": "x"}) != approval_hash({"command": "x", "cwd": None})


def test_scope_extension_and_description_do_not_change_the_approval_hash() -> None:
    plain = approval_hash({"command": "x"})
    assert approval_hash({"command": "x", "scope": "project", "extension_name": "e", "description": "y"}) == plain


def test_approval_hash_is_taken_before_variable_expansion() -> None:
    def expand_with(value: str) -> Any:
        return lambda entry: {**entry, "env": {"TOKEN": value}}

    entry = {"command": "x", "env": {"TOKEN": "${TOKEN}"}}
    one = McpServerConfig.from_entry(entry, expand=expand_with("a"), scope="project")
    two = McpServerConfig.from_entry(entry, expand=expand_with("b"), scope="project")
    assert one.env == {"TOKEN": "a"}
    assert one.scope == "project"
    assert one.approval_hash == two.approval_hash
    assert connection_id_of("s", one) != connection_id_of("s", two)


def test_target_shows_the_command_line_or_url_without_secrets() -> None:
    cfg = McpServerConfig.model_validate(BASE)
    assert cfg.target() == "node server.js --port 1"
    assert "secret" not in cfg.target()


def test_env_values_are_strings_numbers_or_booleans_and_null_objects_and_arrays_are_refused() -> None:
    cfg = McpServerConfig.model_validate({"command": "x", "env": {"A": 1, "B": True, "C": "c"}})
    assert cfg.env == {"A": "1", "B": "true", "C": "c"}
    for value, kind in ((None, "null"), ({"x": 1}, "an object"), ([1], "an array")):
        with pytest.raises(ValidationError, match=f"the value of 'D' is {kind}; write a string"):
            McpServerConfig.model_validate({"command": "x", "env": {"D": value}})


def test_what_a_variable_stands_for_is_shown_as_written_never_its_value() -> None:
    env = {"TOKEN": "argsecret-777", "HOME": "/home/me"}
    expand = partial(expand_vars, env=env)
    entry = {"command": "${HOME}/bin/tool", "args": ["--api-key", "${TOKEN}", "--key=$TOKEN"]}
    cfg = McpServerConfig.from_entry(entry, expand=expand)
    assert cfg.args == ("--api-key", "argsecret-777", "--key=argsecret-777")  # what runs
    assert cfg.target() == "${HOME}/bin/tool --api-key ${TOKEN} --key=$TOKEN"
    said = redact_text("could not start /home/me/bin/tool: it printed argsecret-777 (--key=argsecret-777)", cfg)
    assert said == "could not start ${HOME}/bin/tool: it printed ${TOKEN} (--key=$TOKEN)"

    remote = McpServerConfig.from_entry({"type": "http", "url": "https://h.example/${TOKEN}/mcp?k=1"}, expand=expand)
    assert remote.http_url == "https://h.example/argsecret-777/mcp?k=1"
    assert remote.target() == "https://h.example/${TOKEN}/mcp?k=***"
    assert "argsecret" not in redact_text(f"failed (reaching {remote.http_url})", remote)


def _shuffled(d: dict[str, Any], order: list[int]) -> dict[str, Any]:
    keys = list(d)
    ranked = sorted(range(len(keys)), key=lambda i: order[i % len(order)] if order else i)
    return {keys[i]: (_shuffled(d[keys[i]], order) if isinstance(d[keys[i]], dict) else d[keys[i]]) for i in ranked}


@given(st.lists(st.integers(), min_size=1, max_size=12))
def test_key_order_never_changes_a_fingerprint(order: list[int]) -> None:
    a = McpServerConfig.model_validate(BASE)
    b = McpServerConfig.model_validate(_shuffled(BASE, order))
    assert connection_id_of("s", a) == connection_id_of("s", b)
    assert a.approval_hash == b.approval_hash


CONNECTION_CHANGES: list[tuple[str, Any]] = [
    ("command", "python"),
    ("args", ["server.js", "--port", "2"]),
    ("args", ["--port", "1", "server.js"]),
    ("env", {"TOKEN": "other", "MODE": "x"}),
    ("env", {"TOKEN": "secret"}),
    ("cwd", "/tmp"),
    ("timeout", 6000),
    ("headers", {"Authorization": "Bearer x"}),
    ("url", "http://h/sse"),
    ("oauth", {"enabled": True}),
]


@pytest.mark.parametrize(("field", "value"), CONNECTION_CHANGES)
def test_any_connection_field_change_changes_the_connection_id_and_approval_hash(field: str, value: Any) -> None:
    a = McpServerConfig.model_validate(BASE)
    b = McpServerConfig.model_validate({**BASE, field: value})
    assert connection_id_of("s", a) != connection_id_of("s", b)
    assert a.approval_hash != b.approval_hash


@given(
    trust=st.none() | st.booleans(),
    include=st.none() | st.lists(st.text(min_size=1, max_size=5), max_size=3),
    exclude=st.none() | st.lists(st.text(min_size=1, max_size=5), max_size=3),
    description=st.none() | st.text(max_size=10),
    scope=st.none() | st.sampled_from(["project", "workspace", "system"]),
)
def test_exposure_only_changes_never_change_the_connection_id(
    trust: bool | None, include: list[str] | None, exclude: list[str] | None, description: str | None, scope: str | None
) -> None:
    a = McpServerConfig.model_validate(BASE)
    b = McpServerConfig.model_validate(
        {
            **BASE,
            "trust": trust,
            "includeTools": include,
            "excludeTools": exclude,
            "description": description,
            "scope": scope,
        }
    )
    assert connection_id_of("s", a) == connection_id_of("s", b)


def test_exposure_filters_exclude_wins_over_include() -> None:
    cfg = McpServerConfig.model_validate({"command": "x", "includeTools": ["a", "b"], "excludeTools": ["b"]})
    exposure = exposure_of(cfg)
    assert exposure.admits("a")
    assert not exposure.admits("b")
    assert not exposure.admits("c")
    assert exposure_of(McpServerConfig(command="x")).admits("anything")


def test_target_hides_url_credentials_and_query_values() -> None:
    cfg = McpServerConfig(http_url="https://user:pw@example.com/mcp?token=s3cret&x=1", headers={"Authorization": "B"})
    assert cfg.target() == "https://example.com/mcp?token=***&x=***"


def test_a_password_in_a_url_of_the_command_line_is_never_shown_but_is_run() -> None:
    """A DSN in an argument ("postgres://app:s3cret@db/prod") was shown as written by mcp list, lsp list and
    mcp import's plan, while a remote server's URL loses its credentials. It loses them too; a URL without a
    password, or with a ${VAR} for one, is shown as written."""
    args = ["--db", "postgres://app:s3cret@db/prod", "--dsn=mysql://u:pw@h/d?ssl=1", "redis://:${PW}@h/0"]
    cfg = McpServerConfig.model_validate({"command": "srv", "args": [*args, "git+ssh://git@github.com/a/b?x=1"]})
    assert cfg.args[1:3] == ("postgres://app:s3cret@db/prod", "--dsn=mysql://u:pw@h/d?ssl=1")  # what runs
    shown = "srv --db postgres://db/prod --dsn=mysql://h/d?ssl=*** redis://:${PW}@h/0 git+ssh://git@github.com/a/b?x=1"
    assert cfg.target() == shown
    assert "s3cret" not in repr(cfg)
    assert ":pw@" not in repr(cfg)


def test_a_url_in_parentheses_is_redacted_and_the_parenthesis_kept() -> None:
    text = "ConnectError: refused (reaching http://127.0.0.1:1/mcp?key=s3cret)"
    assert redact_text(text) == "ConnectError: refused (reaching http://127.0.0.1:1/mcp?key=***)"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("reach https://bot:s3cr(et)pw@api.example.com/mcp failed", "reach https://api.example.com/mcp failed"),
        (
            "GET https://api.example.com/mcp?api_key=ab(c)d3f4 failed",
            "GET https://api.example.com/mcp?api_key=*** failed",
        ),
        ("(see https://h/mcp?k=a(b)c)", "(see https://h/mcp?k=***)"),
        (
            "with 404 (reaching http://h:9/nope?token=abc); check the URL",
            "with 404 (reaching http://h:9/nope?token=***); check the URL",
        ),
        ("reach http://h/mcp?k=abc, then", "reach http://h/mcp?k=***, then"),
    ],
)
def test_parentheses_inside_a_url_are_redacted_with_it(text: str, shown: str) -> None:
    assert redact_text(text) == shown


def test_a_configs_repr_and_its_validation_errors_show_no_secret() -> None:
    """A repr reaches a log through ``%r``, a debugger or a traceback: what ``${VAR}`` stood for, env and header
    values, URL credentials and a value named like a secret stay out of it."""
    from mcpvisor.host.lsp.config import LspServerConfig
    from mcpvisor.host.options import HostOptions

    env = {"TOK": "ghp_REALTOKEN"}
    expand = partial(expand_vars, env=env)
    stdio = McpServerConfig.from_entry(
        {
            "command": "srv",
            "args": ["--key", "${TOK}"],
            "env": {"GITHUB_TOKEN": "${TOK}"},
            "oauth": {"clientSecret": "${TOK}"},
        },
        expand=expand,
    )
    http = McpServerConfig.from_entry(
        {"type": "http", "url": "https://u:${TOK}@h/mcp?k=${TOK}", "headers": {"Authorization": "Bearer ${TOK}"}},
        expand=expand,
    )
    lsp = LspServerConfig.from_entry(
        {
            "command": "pylsp",
            "args": ["${TOK}"],
            "env": {"A": "${TOK}"},
            "extensionToLanguage": {".py": "python"},
            "initializationOptions": {"apiKey": "${TOK}"},
        },
        expand=expand,
    )
    assert stdio.args == ("--key", "ghp_REALTOKEN")
    assert stdio.env == {"GITHUB_TOKEN": "ghp_REALTOKEN"}
    for shown in (stdio, http, lsp, HostOptions(env=env)):
        assert "REALTOKEN" not in repr(shown) + str(shown)
    assert "args=('--key', '${TOK}')" in repr(stdio)
    assert "env={'GITHUB_TOKEN': '***'}" in repr(stdio)
    assert "oauth={'clientSecret': '***'}" in repr(stdio)
    assert "http_url='https://h/mcp?k=***'" in repr(http)
    assert "headers={'Authorization': '***'}" in repr(http)
    assert "initialization_options={'apiKey': '***'}" in repr(lsp)
    with pytest.raises(ValidationError) as raised:
        McpServerConfig(command="x", env={"K": ["SUPERSECRET"]})
    assert "SUPERSECRET" not in str(raised.value)
    assert "the value of 'K' is an array" in str(raised.value)
    with pytest.raises(ValidationError) as raised_lsp:
        LspServerConfig(command="x", env="SUPERSECRET", extension_to_language={".py": "python"})
    assert "SUPERSECRET" not in str(raised_lsp.value)


def test_user_info_made_of_variable_references_only_is_no_secret_to_hide() -> None:
    said = "write it as ${VAR} (e.g. redis://:${REDIS_PASSWORD}@host:6379/0) and set VAR"
    assert redact_text(said) == said
    assert redact_text("redis://:hunter2@host/0 redis://u:${P}@h/0") == "redis://host/0 redis://h/0"


def test_a_field_is_shown_as_the_readme_spells_it() -> None:
    from mcpvisor.core.spellings import file_name

    shown = {field: file_name(field) for field in McpServerConfig.model_fields}
    assert {field: name for field, name in shown.items() if field != name} == {
        "http_url": "httpUrl",
        "include_tools": "includeTools",
        "exclude_tools": "excludeTools",
        "discovery_timeout_ms": "discoveryTimeoutMs",
        "extension_name": "extensionName",
        "max_message_bytes": "maxMessageBytes",
    }
