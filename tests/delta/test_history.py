"""History tables and soft deletes against PostgreSQL (``support/history_oracle.py``: an
audit trigger's record of every row version is the oracle): a random workload runs while a
delta-rs consumer with ``history="scd2"`` and ``deletes="soft"`` is SIGKILLed once and
started again, and a last run catches up; and the Spark writer keeps the same through
three runs."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Database
from live.test_stream import current_lsn
from pgwire_cdc import delta
from support import history_oracle as oracle

WORKER = Path(__file__).resolve().parents[1] / "support" / "delta_worker.py"
KEEP = {"publication": "pub", "slot": "s1", "history": "scd2", "deletes": "soft"}


def worker(db: Database, path: Path, until: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, str(WORKER), db.dsn, str(path), str(until), "--deletion-vectors"]
    options = ["--max-batch-rows", "7", "--history", "scd2", "--deletes", "soft"]
    return subprocess.Popen([*command, *options], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def read(path: Path) -> tuple[Any, Any]:
    history = delta.read_table(delta.history_path(path, "public.acct"))
    return history, delta.read_table(delta.table_path(path, "public.acct"))


@pytest.mark.timeout(600)
def test_history_and_soft_deletes_match_an_audit_trigger_through_a_kill(
    db: Database, tmp_path: Path
) -> None:
    rng = random.Random(7)
    oracle.create(db.conn)
    delta.run(db.dsn, tmp_path, until_lsn=current_lsn(db), **KEEP)
    since = oracle.snapshot_seq(db.conn)
    start = lambda: worker(db, tmp_path, 2**63 - 1)  # noqa: E731
    oracle.workload_with_a_kill(db.conn, rng, start, steps=40, kill_at=17, pause=0.2)
    command = [sys.executable, str(WORKER), db.dsn, str(tmp_path), str(current_lsn(db))]
    options = ["--history", "scd2", "--deletes", "soft"]
    last = subprocess.run([*command, *options], capture_output=True, text=True, timeout=300)
    assert last.returncode == 0, last.stderr[-3000:]
    assert oracle.check(db.conn, since, *read(tmp_path)) >= 40


def test_the_spark_writer_keeps_history_and_soft_deletes(
    db: Database, tmp_path: Path, spark: Any
) -> None:
    rng = random.Random(8)
    oracle.create(db.conn)
    keep = {**KEEP, "writer": "spark", "spark": spark, "max_batch_rows": 60}
    delta.run(db.dsn, tmp_path, until_lsn=current_lsn(db), **keep)
    since = oracle.snapshot_seq(db.conn)
    next_id = [100]
    for _ in range(2):
        for _ in range(6):
            oracle.workload(db.conn, rng, next_id)
        delta.run(db.dsn, tmp_path, until_lsn=current_lsn(db), **keep)
    assert oracle.check(db.conn, since, *read(tmp_path)) >= 12
