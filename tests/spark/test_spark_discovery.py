"""Spark 4 finds the ``pgwire_cdc`` data source by itself: a brand-new session, in a process
of its own, that never calls ``register()``, reads a table with
``spark.read.format("pgwire_cdc")`` (the top-level ``pyspark_pgwire_cdc`` module); and
``register()`` on such a session is harmless."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import Database

pytestmark = [pytest.mark.server, pytest.mark.java]

SCRIPT = r"""
import json, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").appName("pgwire_cdc-discovery")
         .config("spark.ui.enabled", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
frame = (spark.read.format("pgwire_cdc").option("dsn", sys.argv[1])
         .option("table", "public.found").option("partitions", 2).load())
rows = sorted(tuple(r) for r in frame.collect())
from pgwire_cdc.spark import register
register(spark)  # already there: nothing to do, no error
again = spark.read.format("pgwire_cdc").option("dsn", sys.argv[1]).option(
    "table", "public.found").load().count()
print(json.dumps({"rows": rows, "again": again}))
spark.stop()
"""


def test_a_fresh_session_finds_the_source_without_register(db: Database) -> None:
    db.conn.execute(
        "CREATE TABLE found (id int PRIMARY KEY, v text);"
        " INSERT INTO found VALUES (1, 'a'), (2, 'b'), (3, 'c')"
    )
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, db.dsn],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"rows": [[1, "a"], [2, "b"], [3, "c"]], "again": 3}
