"""Chaos: PostgreSQL's own TPC-B workload (``pgbench``) and schema changes kept in a lake
by a consumer that meets faults again and again, checked against the source at the end by
``verify`` and row by row. ``make chaos`` runs it (``SEED=…``, ``MINUTES=…``, ``SINK=…``);
``make test`` runs one round of seed 1 with half the workload into ``delta-rs``. The sink
(``PGWIRE_CDC_CHAOS_SINK``): ``delta-rs`` (default: Delta tables by deletion vectors,
``delta_worker.py``), ``spark`` (the Delta Spark writer, each consumer with its own local
Spark) or ``iceberg`` (``iceberg_worker.py``, a local catalog). A consumer with a Spark
lives 20 to 45 s instead of 3 to 9 (its session takes seconds to start), and the workload
runs 90 s instead of 40.

Each round, on a fresh database of the PostgreSQL 15 cluster, with the DDL capture
installed: ``pgbench -i -s 3``, with ``pgbench_accounts`` in turn split in 4 partitions
published through their root (``publish_via_partition_root``), one plain table, and split
in 4 partitions published as themselves (four tables in the lake); ``pgbench_history``
(no key) under REPLICA IDENTITY FULL. Then
``pgbench -c 4`` for the workload's seconds (in segments: a server restart ends one) while
the worker keeps the four tables and meets one fault per run (:data:`FAULTS`): killed
after a random while or at one of its own kill points (after a commit, between the tables
of one batch, before the ack); its walsender ended by the server; the server restarted
under it (``pg_ctl restart -m fast``, or ``-m immediate``: a crash and recovery); a slow
sink (a pause before each batch); and, in the rounds whose lake is on the object store,
the store's faults (:data:`STORE_FAULTS`). Delta lakes (both writers) are kept on a local
S3 server (moto behind an HTTP fault injector, support/faulty_s3.py) every other round,
in a local directory the others; Iceberg lakes in a local directory. At a
random moment of half the rounds, schema changes (:data:`DDL`) run between two consumer
runs: a column added with a constant default, a column renamed, a column added to the
keyless table. Then one last run up to the source's WAL position, and the check:
``verify`` (each table at one LSN, by key) reports no difference, and every account
balance, teller and branch and the history's rows (as a multiset) equal the source's.

The seed picks the faults, their times and the layout; the workload's own interleaving is
the server's, so a failing seed need not fail again. A failure names the source
transactions the lake lacks: a ``test_decoding`` slot made before the workload keeps every
change, so the report gives each lost row's transaction (xid, commit LSN) next to the
positions the lake's Delta logs recorded and each consumer run's snapshots, slots and
start positions. A consumer run that ends with an error of its own fails the round too,
with its last lines, unless it is the ``ConnectionError`` of a server restarted while the
consumer started or set up (a stream reconnects only once it streams), or of a walsender
ended during the initial snapshot (which cannot go on over a new connection: the error
says so, and the next run takes a new one), or the ``DeltaError`` of a store that stayed
away longer than its client's retries.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Database, fresh_database
from pgwire_cdc import delta, iceberg
from pgwire_cdc.ddl_capture import install_ddl_capture
from pgwire_cdc.lakehouse.sql import default_table_name
from pgwire_cdc.lsn import int_to_lsn
from support import requires
from support.s3 import S3Server
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
#: ``make test`` (no MINUTES): one round with half the workload.
SHORTER = 1.0 if MINUTES > 0 else 0.5
#: The options of the last run, which catches up with the source (not killed).
FINAL_RUN = (*OPTIONS, "--max-batch-rows", "5000")
#: The workers log their snapshots, slots and start positions (delta_worker.py).
WORKER_ENV = {**os.environ, "PGWIRE_CDC_WORKER_LOG": "1"}
#: The fault each consumer run meets.
FAULTS = (
    "timed",
    "committed",
    "between-tables",
    "before-ack",
    "walsender",
    "restart",
    "slow",
)
#: Schema changes a round may make, in this order, while the workload runs (pgbench's
#: statements name none of these columns).
DDL = (
    "ALTER TABLE pgbench_tellers ADD COLUMN note text DEFAULT 'chaos'",
    "ALTER TABLE pgbench_branches RENAME COLUMN filler TO remark",
    "ALTER TABLE pgbench_history ADD COLUMN note text",
)
#: Faults of the object store a consumer run may meet (support/faulty_s3.py): requests
#: answered 503 before the store sees them, writes done and then answered 500 (the answer
#: lost), slow requests, and the store away for some seconds from a random moment.
STORE_FAULTS: dict[str, dict[str, float]] = {
    "errors": {"rate": 0.2},
    "lost": {"rate": 0.3},
    "slow": {"rate": 0.5, "delay": 0.3},
    "outage": {},
}
#: The sinks whose lakes may live on the object store.
ON_STORE = ("delta-rs", "spark")
TABLES = ("pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history")
#: The accounts table: split in 4 partitions published through their root, one plain
#: table, or split in 4 partitions published as themselves (four tables in the lake).
LAYOUTS = ("partitions", "plain", "leaves")
PARTITIONS = 4


def lake_tables(layout: str) -> tuple[str, ...]:
    """The tables the lake keeps in ``layout``."""
    if layout != "leaves":
        return TABLES
    return (*(f"pgbench_accounts_{i}" for i in range(1, PARTITIONS + 1)), *TABLES[1:])


pytestmark = pytest.mark.timeout(int(MINUTES * 60) + 900)


@dataclasses.dataclass
class Lake:
    """Where a round keeps its tables: a local directory, or a location on the S3 server."""

    location: str
    s3: S3Server | None = None

    @property
    def options(self) -> dict[str, str] | None:
        return self.s3.options if self.s3 is not None else None

    def log(self, name: str) -> list[tuple[str, str]]:
        """The Delta log entries of table ``name``: (version, text), oldest first."""
        where = delta.table_path(self.location, f"public.{name}") + "/_delta_log"
        if self.s3 is None:
            return [(e.stem, e.read_text()) for e in sorted(Path(where).glob("*.json"))]
        from pyarrow import fs

        options = self.s3.options
        store = fs.S3FileSystem(
            access_key=options["AWS_ACCESS_KEY_ID"],
            secret_key=options["AWS_SECRET_ACCESS_KEY"],
            region=options["AWS_REGION"],
            endpoint_override=self.s3.endpoint,
            scheme="http",
        )
        found = store.get_file_info(fs.FileSelector(where.removeprefix("s3://")))
        entries = sorted(f.path for f in found if f.path.endswith(".json"))
        out = []
        for entry in entries:
            with store.open_input_stream(entry) as stream:
                out.append((Path(entry).stem, stream.read().decode()))
        return out


@pytest.fixture(scope="module")
def store() -> Iterator[S3Server | None]:
    """The S3 server with its fault injector, for the sinks that keep lakes on it."""
    if SINK not in ON_STORE:
        yield None
        return
    requires.moto_server()
    with S3Server(faults=True) as server:
        yield server


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


def source_state(db: Database, tables: tuple[str, ...]) -> dict[str, Counter[Any]]:
    out: dict[str, Counter[Any]] = {}
    for name in tables:
        rows = db.conn.execute(f"SELECT * FROM {name}").fetchall()
        out[name] = Counter(tuple(str(v) for v in row) for row in rows)
    return out


def lake_state(lake: Lake, columns: dict[str, list[str]]) -> dict[str, Counter[Any]]:
    out: dict[str, Counter[Any]] = {}
    for name in columns:
        if SINK == "iceberg":
            catalog = iceberg.local_catalog("lake", Path(lake.location))
            table = iceberg.read_table(catalog, f"chaos.{default_table_name('public.' + name)}")
        else:
            where = delta.table_path(lake.location, f"public.{name}")
            table = delta.read_table(where, storage_options=lake.options)
        rows = table.select(columns[name]).to_pylist()
        out[name] = Counter(tuple(str(r[c]) for c in columns[name]) for r in rows)
    return out


def lost_transactions(db: Database, missing: list[tuple[Any, ...]], name: str) -> list[str]:
    """The audit slot's record of the transactions that wrote the first few rows the lake
    lacks (matched on the row's first column, its key in every pgbench table but
    history, whose rows carry the account)."""
    found = []
    for row in missing[:3]:
        accounts = name.startswith("pgbench_accounts") or name == "pgbench_history"
        column = "aid" if accounts else name[8:-1] + "id"
        value = row[2] if name == "pgbench_history" else row[0]
        hits = db.conn.execute(
            "WITH c AS (SELECT lsn, xid, data FROM pg_logical_slot_peek_changes('audit', NULL,"
            " NULL)) SELECT c.xid::text, (SELECT max(lsn) FROM c AS e WHERE e.xid = c.xid"
            " AND e.data LIKE 'COMMIT%%')::text, c.lsn::text FROM c WHERE c.data LIKE %s",
            (f"table public.{name}%{column}[integer]:{value} %",),
        ).fetchall()
        found += [f"{name} {row}: xid {x}, commit {c}, change at {at}" for x, c, at in hits]
    return found


def positions(lake: Lake, tables: tuple[str, ...]) -> dict[str, list[str]]:
    """Per table, the positions its Delta log recorded, oldest first (none for Iceberg:
    its snapshots' summaries say them, ``SELECT summary FROM t.snapshots``)."""
    out: dict[str, list[str]] = {}
    for name in tables if SINK != "iceberg" else ():
        marks = []
        for version, text in lake.log(name):
            for line in text.splitlines():
                action = json.loads(line)
                if "txn" in action:
                    txn = action["txn"]
                    marks.append(f"{version.lstrip('0') or '0'}:{txn['appId']}={txn['version']}")
        out[name] = marks
    return out


class Workload:
    """``pgbench -c 4`` for ``seconds`` in all, in segments of up to 10 s: a server restart
    ends a segment (its clients lose their connections) and the next one starts."""

    SEGMENT = 10.0

    def __init__(self, cluster: PgCluster, db: Database, seconds: float) -> None:
        self.cluster, self.db, self.left = cluster, db, seconds
        self.proc: subprocess.Popen[str] | None = None
        self.started = 0.0
        #: Whether the server restarted while the running segment ran.
        self.restarted = False

    def running(self) -> bool:
        """Whether the workload still runs (a segment ended: the next one started)."""
        if self.proc is not None and self.proc.poll() is None:
            return True
        if self.proc is not None:
            err = self.proc.communicate()[1]
            assert self.proc.returncode == 0 or self.restarted, err[-2000:]
            self.left -= time.monotonic() - self.started
        if self.left <= 0:
            return False
        seconds = max(1, round(min(self.left, self.SEGMENT)))
        self.restarted = False
        self.started = time.monotonic()
        self.proc = pgbench(self.cluster, self.db, "-n", "-c", "4", "-j", "2", "-T", str(seconds))
        return True


def wait_then(worker: subprocess.Popen[bytes], after: float, fault: Callable[[], object]) -> float:
    """Runs ``fault`` ``after`` seconds from now unless the worker exited first; returns
    the seconds waited."""
    try:
        worker.wait(timeout=after)
    except subprocess.TimeoutExpired:
        fault()
    return after


def end_walsender(db: Database) -> None:
    """The server ends the walsender of slot s1 (as a failover or an operator would)."""
    db.conn.execute(
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
        " WHERE slot_name IN ('s1', 's1_snapshot') AND active_pid IS NOT NULL"
    )


def restart_server(db: Database, workload: Workload, mode: str) -> None:
    """``pg_ctl restart -m mode``: every connection ends, the consumer's and pgbench's
    included; the test's own connection is made again. ``fast``: the stop waits until the
    consumer's walsender has sent every change up to the shutdown checkpoint and the
    consumer confirmed them (PostgreSQL's rule for logical walsenders), or the consumer
    lets it go (the stream does once the server refuses it a new connection); pg_ctl is
    given minutes for it; ``immediate``: a crash, then recovery (slots come back as their
    last checkpoint saved them: a consumer may be sent what it acked)."""
    workload.restarted = True
    db.cluster.restart(mode, timeout=600)
    db.conn = db.cluster.connect(db.name)


#: What a consumer says when a fault ended its connection during its initial snapshot
#: (which cannot go on over a new connection): an error a walsender's end may end a run
#: with. A restart may end one with any ConnectionError: the server is down a moment, and a
#: consumer that starts or sets up then cannot connect (a stream reconnects only once it
#: streams).
SNAPSHOT_LOST = "a new snapshot is taken (the copy starts over)"
#: What a consumer says when the store failed it longer than its client retries.
STORE_AWAY = "run again once the cause is fixed"


def failed_run(worker: subprocess.Popen[bytes], fault: str, log: Path) -> str | None:
    """The last lines of a consumer run that ended by an error of its own (not a kill),
    but for the connection errors a fault may cause (:data:`SNAPSHOT_LOST`) and the store
    errors a store's fault may cause (:data:`STORE_AWAY`); else None."""
    if worker.returncode in (0, -signal.SIGKILL):
        return None
    text = log.read_text(errors="replace").rsplit("--- run", 1)[-1]
    # The exception's own line (its message may go on over lines such as "DETAIL: ...").
    raised = re.findall(r"^([\w.]+(?:Error|Exception)): ", text, flags=re.M)
    lost = bool(raised) and raised[-1] == "pgwire_cdc.errors.ConnectionError"
    if lost and (fault.startswith("restart") or (fault == "walsender" and SNAPSHOT_LOST in text)):
        return None
    away = bool(raised) and raised[-1] == "pgwire_cdc.errors.DeltaError"
    if away and fault.startswith("store-") and STORE_AWAY in text:
        return None
    return f"a consumer run exited with {worker.returncode}: {text[-1500:]}"


def source_columns(db: Database, tables: tuple[str, ...]) -> dict[str, list[str]]:
    return {
        name: [
            r[0]
            for r in db.conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
                " AND NOT attisdropped ORDER BY attnum",
                (name,),
            ).fetchall()
        ]
        for name in tables
    }


def verified(db: Database, lake: Lake) -> list[str]:
    """``verify`` of the whole lake at the end (the slot idle, caught up first): the
    tables that differ, with its report's line."""
    if SINK == "iceberg":
        from pgwire_cdc.spark import session

        conf = iceberg.local_catalog_conf("lake", lake.location)
        # A session of this round's own: a catalog, once loaded, stays what it was.
        spark = session("chaos_verify", "local[1]", iceberg=True, **conf)
        try:
            report = iceberg.verify(
                db.dsn, "lake", "chaos", publication="pub", slot="s1", spark=spark, catch_up=True
            )
        finally:
            spark.stop()
    else:
        report = delta.verify(
            db.dsn,
            lake.location,
            publication="pub",
            slot="s1",
            catch_up=True,
            storage_options=lake.options,
        )
    return [line for line in report.summary().splitlines() if "DIFFERS" in line]


def store_fault(
    s3: S3Server, rnd: random.Random, worker: subprocess.Popen[bytes], lifetime: float
) -> tuple[str, float]:
    """Gives the store a fault plan for this consumer run (:data:`STORE_FAULTS`); an
    outage starts at a random moment and lasts 3 to 15 s. The fault's name and the
    seconds waited."""
    kind = rnd.choice(sorted(STORE_FAULTS))
    plan: dict[str, Any] = {"kind": kind, "seed": rnd.randrange(2**31), **STORE_FAULTS[kind]}
    if kind != "outage":
        s3.faults(plan)
        return f"store-{kind}", 0.0
    plan["seconds"] = rnd.uniform(3, 15)
    start = rnd.uniform(1, max(1.0, lifetime / 2))
    return "store-outage", wait_then(worker, start, lambda: s3.faults(plan))


def one_round(
    cluster: PgCluster, rnd: random.Random, layout: str, lake: Lake, tmp: Path
) -> dict[str, Any]:
    with fresh_database(cluster) as db:
        split = ["--partitions", str(PARTITIONS)] if layout != "plain" else []
        init = ["-i", "-q", "-s", "3", *split]
        tables = lake_tables(layout)
        pgbench(cluster, db, *init).communicate()
        db.conn.execute("ALTER TABLE pgbench_history REPLICA IDENTITY FULL")
        install_ddl_capture(db.dsn)
        via_root = "true" if layout == "partitions" else "false"
        db.conn.execute(
            f"CREATE PUBLICATION pub FOR TABLE {', '.join(TABLES)}"
            f" WITH (publish_via_partition_root = {via_root})"
        )
        db.conn.execute("SELECT pg_create_logical_replication_slot('audit', 'test_decoding')")
        if lake.s3 is None:
            lake.location = str(tmp / f"lake-{db.name}")
        store = ["--storage-options", json.dumps(lake.options)] if lake.s3 is not None else []
        injected = lake.s3.faults()["injected"] if lake.s3 is not None else {}
        workload = Workload(cluster, db, BENCH_SECONDS * SHORTER)
        # Half the rounds change the schema before one of their first consumer runs.
        ddl_before = rnd.randint(1, 4) if rnd.random() < 0.5 else -1
        faults: list[str] = []
        problems: list[str] = []
        log = tmp / f"{db.name}.log"
        while workload.running():
            if len(faults) == ddl_before:
                for statement in DDL:
                    db.conn.execute(statement)
                faults.append("ddl")
            # On the store, a third of the runs meet one of its faults.
            on_store = lake.s3 is not None and rnd.random() < 1 / 3
            fault = "store" if on_store else rnd.choice(FAULTS)
            command = [sys.executable, str(WORKER), db.dsn, lake.location, str(2**63 - 1)]
            command += [*OPTIONS, *store, "--max-batch-rows", str(rnd.choice((500, 5000)))]
            if fault in ("committed", "between-tables", "before-ack"):
                command += ["--crash-at", fault, "--nth", str(rnd.randint(1, 12))]
            if fault == "slow":
                command += ["--slow", str(rnd.choice((0.5, 2.0)))]
            with open(log, "a") as err:
                err.write(f"--- run {len(faults)}: {fault}\n")
                err.flush()
                worker = subprocess.Popen(
                    command, stdout=subprocess.DEVNULL, stderr=err, env=WORKER_ENV
                )
                lifetime = rnd.uniform(*LIFETIME)
                if fault == "walsender":
                    lifetime -= wait_then(
                        worker, rnd.uniform(1, lifetime), lambda: end_walsender(db)
                    )
                elif fault == "restart":
                    mode = rnd.choice(("fast", "immediate"))
                    fault = f"restart-{mode}"
                    restart = functools.partial(restart_server, db, workload, mode)
                    lifetime -= wait_then(worker, rnd.uniform(1, lifetime), restart)
                elif fault == "store":
                    assert lake.s3 is not None
                    fault, waited = store_fault(lake.s3, rnd, worker, lifetime)
                    lifetime -= waited
                try:
                    worker.wait(timeout=max(lifetime, 0.1))
                except subprocess.TimeoutExpired:
                    worker.send_signal(signal.SIGKILL)
                    worker.wait()
                if lake.s3 is not None:
                    lake.s3.faults({"kind": "none"})
            faults.append(fault)
            failed = failed_run(worker, fault, log)
            if failed:
                problems.append(failed)
        row = db.conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
        assert row is not None
        until = int(row[0])
        last = subprocess.run(
            [*(sys.executable, str(WORKER), db.dsn, lake.location, str(until)), *FINAL_RUN, *store],
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert last.returncode == 0, last.stderr[-3000:]
        problems += verified(db, lake)
        source = source_state(db, tables)
        kept = lake_state(lake, source_columns(db, tables))
        report: dict[str, Any] = {
            "layout": layout,
            "store": "s3" if lake.s3 is not None else "local",
            "faults": dict(Counter(faults)),
            "until": int_to_lsn(until),
        }
        if lake.s3 is not None:
            now = Counter(lake.s3.faults()["injected"])
            report["store faults"] = dict(now - Counter(injected))
        for name in tables:
            missing = sorted((source[name] - kept[name]).elements())
            extra = sorted((kept[name] - source[name]).elements())
            if missing or extra:
                problems.append(
                    f"{name}: {len(missing)} source rows missing, {len(extra)} lake rows extra;"
                    f" {lost_transactions(db, missing, name)}"
                )
        if problems:
            report["problems"] = problems
            report["positions"] = {k: v[-12:] for k, v in positions(lake, tables).items()}
            report["runs"] = [
                line
                for line in log.read_text().splitlines()
                if line.startswith("---") or "consistent point" in line or "streaming slot" in line
            ]
        db.conn.execute("SELECT pg_drop_replication_slot('audit')")
        db.conn.execute("SELECT pg_drop_replication_slot('s1')")
        return report


@pytest.mark.server
def test_pgbench_under_faults_ends_equal(
    pg15_cluster: PgCluster, store: S3Server | None, tmp_path: Path
) -> None:
    rnd = random.Random(SEED)
    deadline = time.monotonic() + MINUTES * 60
    rounds: list[dict[str, Any]] = []
    while not rounds or time.monotonic() < deadline:
        layout = LAYOUTS[len(rounds) % len(LAYOUTS)]
        # Every other round on the object store (its first among them).
        on_store = store is not None and len(rounds) % 2 == 0
        lake = Lake(f"s3://{store.bucket()}/lake", store) if on_store and store else Lake("")
        report = one_round(pg15_cluster, rnd, layout, lake, tmp_path)
        print(f"seed {SEED} round {len(rounds)}: {json.dumps(report)}", flush=True)
        rounds.append(report)
        assert "problems" not in report, f"seed {SEED}: {json.dumps(report, indent=1)}"
