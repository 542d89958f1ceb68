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

__all__ = ["framework_missing"]


def framework_missing(exc: ModuleNotFoundError, adapter: str, framework: str, extra: str) -> ImportError:
    """The error an adapter's import raises when its framework is not installed: what to install, by its extra
    (a bare "No module named 'agents'" does not say that it is the OpenAI Agents SDK)."""
    return ImportError(
        f"mcpvisor.integrations.{adapter} needs {framework}, which is not installed (no module {exc.name!r}): "
        f"pip install 'mcpvisor[{extra}]'",
        name=exc.name,
    )
