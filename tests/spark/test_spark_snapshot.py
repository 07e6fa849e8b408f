"""The initial snapshot as a Spark job (``spark.read.format("pgwire_cdc")``,
``pgwire_cdc.spark.snapshot``) on a real local Spark and real PostgreSQL 15 and 18: CTID
ranges read by Spark tasks under one exported snapshot are the table at one point in time,
under concurrent writes that move rows to other blocks; ``delta.run(writer="spark")``
takes a new slot's snapshot this way and streams on from the slot's consistent point."""

from __future__ import annotations

import random
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import Database
from live.test_stream import current_lsn
from pgwire_cdc import delta
from pyspark.sql import functions as F
from support.stream_workload import SCHEMA, TABLES, Workload, norm, source_rows

ACCOUNTS = 300_000
TOTAL = ACCOUNTS * 100


class Transfers(threading.Thread):
    """Moves money between random accounts until stopped: the sum never changes, and
    every update writes the row's new version elsewhere in the heap."""

    def __init__(self, dsn: str, seed: int, accounts: int = ACCOUNTS) -> None:
        super().__init__(daemon=True)
        self.dsn, self.rng, self.accounts = dsn, random.Random(seed), accounts
        self.stop = threading.Event()
        self.transfers = 0

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                with conn.transaction():
                    for _ in range(20):
                        a, b = (
                            self.rng.randrange(1, self.accounts + 1),
                            self.rng.randrange(1, self.accounts + 1),
                        )
                        amount = self.rng.randrange(1, 50)
                        conn.execute(
                            "UPDATE accounts SET balance = balance - %s WHERE id = %s", (amount, a)
                        )
                        conn.execute(
                            "UPDATE accounts SET balance = balance + %s WHERE id = %s", (amount, b)
                        )
                self.transfers += 20


def test_a_parallel_read_is_one_point_in_time(db: Database, spark: Any) -> None:
    db.conn.execute(
        "CREATE TABLE accounts (id int PRIMARY KEY, balance bigint, pad text)"
        " WITH (fillfactor = 100)"
    )
    db.conn.execute(
        f"INSERT INTO accounts SELECT g, 100, repeat('p', 40) FROM generate_series(1, {ACCOUNTS}) g"
    )
    writer = Transfers(db.dsn, db.cluster.version)
    writer.start()
    try:
        time.sleep(0.5)
        df = (
            spark.read.format("pgwire_cdc")
            .option("dsn", db.dsn)
            .option("table", "public.accounts")
            .option("partitions", 4)
            .load()
        )
        # One query (each query takes a snapshot of its own): four CTID ranges, each
        # holding rows (a Spark Connect session has no `df.rdd` to ask).
        ((rows, ids, total, parts),) = (
            df.withColumn("part", F.spark_partition_id())
            .selectExpr("count(*)", "count(DISTINCT id)", "sum(balance)", "count(DISTINCT part)")
            .collect()
        )
        assert parts == 4
    finally:
        writer.stop.set()
        writer.join()
    assert writer.transfers > 0
    assert (rows, ids, total) == (ACCOUNTS, ACCOUNTS, TOTAL)
    # The keeper lets the snapshot go once every partition is read (keep_seconds later).
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert out.count("pgwire_cdc.spark.keeper") <= 1


def test_columns_and_row_filter_of_a_publication(db: Database, spark: Any) -> None:
    if db.cluster.version < 150000:
        pytest.skip("column lists and row filters need PostgreSQL 15")
    db.conn.execute("CREATE TABLE t (id int PRIMARY KEY, secret text, at time, n int)")
    db.conn.execute("INSERT INTO t SELECT g, 'x', '01:02:03', g FROM generate_series(1, 1000) g")
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE t (id, at, n) WHERE (n % 10 = 0)")
    df = (
        spark.read.format("pgwire_cdc")
        .option("dsn", db.dsn)
        .option("table", "public.t")
        .option("publication", "pub")
        .option("partitions", 3)
        .load()
    )
    assert df.columns == ["id", "at", "n"]
    rows = df.orderBy("id").collect()
    assert len(rows) == 100 and rows[0]["at"] == "01:02:03.000000"


def test_the_spark_snapshot_hands_off_to_the_stream(
    db: Database, spark: Any, tmp_path: Path
) -> None:
    """The seeded workload runs while Spark reads the snapshot, then the stream takes
    over at the slot's consistent point: the Delta tables equal the source."""
    db.conn.execute(SCHEMA)
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE items, codes, notes")
    workload = Workload(db.conn, seed=db.cluster.version % 1000 + 11)
    workload.run(60)
    other = Workload(psycopg.connect(db.dsn, autocommit=True), seed=5)
    other.next_id = 1_000_000  # keys of its own
    stop = threading.Event()

    def write() -> None:
        for _ in range(30):  # bounded: the Spark MERGEs of the stream are slow here
            if stop.is_set():
                break
            other.run(5)

    running = threading.Thread(target=write)
    running.start()
    try:
        # The writer stops once the snapshot is in (its first batch): everything it
        # wrote meanwhile is for the stream.
        first = delta.run(
            db.dsn, tmp_path, publication="pub", slot="s1", writer="spark", spark=spark,
            until_lsn=current_lsn(db), max_batch_rows=5000,
            on_batch=lambda sink, batch, stats: stop.set(),
        )  # fmt: skip
    finally:
        stop.set()
        running.join()
    assert first.inserted == 0, "no snapshot row went through the driver"
    assert other.next_id > 1_000_000, "the writer ran during the snapshot"
    workload.run(40)
    later = delta.run(
        db.dsn, tmp_path, publication="pub", slot="s1", writer="spark", spark=spark,
        until_lsn=current_lsn(db), max_batch_rows=5000,
    )  # fmt: skip
    assert later.changes > 0
    for name in TABLES:
        table = delta.read_table(delta.table_path(tmp_path, name))
        got = sorted((tuple(norm(v) for v in r.values()) for r in table.to_pylist()), key=repr)
        assert got == source_rows(db.conn, name), name


def test_the_keeper_lets_go_once_every_range_is_read(db: Database) -> None:
    """Tasks tell the keeper which range they have read by its number: queries longer
    than a NOTIFY payload may be (8000 bytes) are no trouble, and the keeper ends as soon
    as every range is in (keep_seconds 0)."""
    from pgwire_cdc.spark import keeper as snapshot_keeper
    from pgwire_cdc.spark import snapshot as spark_snapshot

    names = [f"c{i:03d}_" + "x" * 58 for i in range(130)]
    db.conn.execute(
        "CREATE TABLE wide (id int PRIMARY KEY, " + ", ".join(f"{n} int" for n in names) + ")"
    )
    db.conn.execute(
        "INSERT INTO wide SELECT g, " + ", ".join("g" for _ in names) + " FROM"
        " generate_series(1, 2000) g"
    )
    with psycopg.connect(db.dsn) as conn:
        info = spark_snapshot.describe(conn, "public.wide", None)
        queries = spark_snapshot.partition_queries(conn, info, 3)
    assert len(queries) == 3 and min(len(q) for q in queries) > 8000
    snapshot, _, keeper = snapshot_keeper.export_snapshot(db.dsn, queries, ttl=120, keep=0)
    try:
        rows = 0
        for i, query in enumerate(queries):
            assert keeper.poll() is None, "the keeper let go before every range was read"
            for table in spark_snapshot.read_partition(db.dsn, snapshot, info, query, index=i):
                rows += table.num_rows
        assert rows == 2000
        assert keeper.wait(timeout=30) == 0
    finally:
        if keeper.poll() is None:
            keeper.kill()
            keeper.wait()
