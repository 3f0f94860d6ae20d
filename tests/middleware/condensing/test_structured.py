"""A tool's JSON answer read as its values: settings naming the call, an array of objects a
listing, so a value deep in a profile survives where one clipped sentence lost it."""

from __future__ import annotations

import json

from kernel.types import Message
from middleware.condensing.ledger import Ledger
from middleware.condensing.ledger.records import LISTING, LISTING_SCORE, SETTINGS
from middleware.condensing.ledger.select import MAX_LINE_CHARS, fact_lines
from middleware.condensing.ledger.structured import MAX_SETTING_CHARS, read_json

PROFILE = {
    "name": {"first": "Ilse", "last": "Brandt"},
    "address": {"street": "12 Quay Road", "city": "Leith", "postcode": "EH6 7BZ"},
    "member_since": "2019-03-02",
    "wallets": {
        f"voucher_{n}": {"kind": "voucher", "balance": 10 + n, "expires": f"2026-0{n}-01"}
        for n in range(1, 8)
    },
    "bookings": ["QX81TR", "PL02MV"],
    "vip": False,
}


def lookup(name: str, arguments: dict[str, str], answer: object) -> list[Message]:
    """An assistant's call and the tool's JSON answer to it."""
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps(answer)},
    ]


def test_text_that_is_no_json_object_or_array_is_not_structured() -> None:
    """Prose, a bare scalar, an empty object and broken JSON are read as text."""
    for text in ("Saved 3 files.", "42", '"ok"', "{}", "[]", '{"a": 1,', "{not json}"):
        assert read_json(text) is None


def test_json_nested_too_deep_to_read_as_data_is_read_as_text() -> None:
    """An answer nested deeper than Python can walk is text, not a crash of the growth."""
    deep = "[" * 5000 + "1" + "]" * 5000
    assert read_json(deep) is None
    assert read_json('{"a": ' * 3000 + "1" + "}" * 3000) is None
    facts = fact_lines(
        [*lookup("probe", {"q": "deep"}, None)[:1], {"role": "tool", "content": deep}]
    )
    assert all(len(fact.text) <= MAX_LINE_CHARS + 2 for fact in facts)  # clipped, with "…"s


def test_a_small_object_is_one_setting_in_a_compact_form() -> None:
    """A nested object that fits is one `path = {...}` setting, strings unquoted."""
    data = read_json(json.dumps({"name": {"first": "Ilse", "last": "Brandt"}, "vip": True}))
    assert data is not None
    assert data.settings == ["name = {first: Ilse, last: Brandt}", "vip = true"]
    assert data.rows == []


def test_a_large_object_is_read_item_by_item_each_with_its_path() -> None:
    """An object whose compact form is over `MAX_SETTING_CHARS` splits into its items,
    each named by its path; every scalar is in exactly one setting."""
    data = read_json(json.dumps(PROFILE))
    assert data is not None
    assert all(len(setting) <= MAX_SETTING_CHARS + 40 for setting in data.settings)
    assert "wallets.voucher_3 = {kind: voucher, balance: 13, expires: 2026-03-01}" in (
        data.settings
    )
    assert "bookings = [QX81TR, PL02MV]" in data.settings
    joined = "\n".join(data.settings)
    for value in ("EH6 7BZ", "2019-03-02", "voucher_7", "PL02MV", "false"):
        assert joined.count(value) == 1


def test_an_array_of_objects_is_a_listing_one_row_per_item() -> None:
    """Three objects or more in one array are a listing: a row per item, named by its index."""
    hits = [{"flight": f"ZK{100 + i}", "seats": i, "fare": 80 + i} for i in range(4)]
    data = read_json(json.dumps({"date": "2025-06-01", "hits": hits}))
    assert data is not None
    assert data.settings == ["date = 2025-06-01"]
    assert data.rows[2] == "hits.2: flight = ZK102; seats = 2; fare = 82"
    assert len(data.rows) == 4


def test_a_json_answer_is_quoted_as_settings_naming_the_call() -> None:
    """The ledger quotes a JSON answer's values on `tool settings` lines that start with
    the call that returned them, and its listings' rows at a listing's rank."""
    hits = [{"flight": f"ZK{100 + i}", "fare": 80 + i} for i in range(3)]
    facts = fact_lines(
        [
            *lookup("get_customer", {"customer_id": "ilse_b_77"}, PROFILE),
            *lookup("search", {"to": "LHR"}, hits),
        ]
    )
    settings = [f for f in facts if f.role.endswith(SETTINGS)]
    assert settings
    assert all(f.text.startswith("[get_customer ilse_b_77] ") for f in settings)
    assert all(len(f.text) <= MAX_LINE_CHARS for f in settings)
    assert any("voucher_6 = {kind: voucher, balance: 16" in f.text for f in settings)
    rows = [f for f in facts if f.role.endswith(LISTING)]
    assert [f.score for f in rows] == [LISTING_SCORE] * 3
    assert rows[0].text == "0: flight = ZK100; fare = 80"


def test_a_value_deep_in_a_one_line_json_answer_survives_the_ledger() -> None:
    """A value at the end of a long one-line JSON answer is in the extraction; read as one
    sentence it was clipped away."""
    made = Ledger.grow(None, (), lookup("get_customer", {"customer_id": "ilse_b_77"}, PROFILE))
    text = made.render("", 600).text
    assert "2026-07-01" in text
    assert "PL02MV" in text
