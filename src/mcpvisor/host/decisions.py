"""Deciding on a server, in one place for every front end: ``mcpvisor mcp approve|reject``, the shell's
``/approve`` and ``/reject`` and its approval dialog, and a library :class:`~mcpvisor.host.host.Host`
(SPEC §7 "Approve/Reject").

What a person decides on is what they were shown: :func:`decide` takes the approval hash of the
configuration that was shown and compares it with the configuration as it is now right beside the
write, with nothing in between that could let the configuration change; when they differ nothing is
written (:class:`ChangedSinceShown`) and the person is shown the new configuration. Approving a
server whose tool or prompt definitions changed since approval accepts what it offers now
(:mod:`mcpvisor.host.pins`); when its configuration needs no approval or is approved already, that
is the whole decision.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from mcpvisor.core.errors import ConfigError
from mcpvisor.core.server_config import McpServerConfig
from mcpvisor.host.approvals import ApprovalStore, DecidedSinceShown, is_gated
from mcpvisor.host.pin_review import Change, accept_held, changes_since_approval
from mcpvisor.host.pins import PinMode, PinStore, is_pinned
from mcpvisor.host.status import APPROVE_HINT

__all__ = ["VERDICTS", "ChangedSinceShown", "Decided", "DecidedSinceShown", "Verdict", "check_verdict", "decide"]

Verdict = Literal["approve", "reject"]
VERDICTS: frozenset[str] = frozenset(get_args(Verdict))


def check_verdict(verdict: str, name: str) -> None:
    """Raise ``ValueError`` unless ``verdict`` is one of :data:`VERDICTS`: a typo (``"approved"``) must never
    be written down as a rejection."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict {verdict!r} on server {name!r} is neither 'approve' nor 'reject'")


class ChangedSinceShown(ConfigError):
    """The server's configuration changed after it was shown: nothing was decided."""

    def __init__(self, name: str, verdict: str) -> None:
        super().__init__(f"{name} not {verdict}d: its configuration changed after it was shown")
        self.name = name


@dataclass(frozen=True, slots=True)
class Decided:
    recorded: bool
    """The approvals store now holds the verdict for this exact configuration (a reconcile follows)."""
    accepted: tuple[Change, ...] = ()
    """Tool and prompt definitions held since approval that were accepted (approving only)."""


def decide(
    approvals: ApprovalStore,
    pins: PinStore,
    root: str | os.PathLike[str],
    name: str,
    cfg: McpServerConfig,
    verdict: Verdict,
    *,
    pin_mode: PinMode,
    shown_hash: str | None = None,
    shown_stamp: str | None = None,
    shown_changes: Sequence[Change] | None = None,
    source: str | None = None,
    approve_command: str = APPROVE_HINT,
) -> Decided:
    """Decide on server ``name``, configured now as ``cfg``, for the project at ``root`` (blocking file I/O).

    ``shown_hash``: the approval hash of the configuration the person was shown (None: ``cfg`` is what
    was shown); ``shown_stamp``: the record as it was then (:meth:`ApprovalStore.stamp`; None: as it is now)
    — a decision made meanwhile by someone else is never overwritten unseen (:class:`DecidedSinceShown`);
    ``shown_changes``: the held definitions the person was shown (None: as they are), the only ones accepted
    (:class:`~mcpvisor.host.pin_review.HeldChangedSinceShown` when they differ by the time of the write).
    ``source`` names where the server comes from, for the refusal of one that needs no
    approval; ``approve_command``, how a refusal says to look again (``{name}``:
    :func:`~mcpvisor.host.status.fix_commands`). Raises :class:`ChangedSinceShown`, or :class:`ConfigError` saying
    why it cannot be decided (needs no approval, the store cannot be read or written)."""
    check_verdict(verdict, name)
    if shown_hash is not None and cfg.approval_hash != shown_hash:
        raise ChangedSinceShown(name, verdict)
    if shown_stamp is not None and is_gated(cfg) and approvals.stamp(root, name) != shown_stamp:
        raise DecidedSinceShown(name, "approval" if verdict == "approve" else "rejection")  # before any write
    held = verdict == "approve" and _held(pins, root, name, cfg, pin_mode)
    record = is_gated(cfg) and not (held and approvals.get_state(root, name, cfg) == "approved")
    if record and approvals.error:
        raise ConfigError(approvals.error)  # before anything is written: all of the verdict or none of it
    if verdict == "approve" and is_pinned(pin_mode, cfg):
        _check_pins_saved(pins, name)  # its tools would stay held: no approval said to have worked
    accepted: tuple[Change, ...] = ()
    if held:
        accepted = tuple(accept_held(pins, root, name, cfg, shown=shown_changes, approve_command=approve_command))
        if not record:
            return Decided(recorded=False, accepted=accepted)
    if not is_gated(cfg):
        origin = f"it comes from {source}, and those" if source else "servers of your own settings"
        raise ConfigError(
            f"cannot {verdict} server {name!r}: it is not a project or workspace server — {origin} need no "
            "approval; only project (.mcp.json) and workspace servers are approved"
        )
    (approvals.approve if verdict == "approve" else approvals.reject)(root, name, cfg, shown=shown_stamp)
    return Decided(recorded=True, accepted=accepted)


def _check_pins_saved(pins: PinStore, name: str) -> None:
    """:class:`ConfigError` when ``name``'s tool pins cannot be saved (which file, why, the fix); a pin store that
    cannot be read is said by the status, and stands in no verdict's way."""
    try:
        pins.read()
    except ConfigError:
        return
    try:
        pins.check_lockable()  # (what a save needs first: its folder and lock file; nothing written)
    except ConfigError as exc:
        raise ConfigError(
            f"cannot approve server {name!r}: its tool pins cannot be saved, so its tools and prompts would stay "
            f"held: {exc}"
        ) from exc


def _held(pins: PinStore, root: str | os.PathLike[str], name: str, cfg: McpServerConfig, mode: PinMode) -> bool:
    """Whether definitions of ``name`` are held since approval. A pin store that cannot be read holds
    everything of a pinned server (and says so in the status); it never stands in the way of a verdict."""
    try:
        return bool(changes_since_approval(pins, root, name, cfg, mode))
    except ConfigError:
        return False
