"""Iceberg tables of format version 2 (``properties={"format-version": "2"}``, for readers
without v3): the sink's merge-on-read MERGEs write position-delete files (Parquet) instead
of deletion vectors, and pyiceberg, applying them, reads the tables equal to the source.
PostgreSQL 18 only: test_iceberg.py runs the same workload on both servers in v3.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import ICEBERG_CATALOG, Database, fresh_database
from live.test_stream import current_lsn
from pgwire_cdc import iceberg
from support.stream_workload import SCHEMA, TABLES, Workload, norm, source_rows

pytestmark = pytest.mark.server


@pytest.fixture
def db(pg18_cluster: Any) -> Iterator[Database]:
    with fresh_database(pg18_cluster) as database:
        yield database


def test_format_version_2_tables_have_position_deletes(
    db: Database, iceberg_spark: Any, iceberg_catalog: Any
) -> None:
    db.conn.execute(SCHEMA)
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE items, codes, notes")
    workload = Workload(db.conn, seed=2)
    namespace = re.sub(r"[^a-z0-9_]", "_", db.name.lower()) + "_v2"

    def run() -> iceberg.ApplyStats:
        return iceberg.run(
            db.dsn, ICEBERG_CATALOG, namespace, publication="pub", slot="s1",
            spark=iceberg_spark, properties={"format-version": "2"},
            until_lsn=current_lsn(db), max_batch_rows=300,
        )  # fmt: skip

    workload.run(40)
    run()
    workload.run(120)
    stats = run()
    assert stats.updated and stats.deleted
    for name in TABLES:
        ref = iceberg.table_ref(ICEBERG_CATALOG, namespace, name)
        props = dict(iceberg_spark.sql(f"SHOW TBLPROPERTIES {ref}").collect())
        assert props["format-version"] == "2"
        rows = iceberg.read_table(iceberg_catalog, f"{namespace}.{name.replace('.', '_')}")
        got = sorted((tuple(norm(v) for v in r.values()) for r in rows.to_pylist()), key=repr)
        assert got == source_rows(db.conn, name), name
    items = iceberg.table_ref(ICEBERG_CATALOG, namespace, "public.items")
    formats = {
        (r["content"], r["file_format"])
        for r in iceberg_spark.sql(
            f"SELECT content, file_format FROM {items}.delete_files"
        ).collect()
    }
    # content 1: position deletes, in Parquet files (v3 writes Puffin deletion vectors).
    assert formats == {(1, "PARQUET")}, formats
