"""Copies of tables added later survive any consumer, against real PostgreSQL 15 and 18: the
consumer here keeps nothing but the slot (no ``held_tables``, no ``snapshot_progress``),
and every run ends with its copy of each table equal to the source.

The consumer's copy is a dict per table, kept from the batches it acks and lost with it
when it "crashes" (a new dict starts from what the earlier runs acked, as a durable
consumer would have it)."""

from __future__ import annotations

import logging
from typing import Any

import pgwire_cdc
import pytest
from conftest import Database

pytestmark = pytest.mark.server

Rows = dict[str, dict[int, Any]]


def apply(rows: Rows, batch: pgwire_cdc.Batch) -> None:
    """Upserts and deletes by key, as a consumer applying change tables does."""
    for name, table in batch.tables.items():
        held = rows.setdefault(name, {})
        for row in table.select(["id", "v", "_change_type", "_before"]).to_pylist():
            kind = row["_change_type"]
            if kind == "delete":
                held.pop(row["id"], None)
            elif kind == "truncate":
                held.clear()
            else:
                before = row["_before"]
                if before is not None and before.get("id") != row["id"]:
                    held.pop(before["id"], None)
                held[row["id"]] = row["v"]


def consume(rows: Rows, dsn: str, stop_after: int | None = None, **options: Any) -> int:
    """One run: applies and acks every batch; ``stop_after`` batches carrying copy
    progress, then stops (the generator closed, as a process that ends would)."""
    batches = pgwire_cdc.stream(dsn, publication="lp", slot="lp_slot", **options)
    reads = 0
    progressed = 0
    try:
        for batch in batches:
            apply(rows, batch)
            for table in batch.tables.values():
                reads += table["_change_type"].to_pylist().count("read")
            batch.ack()
            if batch.snapshot_progress and not batch.snapshot:
                progressed += 1
                if stop_after is not None and progressed >= stop_after:
                    break
    finally:
        batches.close()
    return reads


def source(db: Database, table: str) -> dict[int, Any]:
    return dict(db.conn.execute(f"SELECT id, v FROM {table}").fetchall())  # type: ignore[arg-type]


def setup(db: Database) -> None:
    db.conn.execute(
        "CREATE TABLE lp_a (id int PRIMARY KEY, v text);"
        " CREATE TABLE lp_b (id int PRIMARY KEY, v text);"
        " INSERT INTO lp_a SELECT g, 'a' FROM generate_series(1, 1000) g;"
        " INSERT INTO lp_b SELECT g, 'b' || g FROM generate_series(1, 1000) g"
    )


def test_a_table_added_by_a_later_tables_argument_is_copied(db: Database) -> None:
    setup(db)
    rows: Rows = {}
    consume(rows, db.dsn, tables=["public.lp_a"], idle_timeout=1)
    assert rows["public.lp_a"] == source(db, "lp_a")
    db.conn.execute("UPDATE lp_b SET v = 'early' WHERE id <= 10")
    consume(rows, db.dsn, tables=["public.lp_a", "public.lp_b"], idle_timeout=1)
    assert rows["public.lp_b"] == source(db, "lp_b")
    # A run after that copies nothing again: the last run's last note lists lp_b.
    db.conn.execute("UPDATE lp_b SET v = 'third' WHERE id = 3")
    assert consume(rows, db.dsn, idle_timeout=0.5) == 0
    assert rows["public.lp_b"] == source(db, "lp_b")


def test_a_table_added_by_alter_publication_between_runs_is_copied(db: Database) -> None:
    setup(db)
    rows: Rows = {}
    consume(rows, db.dsn, tables=["public.lp_a"], idle_timeout=1)
    db.conn.execute("INSERT INTO lp_a VALUES (5000, 'later')")
    db.conn.execute("ALTER PUBLICATION lp ADD TABLE lp_b")
    db.conn.execute("UPDATE lp_b SET v = 'after' WHERE id = 1")
    consume(rows, db.dsn, idle_timeout=1, chunk_rows=300)
    assert rows["public.lp_b"] == source(db, "lp_b")
    assert rows["public.lp_a"] == source(db, "lp_a")
    # A column list changed (SET TABLE rewrites the publication's row) is no new table.
    db.conn.execute("ALTER PUBLICATION lp SET TABLE lp_a, lp_b (id)")
    assert consume(rows, db.dsn, idle_timeout=0.5) == 0


def test_a_copy_stopped_halfway_resumes_with_no_held_tables(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """The run ends in the middle of lp_b's copy (``until_lsn`` and ``idle_timeout`` wait
    for copies to finish, so it is the consumer that stops: the generator closed, as a
    process ending would)."""
    setup(db)
    rows: Rows = {}
    consume(rows, db.dsn, tables=["public.lp_a"], idle_timeout=1)
    reads = consume(
        rows, db.dsn, tables=["public.lp_a", "public.lp_b"], chunk_rows=100, stop_after=2
    )
    assert 0 < reads < 1000, "the run stopped in the middle of the copy"
    db.conn.execute("UPDATE lp_b SET v = 'late' WHERE id IN (5, 500, 999)")
    db.conn.execute("DELETE FROM lp_b WHERE id = 998")
    # The next run is told nothing: the slot's own record resumes the copy.
    with caplog.at_level(logging.INFO, logger="pgwire_cdc"):
        resumed = consume(rows, db.dsn, idle_timeout=1, chunk_rows=100)
    assert "resuming the copy of public.lp_b an earlier run began" in caplog.text
    assert f"incremental snapshot of public.lp_b from after key [{reads}]" in caplog.text
    assert resumed > 0
    assert rows["public.lp_b"] == source(db, "lp_b")


def test_an_emptied_publication_still_drains_the_slot(db: Database) -> None:
    setup(db)
    rows: Rows = {}
    consume(rows, db.dsn, tables=["public.lp_a"], idle_timeout=1)
    db.conn.execute("INSERT INTO lp_a VALUES (2001, 'x'), (2002, 'y')")
    db.conn.execute("ALTER PUBLICATION lp DROP TABLE lp_a")
    consume(rows, db.dsn, idle_timeout=1)
    assert rows["public.lp_a"][2001] == "x" and rows["public.lp_a"][2002] == "y"
    # A new slot on the empty publication is still refused.
    with pytest.raises(pgwire_cdc.ConfigError, match="publishes no tables"):
        next(iter(pgwire_cdc.stream(db.dsn, publication="lp", slot="another")))


def notes_in_wal(db: Database, slot: str) -> int:
    """How many copy-state notes the WAL holds past ``slot``'s position (a peek)."""
    row = db.conn.execute(
        "SELECT count(*) FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL,"
        " 'proto_version', '1', 'publication_names', 'lp', 'messages', 'true')"
        " WHERE position(convert_to('pgwire_cdc.copies', 'UTF8') IN data) > 0",
        (slot,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_changes_only_copies_nothing_and_writes_no_notes(db: Database) -> None:
    """``snapshot=False`` (a consumer that takes changes only, such as the Spark streaming
    source's tasks): a table a later ``tables=`` adds is not copied, and the run writes no
    note into the WAL; a run that copies does."""
    setup(db)
    rows: Rows = {}
    consume(rows, db.dsn, tables=["public.lp_a"], idle_timeout=1)
    db.conn.execute("SELECT pg_create_logical_replication_slot('lp_peek', 'pgoutput')")
    db.conn.execute("INSERT INTO lp_b VALUES (5000, 'new')")
    reads = consume(rows, db.dsn, tables=["public.lp_a", "public.lp_b"], snapshot=False,
                    idle_timeout=1)  # fmt: skip
    assert reads == 0
    assert "public.lp_b" not in rows, "changes only: nothing of lp_b changed since"
    assert notes_in_wal(db, "lp_peek") == 0
    db.conn.execute("SELECT pg_drop_replication_slot('lp_peek')")
    db.conn.execute("SELECT pg_create_logical_replication_slot('lp_peek', 'pgoutput')")
    db.conn.execute("ALTER PUBLICATION lp DROP TABLE lp_b")
    assert consume(rows, db.dsn, tables=["public.lp_a", "public.lp_b"], idle_timeout=1) == 1001
    assert notes_in_wal(db, "lp_peek") > 0
