"""Tables added to an Iceberg pipeline later (test_tables_added_later.py's cases for the
Delta sink, on ``pgwire_cdc.iceberg``): a table added by ``ALTER PUBLICATION ... ADD
TABLE`` while ``iceberg.run`` streams, and one added between two runs, are copied in
watermark chunks while a workload changes both tables; the copy's progress is recorded in
the summaries of the table's snapshots, so a consumer stopped in the middle of a copy
goes on from its last chunk. The tables end equal to the source, read by pyiceberg.

PostgreSQL 18 only: the incremental copy itself is tested on both servers by
test_tables_added_later.py; here each batch costs a Spark MERGE.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

import pgwire_cdc
import pytest
from conftest import ICEBERG_CATALOG, Database, fresh_database
from live.test_tables_added_later import Workload, setup, source, when_streaming
from pgwire_cdc import iceberg

pytestmark = pytest.mark.server


@pytest.fixture
def db(pg18_cluster: Any) -> Iterator[Database]:
    with fresh_database(pg18_cluster) as database:
        yield database


class Lake:
    """The test's namespace in the shared local catalog."""

    def __init__(self, db: Database, spark: Any, catalog: Any) -> None:
        self.db, self.spark, self.catalog = db, spark, catalog
        self.namespace = re.sub(r"[^a-z0-9_]", "_", db.name.lower()) + "_later"

    def run(self, **options: Any) -> iceberg.ApplyStats:
        options.setdefault("idle_timeout", 1)
        return iceberg.run(
            self.db.dsn,
            ICEBERG_CATALOG,
            self.namespace,
            slot="lp_slot",
            spark=self.spark,
            **options,
        )

    def ref(self, table: str) -> str:
        return iceberg.table_ref(ICEBERG_CATALOG, self.namespace, f"public.{table}")

    def rows(self, table: str) -> dict[int, str]:
        t = iceberg.read_table(self.catalog, f"{self.namespace}.public_{table}")
        return dict(zip(t["id"].to_pylist(), t["v"].to_pylist(), strict=True))

    def progress_snapshots(self, table: str) -> int:
        """Snapshots of ``table`` recording a copy under way."""
        return int(
            self.spark.sql(
                f"SELECT count(*) AS n FROM {self.ref(table)}.snapshots "
                # The key a copy reached, {"pgwire_cdc": {"progress": [key]}} (null once
                # complete).
                "WHERE summary['pgwire_cdc.progress'] LIKE '%\"progress\": [%'"
            ).collect()[0]["n"]
        )

    def assert_equal_source(self) -> None:
        for table in ("lp_a", "lp_b"):
            assert self.rows(table) == source(self.db, table), table


@pytest.fixture
def lake(db: Database, iceberg_spark: Any, iceberg_catalog: Any) -> Lake:
    return Lake(db, iceberg_spark, iceberg_catalog)


def test_a_table_added_between_runs(db: Database, lake: Lake) -> None:
    setup(db)
    lake.run(publication="lp", tables=["public.lp_a"])
    workload = Workload(db.dsn, ["lp_a", "lp_b"], 11)
    workload.start()
    threading.Timer(4.0, workload.stop.set).start()
    try:
        stats = lake.run(publication="lp", tables=["public.lp_a", "public.lp_b"], chunk_rows=150)
        assert stats.changes > 0
    finally:
        workload.stop.set()
        workload.join()
    assert workload.error is None, workload.error
    assert lake.progress_snapshots("lp_b") > 1, "copied chunk by chunk"
    db.conn.execute("UPDATE lp_b SET v = 'b2' WHERE id <= 10")
    lake.run(publication="lp")
    lake.assert_equal_source()
    sink = iceberg.IcebergSink(lake.spark, ICEBERG_CATALOG, lake.namespace)
    assert sink.held_tables(["public.lp_a", "public.lp_b"]) == {
        "public.lp_a": None,
        "public.lp_b": None,
    }


def test_a_table_added_while_streaming(db: Database, lake: Lake) -> None:
    setup(db)
    db.conn.execute("CREATE PUBLICATION lp FOR TABLE lp_a")
    lake.run(publication="lp")
    workload = Workload(db.dsn, ["lp_a", "lp_b"], 7)
    workload.start()
    adder = when_streaming(db, "lp_slot", "ALTER PUBLICATION lp ADD TABLE lp_b")
    threading.Timer(6.0, workload.stop.set).start()
    try:
        lake.run(publication="lp", chunk_rows=100, max_batch_ms=200, idle_timeout=4)
    finally:
        workload.stop.set()
        workload.join()
        adder.join()
    assert workload.error is None, workload.error
    assert lake.progress_snapshots("lp_b") > 1, "copied chunk by chunk"
    lake.run(publication="lp")
    lake.assert_equal_source()


def test_a_copy_stopped_midway_goes_on_from_its_last_chunk(db: Database, lake: Lake) -> None:
    setup(db)
    lake.run(publication="lp", tables=["public.lp_a"])
    db.conn.execute("ALTER PUBLICATION lp ADD TABLE lp_b")
    sink = iceberg.IcebergSink(lake.spark, ICEBERG_CATALOG, lake.namespace)
    batches = pgwire_cdc.stream(
        db.dsn,
        publication="lp",
        slot="lp_slot",
        held_tables=sink.held_tables(["public.lp_a", "public.lp_b"]),
        chunk_rows=100,
    )
    for batch in batches:
        sink.apply(batch)
        batch.ack()
        if batch.snapshot_progress.get("public.lp_b"):
            break  # the consumer stops in the middle of lp_b's copy
    batches.close()  # type: ignore[attr-defined]
    fresh = iceberg.IcebergSink(lake.spark, ICEBERG_CATALOG, lake.namespace)
    resumed_after = fresh.held_tables(["public.lp_a", "public.lp_b"])["public.lp_b"]
    assert resumed_after in ([100], [200])
    db.conn.execute("UPDATE lp_b SET v = 'late' WHERE id IN (5, 500, 999)")
    stats = lake.run(publication="lp", chunk_rows=100)
    assert stats.changes >= 1000 - resumed_after[0]
    lake.assert_equal_source()
