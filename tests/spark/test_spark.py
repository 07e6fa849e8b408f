"""Spark end to end (a real local Spark session, real PostgreSQL 15 and 18):

- ``batch.to_spark``: every Arrow type of the contract's type mapping and every metadata
  column arrives in Spark with the right Spark type, and comes back out of Spark equal;
- ``time`` columns reach Spark (and Delta tables) as strings, readable without Spark's
  TIME type;
- ``session()``'s Python workers find the package.

Delta Lake tables kept by MERGE are tested in ``test_delta.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pgwire_cdc
import pyarrow as pa
import pytest
from conftest import Database
from live.test_stream import current_lsn
from pgwire_cdc import delta
from pgwire_cdc.spark import spark_schema
from support.stream_workload import norm

TYPES_TABLE = """
CREATE TABLE typed (
    id int PRIMARY KEY,
    b bool, i2 int2, i4 int4, i8 int8, f4 float4, f8 float8,
    n numeric(20,4), n_free numeric, t text, vc varchar(10), bp char(3), nm name,
    by bytea, d date, tm time, ttz timetz, ts timestamp, tstz timestamptz,
    iv interval, u uuid, j json, jb jsonb, ip inet, mo money, rg int4range,
    ai int[], at text[], an numeric(6,2)[], ad date[], ots oid
);
"""

TYPED_ROWS = [
    "(1, true, -32768, 2147483647, -9223372036854775808, 'NaN', '-Infinity', "
    "'-1234567890123456.7891', '1e-30', 'ä \"q\" \\\\', 'vc', 'ab', 'nm', "
    "'\\x00ff10'::bytea, '0001-01-01', '24:00:00', '12:34:56+05:30', "
    "'2000-02-29 23:59:59.999999', '1999-12-31 23:59:59.5-08', "
    "'1 year 2 mons -3 days 04:05:06.000007', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', "
    "'{\"a\": [1, null]}', '{\"b\": 2}', '10.1.0.0/16', '12.34', '[1,5)', "
    "'{1,NULL,3}', '{\"x,y\",NULL,\"\"}', '{1.50,NULL}', '{2020-01-01}', 4294967295)",
    "(2, NULL, NULL, NULL, NULL, 'Infinity', 1.5e300, NULL, NULL, '', NULL, NULL, NULL, "
    "'', '9999-12-31', '00:00:00', NULL, '0001-01-01 00:00:00', NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, 'empty', '{}', '{}', NULL, NULL, 0)",
]


def _plain(table: pa.Table) -> pa.Table:
    """Dictionary columns decoded (Spark has no dictionary type)."""
    columns = [
        c.dictionary_decode() if pa.types.is_dictionary(c.type) else c
        for c in (col.combine_chunks() for col in table.columns)
    ]
    return pa.Table.from_arrays(columns, names=table.column_names)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "text"])
def test_to_spark_keeps_every_type_and_value(db: Database, spark: Any, binary: bool) -> None:
    # 24:00:00 is not a time64 value (the unrepresentable-value policy): keep it out here.
    db.conn.execute(TYPES_TABLE)
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE typed")
    db.conn.execute(
        "INSERT INTO typed VALUES " + TYPED_ROWS[0].replace("'24:00:00'", "'23:59:59.999999'")
    )
    seen: list[pa.Table] = []
    for batch in pgwire_cdc.stream(
        db.dsn, publication="pub", slot="s1", binary=binary, until_lsn=current_lsn(db)
    ):
        seen.append(batch.tables["public.typed"])
        batch.ack()
    db.conn.execute("INSERT INTO typed VALUES " + TYPED_ROWS[1])
    db.conn.execute("UPDATE typed SET i4 = 7, id = 3 WHERE id = 1")
    db.conn.execute("DELETE FROM typed WHERE id = 2")
    for batch in pgwire_cdc.stream(
        db.dsn, publication="pub", slot="s1", binary=binary, until_lsn=current_lsn(db)
    ):
        for df in batch.to_spark(spark).values():
            assert df.count() == batch.rows
        seen.append(batch.tables["public.typed"])
        batch.ack()
    changes = pa.concat_tables(seen)
    assert changes["_change_type"].to_pylist() == ["read", "insert", "update", "delete"]

    (df,) = pgwire_cdc.spark.to_spark(spark, {"public.typed": changes}).values()
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert types["n"] == "decimal(20,4)"
    assert types["tm"] == "string"  # HH:MM:SS.ffffff: every Spark reader reads it
    assert types["ts"] == "timestamp_ntz"
    assert types["tstz"] == "timestamp"
    assert types["iv"] == "struct<months:int,days:int,microseconds:bigint>"
    assert types["an"] == "array<decimal(6,2)>"
    assert types["_change_type"] == "string"
    assert types["_commit_ts"] == "timestamp"
    assert types["_before"].startswith("struct<id:int,b:boolean,")
    assert types["_unchanged"] == "array<string>"
    assert df.schema == spark_schema(changes.schema)

    back = df.toArrow()
    expected = _plain(changes)
    assert back.column_names == expected.column_names
    for name in expected.column_names:
        want = expected[name]
        got = back[name]
        if pa.types.is_time(want.type):
            want = want.cast(pa.string())
            assert all(v is None or len(v) == 15 for v in got.to_pylist())
        assert [norm(v) for v in got.to_pylist()] == [norm(v) for v in want.to_pylist()], name


def test_time_columns_need_no_spark_setting(db: Database, spark: Any, tmp_path: Path) -> None:
    """Parquet written from to_spark output, and a Delta table with a time column, read
    on a session with Spark's TIME type off (its default)."""
    spark.conf.set("spark.sql.timeType.enabled", "false")
    db.conn.execute("CREATE TABLE clock (id int PRIMARY KEY, t time, ts time[])")
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE clock")
    db.conn.execute(
        "INSERT INTO clock VALUES (1, '13:45', '{00:00:01.5}'), (2, '23:59:59.999999', NULL),"
        " (3, NULL, '{}')"
    )
    batches = list(
        pgwire_cdc.stream(db.dsn, publication="pub", slot="s1", until_lsn=current_lsn(db))
    )
    (df,) = batches[0].to_spark(spark).values()
    df.write.parquet(str(tmp_path / "out"))
    back = spark.read.parquet(str(tmp_path / "out")).orderBy("id").collect()
    assert [(r["id"], r["t"], r["ts"]) for r in back] == [
        (1, "13:45:00.000000", ["00:00:01.500000"]),
        (2, "23:59:59.999999", None),
        (3, None, []),
    ]
    sink = delta.DeltaSink(tmp_path / "lake")
    for batch in batches:
        sink.apply(batch)
    clock = spark.read.format("delta").load(sink.table_path("public.clock"))
    rows = clock.orderBy("id").collect()
    assert [r["t"] for r in rows] == ["13:45:00.000000", "23:59:59.999999", None]
    assert clock.selectExpr("max(t)").collect()[0][0] == "23:59:59.999999"


@pytest.mark.java
def test_session_workers_import_pgwire_cdc_without_an_active_venv(tmp_path: Path) -> None:
    """session() makes Spark's Python workers run this interpreter: with a PATH whose
    python3 lacks pgwire_cdc, a UDF importing it still runs."""
    script = (
        "from pgwire_cdc.spark import session\n"
        "spark = session('workers', 'local[1]', **{'spark.ui.enabled': 'false'})\n"
        "names = spark.sparkContext.parallelize([1]).map("
        "lambda _: __import__('pgwire_cdc').__name__).collect()\n"
        "print(names)\n"
        "spark.stop()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK")}
    env["PATH"] = "/usr/bin:/bin"
    env.pop("VIRTUAL_ENV", None)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "['pgwire_cdc']" in proc.stdout
