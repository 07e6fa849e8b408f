"""Streaming from a hot standby (PostgreSQL 16+ decodes logically on a standby): the slot
and the initial snapshot are made on the standby, positions are the standby's replay
positions, and nothing is written into its WAL. Slot creation on a standby waits for a
running-transactions record from the primary, so the primary writes one every half second
(``pg_log_standby_snapshot()``) while a slot is made. The rig is tests/support/standby.py;
the pg15 runs are skipped (logical decoding on a standby needs PostgreSQL 16)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from delta.test_crash_torture import delta_rows
from pgwire_cdc import ConfigError, delta, stream
from pgwire_cdc.lsn import lsn_to_int
from support.server import SERVERS
from support.standby import ReplicaPair
from support.stream_workload import SCHEMA, TABLES, Mirror, Workload, source_rows

from live.test_failover import _continue_workload

#: Each test starts a primary and a standby of its own.
pytestmark = pytest.mark.server


@contextmanager
def _standby_snapshots(pair: ReplicaPair) -> Iterator[None]:
    """The primary logs its running transactions every half second meanwhile."""
    done = threading.Event()

    def kick() -> None:
        with pair.primary.connect() as conn:
            while not done.wait(0.5):
                conn.execute("SELECT pg_log_standby_snapshot()")

    thread = threading.Thread(target=kick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(10)


def _rig(server: str) -> ReplicaPair:
    if server == "pg15":
        pytest.skip("logical decoding on a standby needs PostgreSQL 16+; pg15 is PostgreSQL 15")
    return ReplicaPair(server, synchronized=False)


@pytest.mark.parametrize("server", SERVERS)
def test_stream_and_delta_sink_on_a_standby(server: str, tmp_path: Path) -> None:
    with _rig(server) as pair:
        assert pair.standby is not None
        dbname = pair.primary.create_database("sb")
        with pair.primary.connect(dbname) as conn:
            conn.execute(SCHEMA)
            conn.execute("CREATE PUBLICATION pub FOR TABLE items, codes, notes")
            Workload(conn, seed=21).run(100)
        pair.caught_up()
        standby_dsn = pair.standby.dsn_for(dbname)
        mirror = Mirror()
        with _standby_snapshots(pair):
            batches = stream(standby_dsn, slot="on_standby", max_batch_rows=500, idle_timeout=3)
            first = next(batches)
            assert first.snapshot_start
            mirror.apply(first.tables)
            first.ack()
            with pair.primary.connect(dbname) as conn:
                _continue_workload(conn, seed=22, transactions=100)
                row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            assert row is not None
            until = lsn_to_int(row[0])
            for batch in batches:
                mirror.apply(batch.tables)
                batch.ack()
                if batch.lsn >= until:
                    break
            batches.close()
            # The Delta sink on the standby: a slot, a snapshot and the changes.
            stats = delta.run(
                standby_dsn,
                str(tmp_path / "delta"),
                publication="pub",
                slot="delta_on_standby",
                until_lsn=until,
            )
        assert stats.changes > 0
        with pair.standby.connect(dbname) as conn:
            for name in TABLES:
                rows = source_rows(conn, name)
                assert sorted(mirror.rows(name), key=repr) == rows, name
                assert delta_rows(tmp_path / "delta", name) == rows, name
            slots = conn.execute(
                "SELECT slot_name FROM pg_replication_slots WHERE slot_type = 'logical' ORDER BY 1"
            ).fetchall()
        assert [s[0] for s in slots] == ["delta_on_standby", "on_standby"]
        # failover=True cannot be had on a standby.
        with pytest.raises(ConfigError, match="on a standby"):
            next(iter(stream(standby_dsn, slot="on_standby", failover=True)))
