"""Crash torture of the Iceberg sink: test_crash_torture.py's torture (the seeded
workload with unchanged TOAST, key changes, truncates, the keyless FULL table and
transactions cut across batches; SIGKILLs at random moments, right after a commit that
another table's commit of the same batch follows, after a batch's commits before its ack,
after any commit) with the consumer ``iceberg_worker.py``: ``iceberg.run`` with its own
``local[1]`` Spark, tables in a local JDBC-on-SQLite catalog. The final tables, read by
pyiceberg (deletion vectors applied), must equal the source.

Each restart starts Spark again (15-30 s on a busy machine), and a batch costs one Spark
MERGE per table (about 2 s each), so the workload's bulk transactions are a tenth of the
Delta torture's (6,000 inserts) and the test kills ``PGWIRE_CDC_TORTURE_KILLS`` times:
default 2 (right after a commit another table's commit of the same batch follows, and
after a batch's last commit before its ack: the points where Iceberg's own position
records matter; the state machine's every kill point is the Delta torture's, which
``make test`` runs), 20 as ``make torture`` does takes about 15-20 minutes. It runs in
``make torture`` only (``PGWIRE_CDC_TORTURE_KILLS`` set): ``make test`` checks the Iceberg
sink's replays in test_iceberg.py, and its kills here cost minutes of Spark start-ups.
Timed kills come from the worker itself, a random time after its Spark session is up.
PostgreSQL 18 only: the sink's behaviour does not depend on the server, test_iceberg.py
covers both servers, and one torture is slow enough.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from delta.test_crash_torture import Worker, only_in_make_torture, torture
from pgwire_cdc import iceberg
from support.stream_workload import norm

pytestmark = [pytest.mark.server, pytest.mark.java]

KILLS = int(os.environ.get("PGWIRE_CDC_TORTURE_KILLS", "2"))
NAMESPACE = "torture"


def iceberg_rows(path: str | Path, name: str) -> list[tuple[Any, ...]]:
    table = re.sub(r"[^a-z0-9_]", "_", name.lower())
    rows = iceberg.read_table(iceberg.local_catalog("lake", path), f"{NAMESPACE}.{table}")
    return sorted((tuple(norm(v) for v in row.values()) for row in rows.to_pylist()), key=repr)


ICEBERG_WORKER = Worker(
    script=Path(__file__).resolve().parents[1] / "support" / "iceberg_worker.py",
    args=("--namespace", NAMESPACE),
    rows=iceberg_rows,
    timed=(2.0, 20.0),
    kill_option="--kill-after",
    kinds=("between-tables", "committed", "before-ack", "timed", "timed"),
    bulk_rows=int(os.environ.get("PGWIRE_CDC_ICEBERG_TORTURE_ROWS", "6000")),
    max_batch_rows=2000,
)


# Each restart starts Spark again: minutes per kill on two cores (`make torture`: twenty).
@only_in_make_torture
@pytest.mark.timeout(600 + 240 * KILLS)
def test_iceberg_tables_survive_sigkills(pg18_cluster: Any, tmp_path: Path) -> None:
    report = torture(
        pg18_cluster,
        tmp_path / "lake",
        tmp_path / "deliveries.jsonl",
        kills_wanted=KILLS,
        worker=ICEBERG_WORKER,
    )
    assert report["restarts_after_sigkill"] >= KILLS
    assert report["rows_lost_or_doubled"] == 0
    # Restarts delivered applied changes again, and they were skipped.
    assert report["changes_delivered_again_skipped"] > 0
