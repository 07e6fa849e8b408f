"""Bounded memory for huge transactions, against a real PostgreSQL 15 (issue: reliability).

* One transaction of 5,000,000 inserts, streamed to a consumer in its own process while it
  runs, with ``streaming`` on (the server sends it in progress; pgwire_cdc holds it past
  ``spill_threshold`` in an unnamed temporary file until the commit) and off (the server
  holds it and sends it at commit). Every row arrives exactly once, in batches of at most
  ``max_batch_rows``, and the consumer's peak RSS stays under 512 MB.
* A streamed transaction that rolls back: it was held on disk while it ran, the file is
  gone once the Stream Abort arrives, and none of its rows is ever delivered.
* Backpressure: a consumer that is slow to take batches makes the server wait: the
  walsender's sent position stays within socket buffers of what the consumer acked, and
  the consumer's memory stays flat, while far more WAL waits to be sent.

The spill files are found the way an operator would: as open descriptors of the consumer
process pointing into ``spill_dir`` (the files themselves have no name). Figures are
printed (``pytest -s``) and recorded as test properties; docs/reliability.md quotes
them.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pgwire_cdc
import psycopg
import pytest
from conftest import Database, fresh_database
from pgwire_cdc import lsn_to_int
from pgwire_cdc.errors import SpillError

HERE = Path(__file__).resolve().parent
CONSUMER = HERE.parent / "support" / "big_tx_consumer.py"
RSS_BOUND_MB = 512
HUGE_ROWS = 5_000_000


class Watcher(threading.Thread):
    """Samples a process's open spill files and resident memory every 50 ms."""

    def __init__(self, pid: int, spill_dir: Path) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.spill_dir = str(spill_dir)
        self.current_files = 0
        self.max_files = 0
        self.rss_mb: list[float] = []
        self.stop = threading.Event()

    def spill_files(self) -> int:
        count = 0
        try:
            fds = os.listdir(f"/proc/{self.pid}/fd")
        except FileNotFoundError:
            return 0
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{self.pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(self.spill_dir + "/"):
                count += 1
        return count

    def rss(self) -> float | None:
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            return None
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return None

    def run(self) -> None:
        while not self.stop.is_set():
            self.current_files = self.spill_files()
            self.max_files = max(self.max_files, self.current_files)
            rss = self.rss()
            if rss is not None:
                self.rss_mb.append(rss)
            time.sleep(0.05)

    def wait_for(self, files: int, at_least: bool, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            n = self.spill_files()
            if (n >= files) if at_least else (n == files):
                return True
            time.sleep(0.05)
        return False


def setup(db: Database) -> None:
    db.conn.execute(
        "CREATE TABLE big (id bigint PRIMARY KEY, payload text);"
        "CREATE TABLE done (id int PRIMARY KEY);"
        "CREATE PUBLICATION pub FOR TABLE big, done"
    )
    # Alone: a slot cannot be made in a transaction that has written.
    db.conn.execute("SELECT pg_create_logical_replication_slot('s1', 'pgoutput')")


@contextlib.contextmanager
def consumer(
    db: Database, spill_dir: Path, *args: str
) -> Iterator[tuple[subprocess.Popen[str], Watcher]]:
    """The consumer process, watched; killed if the test fails before it finished."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(CONSUMER),
            db.dsn,
            "--slot",
            "s1",
            "--spill-dir",
            str(spill_dir),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watcher = Watcher(proc.pid, spill_dir)
    watcher.start()
    try:
        yield proc, watcher
    finally:
        watcher.stop.set()
        if proc.poll() is None:
            proc.kill()
        watcher.join()


def confirmed(db: Database) -> str:
    row = db.conn.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 's1'"
    ).fetchone()
    assert row is not None
    return str(row[0])


def wait_for_walsender(db: Database, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = db.conn.execute(
            "SELECT active FROM pg_replication_slots WHERE slot_name = 's1'"
        ).fetchone()
        if row and row[0]:
            return
        time.sleep(0.1)
    raise AssertionError("the consumer never started streaming")


def finish(proc: subprocess.Popen[str], timeout: float = 600) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-4000:]
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("streaming", ["on", "off"])
def test_five_million_row_transaction_in_bounded_memory(
    pg15_cluster: Any,
    tmp_path: Path,
    streaming: str,
    record_property: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    with fresh_database(pg15_cluster) as db:
        setup(db)
        with consumer(db, spill_dir, "--streaming", streaming) as (proc, watcher):
            wait_for_walsender(db)
            started = time.monotonic()
            db.conn.execute(
                "INSERT INTO big SELECT g, 'row ' || g FROM generate_series(1, %s) g",
                (HUGE_ROWS,),
            )
            inserted = time.monotonic() - started
            db.conn.execute("INSERT INTO done VALUES (1)")
            result = finish(proc)
            total = time.monotonic() - started

    assert result["done"]
    assert result["rows"] == HUGE_ROWS
    assert result["id_sum"] == HUGE_ROWS * (HUGE_ROWS + 1) // 2
    assert result["commits"] == 1
    assert 0 < result["largest_batch"] <= 100_000
    assert result["peak_rss_mb"] <= RSS_BOUND_MB, result
    if streaming == "on":
        # The server streamed the transaction while it ran; past spill_threshold it was
        # held on disk.
        assert watcher.max_files >= 1
    else:
        assert watcher.max_files == 0
    # Unnamed files: nothing ever appears in the directory, nothing is left.
    assert os.listdir(spill_dir) == []
    figures = {
        "streaming": streaming,
        "rows": result["rows"],
        "batches": result["batches"],
        "peak_rss_mb": round(result["peak_rss_mb"], 1),
        "spill_files_open_at_most": watcher.max_files,
        "insert_s": round(inserted, 1),
        "insert_to_last_row_s": round(total, 1),
    }
    for key, value in figures.items():
        record_property(key, value)
    with capsys.disabled():
        print(f"\nlarge transaction: {figures}")


def test_aborted_streamed_transaction_leaves_no_trace(
    pg15_cluster: Any, tmp_path: Path, record_property: Any
) -> None:
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    with fresh_database(pg15_cluster) as db:
        setup(db)
        with consumer(db, spill_dir, "--spill-threshold", str(8 << 20)) as (proc, watcher):
            wait_for_walsender(db)
            with psycopg.connect(db.dsn) as writer:
                writer.execute(
                    "INSERT INTO big SELECT g, 'doomed ' || g FROM generate_series(1, 1000000) g"
                )
                # The server streams the running transaction; pgwire_cdc holds it on disk.
                assert watcher.wait_for(1, at_least=True, timeout=120), "never spilled"
                writer.rollback()
            # The Stream Abort closes (and so deletes) the file while the consumer goes on.
            assert watcher.wait_for(0, at_least=False, timeout=60), "spill file kept"
            assert proc.poll() is None
            db.conn.execute("INSERT INTO big VALUES (-1, 'a'), (-2, 'b'), (-3, 'c')")
            db.conn.execute("INSERT INTO done VALUES (1)")
            result = finish(proc)
    assert result["rows"] == 3
    assert result["id_sum"] == -6
    assert watcher.max_files >= 1
    assert os.listdir(spill_dir) == []
    record_property("peak_rss_mb", round(result["peak_rss_mb"], 1))


def socket_buffers_mb() -> float:
    """The most a loopback TCP connection's two socket buffers may hold (MB): the receive
    buffer's autotuning limit plus the send buffer's (Linux `tcp_rmem` / `tcp_wmem`, third
    field); 32 + 4 MB where they cannot be read."""
    limits = []
    for name, default in (("tcp_rmem", 32 << 20), ("tcp_wmem", 4 << 20)):
        try:
            limits.append(int(Path(f"/proc/sys/net/ipv4/{name}").read_text().split()[2]))
        except (OSError, IndexError, ValueError):
            limits.append(default)
    return sum(limits) / 2**20


def test_slow_consumer_makes_the_server_wait(
    pg15_cluster: Any, tmp_path: Path, record_property: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    with fresh_database(pg15_cluster) as db:
        setup(db)
        start_lsn = db.conn.execute("SELECT pg_current_wal_lsn()").fetchone()
        # 200 transactions of 5,000 rows, all committed before the consumer starts.
        for i in range(200):
            db.conn.execute(
                "INSERT INTO big SELECT g, repeat('x', 60)"
                " FROM generate_series(%s::bigint, %s::bigint) g",
                (i * 5000 + 1, (i + 1) * 5000),
            )
        wal = db.conn.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)::bigint", start_lsn
        ).fetchone()
        assert wal is not None
        wal_mb = int(wal[0]) / 2**20
        in_flight: list[float] = []
        slow = ("--max-batch-rows", "5000", "--sleep", "0.25", "--max-batches", "30")
        with consumer(db, spill_dir, *slow) as (proc, watcher):
            wait_for_walsender(db)
            while proc.poll() is None:
                row = db.conn.execute(
                    "SELECT pg_wal_lsn_diff(r.sent_lsn, r.flush_lsn)::bigint"
                    " FROM pg_stat_replication r JOIN pg_replication_slots s"
                    " ON s.active_pid = r.pid WHERE s.slot_name = 's1'"
                ).fetchone()
                if row and row[0] is not None:
                    in_flight.append(int(row[0]) / 2**20)
                time.sleep(0.2)
            result = finish(proc)
    # 30 batches of 5,000 rows: 150,000 of the 1,000,000 rows taken, slowly.
    assert result["rows"] == 150_000
    assert wal_mb > 100
    assert len(in_flight) >= 10
    # What the server sent beyond what the consumer acked: socket buffers and one batch,
    # not the WAL waiting to be sent. The kernel sizes the buffers itself (receive-buffer
    # autotuning goes up to tcp_rmem's maximum, 32 MB on the CI image), so the bound is
    # theirs plus room for a batch; far below the WAL that waits.
    bound = socket_buffers_mb() + 16
    assert bound < wal_mb / 2
    assert max(in_flight) < bound, (bound, in_flight)
    rss = watcher.rss_mb[len(watcher.rss_mb) // 4 :]
    growth = max(rss) - min(rss)
    assert growth < 64, (min(rss), max(rss))
    figures = {
        "wal_waiting_mb": round(wal_mb, 1),
        "sent_not_acked_max_mb": round(max(in_flight), 1),
        "consumer_rss_growth_mb": round(growth, 1),
    }
    for key, value in figures.items():
        record_property(key, value)
    with capsys.disabled():
        print(f"\nslow consumer: {figures}")


def test_spill_directory_gone_is_a_spill_error(pg15_cluster: Any, tmp_path: Path) -> None:
    """The spill directory vanishes after stream() checked it: the first held message
    that needs it fails the stream with SpillError naming the directory (and no row
    value), and nothing is acked past the transaction."""
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    with fresh_database(pg15_cluster) as db:
        setup(db)
        before = confirmed(db)
        batches = pgwire_cdc.stream(
            db.dsn,
            slot="s1",
            snapshot=False,
            idle_timeout=60,
            spill_threshold=0,
            spill_dir=spill_dir,
        )
        spill_dir.rmdir()
        with psycopg.connect(db.dsn) as writer:
            # Over logical_decoding_work_mem (64 MB): streamed while it runs.
            writer.execute(
                "INSERT INTO big SELECT g, 'secret ' || g FROM generate_series(1, 1000000) g"
            )
            row = writer.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
            assert row is not None
            inserted = lsn_to_int(row[0])
            with pytest.raises(SpillError) as err:
                next(batches)
            writer.rollback()
        message = str(err.value)
        assert str(spill_dir) in message
        assert "spill_dir" in message
        assert "secret" not in message
        # Idle, the stream may confirm the server's WAL position from a keepalive (as
        # PostgreSQL's own apply worker does), even one inside the open transaction; never
        # one past it.
        assert lsn_to_int(before) <= lsn_to_int(confirmed(db)) <= inserted
