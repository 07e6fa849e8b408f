"""Delta Lake tables kept by MERGE (``pgwire_cdc.delta``) against real PostgreSQL 15 and
18: PostgreSQL is the oracle. The seeded random workload of the stream tests (unchanged
TOAST, key changes, truncates, the keyless FULL table) kept by each writer equals
``SELECT`` on the source; a batch delivered again changes nothing; transactions cut across
batches commit exactly once; schema changes evolve the tables; each writer's tables read
through the other and through ``spark.read.format("delta")``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import Database
from pgwire_cdc import delta
from stream_workload import SCHEMA, TABLES, Workload, norm, source_rows
from test_stream import current_lsn


def delta_rows(path: Path, name: str) -> list[tuple[Any, ...]]:
    table = delta.read_table(delta.table_path(path, name))
    return sorted((tuple(norm(v) for v in row.values()) for row in table.to_pylist()), key=repr)


def assert_tables_equal_source(db: Database, path: Path, names: tuple[str, ...] = TABLES) -> None:
    for name in names:
        assert delta_rows(path, name) == source_rows(db.conn, name), name


@pytest.fixture
def workload(db: Database) -> Workload:
    db.conn.execute(SCHEMA)
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE items, codes, notes")
    return Workload(db.conn, seed=db.cluster.version % 1000 + 7)


def run(db: Database, path: Path, **options: Any) -> delta.ApplyStats:
    options.setdefault("until_lsn", current_lsn(db))
    options.setdefault("max_batch_rows", 53)
    return delta.run(db.dsn, path, publication="pub", slot="s1", **options)


def test_delta_rs_tables_equal_source(db: Database, workload: Workload, tmp_path: Path) -> None:
    workload.run(60)
    first = run(db, tmp_path)
    assert first.inserted > 0
    assert_tables_equal_source(db, tmp_path)
    workload.run(150)
    later = run(db, tmp_path)
    assert later.updated > 0 and later.deleted > 0
    assert_tables_equal_source(db, tmp_path)


def test_spark_writer_tables_equal_source(
    db: Database, workload: Workload, tmp_path: Path, spark: Any
) -> None:
    workload.run(40)
    first = run(db, tmp_path, writer="spark", spark=spark, max_batch_rows=500)
    assert first.inserted > 0
    assert_tables_equal_source(db, tmp_path)
    workload.run(80)
    later = run(db, tmp_path, writer="spark", spark=spark, max_batch_rows=500)
    assert later.updated > 0 and later.deleted > 0
    assert_tables_equal_source(db, tmp_path)
    # Tables Spark wrote have deletion vectors on, and Spark reads them equal too.
    for name in TABLES:
        path = delta.table_path(tmp_path, name)
        props = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0]["properties"]
        assert props.get("delta.enableDeletionVectors") == "true", name
        rows = spark.read.format("delta").load(path).count()
        assert rows == len(source_rows(db.conn, name)), name
