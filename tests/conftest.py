"""Shared pytest fixtures: throwaway PostgreSQL 15 and 18 clusters, one database per test.

- `pg15_cluster`, `pg18_cluster`: session-scoped, started the first time a test asks.
- `pg`: parametrized over both servers (ids ``pg15`` / ``pg18``); past the decoder (the
  sink, Spark, CLI and docs suites) on PostgreSQL 18 only, but for the tests
  ``support/server_variants.py`` lists.
- `db`: a fresh database on `pg` with an autocommit psycopg 3 connection; dropped afterwards
  (together with its replication slots and prepared transactions).
- `spark`: Spark (UTC, Arrow on, Delta Lake and Iceberg configured), parametrized: one classic
  ``local[2]`` session and one Spark Connect session on a local Connect server (ids
  ``classic`` / ``connect``), each started the first time a test asks. A test's Connect
  variant runs only if ``support/spark_modes.py`` lists the test, with its reason.

Tests that use a server (PostgreSQL or Spark) are marked ``server`` automatically, so
``pytest -m "not server"`` runs only the offline suites. Tests that start Spark need Java
(``support/requires.py``: skipped without it, a failure in CI).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import requires
from support.server import SERVERS, PgCluster
from support.server_variants import keep_server
from support.spark_modes import SPARK_MODES, keep

# The Delta Lake jars `make jars` fetches (the Makefile exports the same path), for every
# Spark session of the tests and the programs they start.
os.environ.setdefault(
    "PGWIRE_CDC_DELTA_JARS", str(Path(__file__).resolve().parent.parent / ".cache/jars/delta")
)
# The Iceberg jars (`make jars`), likewise: one classic session per test process serves the
# Delta and the Iceberg tests (a JVM's jars are fixed when it starts).
os.environ.setdefault(
    "PGWIRE_CDC_ICEBERG_JARS", str(Path(__file__).resolve().parent.parent / ".cache/jars/iceberg")
)


@dataclass
class Database:
    """A fresh database on a running cluster."""

    cluster: PgCluster
    name: str
    conn: psycopg.Connection[Any]

    @property
    def dsn(self) -> str:
        return self.cluster.dsn_for(self.name)

    def connect(self) -> psycopg.Connection[Any]:
        """Another autocommit connection to this database."""
        return self.cluster.connect(self.name)


def _cluster(server: str) -> Iterator[PgCluster]:
    cluster = PgCluster.for_server(server)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def pg15_cluster() -> Iterator[PgCluster]:
    yield from _cluster("pg15")


@pytest.fixture(scope="session")
def pg18_cluster() -> Iterator[PgCluster]:
    yield from _cluster("pg18")


@pytest.fixture(params=SERVERS, ids=SERVERS)
def pg(request: pytest.FixtureRequest) -> PgCluster:
    """A running cluster: once with PostgreSQL 15, once with PostgreSQL 18."""
    cluster: PgCluster = request.getfixturevalue(f"{request.param}_cluster")
    return cluster


@contextlib.contextmanager
def fresh_database(cluster: PgCluster) -> Iterator[Database]:
    """A new database on `cluster` (started again first if a test shut it down), dropped
    afterwards while the server is up."""
    if not cluster.running:
        cluster.start()
    name = cluster.create_database()
    conn = cluster.connect(name)
    try:
        yield Database(cluster, name, conn)
    finally:
        conn.close()
        if cluster.running:
            cluster.drop_database(name)


@pytest.fixture
def db(pg: PgCluster) -> Iterator[Database]:
    """A fresh database on `pg` (so tests don't interfere) with an autocommit connection."""
    with fresh_database(pg) as database:
        yield database


@pytest.fixture(scope="session")
def classic_spark() -> Iterator[Any]:
    """A real local Spark session (PySpark 4, the JVM from the machine's Java 17)."""
    from pgwire_cdc.spark import session

    requires.java()

    # Python workers run this interpreter (the venv with pgwire_cdc installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = session(
        "pgwire_cdc-tests",
        "local[2]",
        delta=True,
        iceberg=True,
        **{
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.memory": "2g",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        spark.stop()


#: The Iceberg catalog of the tests' Spark sessions (pyiceberg opens it under this name).
ICEBERG_CATALOG = "lake"


@pytest.fixture(scope="session")
def iceberg_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The local JDBC-on-SQLite Iceberg catalog of the whole run: each test keeps its
    tables in a namespace of its own."""
    return tmp_path_factory.mktemp("iceberg")


@pytest.fixture
def iceberg_spark_in(spark_in: Any, iceberg_dir: Path) -> Any:
    """``iceberg_spark_in("classic" | "connect")``: that shared session with the catalog
    ``lake`` (a catalog's settings may be set on a running session, Connect included,
    before its first use in the session)."""
    from pgwire_cdc.iceberg import local_catalog_conf

    def get(mode: str) -> Any:
        session = spark_in(mode)
        for key, value in local_catalog_conf(ICEBERG_CATALOG, iceberg_dir).items():
            session.conf.set(key, value)
        return session

    return get


@pytest.fixture
def iceberg_spark(iceberg_spark_in: Any) -> Any:
    """The classic session with the catalog ``lake``."""
    return iceberg_spark_in("classic")


@pytest.fixture
def iceberg_catalog(iceberg_dir: Path) -> Any:
    """pyiceberg's view of the same catalog."""
    from pgwire_cdc.iceberg import local_catalog

    return local_catalog(ICEBERG_CATALOG, iceberg_dir)


#: PySpark marks a process as a Spark Connect client with this variable once it creates a
#: Connect session; `pyspark.sql.functions` and the session builder follow it. The `spark`
#: fixture sets it only while a test runs against the Connect session, so classic tests (and
#: the Spark programs tests start) stay classic.
CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"


@pytest.fixture(scope="session")
def connect_spark() -> Iterator[Any]:
    """A Spark Connect session (``pgwire_cdc.spark.session(remote=...)``) on a Connect
    server started from the pip pyspark, with Delta Lake and Iceberg: the same Spark,
    reached the way Databricks serverless and Spark 4 clients reach it."""
    from pgwire_cdc.spark import session
    from pgwire_cdc.spark.sessions import CODEGEN_CACHE, CODEGEN_CACHE_ENTRIES
    from support.spark_connect import ConnectServer

    requires.java()
    server = ConnectServer(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.memory": "2g",
            # What pgwire_cdc.spark.session() sets on a local session, which a Connect
            # client cannot: Delta's first read of each table in 2 tasks, not 50, and
            # MERGE's generated classes kept.
            "spark.databricks.delta.snapshotPartitions": "2",
            CODEGEN_CACHE: CODEGEN_CACHE_ENTRIES,
        },
        # foreachBatch functions defined in the tests travel by reference to their module.
        python_path=[str(Path(__file__).resolve().parent)],
    )
    server.start()
    spark = None
    try:
        spark = session("pgwire_cdc-tests", delta=True, iceberg=True, remote=server.url)
        os.environ.pop(CONNECT_MODE, None)
        yield spark
    finally:
        if spark is not None:
            os.environ[CONNECT_MODE] = "1"
            spark.stop()
        os.environ.pop(CONNECT_MODE, None)
        server.stop()


@pytest.fixture
def spark_in(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``spark_in("classic" | "connect")``: that shared session, for tests that choose a
    Spark by a parameter of their own."""

    def get(mode: str) -> Any:
        if mode == "classic":
            monkeypatch.delenv(CONNECT_MODE, raising=False)
            return request.getfixturevalue("classic_spark")
        assert mode == "connect", mode
        session = request.getfixturevalue("connect_spark")
        monkeypatch.setenv(CONNECT_MODE, "1")
        return session

    return get


@pytest.fixture(params=SPARK_MODES)
def spark(request: pytest.FixtureRequest, spark_in: Any) -> Any:
    """Spark for a test: a classic ``local[2]`` session, and for the tests
    ``support/spark_modes.py`` lists a Spark Connect session on a local Connect server as
    well (both shared by the whole run)."""
    return spark_in(request.param)


TESTS = Path(__file__).resolve().parent


def _test_name(item: pytest.Item) -> str:
    """``path/under/tests.py::test_function``, as ``support/spark_modes.py`` names tests."""
    path = Path(str(getattr(item, "path", item.nodeid.split("::")[0]))).resolve()
    name = getattr(item, "originalname", item.name.split("[")[0])
    try:
        return f"{path.relative_to(TESTS).as_posix()}::{name}"
    except ValueError:
        return f"{path.as_posix()}::{name}"


#: Fixtures that start a server: PostgreSQL (here, or clusters of a suite's own), or Spark
#: (a JVM, or a Connect server). Tests that start one in their body say ``server``.
SPARK_FIXTURES = {
    *("spark", "spark_in", "classic_spark", "connect_spark", "iceberg_spark", "iceberg_spark_in"),
    # The object-store suite's session: conftest.py's classic one, looked up by name.
    "local_spark",
}
SERVER_FIXTURES = {
    *("pg", "db", "pg15_cluster", "pg18_cluster"),
    *("tls_pg", "own_cluster", "own_db", "replica_cluster", "lossy_cluster", "cluster"),
    *SPARK_FIXTURES,
}


#: Tests marked ``java`` that start Spark in processes of their own (no shared session)
#: and run with the PostgreSQL-only tests (``-m "server and not spark"``) instead of the
#: Spark ones: the two halves of the server tier run at once, and these even their
#: lengths out (the Spark half is the longer by a few minutes without them).
BESIDE_POSTGRES = {
    "spark/test_spark_submit.py::test_a_pipeline_file_runs_as_a_spark_job",
    "spark/test_spark_jars.py::test_jars_then_a_session_writes_and_reads_delta",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks ``server`` the tests that use a server (PostgreSQL or Spark: a fixture of
    `SERVER_FIXTURES`, or the ``java`` marker), and ``spark`` those that start Spark (a
    fixture of `SPARK_FIXTURES`, or the ``java`` marker unless `BESIDE_POSTGRES` lists the
    test); leaves out the Spark Connect variants of
    the tests ``support/spark_modes.py`` does not list, and the PostgreSQL 15 variants
    of the sink, Spark, CLI and docs tests ``support/server_variants.py`` does not list
    (reported as deselected). First of the hooks, so that ``-m`` sees the markers."""
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        name = _test_name(item)
        (kept if keep(name, params) and keep_server(name, params) else dropped).append(item)
        names = set(getattr(item, "fixturenames", ()))
        java = item.get_closest_marker("java") is not None
        if SERVER_FIXTURES & names or java:
            item.add_marker(pytest.mark.server)
        if SPARK_FIXTURES & names or (java and name not in BESIDE_POSTGRES):
            item.add_marker(pytest.mark.spark)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests marked ``java`` start Spark in processes of their own: Java first."""
    if item.get_closest_marker("java") is not None:
        requires.java()
