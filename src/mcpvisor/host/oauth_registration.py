"""How mcpvisor's own OAuth client is registered with an authorization server (dynamic client registration).

An authorization server refuses a client the scopes it was not registered for: a sign-in asks for the
scopes a refused request asked for in the registration too, and a stored registration that does not cover
what a sign-in asks now is made again.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

__all__ = ["registered_for", "widening_metadata"]


@functools.cache
def widening_metadata() -> type[Any]:
    """The SDK's client metadata, whose scope keeps what the sign-in wants (``wanted``) in whatever it is set to."""
    from mcp.client.auth.utils import union_scopes
    from mcp.shared.auth import OAuthClientMetadata
    from pydantic import PrivateAttr

    class WideningMetadata(OAuthClientMetadata):
        _wanted: str | None = PrivateAttr(default=None)

        @property
        def wanted(self) -> str | None:
            return self._wanted

        @wanted.setter
        def wanted(self, scopes: str | None) -> None:
            self._wanted = scopes

        def __setattr__(self, field: str, value: Any) -> None:
            super().__setattr__(field, union_scopes(value, self._wanted) if field == "scope" else value)

    return WideningMetadata


def registered_for(record: Mapping[str, Any]) -> bool:
    """Whether a dynamically registered client in ``record`` (if any) may ask for the scopes a refused request
    asked for (a scope step-up): an authorization server refuses a client the scopes it was not registered
    with. Without a step-up the client stands (a server may leave the scope out of its registration answer)."""
    client, needed = record.get("client"), set(str(record.get("scope_needed") or "").split())
    if not isinstance(client, dict) or not needed:
        return True
    return needed <= set(str(client.get("scope") or "").split())
