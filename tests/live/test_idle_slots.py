"""Idle databases and PostgreSQL 18's ``idle_replication_slot_timeout`` (a cluster of its
own with the timeout at 2 s, so no other test's slot is invalidated):

* a running stream whose published table stays idle while an unpublished one writes:
  the slot's ``confirmed_flush_lsn`` follows the server, and checkpoints (when the
  server invalidates idle slots) leave it valid, because a slot with a consumer attached
  is not idle;
* the same slot once its consumer is stopped longer than the timeout: invalidated at
  the next checkpoint, and the next ``stream()`` is a ``SlotError`` saying why and what
  to do; ``pgwire-cdc check`` names the setting and what it means;
* ``heartbeat_interval``: heartbeat messages move the slot on a database that writes
  nothing, are never handed out as changes, and do not keep ``idle_timeout`` from
  ending the stream.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pgwire_cdc
import pytest
from conftest import Database, fresh_database
from pgwire_cdc.check import run_checks
from pgwire_cdc.errors import ConfigError, SlotError
from pgwire_cdc.lsn import lsn_to_int
from support.server import PgCluster

TIMEOUT_S = 2


@pytest.fixture(scope="module")
def cluster() -> Iterator[PgCluster]:
    server = PgCluster.for_server(
        "pg18", settings={"idle_replication_slot_timeout": f"'{TIMEOUT_S}s'"}
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def db(cluster: PgCluster) -> Iterator[Database]:
    with fresh_database(cluster) as database:
        yield database


def slot_row(db: Database, slot: str) -> tuple[int, str | None]:
    row = db.conn.execute(
        "SELECT confirmed_flush_lsn::text, invalidation_reason FROM pg_replication_slots"
        " WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    assert row is not None
    return (lsn_to_int(row[0]) if row[0] else 0), row[1]


def wal_lsn(db: Database) -> int:
    row = db.conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    return lsn_to_int(row[0])


def test_running_consumer_keeps_an_idle_slot_valid_and_moving(db: Database) -> None:
    db.conn.execute("CREATE TABLE quiet (id int PRIMARY KEY)")
    db.conn.execute("CREATE TABLE noise (id serial PRIMARY KEY, v text)")
    seen: list[int] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            for batch in pgwire_cdc.stream(
                db.dsn, publication="pub", tables=["public.quiet"], slot="idle"
            ):
                ids = [i for t in batch.tables.values() for i in t.column("id").to_pylist()]
                seen.extend(ids)
                batch.ack()
                if -1 in ids:
                    return
        except BaseException as e:  # reported by the test thread
            errors.append(e)

    consumer = threading.Thread(target=consume)
    consumer.start()
    active = "SELECT 1 FROM pg_replication_slots WHERE slot_name = 'idle' AND active"
    deadline = time.monotonic() + 60
    while not db.conn.execute(active).fetchone():
        assert time.monotonic() < deadline and not errors, errors
        time.sleep(0.2)
    start, _ = slot_row(db, "idle")
    # Unpublished writes and checkpoints (when the server invalidates idle slots) for
    # three times the timeout.
    ends = time.monotonic() + 3 * TIMEOUT_S
    marks = []
    while time.monotonic() < ends:
        db.conn.execute(
            "INSERT INTO noise (v) SELECT repeat('x', 200) FROM generate_series(1, 500)"
        )
        db.conn.execute("CHECKPOINT")
        marks.append(wal_lsn(db))
        time.sleep(0.3)
        _, reason = slot_row(db, "idle")
        assert reason is None, reason
    # The slot follows the server: within a few seconds it passes the WAL written
    # before the last checkpoint.
    deadline = time.monotonic() + 15
    while slot_row(db, "idle")[0] < marks[-2]:
        assert time.monotonic() < deadline, "the slot did not follow the server"
        time.sleep(0.2)
    assert slot_row(db, "idle")[0] > start
    db.conn.execute("INSERT INTO quiet VALUES (-1)")
    consumer.join(60)
    assert not errors, errors
    assert seen == [-1]  # nothing of the unpublished table

    # Stopped longer than the timeout: invalidated at the next checkpoint.
    time.sleep(TIMEOUT_S + 1)
    db.conn.execute("CHECKPOINT")
    deadline = time.monotonic() + 15
    while slot_row(db, "idle")[1] is None:
        assert time.monotonic() < deadline, "the stopped slot was not invalidated"
        time.sleep(0.5)
        db.conn.execute("CHECKPOINT")
    assert slot_row(db, "idle")[1] == "idle_timeout"
    with pytest.raises(SlotError) as raised:
        next(iter(pgwire_cdc.stream(db.dsn, publication="pub", slot="idle")))
    message = str(raised.value)
    assert "idle_timeout" in message and "idle_replication_slot_timeout" in message
    assert "pg_drop_replication_slot('idle')" in message and "initial snapshot" in message

    findings = run_checks(db.conn, "pub", slot="idle")
    (timeout,) = [f for f in findings if f.subject == "idle_replication_slot_timeout"]
    assert f"is {TIMEOUT_S} s" in timeout.message and "invalidated" in timeout.message
    assert any(f.level == "problem" and f.topic == "slot" for f in findings)
    db.conn.execute("SELECT pg_drop_replication_slot('idle')")


def test_heartbeats_move_the_slot_of_a_silent_database(db: Database) -> None:
    db.conn.execute("CREATE TABLE quiet (id int PRIMARY KEY)")
    # A slot at the end of the WAL, with nothing written in this cluster after it.
    for _ in pgwire_cdc.stream(
        db.dsn, publication="pub", tables=["public.quiet"], slot="beat", idle_timeout=0.5
    ):
        pass
    before = wal_lsn(db)
    rows = 0
    began = time.monotonic()
    for batch in pgwire_cdc.stream(
        db.dsn, publication="pub", slot="beat", idle_timeout=4, heartbeat_interval=0.5
    ):
        rows += batch.rows
        batch.ack()
    took = time.monotonic() - began
    assert rows == 0  # heartbeats are never changes
    assert took < 15  # heartbeats do not keep idle_timeout from ending the stream
    # The slot moved past several heartbeat records (about 70 bytes each, one every
    # 0.5 s for 4 s); without them only the server's own small records (a running-xacts
    # record, 56 bytes) would lie after `before`.
    moved, reason = slot_row(db, "beat")
    assert reason is None and moved - before > 200
    db.conn.execute("SELECT pg_drop_replication_slot('beat')")


@pytest.mark.parametrize("interval", [0, -1.5])
def test_heartbeat_interval_must_be_positive(interval: float) -> None:
    with pytest.raises(ConfigError, match="heartbeat_interval must be positive"):
        pgwire_cdc.StreamOptions(heartbeat_interval=interval)
