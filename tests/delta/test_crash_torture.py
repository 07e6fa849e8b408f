"""Crash torture: a seeded workload of more than 200,000 changes over three tables (toasted
values left unchanged, primary-key and unique-key changes, truncates, a keyless FULL
table, transactions of up to 60,000 rows that span many batches) is kept in Delta tables
(`pgwire_cdc.delta`, the delta-rs writer) by a consumer process (``delta_worker.py``) that
is killed with SIGKILL and restarted each time — 20 times in ``make torture``, 10 in
``make test`` (each kind of kill point twice) — at random moments, and at chosen steps
(right after a Delta commit that another table's commit of the same batch follows, after
all of a batch's commits but before the slot is acked, after any commit). The final Delta
tables must equal the source: nothing lost, nothing applied twice.

Reports (in the test's output and its JSON line) how many restarts it survived, at which
kinds of kill points, and how many changes were delivered again and skipped (at-least-once
delivery: rows at or below a table's recorded position in its Delta log).

The workload is smaller than the Parquet mirror's torture was (benches/parquet_mirror.py),
to keep the run near a minute: bulk transactions of 60,000 rows instead of 80,000, and
every 40th bulk row changes its primary key instead of every 10th. delta-rs rewrites the
data files a MERGE touches (copy-on-write), and a row that moves to a new key with its
toasted column unchanged is first read back from the table under its old key
(``lakehouse.moved.fill_moved``), which costs most per row.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import Database, fresh_database
from live.test_stream import current_lsn
from pgwire_cdc import delta
from support.stream_workload import SCHEMA, TABLES, Workload, norm, source_rows

WORKER = Path(__file__).resolve().parents[1] / "support" / "delta_worker.py"
#: Kills of the main torture: ``make torture`` sets ``PGWIRE_CDC_TORTURE_KILLS=20``; the
#: default goes through every kind of kill point (``KINDS``) once.
KILLS = int(os.environ.get("PGWIRE_CDC_TORTURE_KILLS", "5"))

#: The tortures ``make test`` leaves to ``make torture`` (which sets
#: ``PGWIRE_CDC_TORTURE_KILLS``): the Iceberg one and the one on S3, each kill of which
#: costs a Spark start-up or an object store's round trips; the two here run in both.
only_in_make_torture = pytest.mark.skipif(
    "PGWIRE_CDC_TORTURE_KILLS" not in os.environ,
    reason="a long run of its own: make torture (PGWIRE_CDC_TORTURE_KILLS)",
)
#: The kill points, in turn: a SIGKILL after a random time, or the worker killing itself
#: at the n-th time it reaches a step (see delta_worker.py).
KINDS = ("timed", "between-tables", "before-ack", "timed", "committed")


def bulk(r: int, rows: int = 60_000) -> list[str]:
    """Round ``r`` of the bulk workload (ids and codes of their own per round), with
    transactions of ``rows`` inserts into items (a sixth as many into codes, a third into
    notes)."""
    lo, hi = 100_000 + r * 100_000, 100_000 + r * 100_000 + rows - 1
    return [
        # 60,000 inserts in one transaction (a tenth with an out-of-line toasted value).
        "INSERT INTO items (id, name, qty, price, flag, big) SELECT g, 'n' || g, g % 10,"
        " g / 7.0, g % 2 = 0, CASE WHEN g % 10 = 0 THEN repeat(md5(g::text), 100) END"
        f" FROM generate_series({lo}, {hi}) g",
        f"INSERT INTO codes (code, val, big) SELECT 'bulk{r}_' || g, g, repeat('z', 3000)"
        f" FROM generate_series(1, {rows // 6}) g",
        "INSERT INTO notes (body, n, at) SELECT 'note ' || (g % 500), g % 4, now()"
        f" FROM generate_series(1, {rows // 3}) g",
        # 60,000 updates leaving the toasted column alone: unchanged TOAST.
        f"UPDATE items SET qty = coalesce(qty, 0) + 1 WHERE id BETWEEN {lo} AND {hi}",
        # Primary-key changes (old key in the old image).
        f"UPDATE items SET id = id + 50000000 WHERE id BETWEEN {lo} AND {hi} AND id % 40 = 0",
        "UPDATE codes SET code = code || '-x' WHERE val % 5 = 0",
        "UPDATE notes SET n = n + 10 WHERE n = 1",
        f"DELETE FROM items WHERE id BETWEEN {lo} AND {hi} AND id % 7 = 0",
        "DELETE FROM notes WHERE n = 2",
        "TRUNCATE codes",
        f"INSERT INTO codes (code, val, big) SELECT 'again{r}_' || g, g, NULL"
        f" FROM generate_series(1, {rows // 12}) g",
        "UPDATE codes SET val = val * 2",
    ]


def delta_rows(path: str | Path, name: str) -> list[tuple[Any, ...]]:
    table = delta.read_table(delta.table_path(path, name))
    return sorted((tuple(norm(v) for v in row.values()) for row in table.to_pylist()), key=repr)


@dataclass(frozen=True)
class Worker:
    """The consumer the torture kills: a worker script taking ``DSN PATH UNTIL_LSN --log
    FILE --max-batch-rows N [--crash-at STEP --nth N]`` (delta_worker.py's interface)."""

    script: Path = WORKER
    #: Further arguments of every run.
    args: tuple[str, ...] = ()
    #: The rows the worker keeps for the source table ``name`` under ``path``.
    rows: Callable[[str | Path, str], list[tuple[Any, ...]]] = delta_rows
    #: Timed kills: after a time drawn uniformly from this range (seconds).
    timed: tuple[float, float] = (0.5, 2.5)
    #: Timed kills made by the worker itself, with this option and the time, counted
    #: from when it is ready (a worker that starts Spark first); "": a SIGKILL from here,
    #: counted from the start.
    kill_option: str = ""
    #: Rows of each bulk transaction into items (see bulk()).
    bulk_rows: int = 60_000
    max_batch_rows: int = 5000
    #: Kill points, in turn.
    kinds: tuple[str, ...] = field(default=KINDS)


def run_worker(
    db: Database,
    path: str | Path,
    until: int,
    log: Path,
    kill_after: float | None = None,
    crash_at: str = "",
    nth: int = 0,
    worker: Worker = Worker(),
) -> int:
    """The worker's return code: 0 (caught up with ``until``) or -SIGKILL (killed after
    ``kill_after`` seconds, or by itself at the ``nth`` ``crash_at``)."""
    command = [sys.executable, str(worker.script), db.dsn, str(path), str(until)]
    command += ["--log", str(log), "--max-batch-rows", str(worker.max_batch_rows)]
    command += worker.args
    if crash_at:
        command += ["--crash-at", crash_at, "--nth", str(nth)]
    if kill_after and worker.kill_option:
        command += [worker.kill_option, str(kill_after)]
        kill_after = None
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=kill_after or 900)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        assert kill_after, "the worker did not finish in 900 s"
        return -signal.SIGKILL
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(err)
    return proc.returncode


def torture(
    cluster: Any,
    path: str | Path,
    log: Path,
    kills_wanted: int = KILLS,
    worker: Worker = Worker(),
) -> dict[str, Any]:
    """The torture on a fresh database of ``cluster``, with the worker's tables under
    ``path`` (for Delta a directory, or an object-store location the workers reach with
    the environment's credentials) and one line per batch applied in ``log``: checks
    that the final tables equal the source and returns the report."""
    rng = random.Random(20261122)
    with fresh_database(cluster) as db:
        db.conn.execute(SCHEMA)
        db.conn.execute("CREATE PUBLICATION pub FOR TABLE items, codes, notes")
        workload = Workload(db.conn, seed=7)
        workload.run(200)  # rows for the initial snapshot
        # The snapshot and the first changes, then the bulk of the workload.
        assert run_worker(db, path, current_lsn(db), log, worker=worker) == 0
        changes = rounds = runs = 0
        kills: Counter[str] = Counter()
        started = time.monotonic()

        def write_round() -> int:
            nonlocal changes, rounds
            for i, statement in enumerate(bulk(rounds, worker.bulk_rows)):
                changes += max(db.conn.execute(statement).rowcount, 1)
                workload.run(60 if i % 3 == 0 else 10, max_ops=12)
            rounds += 1
            return current_lsn(db)

        until = write_round()
        while kills.total() < kills_wanted:
            kind = worker.kinds[kills.total() % len(worker.kinds)]
            runs += 1
            if kind == "timed":
                after = rng.uniform(*worker.timed)
                code = run_worker(db, path, until, log, kill_after=after, worker=worker)
            else:
                nth = rng.randint(1, 6)
                code = run_worker(db, path, until, log, crash_at=kind, nth=nth, worker=worker)
            if code == 0:
                # Caught up before the kill: more work, and kill again.
                until = write_round()
            else:
                kills[kind] += 1
        runs += 1
        assert run_worker(db, path, until, log, worker=worker) == 0
        # Rows lost or applied twice: those of one side missing from the other.
        differing = {}
        for name in TABLES:
            kept, want = Counter(worker.rows(path, name)), Counter(source_rows(db.conn, name))
            differing[name] = (kept - want).total() + (want - kept).total()
        lines = [json.loads(line) for line in log.read_text().splitlines()]
        report = {
            "changes": changes,
            "workload_rounds": rounds,
            "restarts_after_sigkill": kills.total(),
            "kill_points": dict(kills),
            "runs": runs,
            "batches_applied": len(lines),
            "commits": sum(line["commits"] for line in lines),
            "changes_delivered_again_skipped": sum(line["skipped"] for line in lines),
            "rows_lost_or_doubled": sum(differing.values()),
            "seconds": round(time.monotonic() - started, 1),
        }
        print("crash torture:", json.dumps(report))
        assert not any(differing.values()), differing
        return report


#: Kills of the deletion-vector torture (``PGWIRE_CDC_TORTURE_KILLS=20`` for twenty).
DV_KILLS = int(os.environ.get("PGWIRE_CDC_TORTURE_KILLS", "5"))


@pytest.mark.server
@pytest.mark.timeout(900 + 120 * DV_KILLS)
def test_deletion_vector_tables_survive_sigkills(pg18_cluster: Any, tmp_path: Path) -> None:
    """The same torture on tables kept by deletion vectors (the delta-rs writer's MERGE
    that rewrites no file): killed between its data, deletion-vector and log writes, the
    tables still end equal to the source."""
    lake = tmp_path / "lake"
    worker = Worker(args=("--deletion-vectors",))
    report = torture(pg18_cluster, lake, tmp_path / "deliveries.jsonl", DV_KILLS, worker)
    assert report["restarts_after_sigkill"] >= DV_KILLS
    log = (Path(delta.table_path(lake, "public.items")) / "_delta_log").glob("*.json")
    assert any('"deletionVector":{' in p.read_text() for p in log)


@pytest.mark.server
@pytest.mark.timeout(900 + 120 * KILLS)
def test_delta_tables_survive_sigkills(pg15_cluster: Any, tmp_path: Path) -> None:
    report = torture(pg15_cluster, tmp_path / "lake", tmp_path / "deliveries.jsonl")
    assert report["changes"] >= 150_000, report  # a round of the workload at least
    assert report["restarts_after_sigkill"] >= KILLS
    # Restarts delivered applied changes again, and they were skipped.
    assert report["changes_delivered_again_skipped"] > 0
