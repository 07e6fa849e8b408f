"""Delta tables on an S3-compatible object store (a local moto server, tests/support/s3.py)
kept by both writers against real PostgreSQL 15 and 18: the tables equal the source, read
through delta-rs and through Spark (``s3a://``) whichever writer wrote them; the CLI
with ``--delta s3://...`` and credentials from the environment; the crash torture of
test_crash_torture.py with its tables on the store.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli.test_cli import pgwire_lsn, run_cli
from conftest import Database
from live.test_stream import current_lsn
from pgwire_cdc import delta, errors
from support import requires
from support.s3 import S3Server
from support.stream_workload import SCHEMA, TABLES, Workload, norm, source_rows

from delta.test_crash_torture import only_in_make_torture, torture

#: SIGKILLs of the torture on the store (``PGWIRE_CDC_TORTURE_KILLS``).
S3_KILLS = int(os.environ.get("PGWIRE_CDC_TORTURE_KILLS", "5"))


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    requires.moto_server()
    with S3Server() as server:
        yield server


@pytest.fixture
def location(s3: S3Server) -> str:
    """A base location in a new bucket of its own."""
    return f"s3://{s3.bucket()}/lake"


@pytest.fixture
def local_spark(request: pytest.FixtureRequest) -> Any:
    """conftest.py's classic local Spark session (where conftest.py also offers a Spark
    Connect one, this suite keeps to the classic: the S3A settings reach the same
    server-side Hadoop configuration either way, and each Spark mode costs minutes here)."""
    try:
        return request.getfixturevalue("classic_spark")
    except pytest.FixtureLookupError:
        return request.getfixturevalue("spark")


@pytest.fixture
def workload(db: Database) -> Workload:
    db.conn.execute(SCHEMA)
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE items, codes, notes")
    return Workload(db.conn, seed=db.cluster.version % 1000 + 11)


def rows_of(table: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(norm(v) for v in row.values()) for row in table.to_pylist()), key=repr)


def assert_read_by_delta_rs(db: Database, location: str, options: dict[str, str]) -> None:
    for name in TABLES:
        table = delta.read_table(delta.table_path(location, name), storage_options=options)
        assert rows_of(table) == source_rows(db.conn, name), name


def assert_read_by_spark(db: Database, location: str, spark: Any) -> None:
    for name in TABLES:
        path = delta.spark_path(delta.table_path(location, name))
        assert path.startswith("s3a://")
        table = spark.read.format("delta").load(path).toArrow()
        assert rows_of(table) == source_rows(db.conn, name), name


def keep(db: Database, location: str, **options: Any) -> delta.ApplyStats:
    options.setdefault("max_batch_rows", 97)
    return delta.run(
        db.dsn, location, publication="pub", slot="s1", until_lsn=current_lsn(db), **options
    )


def test_s3a_conf_matches_the_storage_options() -> None:
    options = {
        "aws_endpoint_url": "http://127.0.0.1:9000",
        "AWS_ACCESS_KEY_ID": "id",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_REGION": "eu-west-1",
    }
    assert delta.s3a_conf(options) == {
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        "spark.hadoop.fs.s3a.access.key": "id",
        "spark.hadoop.fs.s3a.secret.key": "secret",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    }
    scoped = delta.s3a_conf({"AWS_SESSION_TOKEN": "t"}, bucket="b", prefix="")
    assert scoped == {
        "fs.s3a.bucket.b.session.token": "t",
        "fs.s3a.bucket.b.aws.credentials.provider": (
            "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        ),
    }
    assert delta.spark_path("s3://b/lake/public.t") == "s3a://b/lake/public.t"
    assert delta.spark_path("s3a://b/t") == "s3a://b/t"
    assert delta.spark_path("/data/lake") == "/data/lake"


def test_delta_rs_writer_on_s3(
    db: Database, workload: Workload, s3: S3Server, location: str, local_spark: Any
) -> None:
    """delta-rs with ``storage_options``: the initial snapshot, then every kind of change;
    Spark reads the tables at their ``s3a://`` location."""
    workload.run(50)
    first = keep(db, location, storage_options=s3.options)
    assert first.inserted > 0
    workload.run(150)
    later = keep(db, location, storage_options=s3.options)
    assert later.updated and later.deleted and later.truncated and later.skipped == 0
    assert_read_by_delta_rs(db, location, s3.options)
    for name in TABLES:
        pos = delta.position(delta.table_path(location, name), s3.options)
        assert pos is not None and pos.lsn is not None
    # The shared session learns the bucket's settings as the Spark writer would set them.
    bucket = location.split("/")[2]
    for key, value in delta.s3a_conf(s3.options, bucket=bucket, prefix="").items():
        local_spark.conf.set(key, value)
    assert_read_by_spark(db, location, local_spark)


def test_spark_writer_on_s3(
    db: Database, workload: Workload, s3: S3Server, location: str, local_spark: Any
) -> None:
    """The Spark writer on ``s3a://`` (the sink maps the location and sets the bucket's
    S3A settings on the session from the storage options): its Spark-task snapshot and
    MERGEs; delta-rs reads what it wrote."""
    workload.run(50)
    # Larger batches than the delta-rs test's: each Spark MERGE on the store takes seconds.
    options = {"writer": "spark", "spark": local_spark, "storage_options": s3.options}
    first = keep(db, location, max_batch_rows=400, **options)
    assert first.batches > 0
    workload.run(80)
    later = keep(db, location, max_batch_rows=400, **options)
    assert later.updated and later.deleted
    assert_read_by_delta_rs(db, location, s3.options)
    assert_read_by_spark(db, location, local_spark)


def test_cli_stream_to_s3(db: Database, s3: S3Server, location: str) -> None:
    """``pgwire-cdc stream --delta s3://...`` with the store's credentials and endpoint in
    the environment."""
    db.conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    db.conn.execute("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g")
    db.conn.execute("UPDATE t SET v = 'new' WHERE id <= 10")
    db.conn.execute("DELETE FROM t WHERE id > 90")
    proc = run_cli(
        "stream", "--dsn", db.dsn, "--publication", "pub", "--table", "public.t",
        "--slot", "cli_s3", "--delta", location, "--until-lsn", pgwire_lsn(db), "--json",
        env=s3.options,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["target"] == location
    table = delta.read_table(delta.table_path(location, "public.t"), storage_options=s3.options)
    source = db.conn.execute("SELECT id, v FROM t").fetchall()
    assert rows_of(table) == sorted(source, key=repr)
    assert table.num_rows == 90


@pytest.mark.server
@only_in_make_torture
@pytest.mark.timeout(900 + 120 * S3_KILLS)
def test_crash_torture_on_s3(
    pg15_cluster: Any,
    s3: S3Server,
    location: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """test_crash_torture.py's torture with its tables on the store (``S3_KILLS`` SIGKILLs:
    the local torture's twenty take minutes through the store's HTTP); the workers and the
    final comparison reach it through the environment."""
    for key, value in s3.options.items():
        monkeypatch.setenv(key, value)
    assert os.environ["AWS_ENDPOINT_URL"] == s3.endpoint
    report = torture(pg15_cluster, location, tmp_path / "deliveries.jsonl", S3_KILLS)
    assert report["restarts_after_sigkill"] >= S3_KILLS
    assert report["changes_delivered_again_skipped"] > 0


@pytest.fixture(scope="module")
def faulty_s3() -> Iterator[S3Server]:
    """A store with support/faulty_s3.py's fault injector in front of it."""
    requires.moto_server()
    with S3Server(faults=True) as server:
        yield server


@pytest.mark.parametrize(
    ("kind", "deletion_vectors"),
    [("errors", True), ("lost", True), ("lost", False)],
    ids=["errors-dv", "lost-dv", "lost-cow"],
)
def test_store_errors_and_lost_answers_are_retried(
    db: Database, workload: Workload, faulty_s3: S3Server, kind: str, deletion_vectors: bool
) -> None:
    """A store that answers a fifth of its requests 503 (``errors``) or does a fifth of
    its writes and answers them 500 (``lost``: the client cannot tell whether they
    happened; its retry finds the commit done and takes it for a concurrent writer's)
    under the delta-rs writer, both MERGEs: the run ends, and the tables equal the
    source."""
    location = f"s3://{faulty_s3.bucket()}/lake"
    options = {"storage_options": faulty_s3.options, "deletion_vectors": deletion_vectors}
    workload.run(50)
    keep(db, location, max_batch_rows=300, **options)
    before = faulty_s3.faults()["injected"].get(kind, 0)
    faulty_s3.faults({"kind": kind, "rate": 0.2, "seed": 7})
    try:
        workload.run(100)
        later = keep(db, location, max_batch_rows=300, **options)
    finally:
        counts = faulty_s3.faults({"kind": "none"})
    assert later.updated and later.deleted
    assert counts["injected"][kind] > before
    assert_read_by_delta_rs(db, location, faulty_s3.options)


@pytest.mark.parametrize("deletion_vectors", [True, False], ids=["dv", "cow"])
def test_a_store_away_longer_than_its_retries_is_a_delta_error(
    db: Database, workload: Workload, faulty_s3: S3Server, deletion_vectors: bool
) -> None:
    """A store that answers every request 503 for longer than delta-rs retries: the run
    stops with a ``DeltaError`` that names the table and says to run again; the next run,
    once the store is back, ends with the tables equal to the source."""
    location = f"s3://{faulty_s3.bucket()}/lake"
    options = {"storage_options": faulty_s3.options, "deletion_vectors": deletion_vectors}
    workload.run(30)
    keep(db, location, **options)
    workload.run(30)
    faulty_s3.faults({"kind": "outage", "seconds": 120})
    try:
        with pytest.raises(errors.DeltaError, match="run again") as raised:
            keep(db, location, **options)
    finally:
        faulty_s3.faults({"kind": "none"})
    assert "public." in str(raised.value)
    keep(db, location, **options)
    assert_read_by_delta_rs(db, location, faulty_s3.options)
