"""The Structured Streaming source ``format("pgwire_cdc")`` on a real local Spark and real
PostgreSQL 15 and 18: the initial snapshot and the changes after it under
``Trigger.AvailableNow`` and a processing-time trigger, a restart from the checkpoint, and
a micro-batch that fails and is replayed exactly; micro-batches MERGEd into Delta."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import Database
from live.test_stream import current_lsn
from pgwire_cdc import delta
from pgwire_cdc.spark import register
from support.stream_workload import SCHEMA, Mirror, Workload, norm, source_rows

TABLE = "public.items"


@pytest.fixture
def workload(db: Database) -> Workload:
    db.conn.execute(SCHEMA)
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE items, codes, notes")
    return Workload(db.conn, seed=db.cluster.version % 991)


class Sink:
    """``foreachBatch``: keeps each micro-batch's Arrow rows in files of ``folder``; can
    fail once on demand. Files, because over Spark Connect the function runs in the
    server's Python, not in this process."""

    def __init__(self, folder: Path, fail_on: int | None = None) -> None:
        self.folder = folder
        self.fail_on = fail_on
        folder.mkdir(parents=True, exist_ok=True)

    def __call__(self, df: Any, batch_id: int) -> None:
        import uuid

        import pyarrow.feather as feather

        table = df.toArrow()
        failed = self.folder / "failed"
        if self.fail_on is not None and batch_id == self.fail_on and not failed.exists():
            failed.touch()
            raise RuntimeError("the sink fails once")
        feather.write_feather(table, self.folder / f"{batch_id:08d}-{uuid.uuid4().hex}.arrow")

    @property
    def batches(self) -> list[tuple[int, pa.Table]]:
        import pyarrow.feather as feather

        return [
            (int(file.name.split("-")[0]), feather.read_table(file))
            for file in sorted(self.folder.glob("*.arrow"))
        ]

    def mirror(self) -> Mirror:
        mirror = Mirror()
        for _, table in self.batches:
            mirror.apply({TABLE: table})
        return mirror


def start(
    spark: Any,
    db: Database,
    tmp_path: Path,
    sink: Sink,
    options: dict[str, str] | None = None,
    **trigger: Any,
) -> Any:
    register(spark)
    return (
        spark.readStream.format("pgwire_cdc")
        .option("dsn", db.dsn)
        .option("publication", "pub")
        .option("slot", "spark_slot")
        .option("table", TABLE)
        .option("snapshot_dir", str(tmp_path / "snapshot"))
        .options(**(options or {}))
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(**trigger)
        .start()
    )


def slot_flush(db: Database) -> int:
    row = db.conn.execute(
        "SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots "
        "WHERE slot_name = 'spark_slot'"
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def assert_equal(db: Database, sink: Sink) -> None:
    mirror = sink.mirror()
    assert mirror.rows(TABLE) == source_rows(db.conn, TABLE)
    # Every change once: (_commit_lsn, _tx_ordinal) never repeats across micro-batches.
    assert len(set(mirror.changes)) == len(mirror.changes)


def test_available_now_snapshot_changes_and_restart(
    db: Database, spark: Any, workload: Workload, tmp_path: Path
) -> None:
    workload.run(30)
    sink = Sink(tmp_path / "batches")
    first_end = current_lsn(db)
    start(spark, db, tmp_path, sink, availableNow=True).awaitTermination(240)
    assert sink.batches, "the snapshot micro-batch"
    assert_equal(db, sink)
    first = len(sink.batches)

    workload.run(80)
    start(spark, db, tmp_path, sink, availableNow=True).awaitTermination(240)
    assert len(sink.batches) > first, "the restart resumed from the checkpoint"
    assert_equal(db, sink)
    # Spark commits a batch to its source when it plans the next one: the slot has moved
    # past the first run's batches.
    assert slot_flush(db) >= first_end


def test_a_failover_slot(db: Database, spark: Any, workload: Workload, tmp_path: Path) -> None:
    """Option ``failover``: the slot made with the snapshot becomes a failover slot once
    the first micro-batch is committed (PostgreSQL 17+); before 17, a clear refusal."""
    workload.run(10)
    sink = Sink(tmp_path / "batches")
    if db.cluster.version < 170000:
        with pytest.raises(Exception, match="failover slots need PostgreSQL 17"):
            query = start(spark, db, tmp_path, sink, {"failover": "true"}, availableNow=True)
            query.awaitTermination(240)
        return
    start(spark, db, tmp_path, sink, {"failover": "true"}, availableNow=True).awaitTermination(240)
    workload.run(10)
    start(spark, db, tmp_path, sink, {"failover": "true"}, availableNow=True).awaitTermination(240)
    assert_equal(db, sink)
    row = db.conn.execute(
        "SELECT failover FROM pg_replication_slots WHERE slot_name = 'spark_slot'"
    ).fetchone()
    assert row == (True,)


def test_processing_time_trigger_with_a_failed_batch_replayed(
    db: Database, spark: Any, workload: Workload, tmp_path: Path
) -> None:
    workload.run(20)
    sink = Sink(tmp_path / "batches", fail_on=1)
    query = start(spark, db, tmp_path, sink, processingTime="500 milliseconds")
    writer = threading.Thread(target=workload.run, args=(60,))
    writer.start()
    writer.join()
    # The sink failed on batch 1: the query stopped with that error.
    with pytest.raises(Exception, match="fails once"):
        query.awaitTermination(240)
    # Restarted from the checkpoint, batch 1 is read again (same offsets, same rows).
    query = start(spark, db, tmp_path, sink, processingTime="500 milliseconds")
    expected = source_rows(db.conn, TABLE)
    deadline = time.monotonic() + 240
    while sink.mirror().rows(TABLE) != expected and time.monotonic() < deadline:
        time.sleep(0.5)
    query.stop()
    assert_equal(db, sink)


def test_foreach_batch_merges_into_delta(
    db: Database, spark: Any, workload: Workload, tmp_path: Path
) -> None:
    """The pipeline of docs/spark.md: the source's micro-batches MERGEd into a Delta table by
    ``delta.merge_changes`` in ``foreachBatch``; a micro-batch run twice (a sink that
    fails after its commit) changes nothing."""
    workload.run(30)
    path = str(tmp_path / "lake" / TABLE)
    calls_dir = tmp_path / "calls"
    calls_dir.mkdir()

    def merge(df: Any, batch_id: int) -> None:
        # df.sparkSession: over Spark Connect this runs in the server's Python.
        delta.merge_changes(df, path, keys=["id"], writer="spark", spark=df.sparkSession)
        calls = len(list(calls_dir.iterdir()))
        (calls_dir / f"{calls:04d}-{batch_id}").touch()
        if calls + 1 == 2:
            raise RuntimeError("failed after the commit: Spark runs the batch again")

    register(spark)

    def run() -> None:
        query = (
            spark.readStream.format("pgwire_cdc")
            .option("dsn", db.dsn)
            .option("publication", "pub")
            .option("slot", "delta_slot")
            .option("table", TABLE)
            .option("snapshot_dir", str(tmp_path / "snapshot"))
            .load()
            .writeStream.foreachBatch(merge)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(240)
        except Exception:
            query.stop()

    run()
    workload.run(60)
    run()  # the failed batch
    run()  # ... and the rest
    calls = [name.name.split("-")[1] for name in calls_dir.iterdir()]
    assert len(calls) > len(set(calls)), "a micro-batch was merged twice"
    table = delta.read_table(path)
    got = sorted((tuple(norm(v) for v in r.values()) for r in table.to_pylist()), key=repr)
    want = source_rows(db.conn, TABLE)
    assert got == want


def test_one_options_class_reads_both_sources() -> None:
    from pgwire_cdc.errors import ConfigError
    from pgwire_cdc.spark.source import SourceOptions

    streaming = SourceOptions.parse(
        {"dsn": "d", "table": "t", "publication": "p", "slot": "s", "snapshot": "false"}
    )
    assert streaming.streaming and not streaming.initial_snapshot
    assert streaming.snapshot_name is None and streaming.snapshot_dir.name == "s"
    batch = SourceOptions.parse({"dsn": "d", "table": "t", "snapshot": "000003-1"})
    assert not batch.streaming and batch.snapshot_name == "000003-1"
    assert batch.partitions == 4 and batch.publication is None
    with pytest.raises(ConfigError, match=r'needs \.option\("publication"'):
        SourceOptions.parse({"dsn": "d", "table": "t", "slot": "s"})
    with pytest.raises(ConfigError, match="at least 1"):
        SourceOptions.parse({"dsn": "d", "table": "t", "partitions": "0"})


def test_a_column_added_stops_the_query_which_reads_it_once_restarted(
    db: Database, spark: Any, workload: Workload, tmp_path: Path
) -> None:
    workload.run(20)
    sink = Sink(tmp_path / "batches")
    query = start(spark, db, tmp_path, sink, processingTime="1 second")
    deadline = time.monotonic() + 240
    while not sink.batches and time.monotonic() < deadline:
        time.sleep(0.5)
    # Under the running query (its columns fixed), in one transaction: a change, the
    # ALTER, a change after it.
    before = current_lsn(db)
    db.conn.execute(
        "UPDATE items SET qty = 1 WHERE id = (SELECT min(id) FROM items);"
        " ALTER TABLE items ADD COLUMN extra text;"
        " UPDATE items SET extra = 'x' WHERE id = (SELECT min(id) FROM items)"
    )
    after = current_lsn(db)
    with pytest.raises(Exception, match=r"columns of public\.items changed"):
        query.awaitTermination(240)
    start(spark, db, tmp_path, sink, availableNow=True).awaitTermination(240)
    rows = [
        r
        for _, t in sink.batches
        for r in t.to_pylist()
        if r["_change_type"] == "update" and before <= r["_commit_lsn"] < after
    ]
    # Once each, after the restart, in the new columns: the row from before the ALTER
    # has a null extra, the one after it the value.
    assert [(r["qty"], r.get("extra")) for r in rows] == [(1, None), (1, "x")]
    changes = [(r["_commit_lsn"], r["_tx_ordinal"]) for _, t in sink.batches for r in t.to_pylist()]
    assert len(set(changes)) == len(changes)
