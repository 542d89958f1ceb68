"""What each ``lsp`` tool takes and returns: input schemas, output models, the capability it needs
(LSP.md §6.6). Pure data."""

from __future__ import annotations

import keyword
from dataclasses import dataclass
from typing import Any

import jsonschema
import mcp_types as types
from pydantic import BaseModel

from mcpvisor.core.errors import McpvisorError
from mcpvisor.host.lsp.results import (
    CallsResult,
    DiagnosticsResult,
    HoverResult,
    LocationsResult,
    ReferencesResult,
    RenameResult,
    StatusResult,
    SymbolsResult,
    WorkspaceSymbolsResult,
)

__all__ = [
    "CAPABILITY",
    "DIAGNOSTICS_WAIT_MS",
    "TOOLS",
    "TOOL_NAMES",
    "WHAT",
    "ToolFailure",
    "argument_problem",
    "error_result",
    "new_name_problem",
    "positive",
    "render_result",
]

DIAGNOSTICS_WAIT_MS = 3000

_FILE = {
    "type": "string",
    "description": "A file of the workspace: relative to it, absolute inside it, or its file:// URI.",
}
_LINE = {"type": "integer", "minimum": 1, "description": "1-based line."}
_CHARACTER = {"type": "integer", "minimum": 1, "description": "1-based column, in characters."}
_SYMBOL = {
    "type": "string",
    "description": "Instead of line and character (it wins when both are given): a symbol of the file by name "
    "('User', or 'User.greet').",
}


_SERVER = {
    "type": "string",
    "description": "Which language server answers, by its configured name, when several take the file's extension "
    "(default: the first by name that offers the operation).",
}


def _limit(default: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": 1, "default": default, "description": "Return at most this many."}


def _position_schema(**more: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "file": _FILE,
            "line": _LINE,
            "character": _CHARACTER,
            "symbol": _SYMBOL,
            "server": _SERVER,
            **more,
        },
        "required": ["file"],
    }


class ToolFailure(McpvisorError):
    """A call of an ``lsp`` tool that cannot be answered; its message says why and what to do."""


@dataclass(frozen=True, slots=True)
class _Spec:
    description: str
    input_schema: dict[str, Any]
    output: type[BaseModel]


_SPECS: dict[str, _Spec] = {
    "status": _Spec(
        "The configured language servers: state (ready, starting, idle, failed, needs approval…), pid, open "
        "documents, the files they answer for and the operations they support.",
        {"type": "object", "properties": {}},
        StatusResult,
    ),
    "go_to_definition": _Spec(
        "Where the symbol at a position (or named by 'symbol') is defined.",
        _position_schema(limit=_limit(20)),
        LocationsResult,
    ),
    "go_to_type_definition": _Spec(
        "Where the type of the symbol at a position is defined.", _position_schema(limit=_limit(20)), LocationsResult
    ),
    "go_to_implementation": _Spec(
        "The implementations of the interface or abstract member at a position.",
        _position_schema(limit=_limit(20)),
        LocationsResult,
    ),
    "find_references": _Spec(
        "Every reference to the symbol at a position, across the workspace.",
        _position_schema(
            include_declaration={"type": "boolean", "default": False, "description": "Count the declaration too."},
            limit=_limit(100),
        ),
        ReferencesResult,
    ),
    "hover": _Spec(
        "The type, signature and documentation of the symbol at a position.", _position_schema(), HoverResult
    ),
    "document_symbols": _Spec(
        "The symbols of a file (classes, functions, methods…), nested.",
        {
            "type": "object",
            "properties": {
                "file": _FILE,
                "server": _SERVER,
                "depth": {"type": "integer", "default": -1, "description": "Levels of nesting to keep (-1: all)."},
                "limit": _limit(200),
            },
            "required": ["file"],
        },
        SymbolsResult,
    ),
    "workspace_symbols": _Spec(
        "Symbols of the whole workspace whose name matches a query, from every language server that can search.",
        {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "A name, or part of one."},
                "language": {"type": "string", "description": "Only servers for this language id ('python')."},
                "kind": {"type": "string", "description": "Only symbols of this kind ('Class', 'Function')."},
                "limit": _limit(50),
            },
            "required": ["query"],
        },
        WorkspaceSymbolsResult,
    ),
    "incoming_calls": _Spec(
        "Who calls the function or method at a position.", _position_schema(limit=_limit(50)), CallsResult
    ),
    "outgoing_calls": _Spec(
        "What the function or method at a position calls.", _position_schema(limit=_limit(50)), CallsResult
    ),
    "diagnostics": _Spec(
        "Errors and warnings of files, as of their text on disk now (waits briefly for fresh ones).",
        {
            "type": "object",
            "properties": {
                "files": {"type": "array", "items": _FILE, "description": "Omitted: every open document."},
                "server": {
                    "type": "string",
                    "description": "Only this language server, by its configured name (default: every one running "
                    "for each file's extension, or the first that can start when none runs).",
                },
                "severity": {
                    "enum": ["error", "warning", "info", "hint"],
                    "default": "warning",
                    "description": "The least severe kind to report.",
                },
                "wait_ms": {
                    "type": "integer",
                    "minimum": 0,
                    "default": DIAGNOSTICS_WAIT_MS,
                    "description": "How long to wait for a server to re-check a file's current text, in ms.",
                },
            },
        },
        DiagnosticsResult,
    ),
    "rename_preview": _Spec(
        "The edits renaming the symbol at a position would make, file by file. Writes nothing.",
        _position_schema(new_name={"type": "string", "description": "The new name."})
        | {"required": ["file", "new_name"]},
        RenameResult,
    ),
}
TOOL_NAMES = tuple(_SPECS)
ARGUMENTS: dict[str, frozenset[str]] = {
    name: frozenset(spec.input_schema["properties"]) for name, spec in _SPECS.items()
}
"""Each tool's argument names (its input schema's properties)."""


def argument_problem(tool: str, arguments: dict[str, Any]) -> str | None:
    """What in ``arguments`` its input schema does not allow (a type, a range, a value of an enum), or None."""
    error = jsonschema.exceptions.best_match(_VALIDATORS[tool].iter_errors(arguments))
    if error is None:
        return None
    where = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(error.path))
    return f"{tool}: {where + ': ' if where else ''}{error.message}"


def new_name_problem(language_id: str, new_name: str) -> str | None:
    """Why ``new_name`` cannot name anything in a document of ``language_id``, for a language whose rule is known
    (Python), or None. A server asked for such a rename answers nothing (basedpyright) or an edit that breaks the
    code (pylsp), and nothing says why."""
    if language_id != "python":
        return None
    if keyword.iskeyword(new_name):
        return f"cannot rename to {new_name!r}: it is a Python keyword"
    if not new_name.isidentifier():
        return (
            f"cannot rename to {new_name!r}: it is not a Python identifier (letters, digits and _, not starting "
            "with a digit)"
        )
    return None


_VALIDATORS = {name: jsonschema.Draft202012Validator(spec.input_schema) for name, spec in _SPECS.items()}
_ANNOTATIONS = types.ToolAnnotations(read_only_hint=True, open_world_hint=False)
CAPABILITY = {
    "go_to_definition": "definitionProvider",
    "go_to_type_definition": "typeDefinitionProvider",
    "go_to_implementation": "implementationProvider",
    "find_references": "referencesProvider",
    "hover": "hoverProvider",
    "document_symbols": "documentSymbolProvider",
    "incoming_calls": "callHierarchyProvider",
    "outgoing_calls": "callHierarchyProvider",
    "rename_preview": "renameProvider",
}


def _tool(name: str, spec: _Spec) -> types.Tool:
    return types.Tool(
        name=name,
        description=spec.description,
        input_schema=spec.input_schema,
        output_schema=spec.output.model_json_schema(),
        annotations=_ANNOTATIONS,
    )


TOOLS = [_tool(name, spec) for name, spec in _SPECS.items()]


WHAT = {
    "go_to_definition": "definition",
    "go_to_type_definition": "type definition",
    "go_to_implementation": "implementation",
}


def render_result(result: BaseModel) -> str:
    """A result's short text (its JSON when it has no rendering)."""
    render = getattr(result, "render", None)
    return str(render()) if callable(render) else result.model_dump_json()


def positive(value: Any, default: int) -> int:
    """``value`` when it is a positive integer (a ``limit``), else ``default``."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(is_error=True, content=[types.TextContent(type="text", text=message)])
