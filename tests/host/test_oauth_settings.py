"""A server entry's ``oauth`` block: what is accepted, what is refused with the fix, and what the status
view says about a sign-in (never a token)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mcpvisor.core.errors import ConfigError
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.oauth_settings import oauth_settings, token_key
from mcpvisor.host.oauth_store import SignIn, TokenStore, missing_scopes, sign_in_state


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


@pytest.mark.parametrize(
    "record",
    [
        {"tokens": "garbage"},
        {"tokens": {"access_token": 5}},
        {"tokens": {"access_token": "a", "token_type": "MAC"}},
        {"tokens": {"access_token": "a", "refresh_token": ["r"]}},
        {"tokens": {"access_token": "a"}, "expires_at": "soon"},
        "not a record",
    ],
)
def test_a_stored_sign_in_the_sdk_could_not_read_is_called_unreadable_not_signed_in(record: object) -> None:
    cfg = entry()
    state = sign_in_state({token_key(cfg, oauth_settings("t", cfg)): record}, "t", cfg)
    assert state.unreadable
    assert state.describe() == "the stored sign-in is unreadable"


def test_a_readable_sign_in_and_none_are_told_apart_from_an_unreadable_one() -> None:
    cfg = entry()
    key = token_key(cfg, oauth_settings("t", cfg))
    good = sign_in_state({key: {"tokens": {"access_token": "a", "token_type": "bearer"}, "expires_at": None}}, "t", cfg)
    assert (good.signed_in, good.unreadable) == (True, False)
    for records in ({}, {key: {"client": {"client_id": "c"}}}):  # a registration without tokens is no sign-in
        none = sign_in_state(records, "t", cfg)
        assert (none.signed_in, none.unreadable) == (False, False)


async def test_one_process_of_the_machine_refreshes_a_sign_in_at_a_time(tmp_path: Path) -> None:
    """Refresh tokens rotate, and one used twice may revoke the whole grant: a second store (another process's)
    waits for the first's turn to end and reads what it stored, rather than refreshing with the same token."""
    import anyio

    path = tmp_path / "oauth-tokens.json"
    first, second = TokenStore(path), TokenStore(path)
    turn = await first.refresh_turn("https://x.example/mcp")
    assert turn is not None
    waited: list[object] = []

    async def wait_for_a_turn() -> None:
        waited.append(await second.refresh_turn("https://x.example/mcp"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait_for_a_turn)
        await anyio.sleep(0.3)
        assert waited == []  # still waiting while the first refreshes
        await turn.release(True)
    assert waited == [None]  # the first refreshed: the stored tokens are read again
    other = await second.refresh_turn("https://y.example/mcp")  # another sign-in: a turn of its own at once
    assert other is not None
    await other.release(False)
    again = await second.refresh_turn("https://x.example/mcp")  # the first's turn over: a turn at once
    assert again is not None
    await again.release(False)
