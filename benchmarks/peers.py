"""Side by side with the peers: mcpvisor's gateway and other programs that serve many MCP servers
behind one endpoint, driven by the same client over the same upstream servers.

Gateways (each its own process on loopback, no authentication, its own scratch HOME):

- **mcpvisor**: ``mcpvisor serve --http 127.0.0.1:PORT --no-auth``; servers in the user settings file
  (``$MCPVISOR_HOME/settings.json``), which it watches; streamable HTTP on ``/mcp``; tools ``mcp__s1__echo``.
- **mcp-hub** 4.2.1 (npm, on Node.js 22 from the npm package ``node@22``): ``mcp-hub --port PORT --config
  FILE --watch``; its unified endpoint speaks the HTTP+SSE transport of 2024-11-05 (``GET /mcp`` event
  stream, ``POST /messages``), so it gets the SDK's SSE client; tools ``s1__echo``. Its marketplace
  catalog cache is seeded so that start-up fetches nothing from the network.
- **magg** 1.3.0 (PyPI; it asks for Python 3.12, runs on 3.11 with two back-ports, see
  ``MAGG_BACKPORTS``): ``magg --config FILE serve --http``; watches its config file; streamable HTTP on
  ``/mcp``; tools ``s1_echo`` (each server's ``prefix`` is its name).
- **FastMCP proxy** 4.2.3 (PyPI): ``fastmcp run mcp.json --transport http``; does not watch its config;
  streamable HTTP; tools ``s1_echo``. Built from a config it opens fresh sessions to the upstream
  servers for every request (new processes each time, its default isolation), so a second variant,
  **FastMCP shared**, runs the same proxy over one connected client (``create_proxy(Client(config))``).

Upstreams: 10 light example servers ``s1`` ... ``s10`` (stdlib, stdio, started with this venv's Python),
the same for every gateway; each appends its PID to a marker file, so every upstream ever started is
accounted for. Client: the official SDK's ``Client`` in handshake-era mode (``mode="legacy"``, the era
every peer speaks), response cache off, streamable HTTP (SSE for mcp-hub).

Per round, each gateway in turn (the order rotates every round) gets a fresh process and:

1. **start-up**: launch -> all 10 servers' tools listed by a client (polled every 20 ms);
2. **idle RSS** of the gateway's own processes (its tree without the upstream servers), 1 s later;
3. **call latency**: ``--calls`` sequential ``echo`` calls after 20 warm-up ones (at most 15 s);
4. **throughput**: 16 client sessions, each on its own connection, calling back to back for
   ``--seconds`` (session i calls server i mod 10), with the CPU time the gateway's own processes and
   this client process spent meanwhile (all 16 sessions share this one client process: near a full
   core, the client is the bound); then **RSS after the load**;
5. **save -> callable**: the gateway's config saved atomically (temporary file + ``os.replace``) with an
   11th server; the new tool is called back to back until it answers; and **save -> list_changed**,
   the ``notifications/tools/list_changed`` the connected client receives ("never sent" after 5 s);
6. stop: SIGTERM, then how many upstreams are still running 3 s later (all are killed after that).

Once per round, as a reference, the same ``echo`` call straight to one light server over stdio.
Ratios are peer / mcpvisor within the same round, the median over the rounds.

Peers are installed on first use into ``~/.cache/mcpvisor-bench-peers`` (npm and pip, never into the
project's venv) and reused afterwards; ``--skip-install`` uses only what is there.

Run: ``.venv/bin/python benchmarks/peers.py [--rounds 3] [--calls 300] [--seconds 5] [--only mcpvisor,mcp-hub]``
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import anyio
import httpx2
import mcp_types as types
import psutil
from _common import LIGHT_MODULE, Table, percentile, print_header, run
from anyio.abc import TaskStatus
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.session import IncomingMessage
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mcpvisor-bench-peers"
MCP_HUB_VERSION = "4.2.1"
NODE_PACKAGE = "node@22"  # mcp-hub runs on Node.js 22; the npm package brings its own binary
MAGG_VERSION = "1.3.0"
FASTMCP_VERSION = "4.2.3"
INSTALL_TIMEOUT_S = 900

UPSTREAMS = 10
SESSIONS = 16
ARGS = {"text": "hi"}
WARMUP_CALLS = 20
WARMUP_BUDGET_S = 3.0
LATENCY_BUDGET_S = 15.0
CALL_TIMEOUT_S = 30.0
STARTUP_TIMEOUT_S = 60.0
LIST_POLL_S = 0.02
IDLE_SETTLE_S = 1.0
LOAD_SETTLE_S = 0.5
RELOAD_TIMEOUT_S = 20.0
NOTICE_WAIT_S = 5.0
STOP_TIMEOUT_S = 10.0
UPSTREAM_GRACE_S = 3.0
BETWEEN_SESSIONS_S = 1.0
CLIENT_BOUND_PERCENT = 90.0

STREAMABLE = "streamable HTTP"
SSE = "HTTP+SSE (2024-11-05)"
MB = 1024 * 1024

# Python 3.12 features magg 1.3.0 uses, back-ported in its scratch venv so that it runs on 3.11 (the
# project's Python): (file under site-packages, why, [(original text, replacement)]).
MAGG_BACKPORTS: list[tuple[str, str, list[tuple[str, str]]]] = [
    (
        "magg/util/transform.py",
        "PEP 695 type parameters on a function (def f[T: BaseModel](...)) are Python 3.12 syntax: "
        "a SyntaxError on 3.11; a module-level TypeVar instead",
        [
            ("from typing import Any, TypeAlias\n", "from typing import Any, TypeAlias, TypeVar\n"),
            (
                "def deserialize_embedded_resource_python_object[T: BaseModel](",
                "# Back-ported for Python 3.11: PEP 695 type parameters are 3.12 syntax.\n"
                'T = TypeVar("T", bound=BaseModel)\n\n\n'
                "def deserialize_embedded_resource_python_object(",
            ),
        ],
    ),
    (
        "magg/logs/defaults.py",
        "logging.config.dictConfig builds a QueueHandler with its 'listener' and 'handlers' keys only "
        "from Python 3.12; 3.11 passes them to QueueHandler() (TypeError, magg does not start): "
        "log straight to stderr instead",
        [
            (
                '        "default": {\n'
                '            "class": "magg.logs.handler.QueueHandler",\n'
                '            "queue": "magg.logs.queue.LogQueue",\n'
                '            "listener": "magg.logs.listener.QueueListener",\n'
                '            "handlers": ["stream"],\n'
                "        },\n",
                "        # Back-ported for Python 3.11: dictConfig knows QueueHandler's 'listener' and\n"
                "        # 'handlers' keys only from 3.12, so log straight to stderr.\n"
                '        "default": {\n'
                '            "class": "magg.logs.handler.StreamHandler",\n'
                '            "formatter": "default",\n'
                '            "stream": "ext://sys.stderr",\n'
                "        },\n",
            )
        ],
    ),
]

# The proxy over one connected client, run with the FastMCP venv's Python: argv = config file, port.
FASTMCP_SHARED_SCRIPT = """
import asyncio, json, sys
from fastmcp import Client
from fastmcp.server import create_proxy

async def main():
    with open(sys.argv[1]) as f:
        config = json.load(f)
    async with Client(config) as client:
        proxy = create_proxy(client, name="proxy")
        await proxy.run_http_async(host="127.0.0.1", port=int(sys.argv[2]), show_banner=False)

asyncio.run(main())
"""


class Unavailable(Exception):
    """A peer that cannot be installed or started here; the message says why."""


class GatewayFailed(Exception):
    """A gateway that did not come up or stopped answering during a session."""


# --------------------------------------------------------------------------- installing


def _tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])[-600:]


def _install_step(what: str, argv: Sequence[str], log: Path) -> None:
    print(f"  {what} ...", end=" ", flush=True)
    started = time.perf_counter()
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        try:
            result = subprocess.run(
                list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=INSTALL_TIMEOUT_S
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            print("failed")
            raise Unavailable(f"{what} failed: {exc}") from exc
    if result.returncode != 0:
        print("failed")
        raise Unavailable(f"{what} failed (exit {result.returncode}): {_tail(log)}; log: {log}")
    print(f"done in {time.perf_counter() - started:.0f} s", flush=True)


def _base_python() -> str:
    """A plain CPython of the project's version for the peers' venvs (never the project's venv)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidate = Path(sys.base_prefix) / "bin" / version
    return str(candidate) if candidate.exists() else (shutil.which(version) or sys.executable)


def _venv_version(venv: Path, package: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    return result.stdout.strip() or "?"


def _site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise Unavailable(f"no site-packages in {venv}")
    return found[0]


def _ensure_venv(venv: Path, requirement: str, *extra: str) -> None:
    log = CACHE_DIR / f"{venv.name}-install.log"
    if not (venv / "bin" / "python").exists():
        _install_step(f"creating {venv}", [_base_python(), "-m", "venv", str(venv)], log)
    _install_step(
        f"pip install {requirement} into {venv}",
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *extra, requirement],
        log,
    )


def apply_magg_backports(venv: Path) -> list[str]:
    """Patch magg's installed files (idempotent); returns what was done, one line per file."""
    site = _site_packages(venv)
    done: list[str] = []
    for relative, why, replacements in MAGG_BACKPORTS:
        path = site / relative
        text = path.read_text()
        changed = False
        for original, replacement in replacements:
            if original in text:
                text = text.replace(original, replacement)
                changed = True
            elif replacement not in text:
                raise Unavailable(f"magg back-port for {relative} does not apply: its text is not as expected")
        if changed:
            path.write_text(text)
        done.append(f"{relative}: {why}")
    return done


# --------------------------------------------------------------------------- the gateways


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]
    url: str


def _base_env(folder: Path) -> dict[str, str]:
    home = folder / "home"
    home.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "HOME": str(home)}


def _mcp_servers_json(servers: Mapping[str, Sequence[str]]) -> str:
    entries = {name: {"command": argv[0], "args": list(argv[1:])} for name, argv in servers.items()}
    return json.dumps({"mcpServers": entries}, indent=2)


class Peer:
    key = ""
    label = ""
    transport = STREAMABLE
    watches = True

    def __init__(self) -> None:
        self.version = ""
        self.details = ""

    def prepare(self, *, skip_install: bool) -> None:
        """Install (unless there already) and check what is needed; raises ``Unavailable``."""

    def describe(self) -> str:
        return f"{self.label}: {self.details}"

    def tool(self, server: str) -> str:
        return f"{server}_echo"

    def config_file(self, folder: Path) -> Path:
        return folder / "mcp.json"

    def config_text(self, servers: Mapping[str, Sequence[str]]) -> str:
        return _mcp_servers_json(servers)

    def launch(self, folder: Path, port: int) -> Launch:
        raise NotImplementedError


class Mcpvisor(Peer):
    key = "mcpvisor"
    label = "mcpvisor"

    def prepare(self, *, skip_install: bool) -> None:
        from importlib.metadata import version

        self.version = version("mcpvisor")
        # An installed wheel comes with its bytecode; this checkout's may be stale (or never written, under
        # PYTHONDONTWRITEBYTECODE), which would add the compiling of changed modules to every start-up.
        import mcpvisor

        compileall.compile_dir(Path(mcpvisor.__file__).parent, quiet=1)
        self.details = (
            f"{self.version} (this checkout), `mcpvisor serve --http --no-auth`, {self.transport} on /mcp, "
            "tools mcp__s1__echo; watches its user settings file"
        )

    def tool(self, server: str) -> str:
        return f"mcp__{server}__echo"

    def config_file(self, folder: Path) -> Path:
        return folder / "home" / ".mcpvisor" / "settings.json"

    def launch(self, folder: Path, port: int) -> Launch:
        script = Path(sys.executable).with_name("mcpvisor")
        command = [str(script)] if script.exists() else [sys.executable, "-m", "mcpvisor"]
        (folder / "ws").mkdir(exist_ok=True)
        env = {
            **_base_env(folder),
            "MCPVISOR_HOME": str(folder / "home" / ".mcpvisor"),
            "MCPVISOR_LOG_DIR": str(folder / "logs"),
            "MCPVISOR_SYSTEM_DEFAULTS_PATH": str(folder / "etc" / "system-defaults.json"),
            "MCPVISOR_SYSTEM_SETTINGS_PATH": str(folder / "etc" / "settings.json"),
        }
        env.pop("MCPVISOR_GATEWAY_TOKEN", None)
        argv = [*command, "serve", "--http", f"127.0.0.1:{port}", "--no-auth", "--workspace", str(folder / "ws")]
        return Launch(argv, env, f"http://127.0.0.1:{port}/mcp")


class McpHub(Peer):
    key = "mcp-hub"
    label = "mcp-hub"
    transport = SSE

    def __init__(self) -> None:
        super().__init__()
        self.prefix = CACHE_DIR / "node"
        self.bin = self.prefix / "node_modules" / ".bin"

    def prepare(self, *, skip_install: bool) -> None:
        marker = self.prefix / f"installed-mcp-hub-{MCP_HUB_VERSION}-{NODE_PACKAGE}"
        if not (marker.exists() and (self.bin / "mcp-hub").exists() and (self.bin / "node").exists()):
            if skip_install:
                raise Unavailable(f"not installed in {self.prefix} (--skip-install)")
            npm = shutil.which("npm")
            if npm is None:
                raise Unavailable("npm is not on the PATH (any Node.js with npm installs it)")
            self.prefix.mkdir(parents=True, exist_ok=True)
            _install_step(
                f"npm install {NODE_PACKAGE} mcp-hub@{MCP_HUB_VERSION} into {self.prefix}",
                [npm, "install", "--prefix", str(self.prefix), "--no-audit", "--no-fund", "--silent",
                 NODE_PACKAGE, f"mcp-hub@{MCP_HUB_VERSION}"],
                CACHE_DIR / "node-install.log",
            )  # fmt: skip
            marker.touch()
        package = json.loads((self.prefix / "node_modules" / "mcp-hub" / "package.json").read_text())
        self.version = str(package.get("version", "?"))
        node = subprocess.run(
            [str(self.bin / "node"), "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout.strip()
        self.details = (
            f"{self.version} on Node.js {node}, `mcp-hub --port P --config FILE --watch`, its unified endpoint "
            f"GET /mcp + POST /messages = {self.transport} (SDK SSE client), tools s1__echo; watches its config"
        )

    def tool(self, server: str) -> str:
        return f"{server}__echo"

    def launch(self, folder: Path, port: int) -> Launch:
        env = _base_env(folder)
        data = folder / "xdg-data"
        env |= {
            "PATH": f"{self.bin}{os.pathsep}{env.get('PATH', '')}",
            "XDG_DATA_HOME": str(data),
            "XDG_STATE_HOME": str(folder / "xdg-state"),
            "XDG_CONFIG_HOME": str(folder / "xdg-config"),
        }
        # A fresh marketplace catalog in its cache: otherwise start-up first tries to download it.
        cache = data / "mcp-hub" / "cache"
        cache.mkdir(parents=True, exist_ok=True)
        catalog = {
            "registry": {"servers": [{"id": "placeholder", "name": "placeholder"}]},
            "lastFetchedAt": int(time.time() * 1000),
            "serverDocumentation": {},
        }
        (cache / "registry.json").write_text(json.dumps(catalog))
        argv = [str(self.bin / "mcp-hub"), "--port", str(port), "--config", str(self.config_file(folder)), "--watch"]
        return Launch(argv, env, f"http://127.0.0.1:{port}/mcp")


class Magg(Peer):
    key = "magg"
    label = "magg"

    def __init__(self) -> None:
        super().__init__()
        self.venv = CACHE_DIR / "venv-magg"
        self.backports: list[str] = []

    def prepare(self, *, skip_install: bool) -> None:
        marker = self.venv / f"installed-magg-{MAGG_VERSION}"
        if not (marker.exists() and (self.venv / "bin" / "magg").exists()):
            if skip_install:
                raise Unavailable(f"not installed in {self.venv} (--skip-install)")
            # magg 1.3.0 declares Requires-Python >= 3.12; the back-ports below make it run on 3.11.
            _ensure_venv(self.venv, f"magg=={MAGG_VERSION}", "--ignore-requires-python")
            marker.touch()
        self.backports = apply_magg_backports(self.venv)
        self.version = _venv_version(self.venv, "magg")
        fastmcp = _venv_version(self.venv, "fastmcp")
        self.details = (
            f"{self.version} (on FastMCP {fastmcp}), `magg --config FILE serve --http`, {self.transport} on /mcp, "
            "tools s1_echo (prefix per server); watches its config"
        )

    def config_file(self, folder: Path) -> Path:
        return folder / "magg.json"

    def config_text(self, servers: Mapping[str, Sequence[str]]) -> str:
        entries = {
            name: {"source": "mcpvisor example server", "prefix": name, "command": argv[0], "args": list(argv[1:])}
            for name, argv in servers.items()
        }
        return json.dumps({"servers": entries}, indent=2)

    def launch(self, folder: Path, port: int) -> Launch:
        env = _base_env(folder) | {"FASTMCP_CHECK_FOR_UPDATES": "off"}
        argv = [str(self.venv / "bin" / "magg"), "--config", str(self.config_file(folder)), "serve", "--http"]
        argv += ["--host", "127.0.0.1", "--port", str(port), "--no-banner"]
        return Launch(argv, env, f"http://127.0.0.1:{port}/mcp")


class FastMcpProxy(Peer):
    key = "fastmcp"
    label = "FastMCP proxy"
    watches = False

    def __init__(self) -> None:
        super().__init__()
        self.venv = CACHE_DIR / "venv-fastmcp"
        self.note = ""

    def prepare(self, *, skip_install: bool) -> None:
        marker = self.venv / "installed-fastmcp"
        if not (marker.exists() and (self.venv / "bin" / "fastmcp").exists()):
            if skip_install:
                raise Unavailable(f"not installed in {self.venv} (--skip-install)")
            try:
                _ensure_venv(self.venv, f"fastmcp=={FASTMCP_VERSION}")
            except Unavailable as exc:
                if "No matching distribution" not in str(exc) and "no matching distribution" not in str(exc).lower():
                    raise
                print(f"  fastmcp {FASTMCP_VERSION} is not on the index; installing the newest")
                _ensure_venv(self.venv, "fastmcp")
            marker.touch()
        self.version = _venv_version(self.venv, "fastmcp")
        if self.version != FASTMCP_VERSION:
            self.note = f" (asked for {FASTMCP_VERSION}: not available, using the newest)"
        self.details = self._details()

    def _details(self) -> str:
        return (
            f"{self.version}{self.note}, `fastmcp run mcp.json --transport http`, {self.transport} on /mcp, "
            "tools s1_echo; does not watch its config; fresh upstream sessions (new processes) for every request"
        )

    def launch(self, folder: Path, port: int) -> Launch:
        env = _base_env(folder) | {"FASTMCP_CHECK_FOR_UPDATES": "off"}
        argv = [str(self.venv / "bin" / "fastmcp"), "run", str(self.config_file(folder)), "--transport", "http"]
        argv += ["--host", "127.0.0.1", "--port", str(port), "--no-banner"]
        return Launch(argv, env, f"http://127.0.0.1:{port}/mcp")


class FastMcpShared(FastMcpProxy):
    key = "fastmcp-shared"
    label = "FastMCP shared"

    def _details(self) -> str:
        return (
            f"{self.version}{self.note}, create_proxy(Client(config)) served with run_http_async, "
            f"{self.transport} on /mcp, tools s1_echo; does not watch its config; one upstream session kept"
        )

    def launch(self, folder: Path, port: int) -> Launch:
        env = _base_env(folder) | {"FASTMCP_CHECK_FOR_UPDATES": "off"}
        argv = [
            str(self.venv / "bin" / "python"),
            "-c",
            FASTMCP_SHARED_SCRIPT,
            str(self.config_file(folder)),
            str(port),
        ]
        return Launch(argv, env, f"http://127.0.0.1:{port}/mcp")


PEERS: list[Callable[[], Peer]] = [Mcpvisor, McpHub, Magg, FastMcpProxy, FastMcpShared]


# --------------------------------------------------------------------------- processes


def _upstream_argv(name: str, marker: Path) -> list[str]:
    return [sys.executable, "-m", LIGHT_MODULE, "--name", name, "--marker", str(marker)]


def _is_upstream(proc: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return LIGHT_MODULE in " ".join(proc.cmdline())
    return False


def live_upstreams(marker: Path) -> list[psutil.Process]:
    """Every upstream this marker file lists that is still running (zombies excluded)."""
    try:
        lines = marker.read_text().splitlines()
    except OSError:
        return []
    alive: list[psutil.Process] = []
    for line in lines:
        with contextlib.suppress(ValueError, psutil.Error):
            proc = psutil.Process(int(line.split()[0]))
            if proc.status() != psutil.STATUS_ZOMBIE and str(marker) in " ".join(proc.cmdline()):
                alive.append(proc)
    return alive


def _kill(procs: Sequence[psutil.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) == proc.pid:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
    psutil.wait_procs(list(procs), timeout=3)


@dataclass
class GatewayProcess:
    proc: subprocess.Popen[bytes]
    marker: Path
    log: Path
    stopped: bool = False

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def own_rss_mb(self) -> float:
        """RSS of the gateway's own processes: its tree without the upstream servers (and theirs)."""
        total = 0
        stack = [psutil.Process(self.proc.pid)]
        while stack:
            proc = stack.pop()
            with contextlib.suppress(psutil.Error):
                total += proc.memory_info().rss
                stack.extend(child for child in proc.children() if not _is_upstream(child))
        return total / MB

    def own_cpu_s(self) -> float:
        """CPU time (user + system) of the gateway's own processes so far."""
        total = 0.0
        stack = [psutil.Process(self.proc.pid)]
        while stack:
            proc = stack.pop()
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                total += times.user + times.system
                stack.extend(child for child in proc.children() if not _is_upstream(child))
        return total

    def started_upstreams(self) -> int:
        try:
            return len(self.marker.read_text().splitlines())
        except OSError:
            return 0

    def stop(self) -> int:
        """SIGTERM, wait; SIGKILL its group if it hangs. Returns how many upstreams were still running
        ``UPSTREAM_GRACE_S`` after it exited; those are killed."""
        if self.stopped:
            return 0
        self.stopped = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        deadline = time.monotonic() + UPSTREAM_GRACE_S
        while (alive := live_upstreams(self.marker)) and time.monotonic() < deadline:
            time.sleep(0.05)
        _kill(alive)
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # anything of its own still in its process group
        return len(alive)


STARTED: list[GatewayProcess] = []


def start_gateway(launch: Launch, folder: Path, marker: Path) -> GatewayProcess:
    log = folder / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            launch.argv,
            cwd=folder,
            env=launch.env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    gateway = GatewayProcess(proc, marker, log)
    STARTED.append(gateway)
    return gateway


def stop_everything(scratch: Path) -> int:
    """Stop every gateway still running and kill any upstream a marker lists; returns how many
    upstreams had to be killed here."""
    for gateway in STARTED:
        gateway.stop()
    leftovers = [proc for marker in scratch.glob("*/upstreams.txt") for proc in live_upstreams(marker)]
    _kill(leftovers)
    return len(leftovers)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def write_atomically(path: Path, text: str) -> None:
    """An editor's save: a temporary file in the same folder, renamed over the target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# --------------------------------------------------------------------------- the client


class Notices:
    """The connected client's message handler: when each tools/list_changed notice arrived."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._arrived = anyio.Event()

    async def __call__(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.times.append(time.perf_counter())
            self._arrived.set()
            self._arrived = anyio.Event()

    def first_after(self, moment: float) -> float | None:
        return next((t for t in self.times if t >= moment), None)

    async def wait_after(self, moment: float, deadline: float) -> float | None:
        while (first := self.first_after(moment)) is None:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return None
            with anyio.move_on_after(remaining):
                await self._arrived.wait()
        return first


@contextlib.asynccontextmanager
async def connect(peer: Peer, url: str, handler: Notices | None = None) -> AsyncIterator[Client]:
    if peer.transport == SSE:
        async with Client(
            sse_client(url, timeout=CALL_TIMEOUT_S),
            mode="legacy",
            cache=None,
            message_handler=handler,
            read_timeout_seconds=CALL_TIMEOUT_S,
        ) as client:
            yield client
    else:
        async with (
            httpx2.AsyncClient(timeout=CALL_TIMEOUT_S) as http,
            Client(
                streamable_http_client(url, http_client=http),
                mode="legacy",
                cache=None,
                message_handler=handler,
                read_timeout_seconds=CALL_TIMEOUT_S,
            ) as client,
        ):
            yield client


async def call_ok(client: Client, tool: str) -> None:
    result = await client.call_tool(tool, ARGS)
    if result.is_error:
        text = result.content[0].text if result.content and isinstance(result.content[0], types.TextContent) else ""
        raise GatewayFailed(f"call to {tool!r} failed: {text[:200]}")


async def timed_calls(client: Client, tool: str, calls: int, budget_s: float) -> list[float]:
    warm_until = time.perf_counter() + WARMUP_BUDGET_S
    for _ in range(WARMUP_CALLS):
        await call_ok(client, tool)
        if time.perf_counter() > warm_until:
            break
    out: list[float] = []
    stop_at = time.perf_counter() + budget_s
    while len(out) < calls and time.perf_counter() < stop_at:
        started = time.perf_counter()
        await call_ok(client, tool)
        out.append((time.perf_counter() - started) * 1000)
    return out


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"[:300]


# --------------------------------------------------------------------------- one session


@dataclass
class Sample:
    """One gateway in one round. ``nan``: not measured; ``None`` (reload): did not happen in time."""

    values: dict[str, float] = field(default_factory=dict)
    callable_ms: float | None = math.nan
    notice_ms: float | None = math.nan
    error: str | None = None

    def get(self, key: str) -> float:
        return self.values.get(key, math.nan)


async def wait_port(port: int, gateway: GatewayProcess, deadline: float) -> None:
    while True:
        if gateway.exited():
            raise GatewayFailed(f"exited with code {gateway.proc.returncode} before listening: {_tail(gateway.log)}")
        with contextlib.suppress(OSError):
            stream = await anyio.connect_tcp("127.0.0.1", port)
            await stream.aclose()
            return
        if time.perf_counter() > deadline:
            raise GatewayFailed(f"did not listen on port {port} within {STARTUP_TIMEOUT_S:g} s")
        await anyio.sleep(0.01)


async def connect_when_ready(
    stack: contextlib.AsyncExitStack, peer: Peer, url: str, handler: Notices, gateway: GatewayProcess, deadline: float
) -> Client:
    while True:
        try:
            return await stack.enter_async_context(connect(peer, url, handler))
        except Exception as exc:
            if gateway.exited() or time.perf_counter() > deadline:
                raise GatewayFailed(f"no MCP session: {_describe(exc)}") from exc
        await anyio.sleep(0.05)


async def wait_listed(client: Client, expected: set[str], gateway: GatewayProcess, deadline: float) -> None:
    while True:
        result = await client.list_tools()
        names = {tool.name for tool in result.tools}
        if expected <= names:
            return
        if gateway.exited() or time.perf_counter() > deadline:
            missing = ", ".join(sorted(expected - names))
            raise GatewayFailed(f"tools never listed within {STARTUP_TIMEOUT_S:g} s: {missing}")
        await anyio.sleep(LIST_POLL_S)


@dataclass(frozen=True)
class Load:
    calls_per_s: float
    failed: int
    gateway_cpu_s: float
    client_cpu_s: float


def _cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


async def throughput(peer: Peer, url: str, seconds: float, gateway: GatewayProcess) -> Load:
    """``SESSIONS`` sessions calling back to back for ``seconds``: calls/s finished in the window, failures,
    and the CPU time the gateway's own processes and this client process spent in the window."""
    go = anyio.Event()
    end = math.inf
    done = 0
    failed = 0

    async def session(index: int, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        nonlocal done, failed
        tool = peer.tool(f"s{index % UPSTREAMS + 1}")
        async with connect(peer, url) as client:
            await call_ok(client, tool)
            task_status.started()
            await go.wait()
            while time.perf_counter() < end:
                try:
                    await call_ok(client, tool)
                except Exception:
                    failed += 1
                    await anyio.sleep(0.01)
                    continue
                if time.perf_counter() <= end:
                    done += 1

    async with anyio.create_task_group() as tg:
        for index in range(SESSIONS):
            await tg.start(session, index)
        me = psutil.Process()
        gateway_cpu, client_cpu = gateway.own_cpu_s(), _cpu_s(me)
        end = time.perf_counter() + seconds
        go.set()
        await anyio.sleep(seconds)
        gateway_cpu, client_cpu = gateway.own_cpu_s() - gateway_cpu, _cpu_s(me) - client_cpu
    return Load(done / seconds, failed, gateway_cpu, client_cpu)


async def reload_probe(
    client: Client, peer: Peer, folder: Path, servers: dict[str, list[str]], notices: Notices
) -> tuple[float | None, float | None]:
    new = f"s{UPSTREAMS + 1}"
    marker = folder / "upstreams.txt"
    text = peer.config_text({**servers, new: _upstream_argv(new, marker)})
    write_atomically(peer.config_file(folder), text)
    saved = time.perf_counter()
    tool = peer.tool(new)
    callable_at: float | None = None
    while time.perf_counter() - saved < RELOAD_TIMEOUT_S:
        try:
            result = await client.call_tool(tool, ARGS)
        except Exception:  # an unknown tool: an error answer or a JSON-RPC error, depending on the gateway
            continue
        if not result.is_error:
            callable_at = time.perf_counter()
            break
    deadline = max(saved + NOTICE_WAIT_S, (callable_at or saved) + 1.0)
    notice_at = await notices.wait_after(saved, deadline)
    return (
        None if callable_at is None else (callable_at - saved) * 1000,
        None if notice_at is None else (notice_at - saved) * 1000,
    )


def lay_out(peer: Peer, folder: Path) -> tuple[Path, dict[str, list[str]]]:
    """A session's folder with the gateway's config listing the upstreams; returns the marker file and them."""
    folder.mkdir(parents=True)
    marker = folder / "upstreams.txt"
    servers = {f"s{i}": _upstream_argv(f"s{i}", marker) for i in range(1, UPSTREAMS + 1)}
    write_atomically(peer.config_file(folder), peer.config_text(servers))
    return marker, servers


async def session(peer: Peer, folder: Path, args: argparse.Namespace) -> Sample:
    marker, servers = lay_out(peer, folder)
    port = free_port()
    launch = peer.launch(folder, port)
    sample = Sample()
    notices = Notices()
    expected = {peer.tool(name) for name in servers}
    started = time.perf_counter()
    deadline = started + STARTUP_TIMEOUT_S
    gateway = start_gateway(launch, folder, marker)
    try:
        await wait_port(port, gateway, deadline)
        sample.values["listen"] = (time.perf_counter() - started) * 1000
        async with contextlib.AsyncExitStack() as stack:
            client = await connect_when_ready(stack, peer, launch.url, notices, gateway, deadline)
            await wait_listed(client, expected, gateway, deadline)
            sample.values["startup"] = (time.perf_counter() - started) * 1000
            await anyio.sleep(IDLE_SETTLE_S)
            sample.values["rss_idle"] = gateway.own_rss_mb()

            latencies = await timed_calls(client, peer.tool("s1"), args.calls, LATENCY_BUDGET_S)
            sample.values |= {
                "p50": percentile(latencies, 50),
                "p99": percentile(latencies, 99),
                "calls": float(len(latencies)),
            }
            load = await throughput(peer, launch.url, args.seconds, gateway)
            calls = load.calls_per_s * args.seconds
            sample.values |= {
                "throughput": load.calls_per_s,
                "load_failed": float(load.failed),
                "cpu_per_call": load.gateway_cpu_s * 1000 / calls if calls else math.nan,
                "gateway_cpu": load.gateway_cpu_s / args.seconds * 100,
                "client_cpu": load.client_cpu_s / args.seconds * 100,
            }
            await anyio.sleep(LOAD_SETTLE_S)
            sample.values["rss_load"] = gateway.own_rss_mb()

            if peer.watches:
                sample.callable_ms, sample.notice_ms = await reload_probe(client, peer, folder, servers, notices)
    except Exception as exc:
        sample.error = _describe(exc)
        if gateway.exited():
            sample.error += f" (gateway exited with code {gateway.proc.returncode}: {_tail(gateway.log, 3)})"
    finally:
        sample.values["spawned"] = float(gateway.started_upstreams())
        sample.values["left"] = float(gateway.stop())
    return sample


@contextlib.contextmanager
def _devnull() -> Iterator[TextIO]:
    with open(os.devnull, "w") as sink:
        yield sink


async def direct_reference(calls: int) -> list[float]:
    """The same echo call straight to one light server over stdio (SDK client): the floor."""
    params = StdioServerParameters(command=sys.executable, args=["-m", LIGHT_MODULE, "--name", "direct"])
    with _devnull() as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy", cache=None) as client:
            return await timed_calls(client, "echo", calls, LATENCY_BUDGET_S)


def _progress(sample: Sample) -> str:
    if sample.error and "startup" not in sample.values:
        return f"FAILED: {sample.error}"
    parts = [
        f"start-up {sample.get('startup'):.0f} ms",
        f"idle RSS {sample.get('rss_idle'):.0f} MB",
        f"p50 {sample.get('p50'):.2f} / p99 {sample.get('p99'):.2f} ms ({sample.get('calls'):.0f} calls)",
        f"{sample.get('throughput'):.0f} calls/s ({sample.get('load_failed'):.0f} failed, "
        f"gateway CPU {sample.get('cpu_per_call'):.2f} ms/call)",
    ]
    if not math.isnan(sample.callable_ms or 0.0):
        parts.append("save->callable " + ("never" if sample.callable_ms is None else f"{sample.callable_ms:.0f} ms"))
        parts.append("list_changed " + ("never sent" if sample.notice_ms is None else f"{sample.notice_ms:.0f} ms"))
    parts.append(f"{sample.get('spawned'):.0f} upstreams started, {sample.get('left'):.0f} left after SIGTERM")
    line = ", ".join(parts)
    return line + (f"; ERROR: {sample.error}" if sample.error else "")


# --------------------------------------------------------------------------- the report


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    digits: int
    ratio: bool = True


ROWS = [
    Row("transport", "endpoint transport", 0, ratio=False),
    Row("callable", "save -> new server's tool callable (ms)", 0),
    Row("notice", "save -> tools/list_changed received (ms)", 0),
    Row("order", "list_changed vs callable", 0, ratio=False),
    Row("p50", "tool call p50 (ms)", 2),
    Row("p99", "tool call p99 (ms)", 2),
    Row("calls", "  calls timed per round", 0, ratio=False),
    Row("throughput", f"throughput, {SESSIONS} sessions (calls/s)", 0),
    Row("load_failed", "  failed calls under load", 0, ratio=False),
    Row("cpu_per_call", "  gateway CPU per call under load (ms)", 2),
    Row("gateway_cpu", "  gateway CPU under load (% of a core)", 0),
    Row("client_cpu", "  this client's CPU under load (% of a core)", 0, ratio=False),
    Row("startup", f"start-up -> {UPSTREAMS} servers' tools listed (ms)", 0),
    Row("listen", "  of which until the port accepted (ms)", 0),
    Row("rss_idle", "gateway RSS, idle after start-up (MB)", 1),
    Row("rss_load", "gateway RSS, after the load (MB)", 1),
    Row("spawned", "upstream processes started", 0, ratio=False),
    Row("left", "upstreams running 3 s after SIGTERM", 0, ratio=False),
]


def _values(samples: Sequence[Sample], key: str) -> list[float | None]:
    """Per round: the value, ``None`` when it did not happen in time, ``nan`` when not measured."""
    out: list[float | None] = []
    for sample in samples:
        if key == "callable":
            out.append(sample.callable_ms)
        elif key == "notice":
            out.append(sample.notice_ms)
        else:
            out.append(sample.get(key))
    return out


def _finite(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None and not math.isnan(v)]


def _cell(peer: Peer, samples: Sequence[Sample], row: Row) -> str:
    if row.key == "transport":
        return "HTTP+SSE" if peer.transport == SSE else peer.transport
    if row.key == "order":
        if not peer.watches:
            return "-"
        counts: dict[str, int] = {}
        for sample in samples:
            c, n = sample.callable_ms, sample.notice_ms
            if c is None or n is None or math.isnan(c) or math.isnan(n):
                what = "never sent" if n is None else ("not callable" if c is None else "-")
            else:
                what = "before" if n <= c else "after"
            counts[what] = counts.get(what, 0) + 1
        return ", ".join(f"{what} {n}/{len(samples)}" for what, n in counts.items())
    values = _values(samples, row.key)
    finite = _finite(values)
    if row.key in ("callable", "notice") and not peer.watches:
        return "does not watch"
    if not finite:
        if any(v is None for v in values):
            return "never sent" if row.key == "notice" else "never"
        return "-"
    median = statistics.median(finite)
    text = f"{median:,.{row.digits}f}"
    if len(finite) > 1 and max(finite) != min(finite):
        text += f" ({min(finite):,.{row.digits}f}-{max(finite):,.{row.digits}f})"
    missing = sum(1 for v in values if v is None)
    if missing:
        text += f", {len(finite)}/{len(values)} in time"
    return text


def _ratio(peer_samples: Sequence[Sample], base_samples: Sequence[Sample], key: str) -> float:
    ratios = []
    for mine, theirs in zip(base_samples, peer_samples, strict=True):
        a = _finite(_values([theirs], key))
        b = _finite(_values([mine], key))
        if a and b and b[0] > 0:
            ratios.append(a[0] / b[0])
    return statistics.median(ratios) if ratios else math.nan


def _median(samples: Sequence[Sample], key: str) -> float:
    finite = _finite(_values(samples, key))
    return statistics.median(finite) if finite else math.nan


def report(peers: Sequence[Peer], results: Mapping[str, list[Sample]], direct: Sequence[float], rounds: int) -> None:
    base = next((p for p in peers if p.key == "mcpvisor"), None)
    others = [p for p in peers if p is not base]
    columns = ["measurement", *(p.label for p in peers)]
    if base is not None:
        columns += [f"{p.key} / mcpvisor" for p in others]
    table = Table(
        f"Gateways side by side, {rounds} rounds (median (min-max); ratios: peer / mcpvisor in the same round, median)",
        columns,
        note_last=False,
    )
    for row in ROWS:
        cells = [_cell(p, results[p.key], row) for p in peers]
        if base is not None:
            for p in others:
                r = _ratio(results[p.key], results[base.key], row.key) if row.ratio else math.nan
                cells.append("-" if math.isnan(r) else f"{r:.2f}x")
        table.add(row.label, *cells)
    table.print()
    if direct:
        print(
            f"reference: the same echo call straight to one light server over stdio (SDK client, {len(direct)} calls): "
            f"p50 {percentile(direct, 50):.2f} ms, p99 {percentile(direct, 99):.2f} ms"
        )
    print("throughput: higher is better (a ratio above 1 favours the peer); every other row: lower is better")
    bound = [p.label for p in peers if _median(results[p.key], "client_cpu") >= CLIENT_BOUND_PERCENT]
    if bound:
        print(
            f"throughput of {', '.join(bound)}: this client process used >= {CLIENT_BOUND_PERCENT:g} % of a core, "
            "so the figure is bounded by the client, not by the gateway (compare gateway CPU per call)"
        )
    for p in peers:
        errors = [f"round {i + 1}: {s.error}" for i, s in enumerate(results[p.key]) if s.error]
        for error in errors:
            print(f"{p.label}: {error}")
    print()
    if base is not None:
        targets(base, others, results)


def targets(base: Peer, others: Sequence[Peer], results: Mapping[str, list[Sample]]) -> None:
    mine = results[base.key]
    hub = next((p for p in others if p.key == "mcp-hub"), None)
    lines: list[tuple[str, str, str]] = []

    def met(ok: bool) -> str:
        return "met" if ok else "not met"

    watching = [p for p in others if p.watches and not math.isnan(_median(results[p.key], "callable"))]
    callable_ms = _median(mine, "callable")
    if watching and not math.isnan(callable_ms):
        best = min(watching, key=lambda p: _median(results[p.key], "callable"))
        theirs = _median(results[best.key], "callable")
        lines.append(
            (
                "save -> callable <= 0.5x the best peer's",
                met(callable_ms <= 0.5 * theirs),
                f"mcpvisor {callable_ms:.0f} ms; best peer {best.label} {theirs:.0f} ms (half: {theirs / 2:.0f} ms); "
                f"{callable_ms / theirs:.2f}x",
            )
        )
    else:
        lines.append(("save -> callable <= 0.5x the best peer's", "not measured", "no watching peer answered in time"))

    pairs = [(s.callable_ms, s.notice_ms) for s in mine]
    timely = [n is not None and c is not None and n <= c for c, n in pairs]
    figures = "; ".join(
        f"round {i + 1}: list_changed {'never' if n is None else f'{n:.0f}'} ms, callable "
        f"{'never' if c is None else f'{c:.0f}'} ms"
        for i, (c, n) in enumerate(pairs)
    )
    lines.append(("list_changed no later than callable", met(bool(timely) and all(timely)), figures))

    if hub is not None:
        theirs_hub = results[hub.key]
        for key, what in (("p50", "call p50"), ("p99", "call p99")):
            a, b = _median(mine, key), _median(theirs_hub, key)
            lines.append(
                (f"{what} <= mcp-hub's", met(a <= b), f"mcpvisor {a:.2f} ms, mcp-hub {b:.2f} ms ({a / b:.2f}x)")
            )
        a, b = _median(mine, "throughput"), _median(theirs_hub, "throughput")
        goal = "goal 1.5x: " + met(a >= 1.5 * b)
        lines.append(
            (
                "throughput >= mcp-hub's (goal 1.5x)",
                met(a >= b),
                f"mcpvisor {a:.0f} calls/s, mcp-hub {b:.0f} calls/s ({a / b:.2f}x; {goal})",
            )
        )
        a, b = _median(mine, "startup"), _median(theirs_hub, "startup")
        lines.append(("start-up <= mcp-hub's", met(a <= b), f"mcpvisor {a:.0f} ms, mcp-hub {b:.0f} ms ({a / b:.2f}x)"))
    else:
        lines.append(("call p50 / p99, throughput, start-up vs mcp-hub", "not measured", "mcp-hub did not run"))

    rss = {p.label: _median(results[p.key], "rss_idle") for p in [base, *others]}
    measured = {k: v for k, v in rss.items() if not math.isnan(v)}
    lowest = min(measured, key=lambda k: measured[k]) if measured else ""
    lines.append(
        (
            "idle RSS the lowest",
            met(lowest == base.label),
            ", ".join(f"{k} {v:.1f} MB" for k, v in sorted(measured.items(), key=lambda kv: kv[1])),
        )
    )
    table = Table("Targets (mcpvisor; medians over the rounds)", ["target", "verdict", "figures"])
    for line in lines:
        table.add(*line)
    table.print()


# --------------------------------------------------------------------------- main


def select(only: str | None) -> list[Peer]:
    peers = [make() for make in PEERS]
    if not only:
        return peers
    wanted = [name.strip() for name in only.split(",") if name.strip()]
    known = {p.key: p for p in peers}
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise SystemExit(f"unknown gateway(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    return [p for p in peers if p.key in wanted]


def prepare(peers: Sequence[Peer], *, skip_install: bool) -> list[Peer]:
    print(f"peers' installs: {CACHE_DIR}")
    ready: list[Peer] = []
    for peer in peers:
        try:
            peer.prepare(skip_install=skip_install)
        except Unavailable as exc:
            print(f"  {peer.label}: left out: {exc}")
            continue
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            print(f"  {peer.label}: left out: {_describe(exc)}")
            continue
        ready.append(peer)
    print()
    for peer in ready:
        print(f"- {peer.describe()}")
        if isinstance(peer, Magg):
            for line in peer.backports:
                print(f"    back-port {line}")
    print()
    return ready


async def bench(peers: Sequence[Peer], args: argparse.Namespace, scratch: Path) -> None:
    results: dict[str, list[Sample]] = {p.key: [] for p in peers}
    direct: list[float] = []
    try:
        for round_index in range(args.rounds):
            shift = round_index % len(peers)
            order = [*peers[shift:], *peers[:shift]]
            load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
            names = ", ".join(p.label for p in order)
            print(f"round {round_index + 1}/{args.rounds} (load average {load}); order: {names}")
            latencies = await direct_reference(args.calls)
            direct += latencies
            print(
                f"  {'direct stdio':<15} p50 {percentile(latencies, 50):.2f} / p99 {percentile(latencies, 99):.2f} ms",
                flush=True,
            )
            for peer in order:
                sample = await session(peer, scratch / f"{peer.key}-r{round_index + 1}", args)
                results[peer.key].append(sample)
                print(f"  {peer.label:<15} {_progress(sample)}", flush=True)
                await anyio.sleep(BETWEEN_SESSIONS_S)
        print()
    finally:
        stop_everything(scratch)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average after the rounds: {load}")
    print()
    report(peers, results, direct, args.rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each runs every gateway once (default 3)")
    parser.add_argument(
        "--calls", type=int, default=300, help="sequential calls timed per gateway and round (default 300)"
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="throughput window in seconds (default 5)")
    parser.add_argument(
        "--only", help=f"comma-separated subset of: {', '.join(make().key for make in PEERS)} (default: all)"
    )
    parser.add_argument("--skip-install", action="store_true", help="use only the peers already installed")
    args = parser.parse_args()
    peers = select(args.only)
    print_header(
        "peers",
        f"upstreams: {UPSTREAMS} light example servers over stdio (+1 added by the reload probe)",
        f"client: mcp SDK Client, mode='legacy' (handshake era), cache off; {args.calls} calls per latency run, "
        f"{SESSIONS} sessions x {args.seconds:g} s of load; {args.rounds} rounds",
    )
    started = time.perf_counter()
    ready = prepare(peers, skip_install=args.skip_install)
    print(f"(installs and checks took {time.perf_counter() - started:.1f} s)")
    print()
    if not ready:
        raise SystemExit("no gateway could be prepared")
    scratch = Path(tempfile.mkdtemp(prefix="mcpvisor-bench-peers-"))
    try:
        run(lambda: bench(ready, args, scratch))
    finally:
        killed = stop_everything(scratch)
        alive = [p for marker in scratch.glob("*/upstreams.txt") for p in live_upstreams(marker)]
        if killed or alive:
            print(
                f"warning: {killed} upstream server(s) were still running at the end and were killed", file=sys.stderr
            )
        print(f"upstream servers still running at exit: {len(alive)}")
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
