"""``register()`` makes ``format("pgwire_cdc")`` resolve on any session, and only registers
where Spark did not find the source by itself.

Spark looks for top-level ``pyspark_*`` modules with ``$PYSPARK_DRIVER_PYTHON``, else
``$PYSPARK_PYTHON``, else ``python3``, and a classic session starts a registered source's
Python workers with ``$PYSPARK_PYTHON`` or ``python3``: never with
``spark.pyspark.python``. A session of one's own that names the virtual environment's
Python in its builder, in a process without those variables and without the environment
activated, finds nothing; ``register()`` registers the source there, to run in the
Python the session names. The package's entry points call it on the session they are
given. Such a process must start with a clean environment (a JVM is per process, and
this one's already runs with the variables set), so each scenario runs in a process of
its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Database, fresh_database

pytestmark = pytest.mark.server

#: argv: DSN, then "plain" (a session of one's own, read, then register() and read again)
#: or "found" (Spark found the source: register() twice, then read).
SCRIPT = r"""
import json, sys
from pyspark.sql import SparkSession
from pgwire_cdc.spark import register
from pgwire_cdc.spark.sessions import _condition, source_found

dsn, mode = sys.argv[1], sys.argv[2]
spark = (SparkSession.builder.master("local[1]").appName("pgwire_cdc-registration")
         .config("spark.ui.enabled", "false")
         .config("spark.pyspark.python", sys.executable)
         .getOrCreate())

def read():
    frame = (spark.read.format("pgwire_cdc").option("dsn", dsn)
             .option("table", "public.found").option("partitions", 2).load())
    return sorted(tuple(r) for r in frame.collect())

out = {"found": source_found(spark)}
if mode == "plain":
    try:
        out["before"] = read()
    except Exception as e:
        out["before"] = _condition(e)
register(spark)
register(spark)
out["rows"] = read()
print(json.dumps(out))
spark.stop()
"""


def _clean_environment() -> dict[str, str]:
    """What a shell without the virtual environment activated has: no
    ``$PYSPARK_PYTHON`` or ``$PYSPARK_DRIVER_PYTHON``, and no ``python3`` on ``PATH``
    that could import pgwire_cdc."""
    venv_bin = str(Path(sys.executable).parent)
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin]
    env = {"PATH": os.pathsep.join(path), "HOME": os.environ.get("HOME", "/")}
    for name in ("JAVA_HOME", "LANG", "TMPDIR"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def _run(db: Database, mode: str, env: dict[str, str]) -> tuple[dict[str, Any], str]:
    db.conn.execute(
        "CREATE TABLE found (id int PRIMARY KEY, v text);"
        " INSERT INTO found VALUES (1, 'a'), (2, 'b'), (3, 'c')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, db.dsn, mode],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_a_session_of_ones_own_without_pyspark_python(pg18_cluster: Any) -> None:
    """The builder names the venv's Python, the environment names none: Spark does not
    find the source (the read fails with DATA_SOURCE_NOT_FOUND), register() registers it,
    and the same read, planned and read by that Python, returns the table. (One server:
    nothing here depends on its version.)"""
    with fresh_database(pg18_cluster) as db:
        out, _ = _run(db, "plain", _clean_environment())
    assert out == {
        "found": False,
        "before": "DATA_SOURCE_NOT_FOUND",
        "rows": [[1, "a"], [2, "b"], [3, "c"]],
    }


def test_register_leaves_the_source_spark_found_alone(pg18_cluster: Any) -> None:
    """With ``$PYSPARK_PYTHON`` set Spark finds the source itself; register() then
    registers nothing, so Spark logs no warning that a registration replaced it."""
    env = dict(_clean_environment(), PYSPARK_PYTHON=sys.executable)
    with fresh_database(pg18_cluster) as db:
        out, stderr = _run(db, "found", env)
    assert out == {"found": True, "rows": [[1, "a"], [2, "b"], [3, "c"]]}
    assert "replaced a" not in stderr, stderr[-3000:]


def test_the_check_tells_a_found_source_from_a_missing_one(spark: Any) -> None:
    """On classic and Spark Connect sessions alike (where Spark raises the missing
    source's error differently): the source resolves, a name no source has does not."""
    from pgwire_cdc.spark.sessions import source_found

    assert source_found(spark)
    assert not source_found(spark, "pgwire_cdc_nowhere")
