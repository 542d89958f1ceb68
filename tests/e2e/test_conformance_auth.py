"""The official MCP conformance suite's client ``auth/*`` scenarios with the real ``mcpvisor`` CLI as the
client: ``tests/e2e/auth_client.sh`` writes a settings entry for the suite's test server (with the
pre-registered client the scenario hands over), then in one ``mcpvisor shell`` session signs in with
``/login t`` (its "browser" is curl, and the suite's authorization server redirects straight back), looks
at the status view and calls the server's tool — signing in again once, in a second session, when the call
asks for a wider sign-in, as a person would. Machine-to-machine grants sign in by themselves. Every scenario
must pass with no failure and no warning."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.npm_peers import node_env
from tests.e2e.test_conformance import conformance_command
from tests.helpers import mcpvisor_command

pytestmark = pytest.mark.conformance

DRIVER = Path(__file__).with_name("auth_client.sh")
SCENARIO_TIMEOUT_S = 180
CLIENT_TIMEOUT_MS = 90_000

SCENARIOS = [
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/client-credentials-basic",
    "auth/client-credentials-jwt",
    "auth/cross-app-access-complete-flow",
]


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The driver at a path without spaces (the suite splits its --command on them)."""
    copy = tmp_path_factory.mktemp("auth-client") / DRIVER.name
    shutil.copy2(DRIVER, copy)
    return copy


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_cli_passes_the_official_client_auth_scenario(driver: Path, scenario: str, tmp_path: Path) -> None:
    env = {**node_env(), "MCPVISOR": mcpvisor_command(), "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    result = subprocess.run(
        [str(conformance_command()), "client", "--command", str(driver), "--scenario", scenario,
         "--timeout", str(CLIENT_TIMEOUT_MS), "-o", str(tmp_path / "results")],
        capture_output=True,
        text=True,
        timeout=SCENARIO_TIMEOUT_S,
        env=env,
    )  # fmt: skip
    output = result.stdout + result.stderr
    summary = re.search(r"Passed: (\d+)/(\d+), (\d+) failed, (\d+) warnings", output)
    assert summary is not None, output
    passed, total, failed, warnings = map(int, summary.groups())
    assert (failed, warnings) == (0, 0), output
    assert passed == total > 0, output
    assert "EXITED WITH ERROR" not in output, output
    assert result.returncode == 0, output
