"""The sign-in provider (``host/oauth.py``) overrides private methods of the SDK's ``OAuthClientProvider``.
The SDK is pinned to its minor version while that lasts (pyproject.toml); this test fails loudly, naming
the method, when a new SDK moves one of them or changes its parameters."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from mcp.client.auth import OAuthClientProvider

from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.oauth import TokenStore, oauth_provider


def host_provider(tmp_path: Path) -> Any:
    """The provider a host signs a remote server's requests with (no sign-in handlers)."""
    cfg = McpServerConfig.model_validate({"url": "https://mcp.example.test/mcp"})
    return oauth_provider(
        TokenStore(tmp_path / "tokens.json"),
        "remote",
        cfg,
        redirect_uri="http://127.0.0.1:1/callback",
        redirect_handler=None,
        callback_handler=None,
    )


def test_every_private_sdk_method_the_provider_overrides_still_exists_with_its_parameters(tmp_path: Path) -> None:
    provider = host_provider(tmp_path)
    subclass = type(provider)
    assert issubclass(subclass, OAuthClientProvider)
    overridden = sorted(
        name
        for name, value in vars(subclass).items()
        if name.startswith("_") and not name.startswith("__") and callable(value)
    )
    ours = {
        "_choose_method",
        "_refresh_due",
        "_adopt_stored_tokens",
        "_take_turn",
        "_end_turn",
        "_note_step_up",
        "_gone",
    }
    assert set(overridden) >= {"_initialize", "_perform_authorization", "_handle_token_response"}
    for name in sorted(set(overridden) - ours):
        base = getattr(OAuthClientProvider, name, None)
        assert base is not None, (
            f"the SDK's OAuthClientProvider has no {name} any more; host/oauth.py overrides it: adapt the "
            "provider to the new SDK before widening the pin in pyproject.toml"
        )
        theirs = list(inspect.signature(base).parameters)
        mine = list(inspect.signature(getattr(subclass, name)).parameters)
        assert mine == theirs, f"OAuthClientProvider.{name} now takes {theirs}; host/oauth.py's override takes {mine}"


def test_the_sdk_state_the_refresh_turn_reads_is_still_there(tmp_path: Path) -> None:
    """The provider reads whether the SDK initialized its context, and asks the context whether its token is
    valid and can be refreshed, to decide whether a request refreshes first (one process at a time)."""
    provider = host_provider(tmp_path)
    assert provider._initialized is False
    assert provider.context.is_token_valid() is False
    assert provider.context.can_refresh_token() is False
    assert provider._refresh_due() is False  # nothing stored: nothing to refresh
