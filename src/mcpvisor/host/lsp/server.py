"""One language server: its process, its life cycle, what it was told and what it published (LSP.md §6.4).

A :class:`LanguageServer` starts when first needed (or at once, with ``lsp.startup: eager``): one owner
task opens the connection (:mod:`mcpvisor.host.lsp.jsonrpc`), runs ``initialize`` within the server's
``startupTimeout``, sends its ``settings``, re-opens the documents it had open, and keeps the connection
until it is stopped or the process ends. Requests retry ``ContentModified`` a few times; files are
synchronised with the disk before every request that names one (:mod:`mcpvisor.host.lsp.documents`);
diagnostics are pulled where the server offers it, else taken from what it published, never older than
the text it was last sent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc

from mcpvisor import __version__
from mcpvisor.core.processes import how_it_exited
from mcpvisor.core.server_config import arguments_hint
from mcpvisor.core.server_log import ServerLog, log_file, log_problem
from mcpvisor.host.lsp.client_side import CLIENT_CAPABILITIES, FileWatch
from mcpvisor.host.lsp.config import GATED_LSP_SCOPES, LspServerConfig
from mcpvisor.host.lsp.documents import Document, Documents
from mcpvisor.host.lsp.errors import LspDocumentUnreadable, LspRequestTimedOut
from mcpvisor.host.lsp.jsonrpc import (
    CONTENT_MODIFIED,
    METHOD_NOT_FOUND,
    LspConnection,
    LspConnectionClosed,
    LspError,
    LspRequestError,
    open_lsp_connection,
)
from mcpvisor.host.lsp.published import PublishedDiagnostics
from mcpvisor.host.lsp.text import relative, uri_of

__all__ = ["CLIENT_CAPABILITIES", "LanguageServer", "ServerState"]

logger = logging.getLogger(__name__)

ServerState = Literal["stopped", "starting", "ready", "failed", "stopping"]

CONTENT_MODIFIED_RETRIES = 3
CONTENT_MODIFIED_PAUSE_S = 0.5
UNRESPONSIVE_AFTER = 2
"""Requests in a row a running server leaves unanswered past their timeout before it is stopped as hung (a crash, for
restartOnCrash): one may be a slow answer while it indexes; two, with none answered between, is a hung server."""


class LanguageServer:
    """One configured language server (running or not). ``on_change`` hears every state change."""

    def __init__(
        self,
        name: str,
        config: LspServerConfig,
        *,
        root: Path,
        log_dir: Path,
        on_change: Callable[[LanguageServer], None],
        max_message_bytes: int | None = None,
        reopen: Sequence[Path] = (),
    ) -> None:
        self.name = name
        self.config = config
        self.root = root
        self.state: ServerState = "stopped"
        self.pid: int | None = None
        self.last_error: str | None = None
        self.capabilities: dict[str, Any] = {}
        self.crashes = 0
        """Crashes since the server last ran stably (restartOnCrash counts against maxRestarts)."""
        self.ready_since = 0.0  # when it last became ready (anyio's clock)
        self.last_used = time.monotonic()
        self._waiting_for_diagnostics = 0  # calls waiting for published diagnostics (see busy)
        self._log_dir = log_dir
        self._on_change = on_change
        self._max_message_bytes = max_message_bytes
        self._connection: LspConnection | None = None
        self._starting: anyio.CancelScope | None = None
        self._stop = anyio.Event()
        self._ready = anyio.Event()
        self._done = anyio.Event()
        self._done.set()
        self._reopen = list(reopen)
        self.documents = Documents(self._notify, deleted=lambda path: self._watch.deleted(path))
        self.published = PublishedDiagnostics(lambda: self.config.extension_to_language)
        self._unanswered = 0
        """Requests in a row the running process did not answer in time: at :data:`UNRESPONSIVE_AFTER` it is hung."""
        self._unresponsive = anyio.Event()
        self._watch = FileWatch(root, self._notify)

    # -- properties ---------------------------------------------------------------------------

    @property
    def folder(self) -> Path:
        """The server's root and working folder: ``workspaceFolder`` (relative to the workspace), else the workspace."""
        folder = self.config.workspace_folder
        if not folder:
            return self.root
        path = Path(folder).expanduser()
        return (path if path.is_absolute() else self.root / path).resolve()

    @property
    def log_path(self) -> Path:
        return log_file(self._log_dir, f"lsp-{self.name}")  # (a name that is no file's name: cut and hashed)

    def operations(self) -> list[str]:
        """The LSP operations the running server says it supports (its capabilities)."""
        caps = self.capabilities
        names = {
            "definitionProvider": "go_to_definition",
            "typeDefinitionProvider": "go_to_type_definition",
            "implementationProvider": "go_to_implementation",
            "referencesProvider": "find_references",
            "hoverProvider": "hover",
            "documentSymbolProvider": "document_symbols",
            "workspaceSymbolProvider": "workspace_symbols",
            "callHierarchyProvider": "incoming_calls",
            "renameProvider": "rename_preview",
        }
        ops = [op for key, op in names.items() if caps.get(key)]
        if caps.get("callHierarchyProvider"):
            ops.append("outgoing_calls")
        return [*sorted(ops), "diagnostics"]

    def supports(self, capability: str) -> bool:
        return bool(self.capabilities.get(capability))

    def busy(self) -> bool:
        """Whether a request waits for the running server's answer, or a call for the diagnostics it publishes (it
        is in use, however long ago it was asked)."""
        return self._waiting_for_diagnostics > 0 or (self._connection is not None and self._connection.busy())

    # -- life cycle -----------------------------------------------------------------------------

    def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Start the server in ``tg`` unless it runs or is starting (returns at once)."""
        if self.state in ("starting", "ready"):
            return
        self._stop = anyio.Event()
        self._ready = anyio.Event()
        self._done = anyio.Event()
        self._unanswered, self._unresponsive = 0, anyio.Event()
        self._set("starting")
        tg.start_soon(self._own, name=f"lsp-server:{self.name}")

    async def wait_ready(self, timeout_s: float | None = None) -> bool:
        """Wait until the server is ready (``True``), failed or stopped (``False``), or ``timeout_s`` passed
        (``False``, still starting)."""
        with anyio.move_on_after(timeout_s if timeout_s is not None else self.config.startup_timeout_s):
            await self._ready.wait()
        return self.state == "ready"

    async def stop(self, why: str | None = None) -> None:
        """Stop the server (``shutdown``, ``exit``, then its process group) and wait for it; ``why`` (an edit) is said
        to the requests it cuts short."""
        if why is not None and self._connection is not None:
            self._connection.stopped_because = why
        self._stop.set()
        if self._starting is not None:
            self._starting.cancel()  # a start under way ends at once, not after its startupTimeout
        if self.state == "ready":
            self._set("stopping")  # at once: no call is routed to it from now on
        await self._done.wait()

    async def wait_stopped(self) -> None:
        """Wait until a server that is stopping has stopped (returns at once otherwise)."""
        if self.state == "stopping":
            await self._done.wait()

    def _check_folder(self) -> None:
        """The server's folder is one; a repository's server runs in the workspace: its ``workspaceFolder`` must
        not lead out through a link."""
        if self.config.workspace_folder and self.config.command and not self.folder.is_dir():  # its process's
            raise LspConnectionClosed(
                server=self.name,
                reason=f"could not be started: its folder {self.folder} is not there; fix "
                f"{self.config.field(self.name, 'workspaceFolder')}",
            )
        if self.config.scope not in GATED_LSP_SCOPES or not self.config.workspace_folder:
            return
        root = self.root.resolve()
        if not self.folder.is_relative_to(root):
            raise LspConnectionClosed(
                server=self.name,
                reason=(
                    f"could not be started: its workspaceFolder resolves to {self.folder}, outside the workspace "
                    f"{root}; a repository's server must stay inside it: fix {self.name}.workspaceFolder"
                ),
            )

    async def _own(self) -> None:
        with anyio.CancelScope() as self._starting:
            await self._run()

    async def _run(self) -> None:
        try:
            self._check_folder()
            try:
                log = ServerLog(self.log_path)
            except OSError as exc:
                raise LspConnectionClosed(
                    server=self.name, reason=f"could not be started: {log_problem(self.log_path, exc)}"
                ) from exc
            config = self.config
            address = config.address() if config.transport != "stdio" else None
            started = anyio.current_time()
            async with open_lsp_connection(
                config.command,
                config.args,
                env=self.config.env,
                cwd=str(self.folder),
                log=log,
                name=self.name,
                on_notification=self._on_notification,
                on_request=self._on_request,
                shutdown_timeout_s=self.config.shutdown_timeout_s,
                host_path=self.config.scope in GATED_LSP_SCOPES,
                command_field=self.config.field(self.name, "command"),
                address=address,
                connect_timeout_s=config.startup_timeout_s,
                socket_field=config.field(self.name, "socket"),
                **({"max_message_bytes": self._max_message_bytes} if self._max_message_bytes else {}),
            ) as connection:
                self._connection = connection
                self._watch = FileWatch(self.folder, self._notify)  # what this process registers for
                self.pid = connection.process.pid
                self.published.restart()
                with anyio.fail_after(max(config.startup_timeout_s - (anyio.current_time() - started), 0.1)):
                    result = await connection.request("initialize", self._initialize_params())
                self.capabilities = dict((result or {}).get("capabilities") or {})
                await connection.notify("initialized", {})
                if self.config.settings is not None:
                    await self.reconfigure(self.config)
                await self.documents.replay(self._notify)
                for path in self._reopen:
                    language = self.config.extension_to_language.get(path.suffix.lower())
                    if language is not None:
                        try:
                            await self.documents.sync(path, language)
                        except (LspError, OSError, ValueError) as exc:
                            logger.debug("language server %r: could not re-open %s: %s", self.name, path, exc)
                self._reopen = []
                self.last_error, self.ready_since = None, anyio.current_time()
                self.last_used = time.monotonic()  # unused from the moment it is ready, not from before its start
                self._starting = None
                self._set("ready")
                self._ready.set()
                cut: list[LspConnectionClosed] = []
                with anyio.CancelScope() as watch:

                    async def ended() -> None:
                        await connection.process.ended.wait()
                        if not self._stop.is_set():
                            self._set("stopping")  # at once: it is gone, though what is left takes a moment
                        watch.cancel()

                    async def hung() -> None:
                        await self._unresponsive.wait()
                        connection.stopped_because = (  # what is still in flight is cut short: why, and to retry
                            f"it did not answer {self._unanswered} requests in a row in time: stopped as hung, it "
                            "starts again on the next call"
                        )
                        self._set("stopping")  # at once: the next call waits for it to go, then starts it again
                        watch.cancel()

                    async def feed() -> None:
                        try:
                            await self._watch.run()
                        except LspConnectionClosed as exc:  # it ended (said by ended()) or closed its input under
                            cut.append(exc)  # a batch of file changes
                            if not connection.closed():
                                watch.cancel()

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(ended)
                        tg.start_soon(hung)
                        tg.start_soon(feed)
                        await self._stop.wait()
                        self._set("stopping")
                        tg.cancel_scope.cancel()
                if cut and not connection.closed() and not self._stop.is_set():
                    raise cut[0]  # it runs on, reading nothing: why, as a request cut short says it
                if self._unresponsive.is_set() and not self._stop.is_set():
                    self.last_error = (
                        f"did not answer {self._unanswered} requests in a row in time: stopped as hung (the next "
                        f"call starts it again; its log: {self.log_path})"
                    )
                elif not self._stop.is_set():
                    self.last_error = self._exit_reason(connection)
        except TimeoutError:
            self.last_error = (
                f"no answer to 'initialize' within {self.config.startup_timeout_s:g} s; raise "
                f"{self.config.field(self.name, 'startupTimeout')} if it needs longer (its log: {self.log_path})"
            )
        except LspError as exc:
            # callers name the server: what is said of it is enough
            reason = exc.reason if isinstance(exc, LspConnectionClosed) else str(exc)
            self.last_error = reason.removeprefix(f"language server {self.name!r} ")
            if isinstance(exc, LspConnectionClosed) and exc.crashed and "cannot start" not in reason:
                self.last_error += f"; see its log {self.log_path}"  # it ran, and ended at its start by itself
        except Exception as exc:  # task boundary: one broken server never takes the others down
            logger.exception("language server %r failed", self.name)
            self.last_error = f"{type(exc).__name__}: {exc}"
        finally:
            self._connection = None
            self.pid = None
            if self.last_error:  # the command and arguments as written: a ${VAR} in them may stand for a secret
                if "cannot start" in self.last_error:  # the reaper could not run it: where to fix it, as before a use
                    self.last_error += f"; check {self.config.field(self.name, 'command')}"
                if "cannot start" in self.last_error or "not found on the host's PATH" in self.last_error:
                    self.last_error += arguments_hint(self.config.approved_value("command"))
                self.last_error = self.config.redact(self.last_error)
            stopped = self._stop.is_set()
            self._set("stopped" if stopped else "failed")
            self._ready.set()
            self._done.set()
            if not stopped:
                logger.warning("language server %r stopped: %s", self.name, self.last_error)

    def _exit_reason(self, connection: LspConnection) -> str:
        process = connection.process
        if process.failure is not None:
            return str(process.failure)
        if connection.over_socket:
            return f"{connection.ended_reason}; see its log {self.log_path}"
        code = process.returncode
        return f"the process {how_it_exited(code) if code is not None else 'exited'}; see its log {self.log_path}"

    def _initialize_params(self) -> dict[str, Any]:
        folder = self.folder
        return {
            "processId": None,
            "clientInfo": {"name": "mcpvisor", "version": __version__},
            "rootUri": uri_of(folder),
            "rootPath": str(folder),
            "workspaceFolders": [{"uri": uri_of(folder), "name": folder.name}],
            "capabilities": CLIENT_CAPABILITIES,
            "initializationOptions": self.config.initialization_options,
        }

    async def reconfigure(self, config: LspServerConfig) -> None:
        """Take a new configuration that needs no restart: send changed ``settings`` live; close documents of
        extensions it no longer answers for."""
        settings_changed = config.settings != self.config.settings
        self.config = config
        if settings_changed:  # what was published was computed under the old settings
            self.published.stale_now()
        connection = self._connection
        if connection is None or self.state not in ("starting", "ready"):
            return
        routed = config.extension_to_language
        await self.documents.close_where(lambda doc: doc.path.suffix.lower() not in routed)
        if settings_changed or config.settings is not None:
            try:
                await connection.notify("workspace/didChangeConfiguration", {"settings": config.settings or {}})
            except LspError as exc:
                logger.debug("language server %r: could not send its settings: %s", self.name, exc)

    # -- requests ----------------------------------------------------------------------------

    async def request(self, method: str, params: Any, *, timeout_s: float | None = None) -> Any:
        """A request on the running server; ``ContentModified`` is retried a few times. Raises
        :class:`LspRequestTimedOut` when one attempt is not answered within ``timeout_s``."""
        for attempt in range(CONTENT_MODIFIED_RETRIES + 1):
            connection = self._connection
            if connection is None:
                reason = f"failed — {self.last_error}" if self.last_error else "is not running"
                raise LspConnectionClosed(server=self.name, reason=reason)
            try:
                self.last_used = time.monotonic()
                answer = await connection.request(method, params, timeout_s=timeout_s)
                self._unanswered = 0
                self.last_used = time.monotonic()  # unused from its last answer on, not from the last question
                return answer
            except TimeoutError as exc:
                if timeout_s is None:
                    raise
                hung = False
                if self._connection is connection:
                    self._unanswered += 1
                    hung = self._unanswered >= UNRESPONSIVE_AFTER
                    if hung:
                        self._unresponsive.set()  # stopped, and started again by the next call
                raise LspRequestTimedOut(
                    server=self.name, method=method, timeout_s=timeout_s, log=self.log_path, hung=hung
                ) from exc
            except LspConnectionClosed as exc:
                if not exc.crashed:
                    raise  # stopped by the host: it says why
                reason = f"ended before it answered ({exc.reason}); retry the call"  # the call starts it again
                raise LspConnectionClosed(server=self.name, reason=reason, method=method) from exc
            except LspRequestError as exc:
                if exc.code != CONTENT_MODIFIED or attempt == CONTENT_MODIFIED_RETRIES:
                    raise
                await anyio.sleep(CONTENT_MODIFIED_PAUSE_S)
        raise AssertionError("unreachable")

    async def sync(self, path: Path) -> Document:
        """Bring ``path`` up to date on the server (see :mod:`mcpvisor.host.lsp.documents`). Raises
        :class:`LspDocumentUnreadable` when it cannot be read (too large, unreadable)."""
        language = self.config.extension_to_language.get(path.suffix.lower(), "plaintext")
        self.last_used = time.monotonic()
        opened = self.documents.get(path) is not None
        try:
            return await self.documents.sync(path, language)
        except OSError as exc:
            method = "textDocument/didChange" if opened else "textDocument/didOpen"
            raise LspDocumentUnreadable(
                server=self.name, method=method, file=relative(path, self.root), error=exc
            ) from exc

    async def sync_open(self) -> None:
        """Bring every document open on the server in step with the disk (before a request: its answer about
        one file depends on what it was told of the others)."""
        await self.documents.refresh()

    async def _notify(self, method: str, params: Any) -> None:
        connection = self._connection
        if connection is not None:
            self.published.told(method, params)
            await connection.notify(method, params)

    # -- what the server sends -----------------------------------------------------------------

    def _on_notification(self, method: str, params: Any) -> None:
        if method == "textDocument/publishDiagnostics" and isinstance(params, dict):
            self.published.publish(params)

    async def _on_request(self, method: str, params: Any) -> Any:
        if method == "workspace/configuration":
            items = (params or {}).get("items") or []
            return [self._setting(item.get("section") if isinstance(item, dict) else None) for item in items]
        if method == "workspace/workspaceFolders":
            return [{"uri": uri_of(self.folder), "name": self.folder.name}]
        if method == "client/registerCapability":
            self._watch.register(params)
        elif method == "client/unregisterCapability":
            self._watch.unregister(params)
        if method in ("client/registerCapability", "client/unregisterCapability", "window/workDoneProgress/create"):
            return None
        if method == "window/showMessageRequest":
            return None
        if method == "workspace/applyEdit":
            return {"applied": False, "failureReason": "mcpvisor only previews edits; it writes no files"}
        raise LspRequestError(METHOD_NOT_FOUND, f"mcpvisor does not answer {method}", method=method, server=self.name)

    def _setting(self, section: str | None) -> Any:
        node: Any = self.config.settings
        if not section:
            return node
        for part in section.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    # -- diagnostics ----------------------------------------------------------------------------

    async def diagnostics(
        self, doc: Document, wait_s: float, *, timeout_s: float | None = None
    ) -> tuple[bool, list[dict[str, Any]]]:
        """``(fresh, diagnostics)`` for ``doc`` as last synced: pulled when the server offers it (``timeout_s``
        bounds that request), else the published ones once fresh (see :mod:`~mcpvisor.host.lsp.published`; waiting
        up to ``wait_s``), else the last known ones with ``fresh`` False."""
        if self.supports("diagnosticProvider"):
            try:
                params = {"textDocument": {"uri": doc.uri}}
                report = await self.request("textDocument/diagnostic", params, timeout_s=timeout_s)
            except LspRequestError as exc:
                logger.debug("language server %r: pulling diagnostics failed: %s", self.name, exc)
            else:
                if isinstance(report, dict) and report.get("kind") == "full":
                    return True, [d for d in report.get("items") or () if isinstance(d, dict)]
        self._waiting_for_diagnostics += 1
        try:
            return await self.published.wait(doc, wait_s)
        finally:
            self._waiting_for_diagnostics -= 1
            self.last_used = time.monotonic()  # unused from the end of the wait on

    # -- state ------------------------------------------------------------------------------------

    def _set(self, state: ServerState) -> None:
        if state != self.state:
            self.state = state
            logger.debug("language server %r is %s", self.name, state)
        self._on_change(self)
