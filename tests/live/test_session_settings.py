"""Every connection of a run prints values alike, whatever the database's own settings: a
column read as text (a composite of numeric, interval and timestamptz, which has no binary
decoder) reads the same in the initial snapshot (the Rust snapshot workers), in the stream
(the walsender) and in an incremental chunk (the setup connection), against real
PostgreSQL 15 and 18, under a database whose DateStyle, IntervalStyle and TimeZone are
not the ones pgwire_cdc works in."""

from __future__ import annotations

import pgwire_cdc
import pytest
from conftest import Database

pytestmark = pytest.mark.server

VALUE = "ROW(12345.678, '1 year 2 mons 3 days 04:05:06.5', '2024-02-29 23:30:00+05')::mix"


def values(batches: list[pgwire_cdc.Batch], table: str) -> dict[str, set[str]]:
    """Per change type, the text of the composite column."""
    out: dict[str, set[str]] = {}
    for batch in batches:
        if table in batch.tables:
            t = batch.tables[table].select(["m", "_change_type"]).to_pylist()
            for row in t:
                out.setdefault(row["_change_type"], set()).add(row["m"])
    return out


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_a_text_cast_column_reads_alike_everywhere(db: Database, binary: bool) -> None:
    db.conn.execute(
        f"ALTER DATABASE {db.name} SET DateStyle = 'SQL, DMY';"
        f" ALTER DATABASE {db.name} SET IntervalStyle = 'sql_standard';"
        f" ALTER DATABASE {db.name} SET TimeZone = 'America/New_York';"
        " CREATE TYPE mix AS (n numeric, i interval, t timestamptz);"
        " CREATE TABLE s_a (id int PRIMARY KEY, m mix);"
        " CREATE TABLE s_b (id int PRIMARY KEY, m mix);"
        f" INSERT INTO s_a VALUES (1, {VALUE}); INSERT INTO s_b VALUES (1, {VALUE})"
    )
    common = {"publication": "sp", "slot": "sp_slot", "binary": binary, "idle_timeout": 1}
    first: list[pgwire_cdc.Batch] = []
    for batch in pgwire_cdc.stream(db.dsn, tables=["public.s_a"], **common):  # type: ignore[arg-type]
        first.append(batch)
        batch.ack()
    db.conn.execute(f"INSERT INTO s_a VALUES (2, {VALUE})")
    second: list[pgwire_cdc.Batch] = []
    for batch in pgwire_cdc.stream(db.dsn, tables=["public.s_a", "public.s_b"], **common):  # type: ignore[arg-type]
        second.append(batch)
        batch.ack()
    snapshot = values(first, "public.s_a")["read"]
    streamed = values(second, "public.s_a")["insert"]
    chunk = values(second, "public.s_b")["read"]
    assert snapshot == streamed == chunk
    (text,) = snapshot
    assert text == '(12345.678,"1 year 2 mons 3 days 04:05:06.5","2024-02-29 18:30:00+00")'
