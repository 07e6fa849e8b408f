"""`pgwire_cdc.stream()` end to end against real PostgreSQL 15 and 18: initial snapshot,
streamed changes applied by a consumer, restarts with and without ack, a killed walsender.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pgwire_cdc
import pyarrow as pa
import pytest
from conftest import Database
from pgwire_cdc import lsn_to_int
from pgwire_cdc.errors import ConfigError
from pgwire_cdc.streaming import Batch
from support.stream_workload import SCHEMA, TABLES, Mirror, Workload, source_rows


def current_lsn(db: Database) -> int:
    row = db.conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return lsn_to_int(row[0])


def slots(db: Database) -> dict[str, tuple[bool, str | None]]:
    return {
        name: (temporary, flush)
        for name, temporary, flush in db.conn.execute(
            "SELECT slot_name, temporary, confirmed_flush_lsn::text FROM pg_replication_slots "
            "WHERE database = current_database()"
        ).fetchall()
    }


def consume(
    db: Database, mirror: Mirror | None = None, *, ack: bool = True, **options: Any
) -> list[Batch]:
    """Runs stream() up to the current end of WAL, applying and acking every batch."""
    options.setdefault("until_lsn", current_lsn(db))
    options.setdefault("max_batch_rows", 37)
    options.setdefault("max_batch_ms", 200)
    batches = []
    for batch in pgwire_cdc.stream(db.dsn, publication="pub", slot="s1", **options):
        if mirror is not None:
            mirror.apply(batch.tables)
        if ack:
            batch.ack()
        batches.append(batch)
    return batches


def assert_mirror_equals_source(db: Database, mirror: Mirror) -> None:
    for name in TABLES:
        assert mirror.rows(name) == source_rows(db.conn, name), name


@pytest.fixture
def workload(db: Database) -> Workload:
    db.conn.execute(SCHEMA)
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE items, codes, notes")
    return Workload(db.conn, seed=db.cluster.version % 1000)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "text"])
def test_snapshot_then_changes_equal_source(db: Database, workload: Workload, binary: bool) -> None:
    workload.run(40)
    mirror = Mirror()
    first = consume(db, mirror, binary=binary)
    assert first and first[0].snapshot and first[0].snapshot_start
    assert {r for b in first for t in b.tables.values() for r in t["_change_type"].to_pylist()} <= {
        "read"
    }
    assert_mirror_equals_source(db, mirror)
    assert slots(db).keys() == {"s1"}, "the permanent slot exists once the snapshot is acked"

    workload.run(120)
    later = consume(db, mirror, binary=binary)
    assert later and not any(b.snapshot for b in later)
    assert_mirror_equals_source(db, mirror)
    kinds = {r for b in later for t in b.tables.values() for r in t["_change_type"].to_pylist()}
    assert {"insert", "update", "delete"} <= kinds
    # Every change exactly once: (_commit_lsn, _tx_ordinal) unique per table.
    assert len(set(mirror.changes)) == len(mirror.changes)
    # Unchanged TOAST reached the consumer as such and was filled from its copy.
    unchanged = [
        r for b in later for t in b.tables.values() for r in t["_unchanged"].to_pylist() if r
    ]
    assert unchanged, "the workload leaves toasted columns unchanged in updates"


def test_changes_during_snapshot_are_streamed_once(db: Database, workload: Workload) -> None:
    """Rows committed while the snapshot is being read come from the stream, not twice."""
    workload.run(60)
    mirror = Mirror()
    stream = pgwire_cdc.stream(
        db.dsn,
        publication="pub",
        slot="s1",
        max_batch_rows=10,
        snapshot_workers=2,
        snapshot_split_blocks=1,
    )
    first = next(stream)
    assert first.snapshot
    mirror.apply(first.tables)
    first.ack()
    # Concurrently with the copy still in progress (from another thread: a TRUNCATE waits
    # for the snapshot transactions, which wait for this consumer).
    writer = threading.Thread(target=workload.run, args=(60,))
    writer.start()
    batches = []
    while writer.is_alive():
        batch = next(stream)
        batches.append(batch)
        mirror.apply(batch.tables)
        batch.ack()
    writer.join()
    # Read on only while something is missing: a stream with nothing left to deliver
    # blocks in next().
    while any(mirror.rows(name) != source_rows(db.conn, name) for name in TABLES):
        batch = next(stream)
        mirror.apply(batch.tables)
        batch.ack()
    stream.close()
    assert_mirror_equals_source(db, mirror)
    assert len(set(mirror.changes)) == len(mirror.changes)


def test_unacked_snapshot_leaves_no_slot(db: Database, workload: Workload) -> None:
    workload.run(20)
    batches = consume(db, ack=False)
    assert batches[0].snapshot
    # The temporary slot goes with its walsender, which exits just after the client.
    deadline = time.monotonic() + 10
    while slots(db) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert slots(db) == {}, "a snapshot never acked must not leave a slot behind"
    again = consume(db, ack=True)
    assert again[0].snapshot_start
    assert sum(b.rows for b in again) == sum(b.rows for b in batches)


def test_restart_without_ack_redelivers_and_after_ack_never(
    db: Database, workload: Workload
) -> None:
    consume(db)  # snapshot of the empty tables, acked: the slot exists
    workload.run(30)
    end = current_lsn(db)

    def changes(batches: list[Batch]) -> list[tuple[int, int]]:
        return [
            (c, o)
            for b in batches
            for t in b.tables.values()
            for c, o in zip(t["_commit_lsn"].to_pylist(), t["_tx_ordinal"].to_pylist(), strict=True)
        ]

    unacked = consume(db, ack=False, until_lsn=end)
    assert unacked
    again = consume(db, ack=False, until_lsn=end)
    assert changes(again) == changes(unacked), "un-acked batches come again"

    # Ack only the first batch, then restart: nothing up to its LSN comes again.
    stream = pgwire_cdc.stream(
        db.dsn, publication="pub", slot="s1", until_lsn=end, max_batch_rows=37
    )
    first = next(stream)
    first.ack()
    stream.close()
    assert lsn_to_int(slots(db)["s1"][1] or "0/0") >= first.lsn
    rest = consume(db, ack=True, until_lsn=end)
    # Nothing the ack covered comes again; a transaction the first batch only began
    # comes again in full (at-least-once), with the same identifiers.
    assert all(c > first.lsn for c, _ in changes(rest))
    covered = [c for c in changes([first]) if c[0] <= first.lsn]
    assert set(covered).isdisjoint(changes(rest))
    assert set(changes([first])) | set(changes(rest)) == set(changes(unacked))
    assert sorted(covered + changes(rest)) == sorted(changes(unacked))
    assert consume(db, ack=True, until_lsn=end) == []


def test_walsender_killed_stream_reconnects(db: Database, workload: Workload) -> None:
    consume(db)
    mirror = Mirror()
    # Fill the mirror with the current state through a fresh snapshot of a second slot.
    for batch in pgwire_cdc.stream(db.dsn, publication="pub", slot="s2", until_lsn=current_lsn(db)):
        mirror.apply(batch.tables)
        batch.ack()
    killer_done = threading.Event()

    def kill_walsenders() -> None:
        other = db.connect()
        try:
            for _ in range(3):
                time.sleep(0.7)
                other.execute(
                    "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                    "WHERE slot_name = 's2' AND active_pid IS NOT NULL"
                )
        finally:
            other.close()
            killer_done.set()

    thread = threading.Thread(target=kill_walsenders)
    stream: Iterator[Batch] = pgwire_cdc.stream(
        db.dsn, publication="pub", slot="s2", max_batch_rows=20, max_batch_ms=100, idle_timeout=5
    )
    thread.start()
    for _ in range(6):
        workload.run(10)
        time.sleep(0.3)
    end = current_lsn(db)
    for batch in stream:
        mirror.apply(batch.tables)
        batch.ack()
        if batch.lsn >= end and killer_done.is_set():
            break
    stream.close()  # type: ignore[attr-defined]
    thread.join()
    # Reconnects resume exactly after what was handed out: nothing twice within a run.
    assert len(set(mirror.changes)) == len(mirror.changes)
    assert_mirror_equals_source(db, mirror)


def test_missing_publication_without_tables_is_a_config_error(db: Database) -> None:
    with pytest.raises(ConfigError, match="pub"):
        next(pgwire_cdc.stream(db.dsn, publication="pub", slot="s1"))


def test_publication_created_for_tables(db: Database) -> None:
    db.conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    db.conn.execute("INSERT INTO t VALUES (1, 'a'), (2, NULL)")
    batches = list(
        pgwire_cdc.stream(
            db.dsn, publication="newpub", slot="s1", tables=["public.t"], until_lsn=current_lsn(db)
        )
    )
    assert [r["v"] for b in batches for r in b.tables["public.t"].to_pylist()] == ["a", None]


def test_user_types_in_binary_snapshot_and_stream(db: Database) -> None:
    """Enums, domains (with the domain's modifier) and unknown user types: the snapshot and
    the stream agree on types and values, in binary mode."""
    db.conn.execute(
        "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');"
        "CREATE DOMAIN money2 AS numeric(10,2);"
        "CREATE DOMAIN posint AS int CHECK (VALUE > 0);"
        "CREATE TABLE u (id posint PRIMARY KEY, m mood, amt money2, moods mood[]);"
        "INSERT INTO u VALUES (1, 'ok', 12.5, '{sad,happy}'), (2, NULL, NULL, '{}');"
        "CREATE PUBLICATION pub FOR TABLE u;"
    )
    stream = pgwire_cdc.stream(db.dsn, publication="pub", slot="s1", binary=True, idle_timeout=3)
    snapshot = next(stream)
    snapshot.ack()
    db.conn.execute("INSERT INTO u VALUES (3, 'happy', -0.01, '{ok,NULL}')")
    streamed = next(stream)
    stream.close()
    a, b = snapshot.tables["public.u"], streamed.tables["public.u"]
    assert a.schema.field("amt").type == b.schema.field("amt").type == pa.decimal128(10, 2)
    assert a.schema.field("id").type == pa.int32()
    assert a.schema.field("m").type == b.schema.field("m").type == pa.string()
    assert a.schema.field("moods").type == pa.list_(pa.string())
    assert a.select(["id", "m", "amt", "moods"]).to_pylist() == [
        {"id": 1, "m": "ok", "amt": Decimal("12.50"), "moods": ["sad", "happy"]},
        {"id": 2, "m": None, "amt": None, "moods": []},
    ]
    assert b.select(["id", "m", "amt", "moods"]).to_pylist() == [
        {"id": 3, "m": "happy", "amt": Decimal("-0.01"), "moods": ["ok", None]},
    ]


def test_slow_consumer_keeps_the_connection(
    db: Database, workload: Workload, caplog: pytest.LogCaptureFixture
) -> None:
    """A consumer busy longer than wal_sender_timeout between batches: status updates
    still reach the server, so the walsender does not time the connection out."""
    db.conn.execute("ALTER SYSTEM SET wal_sender_timeout = '1s'")
    db.conn.execute("SELECT pg_reload_conf()")
    try:
        consume(db)
        workload.run(5)
        stream = pgwire_cdc.stream(db.dsn, publication="pub", slot="s1", idle_timeout=5)
        first = next(stream)
        first.ack()
        time.sleep(3.5)  # "processing" the batch
        workload.run(5)
        second = next(stream)
        second.ack()
        stream.close()  # type: ignore[attr-defined]
        assert second.lsn > first.lsn
        assert "replication connection lost" not in caplog.text
    finally:
        db.conn.execute("ALTER SYSTEM RESET wal_sender_timeout")
        db.conn.execute("SELECT pg_reload_conf()")


def test_an_empty_snapshot_is_still_announced(db: Database) -> None:
    """A new slot over empty tables yields one empty snapshot batch (snapshot_start), so a
    consumer keeping a copy knows to start it over; acking it creates the slot."""
    db.conn.execute("CREATE TABLE empty (id int PRIMARY KEY)")
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE empty")
    batches = consume(db)
    assert len(batches) == 1
    (batch,) = batches
    assert batch.snapshot and batch.snapshot_start and batch.tables == {} and batch.rows == 0
    assert slots(db).keys() == {"s1"}
    db.conn.execute("INSERT INTO empty VALUES (1)")
    (later,) = consume(db)
    assert not later.snapshot and later.tables["public.empty"]["id"].to_pylist() == [1]


def test_several_publications(db: Database) -> None:
    """publication= takes a list, as pgoutput's publication_names does: every table of every
    publication, each once; a table in two publications gets their row filters ORed, in the
    snapshot as in the stream."""
    conn = db.conn
    conn.execute("CREATE TABLE a (id int PRIMARY KEY, v int)")
    conn.execute("CREATE TABLE b (id int PRIMARY KEY, v int)")
    conn.execute("INSERT INTO a SELECT g, g FROM generate_series(1, 10) g")
    conn.execute("INSERT INTO b SELECT g, g FROM generate_series(1, 10) g")
    conn.execute("CREATE PUBLICATION pa FOR TABLE a, b WHERE (id <= 2)")
    conn.execute("CREATE PUBLICATION pb FOR TABLE b WHERE (id >= 9)")
    options: dict[str, Any] = {"publication": ["pa", "pb"], "slot": "s1"}

    def rows(batches: list[Batch]) -> dict[str, list[tuple[str, int]]]:
        out: dict[str, list[tuple[str, int]]] = {}
        for batch in batches:
            for name, table in batch.tables.items():
                out.setdefault(name, []).extend(
                    zip(table["_change_type"].to_pylist(), table["id"].to_pylist(), strict=True)
                )
        return {name: sorted(r) for name, r in out.items()}

    def run() -> list[Batch]:
        batches = []
        for batch in pgwire_cdc.stream(db.dsn, until_lsn=current_lsn(db), **options):
            batch.ack()
            batches.append(batch)
        return batches

    assert rows(run()) == {
        "public.a": [("read", i) for i in range(1, 11)],
        "public.b": [("read", i) for i in (1, 2, 9, 10)],
    }
    conn.execute("DELETE FROM b WHERE id = 5")  # filtered out: not published
    conn.execute("INSERT INTO b VALUES (11, 11), (5, 5), (0, 0)")
    conn.execute("INSERT INTO a VALUES (11, 5)")
    assert rows(run()) == {
        "public.a": [("insert", 11)],
        "public.b": [("insert", 0), ("insert", 11)],
    }
    with pytest.raises(ConfigError, match="one publication"):
        next(iter(pgwire_cdc.stream(db.dsn, publication=["pa", "pb"], tables=["public.a"])))
    with pytest.raises(ConfigError, match="publication"):
        next(iter(pgwire_cdc.stream(db.dsn, publication=[])))


def test_a_slow_consumer_is_not_idle(db: Database) -> None:
    """``idle_timeout`` counts time the stream waited for the server, not time the
    consumer spent on a batch while changes waited unread."""
    db.conn.execute("CREATE TABLE slow (id int PRIMARY KEY)")
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE slow")
    consume(db)  # the slot, acked past its (empty) snapshot
    for i in range(4):
        db.conn.execute("INSERT INTO slow VALUES (%s)", (i,))
    got = 0
    for batch in pgwire_cdc.stream(
        db.dsn, publication="pub", slot="s1", idle_timeout=1, max_batch_rows=1
    ):
        got += batch.rows
        batch.ack()
        time.sleep(1.5)  # longer than idle_timeout
    assert got == 4
