"""A column a change did not carry never reads as NULL (`_unchanged`).

Changes of one table made under different shapes — a publication's column list changed
mid-stream (the scenario of PostgreSQL's own ``031_column_list`` subscription test), or
ADD / DROP COLUMN between changes — delivered in one batch (segments merged) or across
batches (a batch without the column at all). PostgreSQL's own subscriber keeps the value
of a column a change did not carry; so must the change tables (the column named in
``_unchanged``) and the Delta tables the sink keeps. PostgreSQL 15 and 18.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pgwire_cdc
import pyarrow as pa
import pytest
from conftest import Database
from pgwire_cdc import delta, lsn_to_int
from pgwire_cdc.delta import DeltaSink


def _consume(db: Database, mirror: DeltaSink, **options: Any) -> list[pa.Table]:
    """stream() to the current end of WAL, every batch applied to `mirror`, then acked;
    the change tables of table ``t`` of every batch."""
    row = db.conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    tables = []
    for batch in pgwire_cdc.stream(
        db.dsn, publication="pub", slot="s", until_lsn=lsn_to_int(row[0]), **options
    ):
        mirror.apply(batch)
        batch.ack()
        tables.extend(t for name, t in batch.tables.items() if name.startswith("public.t"))
    return tables


def _changes(tables: list[pa.Table]) -> list[tuple[str, dict[str, Any], list[str]]]:
    """(kind, data values, _unchanged) of every row, in order."""
    out = []
    for table in tables:
        data = [c for c in table.column_names if not c.startswith("_")]
        for row in table.to_pylist():
            values = {c: row[c] for c in data}
            out.append((row["_change_type"], values, sorted(row["_unchanged"])))
    return out


def _mirror_rows(mirror: DeltaSink) -> list[dict[str, Any]]:
    table = delta.read_table(mirror.table_path("public.t"))
    return sorted(table.to_pylist(), key=lambda r: r["a"])


@pytest.mark.parametrize("one_batch", [True, False], ids=["one-batch", "batch-per-change"])
@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_column_list_changed_mid_stream(
    db: Database, tmp_path: Path, one_batch: bool, binary: bool
) -> None:
    conn = db.conn
    conn.execute("CREATE TABLE t (a int PRIMARY KEY, b int, c int)")
    conn.execute("CREATE PUBLICATION pub FOR TABLE t (a, b)")
    mirror = DeltaSink(tmp_path / "m")
    batch_rows = 10_000 if one_batch else 1
    _consume(db, mirror, binary=binary)  # the (empty) snapshot
    conn.execute("INSERT INTO t VALUES (1, 1, 1)")
    conn.execute("ALTER PUBLICATION pub SET TABLE t (a, c)")
    conn.execute("UPDATE t SET c = 10 WHERE a = 1")
    conn.execute("INSERT INTO t VALUES (2, 2, 2)")
    tables = _consume(db, mirror, binary=binary, max_batch_rows=batch_rows)

    changes = _changes(tables)
    assert [(kind, v["a"]) for kind, v, _ in changes] == [
        ("insert", 1),
        ("update", 1),
        ("insert", 2),
    ]
    first, update, second = changes
    assert first[1]["b"] == 1
    assert update[1]["c"] == 10 and second[1]["c"] == 2
    # Every column a change did not carry, present in its table, is named in _unchanged.
    for _, values, unchanged in changes[1:]:
        assert values.get("b") is None
        assert ("b" in unchanged) == ("b" in values)
    if one_batch:
        assert first[2] == ["c"] and update[2] == ["b"] and second[2] == ["b"]
    # PostgreSQL's subscriber keeps b = 1: so does the mirror.
    assert _mirror_rows(mirror) == [
        {"a": 1, "b": 1, "c": 10},
        {"a": 2, "b": None, "c": 2},
    ]


@pytest.mark.parametrize("one_batch", [True, False], ids=["one-batch", "batch-per-change"])
def test_add_and_drop_column_between_changes(db: Database, tmp_path: Path, one_batch: bool) -> None:
    conn = db.conn
    conn.execute("CREATE TABLE t (a int PRIMARY KEY, b int)")
    conn.execute("CREATE PUBLICATION pub FOR TABLE t")
    mirror = DeltaSink(tmp_path / "m")
    _consume(db, mirror)
    conn.execute("INSERT INTO t VALUES (1, 1)")
    conn.execute("ALTER TABLE t ADD COLUMN c int")
    conn.execute("UPDATE t SET c = 5 WHERE a = 1")
    conn.execute("ALTER TABLE t DROP COLUMN b")
    conn.execute("UPDATE t SET c = 6 WHERE a = 1")
    conn.execute("INSERT INTO t VALUES (2, 7)")
    tables = _consume(db, mirror, max_batch_rows=10_000 if one_batch else 1)

    changes = _changes(tables)
    assert [(kind, v["a"], v["c"] if "c" in v else "-") for kind, v, _ in changes] == [
        ("insert", 1, None if one_batch else "-"),
        ("update", 1, 5),
        ("update", 1, 6),
        ("insert", 2, 7),
    ]
    if one_batch:
        # The insert before ADD COLUMN did not carry c; the changes after DROP COLUMN, b.
        assert [unchanged for _, _, unchanged in changes] == [["c"], [], ["b"], ["b"]]
    # The mirror keeps the dropped column's last value for the row it held (what a
    # subscriber's own table keeps); the row inserted afterwards has none.
    assert _mirror_rows(mirror) == [
        {"a": 1, "b": 1, "c": 6},
        {"a": 2, "b": None, "c": 7},
    ]


def test_full_identity_without_key_takes_the_changes_shape(db: Database, tmp_path: Path) -> None:
    """Rows of a REPLICA IDENTITY FULL table without a key are matched whole, which a
    column the changes do not carry cannot take part in: the mirror drops it instead."""
    conn = db.conn
    conn.execute("CREATE TABLE t (a int, b int, c int)")
    conn.execute("ALTER TABLE t REPLICA IDENTITY FULL")
    conn.execute("CREATE PUBLICATION pub FOR TABLE t")
    mirror = DeltaSink(tmp_path / "m")
    _consume(db, mirror)
    conn.execute("INSERT INTO t VALUES (1, 1, 1), (2, 2, 2)")
    conn.execute("ALTER TABLE t DROP COLUMN b")
    conn.execute("UPDATE t SET c = 5 WHERE a = 1")
    _consume(db, mirror, max_batch_rows=1)
    assert _mirror_rows(mirror) == [{"a": 1, "c": 5}, {"a": 2, "c": 2}]
