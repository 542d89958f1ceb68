"""Which tools of a listing a client can use (:func:`mcpvisor.core.listing.usable_tools`), a pure decision."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest

from mcpvisor.core.listing import Listings, Withheld, problems_of, usable_tools, warning_of

OBJECT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
DRAFT_4 = "http://json-schema.org/draft-04/schema#"


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"inputSchema": {"type": "nonsense"}}, "its inputSchema is not a valid JSON Schema ($.type: 'nonsense' is "),
        ({"inputSchema": {"type": "object", "properties": 5}}, "($.properties: 5 is not of type 'object')"),
        ({"outputSchema": {"type": "object", "required": "x"}}, "its outputSchema is not a valid JSON Schema"),
        ({"inputSchema": {"type": "object", "$schema": {"x": 1}}}, "($['$schema']: {'x': 1} is not of type 'string')"),
        ({"inputSchema": {"type": "object", "minimum": 0, "exclusiveMinimum": True}}, "($.exclusiveMinimum: True is"),
        ({"name": ""}, "its name is empty"),
    ],
)
def test_a_tool_whose_schema_is_not_valid_json_schema_or_whose_name_is_empty_is_withheld(
    fields: dict[str, Any], why: str
) -> None:
    bad = types.Tool.model_validate({"name": "bad", "inputSchema": OBJECT, **fields})
    good = types.Tool.model_validate({"name": "good", "inputSchema": OBJECT, "outputSchema": OBJECT})
    usable, [withheld] = usable_tools([bad, good])
    assert usable == [good]
    assert withheld.name == bad.name
    assert why in withheld.why, withheld.why


def test_a_schema_is_checked_by_the_draft_its_schema_names() -> None:
    draft_4 = {"$schema": DRAFT_4, "type": "object", "properties": {"n": {"minimum": 0, "exclusiveMinimum": True}}}
    tool = types.Tool.model_validate({"name": "t", "inputSchema": draft_4})
    assert usable_tools([tool]) == ([tool], ())


def test_what_is_withheld_is_said_with_the_first_tool_and_how_many_more_of_those_the_filters_let_through() -> None:
    withheld = (Withheld("a", "its name is empty"), Withheld("b", "x"), Withheld("c", "y"), Withheld("d", "z"))
    assert warning_of(None, withheld, lambda name: name != "b") == (
        "tool 'a' is withheld: its name is empty; the server needs fixing (and 2 more tools withheld)"
    )
    assert warning_of("it lists tool 'e' more than once; the first is served", withheld[1:2], lambda _: True) == (
        "tool 'b' is withheld: x; the server needs fixing; it lists tool 'e' more than once; the first is served"
    )
    assert warning_of(None, withheld, lambda _: False) is None
    assert problems_of(Listings()) is None
