from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.oauth_settings import OAuthSettings, oauth_settings
from mcpvisor.host.settings.schema import (
    SERVER_ENTRY_JSON_SCHEMA,
    SETTINGS_SCHEMA,
    flatten_schema,
    is_restart_required_key,
    settings_json_schema,
    type_mismatches,
    unknown_keys,
)

KNOWN = [
    "mcpServers",
    "mcp",
    "mcp.allowed",
    "mcp.excluded",
    "mcp.serverCommand",
    "security",
    "security.folderTrust",
    "security.folderTrust.enabled",
    "ui",
    "ui.theme",
    "general",
    "general.debugMode",
]


def test_every_required_key_is_in_the_schema_with_both_flags() -> None:
    flat = flatten_schema()
    for key in KNOWN:
        assert key in flat, key
        assert isinstance(flat[key].requires_restart, bool)
        assert isinstance(flat[key].show_in_dialog, bool)


def test_flatten_lists_parents_before_children() -> None:
    keys = list(flatten_schema())
    assert keys.index("mcp") < keys.index("mcp.allowed")
    assert keys.index("security.folderTrust") < keys.index("security.folderTrust.enabled")


@pytest.mark.parametrize(
    ("key", "restart"),
    [
        ("mcpServers", False),
        ("mcp.allowed", False),
        ("mcp.excluded", False),
        ("mcp", True),
        ("mcp.serverCommand", True),
    ],
)
def test_the_three_mcp_keys_are_hot_reloadable_the_parent_and_server_command_are_not(key: str, restart: bool) -> None:
    assert flatten_schema()[key].requires_restart is restart
    assert is_restart_required_key(key) is restart


@pytest.mark.parametrize(
    ("path", "restart"),
    [
        ("mcpServers.a", False),
        ("mcpServers.a.args", False),
        ("mcpServers.mcp.serverCommand", False),
        ("mcp.allowed", False),
        ("mcp.excluded", False),
        ("mcp.unknownChild", True),
        ("mcp.serverCommand", True),
        ("security.folderTrust.enabled", True),
        ("security.folderTrust.other", True),
        ("ui.theme", False),
        ("ui.somethingNew", False),
        ("general.debugMode", True),
        ("noSuchKey", False),
        ("noSuchKey.child", False),
        ("mcpServer", False),
        ("mcpx.allowed", False),
    ],
)
def test_restart_required_is_decided_by_the_longest_covering_key(path: str, restart: bool) -> None:
    assert is_restart_required_key(path) is restart


def test_unknown_keys_are_listed_by_dotted_path_server_entries_are_free_form() -> None:
    data = {
        "mcpServers": {"a": {"command": "x", "whatever": 1}},
        "mcp": {"allowed": [], "allowd": []},
        "ui": {"theme": "x"},
        "typo": 1,
        "$schema": "x",
    }
    assert unknown_keys(data) == ["mcp.allowd", "typo"]


def test_type_mismatches_name_the_key_and_the_expected_type() -> None:
    data = {"mcp": {"allowed": "a", "excluded": [1]}, "ui": {"theme": 3}, "general": {"debugMode": 1}}
    assert type_mismatches(data) == [
        'mcp.allowed should be array, got string; taken as ["a"]',
        "mcp.excluded should be an array of strings",
        "ui.theme should be string, got integer",
        "general.debugMode should be boolean, got integer",
    ]


def test_the_json_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = settings_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert set(schema["properties"]) == set(SETTINGS_SCHEMA)


@pytest.mark.parametrize(
    ("document", "valid"),
    [
        ({}, True),
        ({"mcpServers": {"a": {"command": "x", "args": ["1"]}, "b": {"httpUrl": "http://h"}}}, True),
        ({"mcpServers": {"a": {"args": ["1"]}}}, False),
        ({"mcpServers": {"a": {"command": "x", "timeout": 0}}}, False),
        ({"mcp": {"allowed": ["a*"], "excluded": [], "serverCommand": "x"}}, True),
        ({"mcp": {"allowed": "a"}}, False),
        ({"security": {"folderTrust": {"enabled": "yes"}}}, False),
        ({"ui": {"theme": "dark"}, "general": {"debugMode": True}}, True),
        ({"somethingUnknown": 1}, True),
    ],
)
def test_the_json_schema_validates_settings_documents(document: dict[str, Any], valid: bool) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(settings_json_schema())
    assert validator.is_valid(document) is valid


def _snake(key: str) -> str:
    return re.sub(r"([A-Z])", r"_\1", key).lower()


def test_the_editor_schema_of_a_server_entry_is_the_model_field_by_field() -> None:
    """Every field of ``McpServerConfig`` a user writes is in the schema, under the spelling the README
    uses, and every property of the schema is one the model (or the oauth block) reads."""
    properties = SERVER_ENTRY_JSON_SCHEMA["properties"]
    set_by_the_host = {"scope", "extension_name"}  # where an entry came from: never written by people
    read = {_snake(key) for key in properties} - {"type", "oauth"}
    assert read == set(McpServerConfig.model_fields) - set_by_the_host
    entry = McpServerConfig.model_validate(_EXAMPLE_ENTRY)  # the README's spellings, all understood
    assert set(entry.model_extra or {}) == {"oauth"}
    assert (entry.http_url, entry.discovery_timeout_ms, entry.max_message_bytes) == (
        "https://mcp.example.test/mcp",
        5000,
        2048,
    )


_EXAMPLE_ENTRY: dict[str, Any] = {
    "httpUrl": "https://mcp.example.test/mcp",
    "headers": {"X-Team": "a"},
    "timeout": 60000,
    "discoveryTimeoutMs": 5000,
    "trust": False,
    "description": "d",
    "includeTools": ["a"],
    "excludeTools": ["b"],
    "shared": True,
    "maxMessageBytes": 2048,
    "oauth": {"clientId": "c"},
}


def test_the_oauth_block_of_the_schema_is_what_the_host_reads_field_by_field() -> None:
    oauth = SERVER_ENTRY_JSON_SCHEMA["properties"]["oauth"]["properties"]
    assert {_snake(key) for key in oauth} == {f.name for f in dataclasses.fields(OAuthSettings)}
    block = {
        "clientId": "c",
        "clientSecret": "s",
        "scopes": ["a", "b"],
        "callbackPort": 8123,
        "tokenEndpointAuthMethod": "client_secret_post",
        "clientMetadataUrl": "https://client.example.test/meta.json",
        "grant": "client_credentials",
        "privateKeyFile": "/k.pem",
        "signingAlgorithm": "ES256",
        "issuer": "https://as.example.test",
        "idp": {"tokenEndpoint": "https://idp.example.test/token", "idToken": "t"},
    }
    assert set(block) == set(oauth)
    settings = oauth_settings("r", McpServerConfig.model_validate({"httpUrl": "https://x.test/mcp", "oauth": block}))
    for key in block:  # every key of the schema is read into its field
        assert getattr(settings, _snake(key)) != getattr(OAuthSettings(), _snake(key)), key
