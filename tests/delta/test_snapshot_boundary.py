"""A transaction whose commit record is the first WAL record after a new slot's consistent
point, kept by ``delta.run``: the snapshot does not see it, the slot streams it with
``_commit_lsn`` equal to the consistent point (the initial snapshot rows' own), and the
lake must hold it. ``make chaos`` lost such a transaction under pgbench once in some 500
kills; here the server is led to that boundary on purpose.

How: a slot becomes consistent at an ``xl_running_xacts`` record once every transaction
running at the one before it has ended. So U runs while the slot is being created (its
builder waits for U), V starts before U commits (the builder then waits for V), W starts
before V commits: at the record logged when V ends, W is running and the slot is
consistent. W commits as soon as the slot reports its consistent point, before anything
else writes WAL: its commit record starts at the consistent point. The test checks that it
did (W's insert position before its commit), and tries again on a fresh database when
something else wrote first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import Database, fresh_database
from pgwire_cdc import delta
from pgwire_cdc.lsn import lsn_to_int
from pgwire_cdc.replication import temporary_slot_name
from support.server import PgCluster

ATTEMPTS = 5


def poll(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


def xid_of(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_current_xact_id()::text").fetchone()
    assert row is not None
    return int(row[0])


def one_attempt(db: Database, path: Path) -> bool:
    """One run at the boundary; False when W's commit did not land on the consistent point
    (another WAL record came first), True once the lake was checked."""
    db.conn.execute("CREATE TABLE t (id int PRIMARY KEY, who text)")
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE t")
    db.conn.execute("INSERT INTO t VALUES (0, 'before')")
    waiters = db.conn

    def waiting_on(xid: int) -> Callable[[], bool]:
        query = (
            "SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted"
            " AND transactionid::text = %s"
        )
        return lambda: (waiters.execute(query, (str(xid),)).fetchone() or (0,))[0] > 0

    u, v, w = (psycopg.connect(db.dsn) for _ in range(3))
    result: dict[str, Any] = {}

    def pipeline() -> None:
        try:
            result["stats"] = delta.run(
                db.dsn, path, publication="pub", slot="s1", idle_timeout=3, max_batch_ms=100
            )
        except BaseException as e:  # re-raised by the test thread
            result["error"] = e

    try:
        u.execute("INSERT INTO t VALUES (1, 'u')")
        worker = threading.Thread(target=pipeline, daemon=True)
        worker.start()
        poll("the slot's builder to wait for U", waiting_on(xid_of(u)))
        v.execute("INSERT INTO t VALUES (2, 'v')")
        u.commit()
        poll("the slot's builder to wait for V", waiting_on(xid_of(v)))
        w.execute("INSERT INTO t VALUES (3, 'w')")
        xid_of(w)
        v.commit()
        point: list[int] = []

        def consistent() -> bool:
            row = waiters.execute(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots"
                " WHERE slot_name = %s AND confirmed_flush_lsn IS NOT NULL",
                (temporary_slot_name("s1"),),
            ).fetchone()
            if row is not None:
                point.append(lsn_to_int(row[0]))
            return row is not None

        poll("the slot's consistent point", consistent)
        row = w.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        w.commit()
        assert row is not None
        at_point = lsn_to_int(row[0]) == point[0]
        worker.join(120)
        assert not worker.is_alive(), "the pipeline did not stop"
        if "error" in result:
            raise result["error"]
    finally:
        for conn in (u, v, w):
            conn.close()
    if not at_point:
        return False
    lake = delta.read_table(delta.table_path(path, "public.t")).to_pylist()
    assert sorted((r["id"], r["who"]) for r in lake) == [
        (0, "before"),
        (1, "u"),
        (2, "v"),
        (3, "w"),
    ]
    return True


@pytest.mark.server
def test_a_commit_at_the_consistent_point_reaches_the_lake(pg: PgCluster, tmp_path: Path) -> None:
    for attempt in range(ATTEMPTS):
        with fresh_database(pg) as db:
            if one_attempt(db, tmp_path / f"lake{attempt}"):
                return
    pytest.fail(f"W's commit never landed on the consistent point in {ATTEMPTS} attempts")
