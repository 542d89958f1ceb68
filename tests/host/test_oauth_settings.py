"""A server entry's ``oauth`` block: what is accepted, what is refused with the fix, and what the status
view says about a sign-in (never a token)."""

from __future__ import annotations

from typing import Any

import pytest

from mcpvisor.core.errors import ConfigError
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.oauth_settings import oauth_settings, token_key
from mcpvisor.host.oauth_store import SignIn, missing_scopes, sign_in_state


def entry(**oauth: Any) -> McpServerConfig:
    return McpServerConfig.model_validate({"type": "http", "url": "https://mcp.example.com/mcp", "oauth": oauth})


def test_a_machine_to_machine_entry_is_read_whole() -> None:
    settings = oauth_settings(
        "t",
        entry(
            grant="client_credentials",
            clientId="c",
            privateKeyFile="/k.pem",
            signingAlgorithm="ES256",
            issuer="https://auth.example.com",
        ),
    )
    assert settings.machine
    assert (settings.client_id, settings.private_key_file, settings.signing_algorithm) == ("c", "/k.pem", "ES256")
    assert not oauth_settings("t", entry(clientId="c")).machine


@pytest.mark.parametrize(
    ("oauth", "message"),
    [
        ({"grant": "password"}, "mcpServers.t.oauth.grant must be one of authorization_code, client_credentials"),
        ({"tokenEndpointAuthMethod": "basic"}, "mcpServers.t.oauth.tokenEndpointAuthMethod must be one of"),
        ({"clientMetadataUrl": "http://x.example/c.json"}, "clientMetadataUrl must be an https URL with a path"),
        ({"clientMetadataUrl": "https://x.example/"}, "clientMetadataUrl must be an https URL with a path"),
        ({"grant": "client_credentials", "clientId": "c"}, "needs clientId and clientSecret (or privateKeyFile)"),
        ({"grant": "identity_assertion", "clientId": "c", "clientSecret": "s"}, "needs clientId, clientSecret and idp"),
        ({"idp": {"tokenEndpoint": "https://idp"}}, "idp must be an object with tokenEndpoint and idToken"),
        ({"signingAlgorithm": "none"}, "signingAlgorithm must be one of RS256"),
    ],
)
def test_a_malformed_oauth_block_names_the_field_and_the_fix(oauth: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        oauth_settings("t", entry(**oauth))


def test_the_status_says_a_wider_sign_in_is_needed_and_how_a_machine_client_is_signed_in() -> None:
    cfg = entry()
    key = token_key(cfg, oauth_settings("t", cfg))
    tokens = {"access_token": "secret-token", "scope": "mcp:basic"}
    wider = sign_in_state({key: {"tokens": tokens, "scope_needed": "mcp:basic mcp:write"}}, "t", cfg)
    assert wider.describe() == "signed in; needs a wider sign-in (mcp:write)"
    assert "secret-token" not in repr(wider)
    assert SignIn(True, machine=True).describe() == "signed in (client credentials)"
    assert missing_scopes("a b", "a b c") is None
    assert missing_scopes("a b", None) == "a b"
