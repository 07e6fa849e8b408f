"""Spark Connect servers of their own (started from the pip pyspark): a fresh client
session that never calls ``register()`` finds ``format("pgwire_cdc")`` on the server; and
``pgwire_cdc.spark.session(remote=...)`` checks the server at once, with an error that says
what to do when its Python workers lack pgwire_cdc or it has no Delta Lake. (The rest of
the Spark suite runs on a shared Connect server: the ``spark`` fixture's ``connect`` mode.)

Each client runs in a process of its own: a process keeps one default Connect session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Database
from support.spark_connect import ConnectServer

pytestmark = [pytest.mark.server, pytest.mark.java]

#: argv: server URL, DSN. A plain Connect client: no pgwire_cdc session, no register().
PLAIN_CLIENT = r"""
import json, sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
rows = (spark.read.format("pgwire_cdc").option("dsn", sys.argv[2])
        .option("table", "public.found").option("partitions", 2).load()
        .orderBy("id").collect())
from pgwire_cdc.errors import ConfigError
from pgwire_cdc.spark.sessions import check_server
check_server(spark)  # pgwire_cdc imports there, same Python: fine
try:
    check_server(spark, delta=True)
    delta = None
except ConfigError as e:
    delta = str(e)
print(json.dumps({"rows": [list(r) for r in rows], "delta": delta}))
spark.stop()
"""

#: argv: server URL.
SESSION_CLIENT = r"""
import sys
from pgwire_cdc.errors import ConfigError
from pgwire_cdc.spark import session
try:
    session(remote=sys.argv[1])
    print("no error")
except ConfigError as e:
    print(e)
"""


def client(script: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_CONNECT_MODE_ENABLED",)}
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("pg", ["pg18"], indirect=True)
def test_a_plain_client_finds_the_source_and_the_check_names_delta(db: Database) -> None:
    db.conn.execute(
        "CREATE TABLE found (id int PRIMARY KEY, v text);"
        " INSERT INTO found VALUES (1, 'a'), (2, 'b'), (3, 'c')"
    )
    server = ConnectServer("local[1]", delta=False)
    server.start()
    try:
        out = json.loads(client(PLAIN_CLIENT, server.url, db.dsn))
    finally:
        server.stop()
    assert out["rows"] == [[1, "a"], [2, "b"], [3, "c"]]
    assert out["delta"].startswith("the Spark server has no Delta Lake: start it with")


def test_a_server_whose_workers_lack_the_package(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    server = ConnectServer("local[1]", python=str(bare / "bin" / "python"))
    server.start()
    try:
        message = client(SESSION_CLIENT, server.url)
    finally:
        server.stop()
    assert message.startswith("the Spark server's Python workers cannot import pgwire_cdc")
