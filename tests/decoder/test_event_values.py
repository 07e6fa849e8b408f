"""Typed event values and the decoder's bounded default.

* Every row image of an event holds the Python values of its columns' Arrow types, the
  same objects ``take()``'s ``to_pylist()`` gives for the same change (inserts, update new
  and old images, delete key and full images, unchanged TOAST), text and binary, on
  PostgreSQL 15 and 18; `test_arrow_oracle.py` checks the same for every mapped type.
* A decoder made with the default constructor and drained only with ``take()`` keeps no
  events beyond the last take; ``events()`` right after a take still gets them.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path
from typing import Any

import pgwire_cdc
import pyarrow as pa
import pytest
from conftest import Database
from support import synthetic
from support.capture.record import capture_path, load_capture
from support.scenario_checks import capture_messages


def _peek(db: Database, slot: str, binary: bool) -> tuple[list[bytes], list[int]]:
    options = "'proto_version', '1', 'publication_names', 'pub'"
    if binary:
        options += ", 'binary', 'true'"
    rows = db.conn.execute(
        "SELECT lsn::text, data"
        f" FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, {options})",
        (slot,),
    ).fetchall()
    return [bytes(d) for _, d in rows], [pgwire_cdc.lsn_to_int(lsn) for lsn, _ in rows]


def _table_images(table: pa.Table) -> list[tuple[tuple[Any, ...], Any, str | None]]:
    """Per row: the data values, the `_before` struct as a tuple (or None), `_before_kind`."""
    data = [c for c in table.column_names if not c.startswith("_")]
    out = []
    for row in table.to_pylist():
        before = row["_before"]
        out.append(
            (
                tuple(row[c] for c in data),
                None if before is None else tuple(before[c] for c in data),
                row["_before_kind"],
            )
        )
    return out


def _event_images(
    events: list[Any], columns: list[tuple[str, bool]]
) -> list[tuple[tuple[Any, ...], Any, str | None]]:
    """The same per-row view built from the events' typed values."""
    keys = [i for i, (_, is_key) in enumerate(columns) if is_key]
    width = len(columns)

    def widen(old: Any) -> tuple[tuple[Any, ...] | None, str | None]:
        if old is None:
            return None, None
        kind, values = old
        if kind == "full":
            return tuple(None if v is pgwire_cdc.UNCHANGED_TOAST else v for v in values), "full"
        full: list[Any] = [None] * width
        for i, v in zip(keys, values, strict=True):
            full[i] = v
        return tuple(full), "key"

    out = []
    for e in events:
        if e.kind == "insert":
            out.append((e.table_row, None, None))
        elif e.kind == "update":
            new = e.updated_table_row
            if new[0] == "full":
                values = new[1]
            else:
                known = iter(new[1])
                values = tuple(None if i in new[2] else next(known) for i in range(width))
            before, kind = widen(e.old_table_row)
            out.append((values, before, kind))
        elif e.kind == "delete":
            before, kind = widen(e.old_table_row)
            out.append((before, before, kind))
    return out


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
@pytest.mark.parametrize("identity", ["default", "full"])
def test_event_values_are_the_tables_values(db: Database, binary: bool, identity: str) -> None:
    conn = db.conn
    conn.execute(
        "CREATE TABLE t (id int PRIMARY KEY, n numeric(10,2), ts timestamptz, d date,"
        " f float8, b bytea, a int4[], j jsonb, i interval, big text)"
    )
    conn.execute("ALTER TABLE t ALTER COLUMN big SET STORAGE EXTERNAL")
    conn.execute(f"ALTER TABLE t REPLICA IDENTITY {identity.upper()}")
    conn.execute("CREATE PUBLICATION pub FOR TABLE t")
    conn.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
    conn.execute(
        "INSERT INTO t VALUES (1, 12.5, '2024-02-29 12:34:56.789012+00', '2024-01-01',"
        " '-Infinity', '\\x00ff', '{1,NULL,3}', '{\"a\": 1}', '1 mon 2 days 3 sec',"
        " repeat('x', 5000)),"
        " (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
    )
    conn.execute("UPDATE t SET n = -1.25 WHERE id = 1")  # big: unchanged TOAST
    conn.execute("UPDATE t SET id = 3, f = 1.5 WHERE id = 2")  # key change: old image
    conn.execute("DELETE FROM t WHERE id = 1")
    messages, lsns = _peek(db, "s", binary)

    dec = pgwire_cdc.Decoder(proto_version=1, binary=binary)
    dec.feed_many(messages, lsns)
    table = dec.take()["public.t"]
    events = dec.events()  # after take(): still this take's events
    relation = next(e for e in events if e.kind == "relation")
    columns = [(name, is_key) for name, _, _, is_key in relation.columns]
    rows = [e for e in events if e.kind in ("insert", "update", "delete")]
    assert [e.kind for e in rows] == ["insert", "insert", "update", "update", "delete"]
    assert _event_images(rows, columns) == _table_images(table)

    first = rows[0].table_row
    assert first[:2] == (1, Decimal("12.50"))
    assert first[2].utcoffset() is not None and first[2].utcoffset().total_seconds() == 0
    assert first[4] == float("-inf")
    assert first[5:7] == (b"\x00\xff", [1, None, 3])
    assert first[8] == {"months": 1, "days": 2, "microseconds": 3_000_000}
    # The wire form stays available.
    assert rows[1].wire_table_row[0] == (b"\x00\x00\x00\x02" if binary else "2")
    if identity == "default":
        assert rows[2].updated_table_row[0] == "partial"
        assert rows[2].updated_table_row[2] == [9]
        assert rows[4].old_table_row == ("key", (1,))


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_synthetic_stream_events_equal_tables(binary: bool) -> None:
    messages, lsns = synthetic.messages(3000, binary, seed=7)
    dec = pgwire_cdc.Decoder(proto_version=1, binary=binary)
    dec.feed_many(messages, lsns)
    events = [e for e in dec.events() if e.kind == "insert"]
    table = dec.take()["public.bench"]  # events() first, then take(): both complete
    assert [e.table_row for e in events] == [r[0] for r in _table_images(table)]


def test_synthetic_text_and_binary_give_the_same_tables() -> None:
    tables = []
    for binary in (False, True):
        messages, lsns = synthetic.messages(5000, binary, seed=3)
        dec = pgwire_cdc.Decoder(proto_version=1, binary=binary)
        dec.feed_many(messages, lsns)
        tables.append(dec.take()["public.bench"])
    text, binary_table = tables
    assert text.num_rows == 5000
    # The LSNs differ (the formats' messages differ in length); the values may not.
    data = [name for name, _, _ in synthetic.COLUMNS]
    for name in data:
        assert text.column(name).equals(binary_table.column(name)), name
    assert text.column("amount").null_count == 0 and text.column("score").null_count == 0


def test_default_decoder_drained_by_take_drops_older_events() -> None:
    messages, lsns = synthetic.messages(2000, binary=False)
    half = len(messages) // 2
    dec = pgwire_cdc.Decoder(proto_version=1, binary=False)
    dec.feed_many(messages[:half], lsns[:half])
    first = dec.take()["public.bench"].num_rows
    dec.feed_many(messages[half:], lsns[half:])
    second = dec.take()["public.bench"].num_rows
    assert first + second == 2000
    # Only the last take's changes are still kept for events().
    inserts = [e for e in dec.events() if e.kind == "insert"]
    assert len(inserts) == second
    # Once events() has been called the decoder keeps every event until it is drained.
    dec.feed_many(messages[:half], lsns[:half])
    dec.take()
    dec.feed_many(messages[half:], lsns[half:])
    dec.take()
    assert sum(e.kind == "insert" for e in dec.events()) == 2000


def test_keep_events_false_refuses_events() -> None:
    dec = pgwire_cdc.Decoder(proto_version=1, keep_events=False)
    with pytest.raises(RuntimeError, match="keep_events=False"):
        dec.events()


MEMORY_SCRIPT = textwrap.dedent(
    """
    import resource, sys
    sys.path.insert(0, sys.argv[1])
    import pgwire_cdc
    from support import synthetic
    messages, lsns = synthetic.messages(100_000, binary=False)
    dec = pgwire_cdc.Decoder(proto_version=1, binary=False)
    rows = 0
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(10):
        dec.feed_many(messages, lsns)
        rows += sum(t.num_rows for t in dec.take().values())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(rows, base // 1024, peak // 1024)
    """
)


def test_default_decoder_memory_stays_bounded() -> None:
    """1,000,000 rows through feed_many + take() per 100,000, default constructor: the
    peak follows one batch, not the stream (benches/memory.py reports the figure; the
    bound here is generous)."""
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, str(Path(__file__).resolve().parents[1])],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    rows, base, peak = (int(x) for x in out)
    assert rows == 1_000_000
    # The 100,000 messages themselves are held by the script (about 25 MB more than base).
    assert peak - base < 300, f"peak RSS {peak} MB, {base} MB before decoding"


@pytest.mark.parametrize(
    "scenario", ["stream_interleaved", "stream_prepare", "two_phase_interleaved"]
)
def test_events_after_takes_are_those_of_the_last_take_and_later(scenario: str) -> None:
    """Takes at every pair of positions of a capture with streamed and prepared
    transactions, some while a transaction is held (then the decoder's state cannot be
    copied and the forgotten messages are decoded again): events() afterwards gives the
    events of the messages since the first of the two takes, as a decoder that saw
    everything gives them."""
    capture = load_capture(capture_path("pg15", scenario))
    messages, lsns = capture_messages(capture)
    proto, binary = capture["proto_version"], capture["binary"]

    def dicts(events: list[Any]) -> list[dict[str, Any]]:
        return [e.to_dict() for e in events]

    n = len(messages)
    points = sorted({0, 1, n // 3, n // 2, (2 * n) // 3, n - 1, n})
    for first in points:
        reference = pgwire_cdc.Decoder(proto_version=proto, binary=binary)
        reference.feed_many(messages[:first], lsns[:first])
        reference.events()
        reference.feed_many(messages[first:], lsns[first:])
        expected = dicts(reference.events())
        for second in (p for p in points if p >= first):
            dec = pgwire_cdc.Decoder(proto_version=proto, binary=binary)
            dec.feed_many(messages[:first], lsns[:first])
            dec.take()
            dec.feed_many(messages[first:second], lsns[first:second])
            dec.take()
            dec.feed_many(messages[second:], lsns[second:])
            assert dicts(dec.events()) == expected, (first, second)
