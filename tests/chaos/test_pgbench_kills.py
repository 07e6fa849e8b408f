"""Chaos: PostgreSQL's own TPC-B workload (``pgbench``) kept in a lake by a consumer killed
with SIGKILL again and again, checked against the source at the end. ``make chaos`` runs
it (``SEED=…``, ``MINUTES=…``, ``SINK=…``); ``make test`` does not. The sink
(``PGWIRE_CDC_CHAOS_SINK``): ``delta-rs`` (default: Delta tables by deletion vectors,
``delta_worker.py``), ``spark`` (the Delta Spark writer, each consumer with its own local
Spark) or ``iceberg`` (``iceberg_worker.py``, a local catalog). A consumer with a Spark
lives 20 to 45 s instead of 3 to 9 (its session takes seconds to start), and the workload
runs 90 s instead of 40.

Each round, on a fresh database of the PostgreSQL 15 cluster: ``pgbench -i -s 3``, with
``pgbench_accounts`` split in 4 partitions and published through its root
(``publish_via_partition_root``) in odd rounds, as one plain table in even ones;
``pgbench_history`` (no key) under REPLICA IDENTITY FULL. Then 40 s of ``pgbench -c 4``
while ``delta_worker.py`` keeps the four tables, killed after a random 3 to 9 s or at one of
its own kill points (after a commit, between the tables of one batch, before the ack), or
having its walsender ended by the server a random moment before the kill (it reconnects);
then one last run up to the source's WAL position. Every account balance, teller and
branch and the history's rows (as a multiset) must equal the source.

The seed picks the kill kinds and times and the layout; the workload's own interleaving is
the server's, so a failing seed need not fail again. A failure names the source
transactions the lake lacks: a ``test_decoding`` slot made before the workload keeps every
change, so the report gives each lost row's transaction (xid, commit LSN) next to the
positions the lake's Delta logs recorded and each consumer run's snapshots, slots and
start positions.
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
from pathlib import Path
from typing import Any

import pytest
from conftest import Database, fresh_database
from pgwire_cdc import delta, iceberg
from pgwire_cdc.lakehouse.sql import default_table_name
from pgwire_cdc.lsn import int_to_lsn
from support.server import PgCluster

SUPPORT = Path(__file__).resolve().parents[1] / "support"
SEED = int(os.environ.get("PGWIRE_CDC_CHAOS_SEED", "1"))
MINUTES = float(os.environ.get("PGWIRE_CDC_CHAOS_MINUTES", "0"))
SINK = os.environ.get("PGWIRE_CDC_CHAOS_SINK", "delta-rs")
#: Per sink: the consumer, its options, its lifetime before a timed kill (seconds, from
#: to), the workload's seconds.
SINKS: dict[str, tuple[Path, tuple[str, ...], tuple[float, float], int]] = {
    "delta-rs": (SUPPORT / "delta_worker.py", ("--deletion-vectors",), (3, 9), 40),
    "spark": (SUPPORT / "delta_worker.py", ("--writer", "spark"), (20, 45), 90),
    "iceberg": (SUPPORT / "iceberg_worker.py", ("--namespace", "chaos"), (20, 45), 90),
}
WORKER, OPTIONS, LIFETIME, BENCH_SECONDS = SINKS[SINK]
#: The options of the last run, which catches up with the source (not killed).
FINAL_RUN = (*OPTIONS, "--max-batch-rows", "5000")
#: The workers log their snapshots, slots and start positions (delta_worker.py).
WORKER_ENV = {**os.environ, "PGWIRE_CDC_WORKER_LOG": "1"}
KINDS = ("timed", "committed", "between-tables", "before-ack", "walsender")
TABLES = ("pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history")

pytestmark = [
    pytest.mark.skipif(
        MINUTES <= 0, reason="a long run of its own: make chaos (PGWIRE_CDC_CHAOS_MINUTES)"
    ),
    pytest.mark.timeout(int(MINUTES * 60) + 900),
]


def pgbench(cluster: PgCluster, db: Database, *args: str) -> subprocess.Popen[str]:
    tool = cluster.bindir / "pgbench"
    env = {
        **os.environ,
        "PGHOST": cluster.host,
        "PGPORT": str(cluster.port),
        "PGUSER": "postgres",
        "PGDATABASE": db.name,
    }
    return subprocess.Popen(
        [str(tool) if tool.exists() else "pgbench", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def source_state(db: Database) -> dict[str, Counter[Any]]:
    out: dict[str, Counter[Any]] = {}
    for name in TABLES:
        rows = db.conn.execute(f"SELECT * FROM {name}").fetchall()
        out[name] = Counter(tuple(str(v) for v in row) for row in rows)
    return out


def lake_state(path: Path, columns: dict[str, list[str]]) -> dict[str, Counter[Any]]:
    out: dict[str, Counter[Any]] = {}
    for name in TABLES:
        if SINK == "iceberg":
            catalog = iceberg.local_catalog("lake", path)
            table = iceberg.read_table(catalog, f"chaos.{default_table_name('public.' + name)}")
        else:
            table = delta.read_table(delta.table_path(path, f"public.{name}"))
        rows = table.select(columns[name]).to_pylist()
        out[name] = Counter(tuple(str(r[c]) for c in columns[name]) for r in rows)
    return out


def lost_transactions(db: Database, missing: list[tuple[Any, ...]], name: str) -> list[str]:
    """The audit slot's record of the transactions that wrote the first few rows the lake
    lacks (matched on the row's first column, its key in every pgbench table but
    history, whose rows carry the account)."""
    found = []
    for row in missing[:3]:
        column = "aid" if name in ("pgbench_accounts", "pgbench_history") else name[8:-1] + "id"
        value = row[2] if name == "pgbench_history" else row[0]
        hits = db.conn.execute(
            "WITH c AS (SELECT lsn, xid, data FROM pg_logical_slot_peek_changes('audit', NULL,"
            " NULL)) SELECT c.xid::text, (SELECT max(lsn) FROM c AS e WHERE e.xid = c.xid"
            " AND e.data LIKE 'COMMIT%%')::text, c.lsn::text FROM c WHERE c.data LIKE %s",
            (f"table public.{name}%{column}[integer]:{value} %",),
        ).fetchall()
        found += [f"{name} {row}: xid {x}, commit {c}, change at {at}" for x, c, at in hits]
    return found


def positions(path: Path) -> dict[str, list[str]]:
    """Per table, the positions its Delta log recorded, oldest first (none for Iceberg:
    its snapshots' summaries say them, ``SELECT summary FROM t.snapshots``)."""
    out: dict[str, list[str]] = {}
    for name in TABLES if SINK != "iceberg" else ():
        log = Path(delta.table_path(path, f"public.{name}")) / "_delta_log"
        marks = []
        for entry in sorted(log.glob("*.json")):
            for line in entry.read_text().splitlines():
                action = json.loads(line)
                if "txn" in action:
                    txn = action["txn"]
                    marks.append(f"{entry.stem.lstrip('0') or '0'}:{txn['appId']}={txn['version']}")
        out[name] = marks
    return out


def wait_then_end_walsender(db: Database, worker: subprocess.Popen[bytes], after: float) -> float:
    """Ends the walsender of slot s1 ``after`` seconds from now unless the worker exited
    first; returns the seconds waited."""
    try:
        worker.wait(timeout=after)
    except subprocess.TimeoutExpired:
        db.conn.execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
            " WHERE slot_name IN ('s1', 's1_snapshot') AND active_pid IS NOT NULL"
        )
    return after


def one_round(cluster: PgCluster, rnd: random.Random, layout: str, tmp: Path) -> dict[str, Any]:
    with fresh_database(cluster) as db:
        init = ["-i", "-q", "-s", "3", *(["--partitions", "4"] if layout == "partitions" else [])]
        out = pgbench(cluster, db, *init).communicate()[1]
        db.conn.execute("ALTER TABLE pgbench_history REPLICA IDENTITY FULL")
        via_root = "true" if layout == "partitions" else "false"
        db.conn.execute(
            f"CREATE PUBLICATION pub FOR TABLE {', '.join(TABLES)}"
            f" WITH (publish_via_partition_root = {via_root})"
        )
        db.conn.execute("SELECT pg_create_logical_replication_slot('audit', 'test_decoding')")
        path = tmp / f"lake-{db.name}"
        bench = pgbench(cluster, db, "-n", "-c", "4", "-j", "2", "-T", str(BENCH_SECONDS))
        kills: list[str] = []
        log = tmp / f"{db.name}.log"
        while bench.poll() is None:
            kind = rnd.choice(KINDS)
            command = [sys.executable, str(WORKER), db.dsn, str(path), str(2**63 - 1)]
            command += [*OPTIONS, "--max-batch-rows", str(rnd.choice((500, 5000)))]
            if kind not in ("timed", "walsender"):
                command += ["--crash-at", kind, "--nth", str(rnd.randint(1, 12))]
            with open(log, "a") as err:
                err.write(f"--- run {len(kills)}: {kind}\n")
                err.flush()
                worker = subprocess.Popen(
                    command, stdout=subprocess.DEVNULL, stderr=err, env=WORKER_ENV
                )
                lifetime = rnd.uniform(*LIFETIME)
                if kind == "walsender":
                    # The server ends the consumer's walsender (as a failover or an
                    # operator would) while it streams: the consumer reconnects and goes
                    # on, acks included; then it is killed like the others.
                    lifetime -= wait_then_end_walsender(db, worker, rnd.uniform(1, lifetime))
                try:
                    worker.wait(timeout=max(lifetime, 0.1))
                except subprocess.TimeoutExpired:
                    worker.send_signal(signal.SIGKILL)
                    worker.wait()
            kills.append(kind)
        out = bench.communicate()[1]
        assert bench.returncode == 0, out
        row = db.conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
        assert row is not None
        until = int(row[0])
        last = subprocess.run(
            [*(sys.executable, str(WORKER), db.dsn, str(path), str(until)), *FINAL_RUN],
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert last.returncode == 0, last.stderr[-3000:]
        source = source_state(db)
        columns = {
            name: [
                r[0]
                for r in db.conn.execute(
                    "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
                    " AND NOT attisdropped ORDER BY attnum",
                    (name,),
                ).fetchall()
            ]
            for name in TABLES
        }
        lake = lake_state(path, columns)
        report: dict[str, Any] = {"layout": layout, "kills": len(kills), "until": int_to_lsn(until)}
        problems = []
        for name in TABLES:
            missing = sorted((source[name] - lake[name]).elements())
            extra = sorted((lake[name] - source[name]).elements())
            if missing or extra:
                problems.append(
                    f"{name}: {len(missing)} source rows missing, {len(extra)} lake rows extra;"
                    f" {lost_transactions(db, missing, name)}"
                )
        if problems:
            report["problems"] = problems
            report["positions"] = {k: v[-12:] for k, v in positions(path).items()}
            report["runs"] = [
                line
                for line in log.read_text().splitlines()
                if line.startswith("---") or "consistent point" in line or "streaming slot" in line
            ]
        db.conn.execute("SELECT pg_drop_replication_slot('audit')")
        db.conn.execute("SELECT pg_drop_replication_slot('s1')")
        return report


@pytest.mark.server
def test_pgbench_under_kills_ends_equal(pg15_cluster: PgCluster, tmp_path: Path) -> None:
    rnd = random.Random(SEED)
    deadline = time.monotonic() + MINUTES * 60
    rounds: list[dict[str, Any]] = []
    while not rounds or time.monotonic() < deadline:
        layout = "partitions" if len(rounds) % 2 == 0 else "plain"
        report = one_round(pg15_cluster, rnd, layout, tmp_path)
        print(f"seed {SEED} round {len(rounds)}: {json.dumps(report)}", flush=True)
        rounds.append(report)
        assert "problems" not in report, f"seed {SEED}: {json.dumps(report, indent=1)}"
