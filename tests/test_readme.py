"""The README's complete Python examples run as written (those that need a model provider's key aside)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
RUNNABLE = [b for b in BLOCKS if "anyio.run(main)" in b and "openai:" not in b]
FOREVER_S = 8.0


def test_the_readme_has_complete_examples() -> None:
    assert len(RUNNABLE) >= 2


@pytest.mark.parametrize("code", RUNNABLE, ids=[f"example-{i}" for i in range(len(RUNNABLE))])
def test_a_readme_example_runs_as_written(code: str, tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "MCPVISOR_HOME": str(tmp_path / ".mcpvisor")}
    process = subprocess.Popen(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = process.communicate(timeout=FOREVER_S if "sleep_forever" in code else 60)
    except subprocess.TimeoutExpired:
        assert "sleep_forever" in code  # the one meant to run until stopped is still running, unharmed
        process.terminate()
        out, err = process.communicate(timeout=10)
    else:
        assert process.returncode == 0, err
    assert "Traceback" not in err, err
    assert "error" not in err.lower(), err
    if "mcp__echo__echo" in code:
        assert out.splitlines() == ["echo:echo:hi", "['mcp__echo__echo', 'mcp__more__echo']"], out


def test_the_readme_examples_pass_mypy_strict(tmp_path: Path) -> None:
    """What a typed program copies from the README type-checks (before: ``result.content[0].text`` did not)."""
    files = []
    for i, code in enumerate(RUNNABLE):
        files.append(tmp_path / f"example_{i}.py")
        files[-1].write_text(code)
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--no-error-summary", *map(str, files)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert (checked.returncode, checked.stdout) == (0, ""), checked.stdout + checked.stderr
