"""A pipeline file run as a Spark job: the real ``spark-submit`` of the pip pyspark runs
the driver script ``pgwire_cdc/spark/submit.py`` with ``run PIPELINE.toml`` on a
``local[2]`` master, the Delta jars given by ``--jars`` and nothing else (no ``--conf``:
the job's session gets Delta's extension and catalog when it is made). The run writes
through that session, with spark-submit's master: the initial snapshot read by Spark tasks,
the changes made meanwhile merged by the Spark writer, then ``idle_timeout`` ends it with
exit code 0 and the Delta table equals the source.

The standalone form (``--master spark://host:7077``) differs only by the master:
docs/pipelines.md, "As a Spark job"; ``spark/test_spark_cluster.py`` runs the Spark writer
on a standalone cluster.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import Database
from pgwire_cdc import delta
from pgwire_cdc.spark import delta_jars

PIPELINE = """\
[source]
dsn = "${{PGWIRE_CDC_TEST_DSN}}"
publication = "pub"
slot = "spark_job"

[sink]
kind = "delta"
path = "{lake}"
writer = "spark"

[run]
idle_timeout = 6
"""


def spark_submit() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"


def submit_script() -> str:
    """The driver script's path, as the documented command finds it."""
    found = subprocess.run(
        [sys.executable, "-m", "pgwire_cdc.spark.submit"],
        capture_output=True,
        text=True,
        check=True,
    )
    return found.stdout.strip()


@pytest.mark.java
def test_a_pipeline_file_runs_as_a_spark_job(db: Database, tmp_path: Path) -> None:
    jars = delta_jars()
    if not jars:
        pytest.skip("needs the Delta jars in $PGWIRE_CDC_DELTA_JARS (make jars)")
    db.conn.execute(
        "CREATE TABLE items (id int PRIMARY KEY, name text, qty int);"
        " INSERT INTO items SELECT g, 'item ' || g, g % 10 FROM generate_series(1, 500) g;"
        " CREATE PUBLICATION pub FOR TABLE items"
    )
    lake = tmp_path / "lake"
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(PIPELINE.format(lake=lake))
    script = submit_script()
    assert script.endswith(os.path.join("pgwire_cdc", "spark", "submit.py")), script
    command = [
        str(spark_submit()),
        "--master", "local[2]",
        "--jars", ",".join(jars),
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.log.level=WARN",
        script, "run", str(pipeline), "-v",
    ]  # fmt: skip
    # spark-submit runs the driver and the Python workers with $PYSPARK_PYTHON.
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PGWIRE_CDC_TEST_DSN": db.dsn}
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    # The driver's output (its log with -v) reaches spark-submit's stdout; to a file, so
    # that a full pipe never stalls the job.
    output = tmp_path / "job.log"
    with output.open("w") as sink:
        job = subprocess.Popen(
            command,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            start_new_session=True,  # the JVM and the driver's Python: one process group
        )
    try:
        # Once the snapshot is in the table, changes for the stream to merge.
        log = Path(delta.table_path(lake, "public.items")) / "_delta_log"
        deadline = time.monotonic() + 120
        while not log.is_dir():
            assert job.poll() is None, output.read_text()[-4000:]
            assert time.monotonic() < deadline, "the snapshot did not reach the lake"
            time.sleep(0.2)
        db.conn.execute(
            "INSERT INTO items SELECT g, 'new ' || g, 1 FROM generate_series(501, 600) g"
        )
        db.conn.execute("UPDATE items SET qty = qty + 100 WHERE id % 7 = 0")
        db.conn.execute("DELETE FROM items WHERE id % 11 = 0")
        job.wait(timeout=150)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    out = output.read_text()
    assert job.returncode == 0, out[-4000:]
    assert "writing through the Spark job's session (master local[2])" in out, out[-4000:]
    assert "public.items: initial snapshot written by Spark" in out, out[-4000:]
    rows = delta.read_table(delta.table_path(lake, "public.items")).to_pylist()
    source = db.conn.execute("SELECT id, name, qty FROM items ORDER BY id").fetchall()
    assert sorted((r["id"], r["name"], r["qty"]) for r in rows) == [tuple(r) for r in source]


def test_the_driver_script_without_pgwire_cdc_says_which_python(tmp_path: Path) -> None:
    """spark-submit runs ``python3`` unless told otherwise: a Python without the package
    gets one line naming it, not a traceback."""
    bare = subprocess.run(
        [sys.executable, "-I", "-S", submit_script(), "run", "pipeline.toml"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert bare.returncode == 1
    assert "cannot import pgwire_cdc" in bare.stderr and "PYSPARK_PYTHON" in bare.stderr
