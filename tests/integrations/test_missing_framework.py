"""An adapter imported without its framework says what to install (before: "No module named 'agents'")."""

from __future__ import annotations

import importlib
import importlib.abc
import sys

import pytest


class NotInstalled(importlib.abc.MetaPathFinder):
    """Finds ``module`` (and what is in it) nowhere, as when it is not installed."""

    def __init__(self, module: str) -> None:
        self.module = module

    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        if fullname == self.module or fullname.startswith(f"{self.module}."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)


@pytest.mark.parametrize(
    ("adapter", "module", "said"),
    [
        (
            "openai_agents",
            "agents",
            "needs the OpenAI Agents SDK, which is not installed (no module 'agents'): "
            "pip install 'mcpvisor[openai-agents]'",
        ),
        (
            "pydantic_ai",
            "pydantic_ai",
            "needs Pydantic AI, which is not installed (no module 'pydantic_ai'): pip install 'mcpvisor[pydantic-ai]'",
        ),
        (
            "langchain",
            "langchain",
            "needs LangChain, which is not installed (no module 'langchain'): pip install 'mcpvisor[langchain]'",
        ),
    ],
)
def test_an_adapter_without_its_framework_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, adapter: str, module: str, said: str
) -> None:
    for loaded in [m for m in sys.modules if m == module or m.startswith((f"{module}.", "mcpvisor.integrations."))]:
        monkeypatch.delitem(sys.modules, loaded)
    monkeypatch.setattr(sys, "meta_path", [NotInstalled(module), *sys.meta_path])
    with pytest.raises(ImportError) as missing:
        importlib.import_module(f"mcpvisor.integrations.{adapter}")
    assert str(missing.value) == f"mcpvisor.integrations.{adapter} {said}"
    assert missing.value.name == module


def test_a_module_missing_inside_an_installed_framework_is_said_as_that(monkeypatch: pytest.MonkeyPatch) -> None:
    """An older LangChain without ``langchain.agents.middleware`` is installed, not missing: upgrade it."""
    for loaded in [m for m in sys.modules if m.startswith(("langchain.agents", "mcpvisor.integrations."))]:
        monkeypatch.delitem(sys.modules, loaded)
    monkeypatch.setattr(sys, "meta_path", [NotInstalled("langchain.agents.middleware"), *sys.meta_path])
    with pytest.raises(ImportError) as missing:
        importlib.import_module("mcpvisor.integrations.langchain")
    assert str(missing.value) == (
        "mcpvisor.integrations.langchain needs LangChain: it is installed, but has no module "
        "'langchain.agents.middleware' (too old, or incomplete): pip install --upgrade 'mcpvisor[langchain]'"
    )
