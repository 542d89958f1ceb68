"""What the language server tools answer an agent that asks something a server cannot do as asked, with real
servers (pylsp and basedpyright)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpvisor.host.lsp.manager import LspManager
from mcpvisor.host.lsp.tool_specs import ToolFailure, new_name_problem
from mcpvisor.host.lsp.tools import LspTools
from tests.helpers import WAIT_S
from tests.host.lsp.test_lsp_host import basedpyright, pylsp, session, text

SERVERS = pytest.mark.parametrize("server", [pylsp(), basedpyright()], ids=["pylsp", "basedpyright"])


@SERVERS
async def test_a_rename_to_a_name_python_does_not_allow_says_why_instead_of_no_changes(
    tmp_path: Path, server: dict[str, Any]
) -> None:
    """Before, basedpyright's empty edit read "no changes" (as if nothing referred to the symbol), and pylsp's edit
    wrote ``def 1abc(``: neither said the name is not one Python allows."""
    async with session(tmp_path, user={"lspServers": {"python": server}}, watch=False) as s:
        files: set[str] = set()
        with anyio.fail_after(WAIT_S):  # (asked again until the server has read service.py: a busy machine delays it)
            while files != {"models.py", "service.py"}:
                renamed = await s.ok("rename_preview", file="models.py", symbol="make_user", new_name="new_user")
                files = {change["file"] for change in renamed["changes"]}
                assert files <= {"models.py", "service.py"}, files
                await anyio.sleep(0.2)  # nothing to wait on but the server's own reading
        for name, why in [
            ("1abc", "it is not a Python identifier (letters, digits and _, not starting with a digit)"),
            ("a-b", "it is not a Python identifier (letters, digits and _, not starting with a digit)"),
            ("class", "it is a Python keyword"),
        ]:
            refused = await s.call("rename_preview", file="models.py", symbol="make_user", new_name=name)
            assert refused.is_error, text(refused)
            assert text(refused) == f"cannot rename to {name!r}: {why}"
        soft = await s.ok("rename_preview", file="models.py", symbol="make_user", new_name="match")
        assert soft["changes"]  # a soft keyword is a name like any other


async def test_two_unknown_arguments_are_named_in_the_plural(tmp_path: Path) -> None:
    """It read "hover has no argument 'column', 'row'"."""
    tools = LspTools(LspManager(tmp_path, log_dir=tmp_path / "logs"))
    with pytest.raises(ToolFailure, match=r"^hover has no arguments 'column', 'row'; it takes: "):
        await tools.run("hover", {"file": "a.py", "row": 1, "column": 2})
    with pytest.raises(ToolFailure, match=r"^hover has no argument 'row'; it takes: "):
        await tools.run("hover", {"file": "a.py", "row": 1})


def test_only_the_rule_of_a_language_known_here_is_applied_to_a_new_name() -> None:
    assert new_name_problem("python", "ok_name") is None
    assert new_name_problem("python", "名前") is None
    assert new_name_problem("rust", "1abc") is None  # its rules are its server's to say
    assert new_name_problem("typescript", "class") is None


@SERVERS
async def test_line_one_of_a_file_saved_with_a_byte_order_mark_counts_characters_as_a_person_does(
    tmp_path: Path, server: dict[str, Any]
) -> None:
    """Editors neither show nor send a UTF-8 byte order mark. Before, it was sent as a character: with basedpyright
    a hover on the first character of line 1 found nothing and line 1's symbols read one column right; pylsp put
    the same name at 1:1 in its references and at 1:2 in its symbols, and its previews began with the mark."""
    async with session(tmp_path, user={"lspServers": {"python": server}}, watch=False) as s:
        (s.layout.root / "bom.py").write_bytes(b"\xef\xbb\xbfzed = 1\nw = zed\n")
        symbols = await s.ok("document_symbols", file="bom.py")
        assert [(sym["name"], sym["loc"]["line"], sym["loc"]["character"]) for sym in symbols["symbols"]] == [
            ("zed", 1, 1),
            ("w", 2, 1),
        ]
        refs = await s.ok("find_references", file="bom.py", line=2, character=5, include_declaration=True)
        assert [(r["line"], r["character"], r["preview"]) for r in refs["references"]] == [
            (1, 1, "zed = 1"),
            (2, 5, "w = zed"),
        ]
        found = await s.ok("go_to_definition", file="bom.py", line=2, character=5)
        assert [(loc["line"], loc["character"]) for loc in found["locations"]] == [(1, 1)]
        hover = await s.ok("hover", file="bom.py", line=1, character=1)
        assert hover["contents"]  # about zed, not about the mark before it
