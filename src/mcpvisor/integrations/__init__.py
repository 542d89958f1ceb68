"""Live toolsets for agent frameworks, each backed by a running session (SPEC §0, agent builders).

Each adapter reads the session's tool registry at every agent step, so a settings edit changes the
tools an agent sees at its next step without rebuilding the agent; a tool that left (removed,
rejected, waiting for approval, its server down) answers a call through the framework's own
tool-error path with mcpvisor's reason text. Install the framework with its extra:

- ``mcpvisor.integrations.pydantic_ai``: :class:`McpvisorToolset` (``pip install mcpvisor[pydantic-ai]``)
- ``mcpvisor.integrations.langchain``: :class:`McpvisorToolkit`, :class:`McpvisorMiddleware`
  (``pip install mcpvisor[langchain]``)
- ``mcpvisor.integrations.openai_agents``: :class:`McpvisorMCPServer` (``pip install mcpvisor[openai-agents]``)

Each accepts a :class:`mcpvisor.Config` or a :class:`mcpvisor.host.Host` the caller has entered.
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["framework_missing"]


def framework_missing(exc: ModuleNotFoundError, adapter: str, framework: str, extra: str) -> ImportError:
    """The error an adapter's import raises when its framework is missing: what to install, by its extra (a bare
    "No module named 'agents'" does not say that it is the OpenAI Agents SDK). A module missing inside an installed
    framework (an older version, a dependency of its own) is said as that, with the same fix."""
    if _installed((exc.name or "").partition(".")[0]):
        said = f"{framework}: it is installed, but has no module {exc.name!r} (too old, or incomplete)"
        fix = f"pip install --upgrade 'mcpvisor[{extra}]'"
    else:
        said, fix = f"{framework}, which is not installed (no module {exc.name!r})", f"pip install 'mcpvisor[{extra}]'"
    return ImportError(f"mcpvisor.integrations.{adapter} needs {said}: {fix}", name=exc.name)


def _installed(module: str) -> bool:
    try:
        return bool(module) and (module in sys.modules or importlib.util.find_spec(module) is not None)
    except (ImportError, ValueError):
        return False
