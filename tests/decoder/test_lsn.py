"""pgwire_cdc.lsn_to_int / int_to_lsn: PostgreSQL's textual LSN form ("0/16B3748")."""

from __future__ import annotations

import pgwire_cdc
import pytest
from conftest import Database
from hypothesis import given
from hypothesis import strategies as st
from pgwire_cdc import int_to_lsn, lsn_to_int
from support.capture.record import all_capture_paths, load_capture

U64 = st.integers(min_value=0, max_value=2**64 - 1)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0/0", 0),
        ("0/16B3748", 0x16B3748),
        ("0/1", 1),
        ("1/0", 1 << 32),
        ("16/B374D848", 0x16_B374D848),
        ("FFFFFFFF/FFFFFFFF", 2**64 - 1),
        ("0/ABCDEF", 0xABCDEF),
    ],
)
def test_known_values(text: str, value: int) -> None:
    assert lsn_to_int(text) == value
    assert int_to_lsn(value) == text


def test_lower_case_and_leading_zeros_parse() -> None:
    assert lsn_to_int("0/16b3748") == 0x16B3748
    assert lsn_to_int("00000000/016B3748") == 0x16B3748
    assert int_to_lsn(lsn_to_int("00000001/0000000A")) == "1/A"


@pytest.mark.parametrize(
    "bad", ["", "0", "/", "0/", "/0", "0/0/0", "G/0", "0/-1", "100000000/0", "0/100000000", "x"]
)
def test_invalid_text_is_rejected(bad: str) -> None:
    with pytest.raises(ValueError):
        lsn_to_int(bad)


@pytest.mark.parametrize("bad", [-1, 2**64, 2**70])
def test_out_of_range_int_is_rejected(bad: int) -> None:
    with pytest.raises(ValueError):
        int_to_lsn(bad)


@given(U64)
def test_round_trip_int(value: int) -> None:
    text = int_to_lsn(value)
    assert lsn_to_int(text) == value
    hi, lo = text.split("/")
    assert hi == hi.upper() and lo == lo.upper()
    assert not (len(hi) > 1 and hi.startswith("0")) and not (len(lo) > 1 and lo.startswith("0"))


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_round_trip_text(hi: int, lo: int) -> None:
    text = f"{hi:X}/{lo:X}"
    assert int_to_lsn(lsn_to_int(text)) == text


def test_every_captured_lsn_round_trips() -> None:
    for path in all_capture_paths():
        for m in load_capture(path)["messages"]:
            assert int_to_lsn(lsn_to_int(m["lsn"])) == m["lsn"]


def test_exported_from_package() -> None:
    assert pgwire_cdc.lsn_to_int is lsn_to_int
    assert pgwire_cdc.int_to_lsn is int_to_lsn


@pytest.mark.server
def test_agrees_with_postgresql(db: Database) -> None:
    """PostgreSQL's own pg_lsn arithmetic and text output agree with both functions."""
    values = [0, 1, 0xABCDEF, 0x16B3748, 1 << 32, (1 << 32) - 1, 2**63, 2**64 - 1, 0x12_3456789A]
    for value in values:
        row = db.conn.execute("SELECT ('0/0'::pg_lsn + %s::numeric)::text", (value,)).fetchone()
        assert row is not None
        assert row[0] == int_to_lsn(value)
        back = db.conn.execute("SELECT (%s::pg_lsn - '0/0')::text", (row[0],)).fetchone()
        assert back is not None and int(back[0]) == lsn_to_int(row[0]) == value
    row = db.conn.execute(
        "SELECT pg_current_wal_lsn()::text, (pg_current_wal_lsn() - '0/0')::text"
    ).fetchone()
    assert row is not None
    assert lsn_to_int(row[0]) == int(row[1])
