"""Connection faults under `pgwire_cdc.stream()`, against real PostgreSQL 15 and 18: the
walsender terminated ten times, acks made after it was terminated, a fast restart of the
server, a network path that stalls (found by the stall time-out) or drops (a TCP proxy on
loopback), and a server that stays down (the configured attempts, then a clear
ConnectionError). After every fault the consumer's copy, built from acked batches, equals
the source, with nothing twice. Where no reconnect can apply (the snapshot's temporary slot
gone before its ack, a restart while the stream sets up), a ConnectionError says so; a
server refusing new connections gets the walsender back (a fast shutdown waits for it).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pgwire_cdc
import psycopg
import pytest
from conftest import Database, fresh_database
from pgwire_cdc import lsn_to_int
from pgwire_cdc.errors import ConnectionError
from pgwire_cdc.streaming import Batch
from support.fault_support import (
    StallProxy,
    assert_mirror_equals_source,
    mark,
    mirror_until,
)
from support.server import SERVERS, PgCluster
from support.stream_workload import SCHEMA, Mirror, Workload

RECONNECTED = "replication connection re-established"


@pytest.fixture
def workload(db: Database) -> Workload:
    db.conn.execute(SCHEMA)
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE items, codes, notes")
    return Workload(db.conn, seed=db.cluster.version % 997)


@pytest.fixture(scope="module", params=SERVERS, ids=SERVERS)
def own_cluster(request: pytest.FixtureRequest) -> Iterator[PgCluster]:
    """A cluster these tests may restart and stop."""
    cluster = PgCluster.for_server(request.param)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def own_db(own_cluster: PgCluster) -> Iterator[Database]:
    with fresh_database(own_cluster) as db:
        yield db


def start(db: Database, dsn: str | None = None, **options: Any) -> tuple[Iterator[Batch], Mirror]:
    """A stream on slot s1 whose snapshot (of tables not all empty) is mirrored and acked,
    streaming on the permanent slot."""
    mirror = Mirror()
    options.setdefault("max_batch_rows", 25)
    options.setdefault("max_batch_ms", 100)
    options.setdefault("reconnect_delay", 0.1)
    stream = pgwire_cdc.stream(dsn or db.dsn, publication="pub", slot="s1", **options)
    first = next(stream)  # a snapshot batch (or, for empty tables, the first change)
    mirror.apply(first.tables)
    first.ack()
    # Past the snapshot: streaming on the permanent slot.
    mirror_until(stream, mirror, mark(db.conn))
    return stream, mirror


def reconnects(caplog: pytest.LogCaptureFixture) -> int:
    return sum(RECONNECTED in r.getMessage() for r in caplog.records)


def test_walsender_terminated_ten_times(
    db: Database, workload: Workload, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pgwire_cdc")
    workload.run(20)
    stream, mirror = start(db, idle_timeout=30)
    killer = db.connect()
    killed: set[int] = set()
    try:
        for _ in range(10):
            workload.run(8)
            end = mark(db.conn)
            # Terminate the walsender now serving the slot (a new one after each reconnect).
            deadline = time.monotonic() + 30
            while True:
                row = killer.execute(
                    "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 's1'"
                ).fetchone()
                if row and row[0] is not None and row[0] not in killed:
                    break
                assert time.monotonic() < deadline, "no new walsender on the slot"
                time.sleep(0.05)
            killed.add(row[0])
            killer.execute("SELECT pg_terminate_backend(%s)", (row[0],))
            workload.run(8)
            mirror_until(stream, mirror, max(end, mark(db.conn)))
    finally:
        killer.close()
    stream.close()  # type: ignore[attr-defined]
    assert len(killed) == 10
    assert reconnects(caplog) == 10
    assert_mirror_equals_source(db.conn, mirror)


def confirmed_flush(conn: psycopg.Connection[Any], slot: str) -> int:
    row = conn.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    ).fetchone()
    assert row is not None and row[0] is not None
    return lsn_to_int(row[0])


def test_ack_after_walsender_terminated_is_kept(
    db: Database, workload: Workload, caplog: pytest.LogCaptureFixture
) -> None:
    """Acks made once the walsender is gone (the status updates hit a closed connection)
    do not raise: each is kept, the next poll finds the connection lost and reconnects, and
    the new connection confirms the acked LSN on the slot before anything newer is acked."""
    caplog.set_level(logging.INFO, logger="pgwire_cdc")
    workload.run(20)
    stream, mirror = start(db, idle_timeout=30)
    # Batches with three distinct LSNs, handed out and not acked yet.
    held: list[Batch] = []
    for _ in range(3):
        workload.run(4)
        held.append(mirror_until(stream, mirror, mark(db.conn), ack=False)[-1])
    assert held[0].lsn < held[1].lsn < held[2].lsn
    acked_before = confirmed_flush(db.conn, "s1")
    assert acked_before < held[0].lsn

    row = db.conn.execute(
        "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 's1'"
    ).fetchone()
    assert row is not None and row[0] is not None
    walsender = row[0]
    db.conn.execute("SELECT pg_terminate_backend(%s)", (walsender,))
    deadline = time.monotonic() + 10
    while db.conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (walsender,)).fetchone():
        assert time.monotonic() < deadline, "the walsender did not exit"
        time.sleep(0.02)
    time.sleep(0.2)  # its socket is closed with the process
    for batch in held:
        # The first status update may still go into the half-closed socket (the server
        # answers it with a reset); the next ones fail on the socket.
        batch.ack()
        time.sleep(0.1)
    assert reconnects(caplog) == 0, "nothing has polled since the walsender died"

    # The next poll reconnects; the new session reports the acks that could not be sent.
    workload.run(4)
    unacked = mirror_until(stream, mirror, mark(db.conn), ack=False)
    assert reconnects(caplog) == 1
    deadline = time.monotonic() + 5  # well inside the 10 s status interval
    while confirmed_flush(db.conn, "s1") < held[-1].lsn:
        assert time.monotonic() < deadline, "the acked LSN never reached the slot"
        time.sleep(0.05)
    assert confirmed_flush(db.conn, "s1") < unacked[-1].lsn
    for batch in unacked:
        batch.ack()
    stream.close()  # type: ignore[attr-defined]
    assert confirmed_flush(db.conn, "s1") >= unacked[-1].lsn
    assert_mirror_equals_source(db.conn, mirror)


def test_a_snapshot_whose_temporary_slot_went_says_so_at_the_ack(
    db: Database, workload: Workload
) -> None:
    """The walsender ended after the snapshot was read and before it was acked: its
    temporary slot went with it, so the permanent slot cannot be made where the snapshot
    stands; the ack raises a ConnectionError that says a new run takes a new snapshot,
    and no slot is left behind."""
    workload.run(20)
    stream = pgwire_cdc.stream(db.dsn, publication="pub", slot="s1")
    batch = next(stream)
    while not batch.snapshot_progress:  # the last snapshot batch: its ack makes the slot
        assert batch.snapshot
        batch = next(stream)
    db.conn.execute(
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
        " WHERE slot_name = 's1_snapshot'"
    )
    deadline = time.monotonic() + 10
    while db.conn.execute(
        "SELECT 1 FROM pg_replication_slots WHERE slot_name = 's1_snapshot'"
    ).fetchone():
        assert time.monotonic() < deadline, "the temporary slot stayed"
        time.sleep(0.05)
    with pytest.raises(ConnectionError, match="a new snapshot is taken"):
        batch.ack()
    stream.close()  # type: ignore[attr-defined]
    assert db.conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone() == (0,)


def test_a_restart_while_the_stream_starts_is_a_connection_error(
    own_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server restarts under a stream still setting up (its catalog connection open,
    no replication yet): a ConnectionError that says the connection was lost, not a bare
    driver error; the next run streams."""
    from pgwire_cdc import streaming

    own_db.conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    own_db.conn.execute("CREATE PUBLICATION pub FOR TABLE t")
    watch = streaming._schema_watch
    restarted = []

    def restart_then_watch(*args: Any, **kwargs: Any) -> Any:
        # The restart lands between two catalog queries of the setup, every time.
        own_db.cluster.restart()
        restarted.append(True)
        return watch(*args, **kwargs)

    monkeypatch.setattr(streaming, "_schema_watch", restart_then_watch)
    options = {"publication": "pub", "slot": "s1", "idle_timeout": 1, "schema_watch": True}
    with pytest.raises(ConnectionError, match="connection to PostgreSQL was lost"):
        next(pgwire_cdc.stream(own_db.dsn, **options))
    assert restarted
    monkeypatch.setattr(streaming, "_schema_watch", watch)
    own_db.conn = own_db.cluster.connect(own_db.name)
    batches = list(pgwire_cdc.stream(own_db.dsn, **options))
    assert batches[0].snapshot


def test_refused_new_connections_let_the_walsender_go(
    db: Database, workload: Workload, caplog: pytest.LogCaptureFixture
) -> None:
    """The setup connection is lost while the server refuses new connections (as while it
    shuts down, when a fast shutdown waits for every walsender's consumer to confirm what
    it was sent; here the database refuses connections, ALLOW_CONNECTIONS false): the
    stream closes its replication connection too, so the walsender goes, and once
    connections are taken again it streams on, nothing lost, nothing twice."""
    caplog.set_level(logging.INFO, logger="pgwire_cdc")
    workload.run(20)
    stream, mirror = start(db, idle_timeout=30, reconnect_delay=0.5, reconnect_attempts=10)
    with psycopg.connect(db.cluster.dsn, autocommit=True) as other:
        other.execute(f'ALTER DATABASE "{db.name}" WITH ALLOW_CONNECTIONS false')
    db.conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname ="
        " current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
    )
    released = threading.Event()

    def allow_once_released() -> None:
        with psycopg.connect(db.cluster.dsn, autocommit=True) as conn:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                row = conn.execute(
                    "SELECT active FROM pg_replication_slots WHERE slot_name = 's1'"
                ).fetchone()
                if row is not None and not row[0]:
                    released.set()
                    break
                time.sleep(0.05)
            conn.execute(f'ALTER DATABASE "{db.name}" WITH ALLOW_CONNECTIONS true')

    allowing = threading.Thread(target=allow_once_released)
    allowing.start()
    try:
        # The consumer goes on (the first batch meets the lost connection, the next the
        # refusal, the one after lets the walsender go and waits for the server).
        for _ in range(10):
            workload.run(2)
            mirror_until(stream, mirror, mark(db.conn))
            if released.is_set():
                break
    finally:
        allowing.join()
    assert released.is_set(), "the walsender stayed while new connections were refused"
    assert any("refuses new connections" in r.getMessage() for r in caplog.records)
    workload.run(6)
    mirror_until(stream, mirror, mark(db.conn))
    stream.close()  # type: ignore[attr-defined]
    assert_mirror_equals_source(db.conn, mirror)


def test_fast_restart_mid_stream(own_db: Database, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pgwire_cdc")
    db = own_db
    db.conn.execute(SCHEMA)
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE items, codes, notes")
    workload = Workload(db.conn, seed=7)
    workload.run(30)
    stream, mirror = start(db, idle_timeout=60)
    workload.run(30)
    mirror_until(stream, mirror, mark(db.conn))
    after: list[int] = []

    def restart_and_write() -> None:
        time.sleep(0.5)  # the consumer is waiting inside the stream by now
        db.cluster.restart("fast")
        with db.cluster.connect(db.name) as conn:
            workload.conn = conn
            workload.run(30)
            after.append(mark(conn))

    thread = threading.Thread(target=restart_and_write)
    thread.start()
    for batch in stream:  # waiting while the server goes down and comes back
        mirror.apply(batch.tables)
        batch.ack()
        if after and batch.lsn >= after[0]:
            break
    thread.join()
    stream.close()  # type: ignore[attr-defined]
    assert reconnects(caplog) >= 1
    with db.cluster.connect(db.name) as conn:
        assert_mirror_equals_source(conn, mirror)


def test_stalled_network_is_detected_and_replaced(
    db: Database, workload: Workload, caplog: pytest.LogCaptureFixture
) -> None:
    """The path to the server goes silent: after stall_timeout the stream gives the
    connection up (though the socket never reports a problem) and reconnects once the
    path works again."""
    caplog.set_level(logging.INFO, logger="pgwire_cdc")
    proxy = StallProxy(db.cluster.port)
    try:
        workload.run(20)
        stream, mirror = start(db, proxy.dsn(db.name), stall_timeout=2, idle_timeout=60)
        workload.run(20)
        mirror_until(stream, mirror, mark(db.conn))
        proxy.pause()
        workload.run(20)  # committed while the path is silent

        def heal() -> None:
            # Long after the stall was found; the walsender behind the silent path still
            # holds the slot until its connection is closed.
            deadline = time.monotonic() + 30
            while "considered dead" not in caplog.text and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1)
            proxy.drop()
            proxy.resume()

        thread = threading.Thread(target=heal)
        thread.start()
        mirror_until(stream, mirror, mark(db.conn))
        thread.join()
        workload.run(20)
        mirror_until(stream, mirror, mark(db.conn))
        stream.close()  # type: ignore[attr-defined]
    finally:
        proxy.close()
    assert "no message from the server for" in caplog.text
    assert reconnects(caplog) >= 1
    assert_mirror_equals_source(db.conn, mirror)


def test_dropped_network_connection_reconnects(
    db: Database, workload: Workload, caplog: pytest.LogCaptureFixture
) -> None:
    """The path pauses (shorter than the stall time-out), then the connection drops."""
    caplog.set_level(logging.INFO, logger="pgwire_cdc")
    proxy = StallProxy(db.cluster.port)
    try:
        workload.run(20)
        stream, mirror = start(db, proxy.dsn(db.name), stall_timeout=30, idle_timeout=60)
        proxy.pause()
        workload.run(20)
        time.sleep(1)
        proxy.drop()
        proxy.resume()
        mirror_until(stream, mirror, mark(db.conn))
        stream.close()  # type: ignore[attr-defined]
    finally:
        proxy.close()
    assert "considered dead" not in caplog.text
    assert reconnects(caplog) == 1
    assert_mirror_equals_source(db.conn, mirror)


def test_gives_up_after_the_configured_attempts(
    own_db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """The server stops and stays down: three attempts with doubling, capped delays, then
    a ConnectionError that says so."""
    caplog.set_level(logging.INFO, logger="pgwire_cdc")
    db = own_db
    db.conn.execute(SCHEMA)
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE items, codes, notes")
    Workload(db.conn, seed=3).run(5)
    stream, _ = start(
        db, idle_timeout=60, reconnect_attempts=3, reconnect_delay=0.05, reconnect_max_delay=0.1
    )
    db.conn.close()
    db.cluster.shutdown("fast")
    with pytest.raises(ConnectionError) as err:
        next(stream)
    message = str(err.value)
    assert "3 reconnect attempt(s) failed (reconnect_attempts=3)" in message
    assert "run stream() again to resume" in message
    delays = [
        m.group(1)
        for r in caplog.records
        if r.name == "pgwire_cdc"
        and (m := re.match(r"reconnect attempt \d of 3 in ([\d.]+) s", r.getMessage()))
    ]
    assert delays == ["0.05", "0.10", "0.10"]


def test_no_reconnect_when_attempts_are_zero(db: Database, workload: Workload) -> None:
    workload.run(5)
    stream, _ = start(db, idle_timeout=30, reconnect_attempts=0)
    db.conn.execute(
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
        " WHERE slot_name = 's1' AND active_pid IS NOT NULL"
    )
    workload.run(3)
    with pytest.raises(ConnectionError, match=r"0 reconnect attempt\(s\) failed"):
        mirror_until(stream, Mirror(), mark(db.conn))
