"""WAL safety, against real PostgreSQL 15 and 18: while the published tables are idle and
another (unpublished) table is busy, a slot whose `stream()` consumer waits for changes
keeps following the server (the consumer has nothing un-acked, so the session confirms the
keepalive position on its behalf): the slot's lag, ``pg_current_wal_lsn() -
confirmed_flush_lsn``, stays bounded however much WAL the busy table writes.

The figures (WAL written, largest lag seen, lag once the writer stops) are printed
(``pytest -s``) and recorded as test properties; docs/reliability.md quotes them. The bound
asserted is generous: a tenth of the WAL written, and under 16 MB.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pgwire_cdc
import pytest
from conftest import Database
from support.fault_support import current_lsn

WRITE_SECONDS = 6.0
RATE_MB = 8


def slot_lag(db: Database) -> int:
    row = db.conn.execute(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint"
        " FROM pg_replication_slots WHERE slot_name = 's1'"
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_idle_consumer_slot_lag_stays_bounded(
    db: Database, record_property: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    db.conn.execute(
        "CREATE TABLE quiet (id int PRIMARY KEY, v text);"
        "CREATE TABLE busy (id bigint PRIMARY KEY, pad text);"
        "CREATE PUBLICATION pub FOR TABLE quiet;"
        "INSERT INTO quiet VALUES (1, 'a')"
    )
    stream = pgwire_cdc.stream(db.dsn, publication="pub", slot="s1", idle_timeout=WRITE_SECONDS + 4)
    snapshot = next(stream)
    snapshot.ack()  # the slot is permanent; from now on the consumer only waits
    delivered: list[pgwire_cdc.Batch] = []

    def consume() -> None:
        for batch in stream:
            batch.ack()  # an empty batch may move the LSN: acked like any other
            delivered.append(batch)

    consumer = threading.Thread(target=consume)
    consumer.start()
    stop = threading.Event()
    written: list[int] = []

    def write() -> None:
        with db.connect() as conn:
            start = current_lsn(conn)
            next_id = 0
            # About RATE_MB a second, in transactions of 100 rows.
            started = time.monotonic()
            while not stop.is_set():
                conn.execute(
                    "INSERT INTO busy SELECT g, repeat('x', 400)"
                    " FROM generate_series(%s::bigint, %s::bigint) g",
                    (next_id, next_id + 99),
                )
                next_id += 100
                ahead = current_lsn(conn) - start - RATE_MB * 2**20 * (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead / (RATE_MB * 2**20))
            written.append(current_lsn(conn) - start)

    writer = threading.Thread(target=write)
    writer.start()
    lags = []
    deadline = time.monotonic() + WRITE_SECONDS
    while time.monotonic() < deadline:
        lags.append(slot_lag(db))
        time.sleep(0.1)
    stop.set()
    writer.join()
    # Once the writer stops the slot catches up with the server.
    settle = time.monotonic() + 5
    final = slot_lag(db)
    while final > 256 * 1024 and time.monotonic() < settle:
        time.sleep(0.1)
        final = slot_lag(db)
    consumer.join()
    assert sum(b.rows for b in delivered) == 0, "the published table was idle"
    total, worst = written[0], max(lags)
    figures = {
        "wal_written_mb": round(total / 2**20, 1),
        "max_lag_mb": round(worst / 2**20, 2),
        "final_lag_kb": round(final / 1024, 1),
        "samples": len(lags),
    }
    for key, value in figures.items():
        record_property(key, value)
    with capsys.disabled():
        print(f"\nPostgreSQL {db.cluster.version}: {figures}")
    assert total > 24 * 2**20, "the busy table should have written a lot of WAL"
    assert worst < min(total / 10, 16 * 2**20)
    assert final <= 256 * 1024
