"""``mcpvisor run --json``: host events as one JSON object per line (SPEC §9 "Event stream").

The lines people read instead come from :mod:`mcpvisor.shell.narration`."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

from mcpvisor.core.events import ReconcileFinished, ServerStateChanged
from mcpvisor.host.host import Host, HostEvent, Ready, SettingsWarning
from mcpvisor.host.hot_reload import (
    McpDefinitionsAccepted,
    McpPendingApprovalChanged,
    McpPromptsChanged,
    McpReloadFailed,
)
from mcpvisor.host.lsp.events import LspPendingApprovalChanged, LspServerChanged
from mcpvisor.host.settings.loader import SettingsError
from mcpvisor.host.watcher import RestartRequired, SettingsOk

__all__ = ["JsonOutput", "event_to_json"]


def event_to_json(host: Host, event: HostEvent) -> dict[str, Any] | None:
    """The JSON object for one event, or None for internal events."""
    if isinstance(event, ServerStateChanged):
        return {
            "event": "server",
            "server": event.server,
            "status": event.status,
            "reason": host.refine_reason(event.server, event.reason),
            "tools": list(event.tools),
            "prompts": list(event.prompts),
            "error": event.error,
            "held_tools": list(event.held_tools),
            "held_prompts": list(event.held_prompts),
            "held_why": event.held_why,
            "warning": event.warning,
        }
    if isinstance(event, ReconcileFinished):
        return {
            "event": "reconcile",
            "added": list(event.added),
            "retried": list(event.retried),
            "removed": list(event.removed),
            "restarted": list(event.restarted),
            "refiltered": list(event.refiltered),
            "kept": list(event.kept),
            "gated": {name: host.refine_reason(name, reason) for name, reason in event.gated.items()},
            "failed": dict(event.failed),
            "starting": list(event.starting),
            "duration_ms": round(event.duration_ms, 1),
        }
    if isinstance(event, McpPendingApprovalChanged):
        return {"event": "approval_needed", "servers": list(event.servers)}
    if isinstance(event, SettingsError):
        return {
            "event": "settings_error",
            "path": str(event.path),
            "line": event.line,
            "column": event.column,
            "message": event.message,
        }
    if isinstance(event, SettingsOk):
        return {"event": "settings_ok", "path": str(event.path)}
    if isinstance(event, RestartRequired):
        return {"event": "restart_required", "paths": list(event.paths)}
    if isinstance(event, Ready):
        return {"event": "ready"}
    if isinstance(event, SettingsWarning):
        return {"event": "warning", "message": event.message}
    if isinstance(event, McpReloadFailed):
        return {"event": "error", "message": event.message, "detail": event.detail}
    if isinstance(event, McpDefinitionsAccepted):
        return {
            "event": "definitions_accepted",
            "server": event.server,
            "tools": list(event.tools),
            "prompts": list(event.prompts),
        }
    if isinstance(event, McpPromptsChanged):
        return {"event": "prompts_changed", "prompts": list(event.prompts)}
    if isinstance(event, LspServerChanged):
        return {
            "event": "lsp_server",
            "server": event.server,
            "state": event.state,
            "pid": event.pid,
            "open_documents": event.open_documents,
            "error": event.error,
        }
    if isinstance(event, LspPendingApprovalChanged):
        return {"event": "lsp_approval_needed", "servers": list(event.servers)}
    return None


class JsonOutput:
    """Prints each event as a line of JSON. Once the reader is gone (``run --json | head``), ``on_closed`` is called
    (the command stops, as on SIGTERM) and nothing more is written: no traceback per event."""

    def __init__(
        self, host: Host, stream: TextIO | None = None, *, on_closed: Callable[[], None] | None = None
    ) -> None:
        self._host = host
        self._stream = stream or sys.stdout
        self._on_closed = on_closed
        self._closed = False

    def __call__(self, event: HostEvent) -> None:
        obj = event_to_json(self._host, event)
        if obj is None or self._closed:
            return
        try:
            self._stream.write(json.dumps(obj) + "\n")
            self._stream.flush()
        except BrokenPipeError:
            self._closed = True
            with contextlib.suppress(OSError, ValueError):  # what is still buffered must not fail the exit
                os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())
            if self._on_closed is not None:
                self._on_closed()
