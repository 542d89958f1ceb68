"""Hostile input through the real loaders: structural fuzzing of settings files, ``.mcp.json`` and the
private stores (approvals, OAuth tokens, pinned definitions). Never a traceback; every problem names its
file (and line and column where the text has them) or the server."""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, TimeoutError
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcpvisor.core.config import Config
from mcpvisor.core.errors import ConfigError
from mcpvisor.host.approvals import ApprovalStore
from mcpvisor.host.file_reads import read_regular
from mcpvisor.host.hot_reload import compute_desired_state
from mcpvisor.host.oauth import TokenStore
from mcpvisor.host.oauth_grants import _private_key
from mcpvisor.host.oauth_storage import FileTokenStorage
from mcpvisor.host.pins import PinStore
from mcpvisor.host.settings.files import SettingsFileError
from mcpvisor.host.settings.loader import load_settings
from mcpvisor.host.settings.mcp_servers import load_top_tier
from mcpvisor.host.settings.writer import set_setting
from mcpvisor.host.watched_files import read_file_state
from tests.layout import make_layout

T = TypeVar("T")
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=12))
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20,
)
entry_keys = st.sampled_from(
    ["command", "args", "env", "cwd", "url", "httpUrl", "type", "headers", "timeout", "includeTools", "oauth", "trust"]
)
server_entries = st.one_of(json_values, st.dictionaries(entry_keys, json_values, max_size=5))
settings_documents = st.fixed_dictionaries(
    {},
    optional={
        "mcpServers": st.one_of(json_values, st.dictionaries(st.text(max_size=10), server_entries, max_size=4)),
        "mcp": st.one_of(
            json_values,
            st.fixed_dictionaries(
                {},
                optional={
                    "allowed": json_values,
                    "excluded": json_values,
                    "pinTools": json_values,
                    "maxConcurrentStarts": json_values,
                },
            ),
        ),
        "security": json_values,
        "ui": json_values,
    },
)


@st.composite
def damaged(draw: st.DrawFn, documents: st.SearchStrategy[Any]) -> bytes:
    """A document as a file, then maybe truncated, spliced with junk, nested deep or replaced by bytes."""
    text = json.dumps(draw(documents)).encode()
    damage = draw(st.sampled_from(["none", "truncate", "splice", "nest", "binary"]))
    if damage == "truncate":
        return text[: draw(st.integers(0, len(text)))]
    if damage == "splice":
        at = draw(st.integers(0, len(text)))
        return text[:at] + draw(st.binary(max_size=8)) + text[at:]
    if damage == "nest":
        depth = draw(st.sampled_from([40, 1_000, 100_000]))
        return b'{"mcpServers": ' + b"[" * depth + b"]" * draw(st.sampled_from([0, depth])) + b"}"
    if damage == "binary":
        return draw(st.binary(max_size=64))
    return text


def names_the_file(message: str, path: Path) -> bool:
    return str(path) in message


@FUZZ
@given(user=damaged(settings_documents), project=damaged(settings_documents))
def test_settings_files_and_mcp_json_never_raise_and_every_problem_names_its_file(
    tmp_path_factory: Any, user: bytes, project: bytes
) -> None:
    layout = make_layout(tmp_path_factory.mktemp("fuzz"))
    layout.paths.user.parent.mkdir(parents=True, exist_ok=True)
    layout.paths.user.write_bytes(user)
    layout.paths.project.write_bytes(project)
    loaded = load_settings(layout.env, layout.root)
    for scope, error in loaded.errors.items():
        assert names_the_file(str(error), layout.paths.of(scope))
        assert error.line is None or error.line >= 1
        assert error.column is None or error.column >= 1
    approvals = ApprovalStore(Path(layout.env["MCPVISOR_HOME"]) / "approvals.json")
    state = compute_desired_state(loaded, Config(), approvals, load_top_tier((), layout.env))
    files = (str(layout.paths.user), str(layout.paths.project), str(layout.paths.workspace))
    for warning in (*loaded.warnings, *state.assembled.warnings):
        assert any(f in warning for f in files), warning
    for error in state.assembled.errors:
        assert any(f in str(error) for f in files), error


stores = st.one_of(
    json_values,
    st.dictionaries(st.text(max_size=10), st.one_of(json_values, st.dictionaries(st.text(max_size=6), json_values))),
)


@FUZZ
@given(content=damaged(stores))
def test_the_private_stores_fail_closed_with_an_error_naming_the_file(tmp_path_factory: Any, content: bytes) -> None:
    folder = tmp_path_factory.mktemp("stores")
    approvals_path, tokens_path, pins_path = folder / "approvals.json", folder / "tokens.json", folder / "pins.json"
    for path in (approvals_path, tokens_path, pins_path):
        path.write_bytes(content)
        os.chmod(path, 0o600)
    approvals = ApprovalStore(approvals_path)
    approvals.load()
    assert approvals.error is None or names_the_file(approvals.error, approvals_path)
    for store in (TokenStore(tokens_path), PinStore(pins_path)):
        outcome = read_or_error(store)
        if isinstance(outcome, str):
            assert names_the_file(outcome, store.path)
        else:
            assert all(isinstance(v, dict) for v in outcome.values())
    assert approvals_path.read_bytes() == content  # never written over


def read_or_error(store: TokenStore | PinStore) -> dict[str, Any] | str:
    try:
        return store.read()
    except ConfigError as exc:
        return str(exc)


# --------------------------------------------------------------------------- not a file at all

# git keeps symbolic links: a cloned project may hold `.mcp.json -> /dev/zero` (an endless read) or a
# link to a named pipe (whose open waits for a writer). Each is refused at once, naming the file.
SPECIAL = ["/dev/zero", "fifo"]


def _special(path: Path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(kind)


def _within(seconds: float, call: Callable[[], T], *, fifos: Iterable[Path]) -> T:
    """``call()``'s result, or a failure after ``seconds`` (a blocked open of a pipe is released first)."""
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(call)
        try:
            return future.result(timeout=seconds)
        except TimeoutError:
            for fifo in fifos:  # let the blocked reader go, so the test ends
                with contextlib.suppress(OSError):
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            raise AssertionError(f"{call} blocked for {seconds} s") from None


@pytest.mark.parametrize("kind", SPECIAL)
def test_a_settings_file_that_is_a_device_or_a_pipe_is_refused_naming_it(tmp_path: Path, kind: str) -> None:
    layout = make_layout(tmp_path)
    files = (layout.paths.project, layout.paths.lsp_project)
    for path in files:
        _special(path, kind)
    loaded = _within(20, lambda: load_settings(layout.env, layout.root), fifos=files)
    for scope in ("project", "lsp_project"):
        message = str(loaded.errors[scope])
        assert names_the_file(message, layout.paths.of(scope))
        assert "not a regular file" in message
    for path in files:  # the watcher's view of the file
        assert _within(20, partial(read_file_state, path), fifos=files) is None
    with pytest.raises(SettingsFileError, match="not a regular file"):  # and `mcp add` edits nothing
        _within(20, lambda: set_setting(loaded, "project", ["mcpServers", "x"], {"command": "x"}), fifos=files)
    _special(layout.paths.user, kind)  # the user's own file: the folder's trust cannot be told, so none
    user = (layout.paths.user,)
    loaded = _within(20, lambda: load_settings(layout.env, layout.root), fifos=user)
    assert "not a regular file" in str(loaded.errors["user"])
    assert not loaded.trusted


@pytest.mark.parametrize("kind", SPECIAL)
def test_a_store_that_is_a_device_or_a_pipe_fails_closed_naming_it(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "approvals.json"
    _special(path, kind)
    approvals = ApprovalStore(path)
    _within(20, approvals.load, fifos=[path])
    assert approvals.error is not None
    assert names_the_file(approvals.error, path), approvals.error


def test_a_file_longer_than_its_size_says_is_read_no_further_than_the_limit() -> None:
    # /proc files say size 0 and hold more: the bound holds however large the file turns out to be.
    st, data = read_regular(Path("/proc/self/maps"), 1 << 20)
    assert st.st_size == 0
    assert len(data) > 100
    with pytest.raises(OSError, match="may be at most") as caught:
        read_regular(Path("/proc/self/maps"), 100)
    assert caught.value.errno == errno.EFBIG


@pytest.mark.parametrize("kind", SPECIAL)
def test_a_private_key_file_that_is_a_device_or_a_pipe_is_refused_naming_it(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "key.pem"
    _special(path, kind)
    with pytest.raises(ConfigError, match="privateKeyFile .*not a regular file") as caught:
        _within(20, partial(_private_key, "s", str(path)), fifos=[path])
    assert str(path) in str(caught.value)


async def test_a_token_store_record_that_fails_validation_is_an_error_that_never_shows_its_values(
    tmp_path: Path,
) -> None:
    path = tmp_path / "oauth-tokens.json"
    key = "http://127.0.0.1:8124/mcp"
    path.write_text(json.dumps({key: {"tokens": {"token_type": 7, "refresh_token": "RT-SECRET-abc123"}}}))
    path.chmod(0o600)
    storage = FileTokenStorage(TokenStore(path), key, name="docs")
    with pytest.raises(ConfigError) as caught:
        await storage.get_tokens()
    said = str(caught.value)
    assert "RT-SECRET" not in said
    assert str(path) in said
    assert f"the tokens stored for {key} fail validation (access_token: Field required" in said
    assert said.endswith("(mcpvisor mcp logout docs, then mcpvisor mcp login docs)")  # the server's name
