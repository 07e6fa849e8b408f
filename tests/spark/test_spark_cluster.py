"""pgwire_cdc on a real Spark cluster: a standalone master and two workers from the pip
pyspark (each a JVM of its own, executors started by the workers), and a driver that
connects to it with ``pgwire_cdc.spark.session(master="spark://...", delta=True)`` and
nothing else: no ``PYSPARK_PYTHON`` (the session points the executors at the driver's
interpreter, the master being on this machine), the Delta jars shipped to the executors
through ``spark.jars``.

The driver (a process of its own: this one may already run a local SparkContext) reads a
table with ``spark.read.format("pgwire_cdc")`` in four partitions, spread over both
executors, while transfers move rows between blocks: the table at one point in time (every
id once, the invariant sum). Then ``delta.run(writer="spark")`` takes a new slot's
snapshot with the executors' tasks and MERGEs what was written meanwhile: the Delta table
equals the source. PostgreSQL 18 only: the cluster is the subject, and it is slow to start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import Database
from pgwire_cdc import delta
from support.standalone import StandaloneCluster
from support.stream_workload import SCHEMA, Workload, norm, source_rows

from spark.test_spark_snapshot import Transfers

ACCOUNTS = 40_000
TOTAL = ACCOUNTS * 100
TESTS = Path(__file__).resolve().parents[1]

#: The driver program: argv = master URL, DSN, lake folder. One JSON line per phase.
DRIVER = r"""
import json, os, sys, threading, time
sys.path.insert(0, os.environ["PGWIRE_CDC_TESTS"])
import psycopg
from pgwire_cdc import delta
from pgwire_cdc.spark import session
from support.stream_workload import Workload

master, dsn, lake = sys.argv[1:4]
t0 = time.monotonic()
spark = session("pgwire_cdc-cluster", master=master, delta=True, **{
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.databricks.delta.snapshotPartitions": "2",
})
sc = spark.sparkContext
sc.setLogLevel("ERROR")
deadline = time.monotonic() + 120
while sc._jsc.sc().getExecutorIds().size() < 2:
    assert time.monotonic() < deadline, "the executors did not register"
    time.sleep(0.2)

frame = (spark.read.format("pgwire_cdc").option("dsn", dsn)
         .option("table", "public.accounts").option("partitions", 4).load())

def tag(batches):  # each row with its Python worker's folder, which is its executor's
    import pyarrow as pa
    for b in batches:
        folder = pa.array([os.getcwd()] * b.num_rows)
        yield pa.RecordBatch.from_arrays([b["id"], b["balance"], folder],
                                         ["id", "balance", "folder"])

tagged = frame.mapInArrow(tag, "id int, balance bigint, folder string")
(row,) = tagged.selectExpr("count(*) AS n", "count(DISTINCT id) AS ids", "min(id) AS first",
                           "max(id) AS last", "sum(balance) AS total",
                           "sort_array(collect_set(folder)) AS folders").collect()
print("READ " + json.dumps({
    **row.asDict(), "partitions": frame.rdd.getNumPartitions(), "seconds": time.monotonic() - t0,
    "python": spark.conf.get("spark.pyspark.python"), "jars": spark.conf.get("spark.jars", ""),
}), flush=True)

other = Workload(psycopg.connect(dsn, autocommit=True), seed=5)
other.next_id = 1_000_000  # keys of its own
stop = threading.Event()

def write():
    for _ in range(20):
        if stop.is_set():
            break
        other.run(5)

running = threading.Thread(target=write)
running.start()
try:
    stats = delta.run(dsn, lake, publication="pub", slot="cluster", writer="spark", spark=spark,
                      idle_timeout=3, max_batch_rows=5000,
                      on_batch=lambda sink, batch, stats: stop.set())
finally:
    stop.set()
    running.join()
print("DELTA " + json.dumps({"inserted": stats.inserted, "changes": stats.changes,
                             "wrote_meanwhile": other.next_id - 1_000_000,
                             "seconds": time.monotonic() - t0}), flush=True)
spark.stop()
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    spark = StandaloneCluster(tmp_path / "cluster", workers=2, cores=1, memory="1g")
    try:
        spark.start_master()
        yield spark
    finally:
        spark.stop()


@pytest.mark.parametrize("pg", ["pg18"], indirect=True)
@pytest.mark.java
def test_snapshot_read_and_delta_run_on_a_standalone_cluster(
    db: Database, cluster: StandaloneCluster, tmp_path: Path
) -> None:
    db.conn.execute(
        "CREATE TABLE accounts (id int PRIMARY KEY, balance bigint, pad text)"
        " WITH (fillfactor = 100)"
    )
    db.conn.execute(
        f"INSERT INTO accounts SELECT g, 100, repeat('p', 40) FROM generate_series(1, {ACCOUNTS}) g"
    )
    db.conn.execute(SCHEMA)
    # One table: the cluster is the subject here (test_spark_snapshot.py has every shape).
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE items")
    Workload(db.conn, seed=27).run(60)
    cluster.start_workers()

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env.update(PGWIRE_CDC_TESTS=str(TESTS), SPARK_LOCAL_IP="127.0.0.1")
    transfers = Transfers(db.dsn, seed=18, accounts=ACCOUNTS)
    transfers.start()
    lake = tmp_path / "lake"
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, cluster.url, db.dsn, str(lake)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    out: dict[str, Any] = {}
    errors: list[str] = []
    drain = threading.Thread(target=lambda: errors.append(driver.stderr.read()))  # type: ignore[union-attr]
    drain.start()
    try:
        assert driver.stdout is not None
        for line in driver.stdout:
            phase, _, doc = line.partition(" ")
            if phase in ("READ", "DELTA"):
                out[phase] = json.loads(doc)
            if phase == "READ":
                transfers.stop.set()  # the read is over: the rest needs no transfers
        driver.wait(timeout=300)
    finally:
        transfers.stop.set()
        transfers.join()
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        drain.join()
    assert driver.returncode == 0, errors[0][-4000:] + cluster.tail("worker0")

    print({k: v.get("seconds") for k, v in out.items()})
    read = out["READ"]
    assert transfers.transfers > 0
    assert read["partitions"] == 4
    assert (read["n"], read["ids"], read["first"], read["last"]) == (
        ACCOUNTS,
        ACCOUNTS,
        1,
        ACCOUNTS,
    )
    assert read["total"] == TOTAL
    # Both executors read, each in its worker's folder (JVMs of their own).
    folders = read["folders"]
    assert len(folders) == 2 and all(str(cluster.folder) in f for f in folders), folders
    assert read["python"] == sys.executable
    assert "delta-spark_4.1_2.13" in read["jars"]

    ran = out["DELTA"]
    assert ran["wrote_meanwhile"] > 0 and ran["changes"] > 0
    table = delta.read_table(delta.table_path(lake, "public.items"))
    got = sorted((tuple(norm(v) for v in r.values()) for r in table.to_pylist()), key=repr)
    assert got == source_rows(db.conn, "public.items")
    with psycopg.connect(db.dsn) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()"
        ).fetchone() == (1,)


#: A driver whose Python workers run an interpreter without pgwire_cdc (argv: DSN, lake).
WITHOUT_PACKAGE = r"""
import sys
from pgwire_cdc import delta
from pgwire_cdc.errors import ConfigError
from pgwire_cdc.spark import session
spark = session("pgwire_cdc-no-package", "local[1]", delta=True, **{"spark.ui.enabled": "false"})
try:
    delta.run(sys.argv[1], sys.argv[2], publication="pub", slot="bare", writer="spark",
              spark=spark, idle_timeout=1)
except ConfigError as e:
    print(e)
spark.stop()
"""


@pytest.mark.parametrize("pg", ["pg18"], indirect=True)
@pytest.mark.java
def test_workers_without_the_package_get_a_clear_error(db: Database, tmp_path: Path) -> None:
    """Spark's planner worker running a Python that lacks pgwire_cdc (a bare virtual
    environment): ``delta.run`` says what to set instead of a pickling traceback."""
    db.conn.execute("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1), (2)")
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE t")
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env["PYSPARK_PYTHON"] = str(bare / "bin" / "python")
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_PACKAGE, db.dsn, str(tmp_path / "lake")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    message = proc.stdout.strip().splitlines()[-1]
    assert message.startswith("Spark's Python workers cannot import pgwire_cdc: the driver's")
    assert "spark.pyspark.python" in message and "Running on a cluster" in message
