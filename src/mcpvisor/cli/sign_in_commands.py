"""``mcp login | logout``: sign in to a configured remote server, or out of it (the only management commands that
may connect to a server; ``login`` does)."""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.markup import escape

from mcpvisor.cli.commands import configured, load_state
from mcpvisor.cli.fleet import token_store
from mcpvisor.cli.options import Signals
from mcpvisor.core.errors import ConfigError
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host import paths
from mcpvisor.host.approvals import is_gated
from mcpvisor.host.hot_reload import DesiredState
from mcpvisor.host.status import command_hints, plural
from mcpvisor.shell.consoles import new_console

__all__ = ["login", "logout"]


def _remote_server(
    env: Mapping[str, str], workspace: Path | None, name: str, what: str, mcp_config: Sequence[Path] = ()
) -> tuple[DesiredState, McpServerConfig, str]:
    """The configured remote server ``name`` (the servers, its config, the command that signs in to it as it is
    to be pasted: ``{name}``, :func:`~mcpvisor.host.status.command_hints`), or :class:`ConfigError` saying why not."""
    from mcpvisor.host.oauth import check_sign_in

    settings, approvals, state = load_state(env, workspace, mcp_config, fleets_settings=True)
    cfg = configured(settings, state, name, what)
    approve, login = command_hints(settings.root, options=approvals.decided_with, home=paths.named_home(env))
    check_sign_in(
        name,
        cfg,
        label=state.assembled.sources[name].label,
        approval=approvals.get_state(settings.root, name, cfg) if is_gated(cfg) else None,
        what=what,
        approve_command=approve,
    )
    return state, cfg, login


def login(
    *,
    env: Mapping[str, str],
    workspace: Path | None,
    name: str,
    timeout_s: float,
    browser: bool,
    mcp_config: Sequence[Path] = (),
) -> None:
    import webbrowser

    import anyio

    from mcpvisor.host.oauth_login import login as sign_in

    state, cfg, login_command = _remote_server(env, workspace, name, "sign in to", mcp_config)
    store = token_store(env)
    err = new_console(stderr=True, highlight=False)

    def open_url(url: str) -> bool:
        try:
            return browser and webbrowser.open(url)
        except webbrowser.Error:
            return False

    def announce(text: str) -> None:
        err.print(text, soft_wrap=True, markup=False)

    tools = anyio.run(
        lambda: sign_in(
            store,
            name,
            cfg,
            open_url=open_url,
            announce=announce,
            timeout_s=timeout_s,
            log_dir=paths.log_dir(env),
            defined_in=state.assembled.sources[name].path,
            login_command=login_command,
        )
    )
    new_console(highlight=False).print(
        f"[green]Signed in[/] to [bold]{name}[/] ({plural(tools, 'tool')}); the sign-in is kept in "
        f"{store.place}. A running mcpvisor connects it now."
    )


def logout(*, env: Mapping[str, str], workspace: Path | None, name: str, mcp_config: Sequence[Path] = ()) -> None:
    import anyio

    from mcpvisor.host.oauth import oauth_settings, token_key
    from mcpvisor.host.oauth_revocation import not_forgotten, revoke
    from mcpvisor.host.oauth_settings import server_url, sign_in_key

    state, cfg, _ = _remote_server(env, workspace, name, "sign out of", mcp_config)
    settings = oauth_settings(name, cfg)
    key = token_key(cfg, settings)
    sharing = sorted(n for n, c in state.assembled.servers.items() if n != name and sign_in_key(n, c) == key)
    store = token_store(env)
    store.read()  # a corrupt store: say so rather than "not signed in"
    record = store.get(key)
    revoked = ""

    async def revoke_unless_interrupted() -> str:
        # Ctrl-C is taken on the loop while it revokes, and cancels through anyio (which delivers it again until
        # the revocation's HTTP calls are left): a KeyboardInterrupt raised wherever Python happened to be, or a
        # cancellation that one library swallowed, could leave it waiting out the server's timeout instead.
        with Signals((signal.SIGINT,)) as signals, anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:

                async def on_ctrl_c() -> None:
                    await signals.wait(1)
                    scope.cancel()

                tg.start_soon(on_ctrl_c)
                new_console(stderr=True, highlight=False).print(
                    "[dim]Revoking the sign-in at the authorization server… (Ctrl-C skips it)[/]"
                )
                outcome = await revoke(server_url(cfg) or "", record, settings)
                tg.cancel_scope.cancel()
                return outcome
        return "revoking them at the authorization server was skipped (Ctrl-C)"

    try:
        if record.get("tokens"):
            revoked = f"; {anyio.run(revoke_unless_interrupted)}"
    except KeyboardInterrupt:  # pressed before the loop took it
        revoked = "; revoking them at the authorization server was skipped (Ctrl-C)"
    finally:  # skipped or failed, the sign-in is deleted all the same
        try:
            forgotten = store.forget(key)
        except ConfigError as exc:  # (revoked all the same, when it was)
            raise not_forgotten(name, store.place, exc, revoked.removeprefix("; ")) from None
    if forgotten:
        also = f" (and of {', '.join(sharing)}: {'it shares' if len(sharing) == 1 else 'they share'} its sign-in)"
        new_console(highlight=False).print(
            f"Signed out of [bold]{escape(name)}[/]{escape(also) if sharing else ''}: its tokens are deleted from "
            f"{escape(str(store.place))}{escape(revoked)}"
        )
    else:
        new_console(highlight=False).print(f"Not signed in to [bold]{escape(name)}[/]: nothing to forget")
