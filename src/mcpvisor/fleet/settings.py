"""Settings across a fleet: one replica publishes its settings files, every replica applies them.

The replica that holds the publisher lease watches its settings files (a settings watcher of its own)
and, on every change that parses, writes the raw texts of the published scopes as one snapshot:
generation + 1, a sha256, one log entry. The texts are published *unexpanded*: ``${VAR}`` expands on
each replica from its own environment, so secrets never enter the store.

Every replica, the publisher included, applies the newest snapshot to its hosts through the
settings watcher's own path (:meth:`~mcpvisor.host.settings.loader.Settings.apply`, then the change
event the watcher would have sent): only what changed is reconciled. The user scope applies to every
host; the workspace's own files (workspace settings, ``.mcp.json``, ``.lsp.json``) only to a host whose
folder is the publisher's. Local ceilings stay local: the enforced system scope is never published.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl, urlsplit

import anyio

from mcpvisor.host.settings.files import SettingsFileError, parse_settings_text, read_settings_text
from mcpvisor.host.settings.loader import ScopeRead, Settings
from mcpvisor.host.settings.scopes import FileScope
from mcpvisor.host.watcher import SettingsChanged

if TYPE_CHECKING:
    from mcpvisor.fleet.store import Keys
    from mcpvisor.host.host import Host

__all__ = [
    "CLEAR_PASSWORD_PROBLEM",
    "PUBLISHED_SCOPES",
    "Snapshot",
    "Succession",
    "apply_snapshot",
    "apply_to_settings",
    "holds_clear_password",
    "publish_refusal",
    "published_elsewhere",
    "read_snapshot_texts",
]

logger = logging.getLogger(__name__)

PUBLISHED_SCOPES: Final[tuple[FileScope, ...]] = ("user", "workspace", "project", "lsp_project")
"""The scopes a publisher shares; ``system`` (enforced) and ``system_defaults`` stay each replica's own."""
WORKSPACE_SCOPES: Final[frozenset[FileScope]] = frozenset({"workspace", "project", "lsp_project"})


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One published generation: the publisher's workspace folder and each scope's raw text (``None``: no file)."""

    gen: int
    root: str
    texts: Mapping[FileScope, str | None]
    by: str = ""

    @property
    def files(self) -> str:
        return json.dumps({"root": self.root, "texts": dict(self.texts)}, sort_keys=True)

    @property
    def sha(self) -> str:
        return hashlib.sha256(self.files.encode()).hexdigest()

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> Snapshot | None:
        """The snapshot stored in the ``settings`` hash, or ``None`` when there is none (or it is unreadable)."""
        try:
            gen = int(fields["gen"])
            data = json.loads(fields["files"])
            texts = {scope: data["texts"].get(scope) for scope in PUBLISHED_SCOPES}
            return cls(gen, str(data["root"]), texts, str(fields.get("by", "")))
        except (KeyError, ValueError, TypeError, AttributeError):
            return None


CLEAR_PASSWORD_PROBLEM: Final = (
    "'fleet.url' holds a password in clear, and this file's text is published to the fleet's store: write it as "
    "${VAR} (e.g. redis://:${REDIS_PASSWORD}@host:6379/0) and set VAR in the environment"
)


def holds_clear_password(url: str) -> bool:
    """Whether a URL carries a password itself (not as ``${VAR}``): in its user part, or a query parameter."""
    parts = urlsplit(url.strip())
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    secret = userinfo.partition(":")[2] if ":" in userinfo else ""
    secret += "".join(v for k, v in parse_qsl(parts.query) if k.lower() == "password")
    # What is left once every plain ${VAR} is taken out is written in clear (a ${VAR:-default}'s default too).
    return bool(re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*(:-)?\}|\$[A-Za-z_][A-Za-z0-9_]*", "", secret))


def read_snapshot_texts(source: Settings) -> dict[FileScope, str | None] | None:
    """The published scopes' raw texts as the files are now, or ``None`` when one does not parse (a
    half-saved file is never published; the next good save is) or holds a password in clear; why is
    :func:`publish_refusal`'s. Blocking: run it in a thread."""
    texts: dict[FileScope, str | None] = {}
    said = _WHY_NOT.pop(source.root, None)
    for scope in PUBLISHED_SCOPES:
        path = source.paths.of(scope)
        try:
            text = read_settings_text(path)
        except SettingsFileError as exc:
            if said != str(exc):  # once, not at every heartbeat's try
                logger.warning("not publishing settings: %s", exc)
            _WHY_NOT[source.root] = str(exc)
            return None
        if text is None:
            texts[scope] = None
            continue
        try:
            data = parse_settings_text(text, path)
        except SettingsFileError as exc:
            logger.info("not publishing settings while %s does not parse: %s", path, exc)
            _WHY_NOT[source.root] = f"{path} does not parse"
            return None
        block = data.get("fleet")
        if isinstance(block, dict) and isinstance(url := block.get("url"), str) and holds_clear_password(url):
            if _REFUSED.get(path) != text:  # once per text: every heartbeat tries again
                logger.error("not publishing settings: %s: %s", path, CLEAR_PASSWORD_PROBLEM)
            _REFUSED[path] = text
            _WHY_NOT[source.root] = f"{path}: {CLEAR_PASSWORD_PROBLEM}"
            return None
        _REFUSED.pop(path, None)
        texts[scope] = text
    return texts


def publish_refusal(source: Settings | None) -> str | None:
    """Why the last read of ``source``'s files published nothing (None: it published, or was not read)."""
    return _WHY_NOT.get(source.root) if source is not None else None


_REFUSED: dict[Path, str] = {}
"""The text of each file last refused for a password in clear, said once."""
_WHY_NOT: dict[Path, str] = {}
"""Per publishing folder, why its files' last read was refused."""


async def published_elsewhere(
    client: Any, settings_key: str, source: Settings, replica_id: str, applied: Snapshot | None = None
) -> str | None:
    """The other replica whose settings the fleet follows when their texts are not what ``source``'s files say now
    (``None``: the same texts, this replica's own, or nothing published yet). When the store holds none (it lost
    them), the snapshot this replica ``applied`` last is what the fleet followed."""
    texts = await anyio.to_thread.run_sync(read_snapshot_texts, source)
    files, by = await client.hmget(settings_key, "files", "by")
    published = Snapshot.parse({"gen": "0", "files": files, "by": by or ""}) if files else applied
    if published is None or published.by == replica_id or (texts is not None and dict(published.texts) == texts):
        return None
    return published.by or "another replica"


class Succession:
    """Who publishes once the lease fell free while the publisher of the settings the fleet follows may well be
    alive: the store lost the published settings (emptied, or restored from a copy without them), or it did not
    answer for longer than the lease (the publisher could not renew it either). The first replica to find the
    lease free would make the fleet follow its own files. A replica leaves the lease to the publisher of the
    snapshot it applied for as long as that one is listed, and for a registry entry's lifetime (``wait_s``)
    after it found the lease to leave."""

    def __init__(self, wait_s: float) -> None:
        self._wait_s = wait_s
        self._since: float | None = None
        self._away = False

    def away(self) -> None:
        """The store did not answer this replica: a lease found free once it answers again may have expired under
        a publisher that was cut off too, which renews it on its next beat."""
        self._away = True

    async def defers(self, client: Any, keys: Keys, applied: Snapshot | None, me: str) -> bool:
        """Whether replica ``me``, which ``applied`` that snapshot last, leaves a free lease alone now."""
        if applied is None or applied.by in ("", me):
            self._since, self._away = None, False
            return False
        lost = not await client.exists(keys.settings)
        if self._away and not lost and await client.exists(keys.lease):
            self._away = False  # the lease outlived the silence: nothing to leave
        if not lost and not self._away:
            self._since = None
            return False
        if self._since is None:
            self._since = time.monotonic()
            logger.warning(
                "fleet %s: %s; %s publishes first",
                keys.fleet,
                "the store lost the published settings"
                if lost
                else "the publisher lease expired while the store did not answer",
                applied.by,
            )
        if await client.exists(keys.replica(applied.by)):
            self._away = False  # it is back: it renews the lease
            return True
        if time.monotonic() - self._since < self._wait_s:
            return True
        self._away = False
        return False

    async def took_over(self, client: Any, keys: Keys, source: Settings, applied: Snapshot | None, me: str) -> None:
        """Replica ``me`` took a free lease: whether the fleet followed other files until now is for the log."""
        if by := await published_elsewhere(client, keys.settings, source, me, applied):
            # A deploy whose new replicas bring new files relies on this; replicas meant to share one set of files
            # that do not are a mistake the log must show.
            logger.warning(
                "fleet %s: replica %s takes over publishing from %s, whose settings files differ from its own: the "
                "fleet follows this replica's files from now on",
                keys.fleet,
                me,
                by,
            )


def apply_to_settings(settings: Settings, snapshot: Snapshot) -> list[tuple[FileScope, tuple[str, ...]]]:
    """Apply one snapshot to ``settings`` in memory (no I/O); each scope that changed with its dotted paths.
    A scope whose text does not parse keeps its previous content (and says so in the log)."""
    changed: list[tuple[FileScope, tuple[str, ...]]] = []
    same_folder = Path(snapshot.root) == settings.root
    for scope in PUBLISHED_SCOPES:
        if scope in WORKSPACE_SCOPES and not same_folder:
            continue
        text = snapshot.texts.get(scope)
        label = Path(f"{settings.paths.of(scope)} (from fleet generation {snapshot.gen})")
        if text is None:
            read = ScopeRead(scope, None)
        else:
            try:
                read = ScopeRead(scope, parse_settings_text(text, label))
            except SettingsFileError as exc:
                read = ScopeRead(scope, None, exc.report)
        result = settings.apply(read)
        if result.error is not None:
            logger.warning("%s; keeping the previous %s settings", result.error, scope)
        elif result.changed:
            logger.info("fleet settings generation %d changed (%s): %s", snapshot.gen, scope, ", ".join(result.changed))
            changed.append((scope, result.changed))
    return changed


async def apply_snapshot(host: Host, snapshot: Snapshot) -> None:
    """Apply one snapshot to a running ``host`` as its watcher would apply an edit: only what changed reconciles."""
    for scope, paths in apply_to_settings(host.settings, snapshot):
        if host.watcher is not None:
            await host.watcher.announce(SettingsChanged(scope, paths))


def now() -> str:
    return repr(time.time())
