"""Delta tables named in a Spark catalog (``catalog.schema.table``) with the Spark writer,
against real PostgreSQL and a real Hive metastore (embedded Derby) — PostgreSQL is the
oracle.

One Spark process (Hive support cannot be added to the shared session) keeps the seeded
random workload's tables and an odd-named one in ``spark_catalog.lake`` with
``delta.run``: equal to the source after a first run and after more writes, a column
added on the way; batches applied twice and then streamed again change nothing; a
change table merged with ``merge_changes(table=...)``; then every table is read back by
name through the metastore, at the location the metastore gives: equal to the source.

Run as a program, this file is that Spark process: ``python test_catalog_tables.py
DSN DIR``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pgwire_cdc.delta.catalog import CatalogNames, default_table_name, split_name, table_ref
from pgwire_cdc.errors import ConfigError
from support.stream_workload import SCHEMA, TABLES, norm, source_rows

#: Each source table and its name in ``spark_catalog.lake``.
NAMES = {
    **{name: name.replace(".", "_") for name in TABLES},
    "public.Odd Name.x": "public_odd_name_x",
}
ODD = 'SELECT id, "Val ue", extra FROM "Odd Name.x"'


# -- without a server ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ("public.items", "public_items"),
        ("Sales.Order Lines", "sales_order_lines"),
        ("public.a.b", "public_a_b"),
        ("x.t-1`", "x_t_1_"),
    ],
)
def test_default_table_names(source: str, name: str) -> None:
    assert default_table_name(source) == name


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("spark_catalog.lake.t", ["spark_catalog", "lake", "t"]),
        ("lake.`a.b`", ["lake", "a.b"]),
        ("`c`.`s`.`it``s`", ["c", "s", "it`s"]),
        ("t", ["t"]),
    ],
)
def test_table_names_split_and_quote(name: str, parts: list[str]) -> None:
    assert split_name(name) == parts
    assert split_name(table_ref(name)) == parts


@pytest.mark.parametrize("name", ["", "a..b", "a.`b", "a`b", "a."])
def test_bad_table_names_are_refused(name: str) -> None:
    with pytest.raises(ConfigError):
        table_ref(name)


def test_two_sources_of_one_name_are_refused() -> None:
    names = CatalogNames("spark_catalog", "lake")
    assert names.ref("public.Odd") == "`spark_catalog`.`lake`.`public_odd`"
    assert names.ref("public.Odd") == "`spark_catalog`.`lake`.`public_odd`"
    with pytest.raises(ConfigError, match="both map to"):
        names.ref("public.odd")
    own = CatalogNames(None, "lake", lambda n: "cdc " + n)
    assert own.ref("public.t") == "`lake`.`cdc public.t`"


def test_the_delta_rs_writer_keeps_path_tables_only() -> None:
    from pgwire_cdc import delta

    with pytest.raises(ConfigError, match="writer='spark'"):
        delta.DeltaSink(None, "delta-rs", schema="lake")
    with pytest.raises(ConfigError, match="writer='spark'"):
        delta.run("dbname=x", schema="lake")
    with pytest.raises(ConfigError, match="give the tables' place"):
        delta.run("dbname=x", writer="spark")


# -- Spark with a Hive metastore ------------------------------------------------------


def _spark_process(dsn: str, directory: Path) -> dict[str, Any]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run(
        [sys.executable, __file__, dsn, str(directory)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=directory,  # Derby's log
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.java
@pytest.mark.timeout(1800)  # a Spark process with a Hive metastore: minutes
@pytest.mark.parametrize("pg", ["pg18"], indirect=True)
def test_catalog_tables_equal_source(db: Any, tmp_path: Path) -> None:
    db.conn.execute(SCHEMA)
    db.conn.execute(
        'CREATE TABLE "Odd Name.x" (id int PRIMARY KEY, "Val ue" text);'
        " INSERT INTO \"Odd Name.x\" SELECT g, 'v' || g FROM generate_series(1, 20) g;"
        ' CREATE PUBLICATION pub FOR TABLE items, codes, notes, "Odd Name.x"'
    )
    db.conn.execute("SELECT pg_create_logical_replication_slot('direct', 'pgoutput')")
    wrote = _spark_process(db.dsn, tmp_path)
    assert wrote["tables"] == sorted(NAMES.values())
    assert wrote["first"]["inserted"] == 0, "Spark tasks wrote the snapshot"
    assert wrote["later"]["updated"] > 0 and wrote["later"]["deleted"] > 0
    assert wrote["twice"]["skipped"] > 0 and wrote["twice"]["commits"] == 0
    assert wrote["again"]["skipped"] > 0
    assert wrote["direct"]["skipped"] > 0
    assert wrote["location"].startswith(f"file:{tmp_path}/warehouse/lake.db/")
    assert wrote["mismatched"] == []


# -- the Spark process ----------------------------------------------------------------


def _session(directory: Path) -> Any:
    from pgwire_cdc.spark import session

    spark = session(
        "pgwire_cdc-catalog",
        "local[1]",
        delta=True,
        **{
            "spark.sql.catalogImplementation": "hive",
            "spark.sql.warehouse.dir": str(directory / "warehouse"),
            "spark.hadoop.javax.jdo.option.ConnectionURL": (
                f"jdbc:derby:;databaseName={directory}/metastore_db;create=true"
            ),
            "spark.ui.enabled": "false",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _mismatched(spark: Any, conn: Any) -> list[str]:
    """The tables of ``spark_catalog.lake`` not equal to their source tables."""
    bad = []
    for source, name in NAMES.items():
        table = spark.table(f"spark_catalog.lake.{name}").toArrow()
        got = sorted((tuple(norm(v) for v in r.values()) for r in table.to_pylist()), key=repr)
        if source in TABLES:
            want = source_rows(conn, source)
        else:
            rows = conn.execute(ODD).fetchall()
            want = sorted((tuple(norm(v) for v in row) for row in rows), key=repr)
            got = [tuple(r[c] for c in ("id", "Val ue", "extra")) for r in table.to_pylist()]
            got.sort(key=repr)
        if got != want:
            bad.append(name)
    direct = spark.table("spark_catalog.lake.direct_items").toArrow()
    got = sorted((tuple(norm(v) for v in r.values()) for r in direct.to_pylist()), key=repr)
    if got != source_rows(conn, "public.items"):
        bad.append("direct_items")
    return bad


def _write(dsn: str, directory: Path) -> dict[str, Any]:
    import psycopg
    from pgwire_cdc import delta, lsn_to_int, stream
    from support.stream_workload import Workload

    spark = _session(directory)
    conn = psycopg.connect(dsn, autocommit=True)
    workload = Workload(conn, seed=11)

    def now() -> int:
        return lsn_to_int(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])

    where: dict[str, Any] = {"writer": "spark", "spark": spark, "catalog": "spark_catalog"}
    where["schema"] = "lake"

    def run(**options: Any) -> delta.ApplyStats:
        options.setdefault("until_lsn", now())
        return delta.run(dsn, publication="pub", slot="s1", max_batch_rows=500, **where, **options)

    out: dict[str, Any] = {}
    workload.run(20)
    out["first"] = vars(run())
    workload.run(50)
    conn.execute('ALTER TABLE "Odd Name.x" ADD COLUMN extra bigint')
    conn.execute('UPDATE "Odd Name.x" SET extra = id * 10, "Val ue" = NULL WHERE id % 3 = 0')
    conn.execute("INSERT INTO \"Odd Name.x\" VALUES (100, 'new', 7)")
    out["later"] = vars(run())
    # Batches applied twice and never acked, then the same stretch streamed again.
    workload.run(12)
    until = now()
    twice = delta.ApplyStats()
    for batch in stream(dsn, publication="pub", slot="s1", until_lsn=until, max_batch_rows=200):
        delta.apply(batch, **where)
        twice.add(delta.apply(batch, **where))
    out["twice"] = vars(twice)
    out["again"] = vars(run(until_lsn=until))
    # A change table merged into a table named by the caller, one batch twice.
    direct = delta.ApplyStats()
    changes = stream(dsn, publication="pub", slot="direct", until_lsn=until, snapshot=False)
    for batch in changes:
        items = batch.tables.get("public.items")
        if items is not None:
            # The first batch twice: a micro-batch run again.
            for _ in range(1 if direct.batches else 2):
                merged = delta.merge_changes(
                    items, table="spark_catalog.lake.`direct_items`", spark=spark
                )
                direct.add(merged)
        batch.ack()
    out["direct"] = vars(direct)
    out["tables"] = sorted(
        r["tableName"]
        for r in spark.sql("SHOW TABLES IN spark_catalog.lake").collect()
        # The sink's as-of points are a table of the schema too.
        if r["tableName"] not in ("direct_items", "_pgwire_cdc_points")
    )
    # Every table read back by name, the metastore giving its location.
    spark.catalog.clearCache()
    detail = spark.sql("DESCRIBE DETAIL spark_catalog.lake.public_items").collect()[0]
    out["location"] = detail["location"]
    out["mismatched"] = _mismatched(spark, conn)
    spark.stop()
    return out


if __name__ == "__main__":
    dsn, directory = sys.argv[1], Path(sys.argv[2])
    print(json.dumps(_write(dsn, directory)))
