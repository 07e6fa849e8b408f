"""Failover slots and a real failover: a PostgreSQL 18 primary, a physical standby that
synchronizes failover slots (tests/support/standby.py), and a Delta sink
(``pgwire_cdc.delta.run``, delta-rs writer) under a random workload. The primary is stopped
with ``pg_ctl stop -m immediate`` while the consumer streams, the standby is promoted, and
the consumer, given a DSN that lists both servers with ``target_session_attrs=read-write``,
reaches the new primary and goes on from the synchronized slot: the Delta tables equal the
promoted server's rows and no second snapshot is taken. Without ``failover`` the slot is
missing on the new primary: a ``SlotError`` says so, and nothing starts over.

Failover slots need PostgreSQL 17+: the pg15 runs are skipped.

The failover test prints the figures of its run as one JSON line: changes delivered again
(and skipped by the sink), changes lost, and the time from the stop of the primary (and from
the promotion) to the first batch from the new primary.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import fresh_database
from delta.test_crash_torture import delta_rows
from pgwire_cdc import ConfigError, SlotError, delta, stream
from support.server import SERVERS
from support.standby import ReplicaPair
from support.stream_workload import SCHEMA, TABLES, Workload, source_rows

#: Each test starts a primary and a standby of its own.
pytestmark = pytest.mark.server

SLOT = "fo"


def _pair(server: str) -> ReplicaPair:
    if server == "pg15":
        pytest.skip("failover slots need PostgreSQL 17+; the pg15 server is PostgreSQL 15")
    return ReplicaPair(server)


class Consumer:
    """``delta.run`` in a thread, recording every batch applied (time, LSN, snapshot
    start, rows, rows skipped as delivered again)."""

    def __init__(self, dsn: str, path: Path, **options: Any) -> None:
        self.batches: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self.stats: delta.ApplyStats | None = None

        def on_batch(_sink: Any, batch: Any, stats: delta.ApplyStats) -> None:
            self.batches.append(
                {
                    "at": time.monotonic(),
                    "lsn": batch.lsn,
                    "snapshot_start": batch.snapshot_start,
                    "rows": batch.rows,
                    "skipped": stats.skipped,
                }
            )

        def run() -> None:
            try:
                self.stats = delta.run(
                    dsn,
                    str(path),
                    publication="pub",
                    slot=SLOT,
                    max_batch_rows=2000,
                    reconnect_attempts=30,
                    reconnect_max_delay=1.0,
                    on_batch=on_batch,
                    **options,
                )
            except BaseException as e:
                self.error = e

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()


class Writer:
    """The workload on the primary in a thread, until stopped or the server goes away."""

    def __init__(self, dsn: str, seed: int) -> None:
        import psycopg

        self.conn = psycopg.connect(dsn, autocommit=True)
        self.workload = _resumed_workload(self.conn, seed)
        self.done = threading.Event()
        self.transactions = 0

        def run() -> None:
            while not self.done.is_set():
                try:
                    self.workload.run(1)
                except psycopg.Error:
                    return  # the server went away
                self.transactions += 1
                time.sleep(0.02)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        self.thread.join(30)
        self.conn.close()


def _prepare(pair: ReplicaPair) -> str:
    dbname = pair.primary.create_database("fo")
    with pair.primary.connect(dbname) as conn:
        conn.execute(SCHEMA)
        conn.execute("CREATE PUBLICATION pub FOR TABLE items, codes, notes")
        Workload(conn, seed=11).run(150)
    pair.caught_up()
    return dbname


def _wait(what: str, check: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _resumed_workload(conn: Any, seed: int) -> Workload:
    """The workload going on over the rows that are there (on a promoted server, without
    the last transactions the old primary committed)."""
    workload = Workload(conn, seed)
    workload.item_ids = {r[0] for r in conn.execute("SELECT id FROM items").fetchall()}
    workload.codes = {r[0] for r in conn.execute("SELECT code FROM codes").fetchall()}
    row = conn.execute("SELECT coalesce(max(id), 0) FROM items").fetchone()
    workload.next_id = int(row[0]) + 1_000_000
    return workload


def _continue_workload(conn: Any, seed: int, transactions: int) -> None:
    """More of the workload (see :func:`_resumed_workload`)."""
    _resumed_workload(conn, seed).run(transactions)


@pytest.mark.parametrize("server", SERVERS)
def test_delta_sink_goes_on_after_a_failover(server: str, tmp_path: Path) -> None:
    with _pair(server) as pair:
        assert pair.standby is not None
        dbname = _prepare(pair)
        consumer = Consumer(
            pair.failover_dsn(dbname), tmp_path / "delta", failover=True, idle_timeout=8
        )
        writer = Writer(pair.primary.dsn_for(dbname), seed=12)
        with pair.primary.connect(dbname) as conn:
            _wait("the failover slot", lambda: _is_failover_slot(conn))

        # The standby's copy must be synced and persistent (a temporary one is dropped at
        # promotion); it becomes so once the consumer has confirmed past what it reserved.
        def synced() -> bool:
            assert pair.standby is not None
            with pair.primary.connect(dbname) as conn:
                # A running-transactions record for the slot to move its catalog_xmin
                # past the standby's (else it waits for the next one, up to 15 s).
                conn.execute("SELECT pg_log_standby_snapshot()")
            row = pair.standby.synced_slot(SLOT, dbname)
            return bool(row and row["synced"] and not row["temporary"] and row["failover"])

        _wait("the synced slot on the standby", synced)
        time.sleep(4.0)  # the consumer streaming, the writer writing
        assert consumer.error is None, consumer.error
        delivered_before = len(consumer.batches)
        stopped = time.monotonic()
        pair.primary.shutdown("immediate")
        writer.stop()
        pair.standby.promote()
        promoted = time.monotonic()
        with pair.standby.connect(dbname) as conn:
            _continue_workload(conn, seed=13, transactions=150)
            consumer.thread.join(240)
            assert not consumer.thread.is_alive(), "the consumer did not finish"
            assert consumer.error is None, repr(consumer.error)
            for name in TABLES:
                assert delta_rows(tmp_path / "delta", name) == source_rows(conn, name), name
        batches = consumer.batches
        # One snapshot: the first batch; the failover started nothing over.
        assert [b["snapshot_start"] for b in batches].count(True) == 1
        assert batches[0]["snapshot_start"]
        after = batches[delivered_before:]
        first_new = next(b for b in after if b["rows"])
        figures = {
            "server": server,
            "transactions_while_streaming_on_old_primary": writer.transactions,
            "batches": len(batches),
            "changes_delivered_again": sum(b["skipped"] for b in batches),
            # The Delta tables equal the promoted server's rows: nothing it has was skipped.
            "changes_skipped": 0,
            "seconds_from_stop_to_first_batch": round(first_new["at"] - stopped, 2),
            "seconds_from_promotion_to_first_batch": round(first_new["at"] - promoted, 2),
        }
        print("\nfailover figures: " + json.dumps(figures))


def _is_failover_slot(conn: Any) -> bool:
    row = conn.execute(
        "SELECT failover FROM pg_replication_slots WHERE slot_name = %s", (SLOT,)
    ).fetchone()
    return bool(row and row[0])


@pytest.mark.parametrize("server", SERVERS)
def test_without_failover_the_slot_is_missing_after_promotion(server: str, tmp_path: Path) -> None:
    with _pair(server) as pair:
        assert pair.standby is not None
        dbname = _prepare(pair)
        consumer = Consumer(pair.failover_dsn(dbname), tmp_path / "delta")
        with pair.primary.connect(dbname) as conn:
            _wait("the slot", lambda: _slot_exists(conn))
            _continue_workload(conn, seed=14, transactions=50)
        _wait("a batch after the snapshot", lambda: len(consumer.batches) >= 2)
        pair.caught_up()
        assert pair.standby.synced_slot(SLOT, dbname) is None
        pair.primary.shutdown("immediate")
        pair.standby.promote()
        consumer.thread.join(120)
        assert not consumer.thread.is_alive()
        error = consumer.error
        assert isinstance(error, SlotError), repr(error)
        message = str(error)
        assert f"replication slot {SLOT!r} does not exist on the server" in message
        assert "failover" in message and "Nothing was started over" in message
        assert [b["snapshot_start"] for b in consumer.batches].count(True) == 1


def _slot_exists(conn: Any) -> bool:
    row = conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (SLOT,))
    return row.fetchone() is not None


def test_failover_needs_postgresql_17(pg15_cluster: Any) -> None:
    """Before PostgreSQL 17, ``failover=True`` is a ConfigError naming the version, and
    ``check --failover`` reports it as a problem."""
    from pgwire_cdc.check import run_checks

    with fresh_database(pg15_cluster) as db:
        db.conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        db.conn.execute("CREATE PUBLICATION pub FOR TABLE t")
        with pytest.raises(ConfigError, match="need PostgreSQL 17 or later"):
            next(iter(stream(db.dsn, slot="fo_old", failover=True)))
        findings = run_checks(db.conn, "pub", slot="fo_old", failover=True)
        assert any(f.level == "problem" and "PostgreSQL 17" in f.message for f in findings)
