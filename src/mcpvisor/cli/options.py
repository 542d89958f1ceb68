"""What every command shares: its common options, logging set-up, and one way to report an error."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import anyio
import typer
from rich.markup import escape

from mcpvisor.core.cancel_give_ups import DISPATCHER_LOGGER, CancelGiveUps
from mcpvisor.core.errors import McpvisorError, own_error
from mcpvisor.core.server_config import redact_text
from mcpvisor.host.settings.expand import as_written
from mcpvisor.shell.consoles import new_console, visible

if TYPE_CHECKING:
    from mcpvisor.host.host import HostOptions

__all__ = [
    "AllowedLspOpt",
    "AllowedOpt",
    "LspConfigOpt",
    "JsonOpt",
    "McpConfigOpt",
    "STARTUP_WAIT_S",
    "VerboseOpt",
    "WorkspaceOpt",
    "fail",
    "host_options",
    "own_error",
    "reported",
    "setup_logging",
    "show_fleet_operation",
    "split_names",
]


def _home_expanded(value: Path | list[Path] | None) -> Path | list[Path] | None:
    """``~`` in a path option read as the home folder, as a shell would have (a client's JSON config has no
    shell); the folder of ``--workspace`` must exist."""
    if isinstance(value, list):
        return [path.expanduser() for path in value]
    if value is None:
        return None
    folder = value.expanduser()
    if not folder.is_dir():
        said = "does not exist" if not folder.exists() else "is not a folder"
        raise typer.BadParameter(f"{str(value)!r} {said}" + (f" ({folder})" if folder != value else ""))
    return folder


WorkspaceOpt = Annotated[
    Path | None,
    typer.Option(
        "--workspace",
        "-w",
        help="Workspace root (default: the current directory); an existing folder.",
        show_default=False,
        metavar="DIR",
        callback=_home_expanded,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output (JSON).")]
VerboseOpt = Annotated[int, typer.Option("--verbose", "-v", count=True, help="More log output on stderr (-vv: debug).")]
McpConfigOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--mcp-config",
        metavar="FILE",
        callback=_home_expanded,
        help="Extra server file (mcpServers format); repeatable; highest precedence; read once at start.",
    ),
]
LspConfigOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--lsp-config",
        metavar="FILE",
        callback=_home_expanded,
        help="Extra language servers file (.lsp.json format); repeatable; highest precedence; read once at start.",
    ),
]
AllowedLspOpt = Annotated[
    str | None,
    typer.Option(
        "--allowed-lsp-server-names",
        metavar="NAMES",
        help="Comma-separated allow-list of language servers (globs allowed): a ceiling lsp.allowed can only narrow.",
    ),
]
AllowedOpt = Annotated[
    str | None,
    typer.Option(
        "--allowed-mcp-server-names",
        metavar="NAMES",
        help="Comma-separated allow-list (globs allowed): a ceiling that settings can only narrow.",
    ),
]

STARTUP_WAIT_S = 5.0
"""The most ``serve``, ``shell``, ``run`` and ``demo`` wait for servers still handshaking before they answer
(``serve``: its clients, which give a server tens of seconds to answer ``initialize``; the others: their user) and
follow edits: one slow server (a first ``npx`` download, a hang) must not hold the others up, nor an edit. What
comes up later is said (``list_changed``; a line, a ``server`` event)."""


class RedactingFormatter(logging.Formatter):
    """Every URL in a log line loses its credentials and query values, and what a ``${VAR}`` stood for is shown as
    the variable, whoever logged it (the SDK logs the endpoint it connects to at debug level); control characters
    are shown, not sent to the terminal."""

    def format(self, record: logging.LogRecord) -> str:
        return visible(redact_text(as_written(super().format(record))))


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to ``sys.stderr`` as it is when a record is logged, not as it was when logging was set up:
    the shell's line editor points it above its prompt while a line is edited."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass  # always sys.stderr


FLEET_OPERATION: Final = ("mcpvisor.fleet.replica", "mcpvisor.fleet.settings", "mcpvisor.fleet.store")
"""The loggers of a fleet replica's own operation, which nothing else tells: the publisher lease taken over or lost,
whose settings files the fleet follows, a replica id still listed, settings not published and why."""


def show_fleet_operation(verbose: int) -> None:
    """A replica's log at the default level (errors only, the command narrating the rest) keeps the warnings of
    :data:`FLEET_OPERATION`: no narration says them."""
    if verbose == 0:
        for name in FLEET_OPERATION:
            logging.getLogger(name).setLevel(logging.WARNING)


UNSAID: Final = ("mcpvisor.host.private_files", "mcpvisor.host.settings.writer", "mcpvisor.shell.line_editor")
"""The loggers whose warnings no command says in its own words, kept by a narrated command too: a private store
found readable by other users (made private again, or not), a settings file rewritten without its comments, the
shell's history not read or not saved."""


def setup_logging(verbose: int, *, narrated: bool = False) -> None:
    """Log to stderr. ``narrated``: the command already tells people every change and problem in
    its own words, so by default only errors are logged (no line says the same thing twice)."""
    quiet = logging.ERROR if narrated else logging.WARNING
    level = quiet if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = _StderrHandler()
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in UNSAID:  # (their level follows the root's, as set by an earlier call)
        logging.getLogger(name).setLevel(logging.WARNING if level > logging.WARNING else logging.NOTSET)
    if verbose < 2:
        for noisy in ("mcp", "watchfiles", "uvicorn"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    # The HTTP client logs every request URL, credentials and query included: never let it.
    for secretive in ("httpx2", "httpcore2", "httpx", "httpcore"):
        logging.getLogger(secretive).setLevel(logging.WARNING)
    # The SDK's sign-in logs its failures with a traceback that can quote a token response; the error
    # people see says what failed in one line.
    logging.getLogger("mcp.client.auth").setLevel(logging.CRITICAL)
    # The SDK says each cancel a server that reads nothing was not told of: once per burst and server is enough.
    dispatcher = logging.getLogger(DISPATCHER_LOGGER)
    dispatcher.filters[:] = [f for f in dispatcher.filters if not isinstance(f, CancelGiveUps)] + [CancelGiveUps()]
    # A command ending waits for a refresh its server's start stopped waiting for: it says so (nothing else does).
    logging.getLogger("mcpvisor.host.oauth_refreshes").setLevel(logging.WARNING if verbose < 2 else logging.DEBUG)
    # Its HTTP transports log an answer they cannot parse at ERROR, with a traceback that quotes it; the
    # server's state says so in one line, without the answer.
    if verbose < 2:
        for transport in ("mcp.client.streamable_http", "mcp.client.sse"):
            logging.getLogger(transport).setLevel(logging.CRITICAL)


def fail(message: str, code: int = 1) -> typer.Exit:
    new_console(stderr=True, soft_wrap=True).print(f"[red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


def _exit_of(exc: BaseException) -> SystemExit | None:
    """The ``SystemExit`` task groups wrapped in ``exc`` when it holds nothing else."""
    if not isinstance(exc, BaseExceptionGroup):
        return None
    exits, rest = exc.split(SystemExit)
    if exits is None or rest is not None:
        return None
    first: BaseException = exits
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first if isinstance(first, SystemExit) else None


@contextmanager
def reported(*, json_events: bool = False, json_problems: bool = False) -> Iterator[None]:
    """Turn mcpvisor's own errors into one red line on stderr and exit code 1; with ``json_events`` (a command
    printing events as JSON lines), also into an ``error`` event with ``"fatal": true`` on stdout; with
    ``json_problems`` (a command printing one JSON document), into ``{"error": ..., "problems": [...]}``."""
    try:
        yield
    except (McpvisorError, BaseExceptionGroup) as exc:
        own = own_error(exc)
        if own is None:
            if (ended := _exit_of(exc)) is not None:
                raise ended from None  # (rich exits so when its output's reader is gone: no traceback for that)
            raise
        if json_events:
            typer.echo(json.dumps({"event": "error", "message": str(own), "fatal": True}))
        elif json_problems:  # a script reading the output reads why
            typer.echo(json.dumps({"error": str(own), "problems": [str(own)]}, indent=2))
        raise fail(str(own)) from None


def host_options(
    workspace: Path | None,
    mcp_config: list[Path] | None,
    allowed: str | None,
    *,
    watch: bool = True,
    lsp_config: list[Path] | None = None,
    allowed_lsp: str | None = None,
) -> HostOptions:
    """The host's options from the common command-line options and this process's environment."""
    from mcpvisor.host.host import HostOptions

    return HostOptions(
        env=dict(os.environ),
        workspace=workspace,
        mcp_config=list(mcp_config or []),
        allowed_mcp_server_names=split_names(allowed),
        watch=watch,
        lsp_config=list(lsp_config or []),
        allowed_lsp_server_names=split_names(allowed_lsp),
    )


def split_names(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [name.strip() for name in value.split(",") if name.strip()]


class Signals:
    """``signals`` taken on the event loop while in the ``with`` block, and counted. Unlike anyio's signal receiver,
    whose handlers go when the task that reads it is cancelled (as a stop begins), they stay until the block ends:
    a signal while the session stops (Ctrl-C pressed again) is counted, never a KeyboardInterrupt raised somewhere
    in the shutdown (which left a traceback, or a loop that never ended). Once one was taken, the block leaves them
    ignored for what is left of the process; else Python's own handlers are back. Enter it on the event loop."""

    def __init__(self, signals: tuple[signal.Signals, ...]) -> None:
        self.count = 0
        self._signals = signals
        self._more: anyio.Event | None = None

    def __enter__(self) -> Signals:
        self._more = anyio.Event()
        loop = asyncio.get_running_loop()
        for taken in self._signals:
            loop.add_signal_handler(taken, self._taken)
        return self

    def __exit__(self, *exc_info: object) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                for taken in self._signals:
                    loop.remove_signal_handler(taken)  # Python's own handler is back: until the next line, only
                    if self.count:  # here a signal can come, and it is caught below
                        signal.signal(taken, signal.SIG_IGN)
                return
            except KeyboardInterrupt:
                continue

    def _taken(self) -> None:
        self.count += 1
        if self._more is not None:
            self._more.set()
        self._more = anyio.Event()

    async def wait(self, count: int) -> None:
        """Until ``count`` signals were taken in all."""
        while self.count < count and self._more is not None:
            await self._more.wait()
