"""Tab completion for the shell's line editor: slash commands, then each command's first argument.

What completes is read from the running host at the moment Tab is pressed (tools, prompts and
servers come and go with the settings): ``candidates(command)`` gives name -> one-line description for
a command's argument (``""`` for the command itself). Only the first word after a command completes,
in quotes when a name has a space or a quote in it; JSON arguments are the user's to write.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable, Mapping

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

__all__ = ["ShellCompleter"]


class ShellCompleter(Completer):
    def __init__(self, candidates: Callable[[str], Mapping[str, str]]) -> None:
        self._candidates = candidates

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterable[Completion]:
        text = document.text_before_cursor
        if not text.startswith("/"):
            return  # plain text: an answer to the approval dialog, or nothing a completion could help
        command, space, argument = text[1:].partition(" ")
        if not space:
            for name, meta in sorted(self._candidates("").items()):
                if name.startswith(command):
                    yield Completion(f"/{name}", start_position=-len(text), display_meta=meta)
            return
        word = argument.lstrip()
        if " " in _past_quotes(word):
            return  # past the first argument
        for name, meta in sorted(self._candidates(command).items()):
            # A name with a space or a quote in it is written quoted, as the commands read it (and the hints write it).
            written = shlex.quote(name) if _needs_quotes(name) else name
            if name.startswith(word) or written.startswith(word):
                yield Completion(written, start_position=-len(word), display=name, display_meta=meta)


def _needs_quotes(name: str) -> bool:
    return any(c.isspace() or c in "'\"" for c in name) or name[:1] in ("'", '"')


def _past_quotes(word: str) -> str:
    """``word`` without its quoted part, when it starts with a quote (``'my s`` -> ``""``)."""
    if word[:1] not in ("'", '"'):
        return word
    end = word.find(word[0], 1)
    return "" if end < 0 else word[end + 1 :]
