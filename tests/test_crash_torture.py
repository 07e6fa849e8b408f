"""Crash torture: a seeded workload of more than 200,000 changes over three tables
(toasted values left unchanged, primary-key and unique-key changes, truncates, a keyless
FULL table, transactions of up to 80,000 rows that span many batches) is mirrored by a
consumer process that is killed with SIGKILL at 20 random moments and restarted each
time. The final mirror must equal the source: nothing lost, nothing applied twice.

Reports (in the test's output and its JSON line) how many restarts it survived and how
many changes were delivered more than once (at-least-once delivery: rows the mirror's
watermark recognised as already applied and skipped).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Database, fresh_database
from pgwire_cdc import mirror as mirror_mod
from stream_workload import SCHEMA, TABLES, Workload, norm, source_rows
from test_stream import current_lsn

WORKER = Path(__file__).with_name("mirror_worker.py")
KILLS = 20


def bulk(r: int) -> list[str]:
    """Round ``r`` of the bulk workload (ids and codes of their own per round)."""
    lo, hi = 100_000 + r * 100_000, 179_999 + r * 100_000
    return [
        # 80,000 inserts in one transaction (a tenth with an out-of-line toasted value).
        "INSERT INTO items (id, name, qty, price, flag, big) SELECT g, 'n' || g, g % 10,"
        " g / 7.0, g % 2 = 0, CASE WHEN g % 10 = 0 THEN repeat(md5(g::text), 100) END"
        f" FROM generate_series({lo}, {hi}) g",
        f"INSERT INTO codes (code, val, big) SELECT 'bulk{r}_' || g, g, repeat('z', 3000)"
        " FROM generate_series(1, 10000) g",
        "INSERT INTO notes (body, n, at) SELECT 'note ' || (g % 500), g % 4, now()"
        " FROM generate_series(1, 20000) g",
        # 80,000 updates leaving the toasted column alone: unchanged TOAST.
        f"UPDATE items SET qty = coalesce(qty, 0) + 1 WHERE id BETWEEN {lo} AND {hi}",
        # Primary-key changes (old key in the old image).
        f"UPDATE items SET id = id + 50000000 WHERE id BETWEEN {lo} AND {hi} AND id % 10 = 0",
        "UPDATE codes SET code = code || '-x' WHERE val % 5 = 0",
        "UPDATE notes SET n = n + 10 WHERE n = 1",
        f"DELETE FROM items WHERE id BETWEEN {lo} AND {hi} AND id % 7 = 0",
        "DELETE FROM notes WHERE n = 2",
        "TRUNCATE codes",
        f"INSERT INTO codes (code, val, big) SELECT 'again{r}_' || g, g, NULL"
        " FROM generate_series(1, 5000) g",
        "UPDATE codes SET val = val * 2",
    ]


def run_worker(db: Database, path: Path, until: int, log: Path, kill_after: float | None) -> int:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(WORKER),
            db.dsn,
            str(path),
            str(until),
            "--log",
            str(log),
            "--max-batch-rows",
            "5000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, err = proc.communicate(timeout=kill_after)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        return -signal.SIGKILL
    if proc.returncode != 0:
        raise AssertionError(err)
    return 0


@pytest.mark.server
def test_mirror_survives_twenty_sigkills(pg15_cluster: Any, tmp_path: Path) -> None:
    rng = random.Random(20261122)
    with fresh_database(pg15_cluster) as db:
        db.conn.execute(SCHEMA)
        db.conn.execute("CREATE PUBLICATION pub FOR TABLE items, codes, notes")
        workload = Workload(db.conn, seed=7)
        workload.run(200)  # rows for the initial snapshot
        path, log = tmp_path / "mirror", tmp_path / "deliveries.jsonl"
        # The snapshot and the first changes, then the bulk of the workload.
        run_worker(db, path, current_lsn(db), log, None)
        changes = rounds = kills = runs = 0
        started = time.monotonic()

        def write_round() -> int:
            nonlocal changes, rounds
            for i, statement in enumerate(bulk(rounds)):
                changes += max(db.conn.execute(statement).rowcount, 1)
                workload.run(60 if i % 3 == 0 else 10, max_ops=12)
            rounds += 1
            return current_lsn(db)

        until = write_round()
        while kills < KILLS:
            runs += 1
            if run_worker(db, path, until, log, rng.uniform(0.5, 2.5)) == 0:
                # Caught up before the kill: more work, and kill again.
                until = write_round()
            else:
                kills += 1
        runs += 1
        assert run_worker(db, path, until, log, None) == 0
        assert changes >= 200_000, changes
        m = mirror_mod.Mirror(path)
        for name in TABLES:
            rows = sorted(
                (tuple(norm(v) for v in r.values()) for r in m.table(name).to_pylist()), key=repr
            )
            assert rows == source_rows(db.conn, name), name
        lines = [json.loads(line) for line in log.read_text().splitlines()]
        report = {
            "changes": changes,
            "workload_rounds": rounds,
            "restarts_after_sigkill": kills,
            "runs": runs,
            "batches_applied": len(lines),
            "changes_delivered_again": sum(line["skipped"] for line in lines),
            "seconds": round(time.monotonic() - started, 1),
        }
        print("crash torture:", json.dumps(report))
        assert kills >= KILLS
