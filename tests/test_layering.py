"""Imports point down only (SPEC §1 "Packages"): cli -> shell/gateway -> host -> core.

Every module's imports are read from its source, ``TYPE_CHECKING`` and function-level ones included,
so a rule holds whether or not the import runs. The rules: ``core`` imports no other mcpvisor package;
``host`` only ``core``; ``gateway`` and ``shell`` import ``host`` and ``core``, never each other and
never ``cli``; ``integrations`` (the agent framework adapters) imports ``host`` and ``core`` and is
the only package that imports a framework; ``fleet`` (replicas sharing state through Redis) imports
``host`` and ``core``, only ``cli`` imports it, and only it imports ``redis``; nothing imports ``cli``
but ``cli`` and the entry point; only ``cli`` imports ``typer``, only ``cli`` and ``shell`` draw with
``rich`` or read a terminal; only ``host`` (and ``cli``) watch files. No import circle between modules
anywhere in ``src/``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

import mcpvisor

SRC = Path(mcpvisor.__file__).parent

LAYERS: dict[str, set[str]] = {
    # package -> the mcpvisor packages it may import ("api": the package root, e.g. __version__)
    "core": {"core"},
    "host": {"host", "core", "api"},
    "gateway": {"gateway", "host", "core", "api"},
    "shell": {"shell", "host", "core", "api"},
    "integrations": {"integrations", "host", "core", "api"},
    "fleet": {"fleet", "host", "core", "api"},
    "cli": {"cli", "shell", "gateway", "fleet", "host", "core", "api", "examples"},
    "examples": {"examples", "api"},
    "api": {"api", "core"},
    "entry": {"cli"},
}
THIRD_PARTY: dict[str, set[str]] = {
    # library -> the packages that may import it
    "typer": {"cli"},
    "rich": {"cli", "shell"},
    "prompt_toolkit": {"cli", "shell"},
    "watchfiles": {"host", "cli"},
    "uvicorn": {"gateway", "examples"},  # the OAuth example serves its own app (a broken token endpoint)
    "starlette": {"gateway", "examples"},  # the OAuth example adds a route to the SDK's app
    "pydantic_ai": {"integrations"},
    "langchain": {"integrations"},
    "langchain_core": {"integrations"},
    "langgraph": {"integrations"},
    "agents": {"integrations"},
    "redis": {"fleet"},
}


def module_name(path: Path, root: Path = SRC) -> str:
    parts = ["mcpvisor", *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str) -> str:
    """The layer a module belongs to: the first part below ``mcpvisor``."""
    if module == "mcpvisor.__main__":
        return "entry"
    parts = module.split(".")
    if len(parts) == 1 or parts[1] not in LAYERS:
        return "api"  # the package root and its private helpers (mcpvisor._lazy)
    return parts[1]


def imports_of(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    """Every module ``tree`` imports (absolute names; ``from a import b`` is ``a.b`` when that is a module)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                names.add(sub if sub in known else base)
    return names


def import_graph(root: Path = SRC) -> dict[str, set[str]]:
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    known = set(files)
    return {
        name: imports_of(ast.parse(path.read_text(), filename=str(path)), name, path.stem == "__init__", known)
        for name, path in files.items()
    }


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, imported in sorted(graph.items()):
        layer = package_of(module)
        for name in sorted(imported):
            top = name.split(".")[0]
            if top == "mcpvisor":
                if package_of(name) not in LAYERS[layer]:
                    found.append(f"{module} ({layer}) imports {name} ({package_of(name)})")
            elif top in THIRD_PARTY and layer not in THIRD_PARTY[top]:
                found.append(f"{module} ({layer}) imports {name}")
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, ()):
            if succ not in graph:
                continue
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_every_module_imports_only_the_layers_below_it() -> None:
    assert layer_violations(import_graph()) == []


def test_no_import_circle_between_modules() -> None:
    assert import_cycles(import_graph()) == []


def test_every_package_has_a_docstring_saying_what_it_owns() -> None:
    for package in ("core", "host", "gateway", "shell", "integrations", "fleet", "cli"):
        doc = ast.get_docstring(ast.parse((SRC / package / "__init__.py").read_text()))
        assert doc, f"mcpvisor.{package} has no docstring"


def write_tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _packages(names: Iterable[str]) -> dict[str, str]:
    return {f"{name}/__init__.py": "" for name in names} | {"__init__.py": ""}


@pytest.mark.parametrize(
    ("rel", "source", "expected"),
    [
        ("core/a.py", "from mcpvisor.host import b\n", "mcpvisor.core.a (core) imports mcpvisor.host.b (host)"),
        (
            "core/a.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mcpvisor.cli import e\n",
            "mcpvisor.core.a (core) imports mcpvisor.cli.e (cli)",
        ),
        (
            "host/b.py",
            "def f():\n    from mcpvisor.shell import c\n",
            "mcpvisor.host.b (host) imports mcpvisor.shell.c (shell)",
        ),
        ("gateway/d.py", "from ..shell import c\n", "mcpvisor.gateway.d (gateway) imports mcpvisor.shell.c (shell)"),
        ("shell/c.py", "import mcpvisor.gateway.d\n", "mcpvisor.shell.c (shell) imports mcpvisor.gateway.d (gateway)"),
        ("gateway/d.py", "from mcpvisor.cli import e\n", "mcpvisor.gateway.d (gateway) imports mcpvisor.cli.e (cli)"),
        ("host/b.py", "import rich.console\n", "mcpvisor.host.b (host) imports rich.console"),
        ("shell/c.py", "import typer\n", "mcpvisor.shell.c (shell) imports typer"),
        ("gateway/d.py", "from prompt_toolkit import prompt\n", "mcpvisor.gateway.d (gateway) imports prompt_toolkit"),
        ("core/a.py", "import watchfiles\n", "mcpvisor.core.a (core) imports watchfiles"),
        ("core/a.py", "from mcpvisor import __version__\n", "mcpvisor.core.a (core) imports mcpvisor (api)"),
        (
            "integrations/f.py",
            "from mcpvisor.gateway import d\n",
            "mcpvisor.integrations.f (integrations) imports mcpvisor.gateway.d (gateway)",
        ),
        ("host/b.py", "from pydantic_ai import Agent\n", "mcpvisor.host.b (host) imports pydantic_ai"),
        (
            "gateway/d.py",
            "import mcpvisor.integrations.f\n",
            "mcpvisor.gateway.d (gateway) imports mcpvisor.integrations.f (integrations)",
        ),
    ],
)
def test_the_rule_catches_a_bad_import(tmp_path: Path, rel: str, source: str, expected: str) -> None:
    write_tree(tmp_path, _packages(["core", "host", "gateway", "shell", "cli", "integrations"]))
    files = ("core/a.py", "host/b.py", "shell/c.py", "gateway/d.py", "cli/e.py", "integrations/f.py")
    write_tree(tmp_path, dict.fromkeys(files, ""))
    assert layer_violations(import_graph(tmp_path)) == []
    write_tree(tmp_path, {rel: source})
    assert layer_violations(import_graph(tmp_path)) == [expected]


def test_the_rule_catches_a_circle_held_together_by_type_checking_imports(tmp_path: Path) -> None:
    write_tree(tmp_path, _packages(["core"]))
    write_tree(
        tmp_path,
        {
            "core/config.py": "from mcpvisor.core import manager\n",
            "core/manager.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mcpvisor.core.config import C\n"
            ),
            "core/other.py": "from mcpvisor.core.config import C\n",
        },
    )
    assert import_cycles(import_graph(tmp_path)) == [["mcpvisor.core.config", "mcpvisor.core.manager"]]


def test_importing_every_core_module_loads_no_module_above_the_core() -> None:
    # Third-party libraries are checked in the source above: the mcp SDK itself may load some of them.
    modules = [module_name(p) for p in (SRC / "core").glob("*.py")]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "bad = [m for m in sys.modules if m.split('.')[:2] in "
        "(['mcpvisor', 'host'], ['mcpvisor', 'gateway'], ['mcpvisor', 'shell'], ['mcpvisor', 'cli'])]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_config_module_does_not_import_the_mcp_sdk() -> None:
    """Commands that start no server must answer fast: the SDK costs about a second to import."""
    code = (
        "import sys, mcpvisor.core.config, mcpvisor.core.server_config, mcpvisor.core.gating\n"
        "assert 'mcp' not in sys.modules and 'mcp_types' not in sys.modules, 'the mcp SDK was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_first_connection_imports_the_sdk_off_the_event_loop(tmp_path: Path) -> None:
    """A program that shares its event loop with a web server keeps answering while the SDK loads."""
    code = f"""
import sys, threading, anyio
from pathlib import Path
from mcpvisor.core.config import Config
from mcpvisor.core.server_config import ConnectionOptions, McpServerConfig

importers = []

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name in ("mcp", "mcpvisor.core.client"):
            importers.append((name, threading.current_thread() is threading.main_thread()))
        return None

sys.meta_path.insert(0, Watch())

async def main():
    light = McpServerConfig(command=sys.executable, args=["-m", "mcpvisor.examples.light_server", "--name", "a"])
    async with Config(mcp_servers={{"a": light}}, options=ConnectionOptions(log_dir=Path({str(tmp_path)!r}))) as cfg:
        await cfg.initialize()
        assert set(cfg.tool_registry.names()) == {{"mcp__a__echo"}}, cfg.tool_registry.names()

anyio.run(main)
assert importers and not any(on_loop for _, on_loop in importers), importers
"""
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_host_without_language_servers_keeps_their_client_out_of_memory(tmp_path: Path) -> None:
    """What a gateway keeps at idle: the language-server client, ctypes and the slow JSON5 parser (for errors and
    edits only) load when they are needed, not with every host."""
    home = tmp_path / "home"
    (home / ".mcpvisor").mkdir(parents=True)
    (tmp_path / "ws").mkdir()
    light = {"command": sys.executable, "args": ["-m", "mcpvisor.examples.light_server", "--name", "a"]}
    (home / ".mcpvisor" / "settings.json").write_text(json.dumps({"mcpServers": {"a": light}}))
    env = {
        "HOME": str(home),
        "MCPVISOR_HOME": str(home / ".mcpvisor"),
        "MCPVISOR_LOG_DIR": str(tmp_path / "logs"),
        "MCPVISOR_SYSTEM_DEFAULTS_PATH": str(tmp_path / "etc" / "defaults.json"),
        "MCPVISOR_SYSTEM_SETTINGS_PATH": str(tmp_path / "etc" / "settings.json"),
    }
    code = f"""
import sys, anyio
from pathlib import Path
import mcpvisor.cli.serve
from mcpvisor.host.host import Host, HostOptions

async def main():
    async with Host(HostOptions(env={env!r}, workspace=Path({str(tmp_path / "ws")!r}))) as host:
        assert host.config.tool_registry.names() == {{"mcp__a__echo"}}, host.config.tool_registry.names()

anyio.run(main)
kept = [m for m in ("mcpvisor.host.lsp.server", "mcpvisor.host.lsp.jsonrpc", "ctypes", "json5") if m in sys.modules]
assert not kept, kept
"""
    subprocess.run([sys.executable, "-c", code], check=True)


MAX_MODULE_LINES = 500
"""Readable sizes: a module that grows past this is split by concern."""


def test_no_module_is_over_500_lines() -> None:
    package = Path(__file__).resolve().parents[1] / "src" / "mcpvisor"
    sizes = {
        str(p.relative_to(package)): len(p.read_text(encoding="utf-8").splitlines()) for p in package.rglob("*.py")
    }
    assert len(sizes) > 100  # the package itself, not an empty folder
    assert {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES} == {}
