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

import pgwire_cdc
import pytest
from conftest import Database
from live.test_stream import current_lsn
from pgwire_cdc import delta
from pgwire_cdc.errors import ConfigError, DeltaError
from pgwire_cdc.spark.sessions import is_connect
from support.schema_workload import EVOLVING, ODD, ODD_MOVES, Step
from support.stream_workload import SCHEMA, TABLES, Workload, norm, source_rows


def delta_rows(path: Path, name: str) -> list[tuple[Any, ...]]:
    table = delta.read_table(delta.table_path(path, name))
    return sorted((tuple(norm(v) for v in row.values()) for row in table.to_pylist()), key=repr)


def assert_tables_equal_source(db: Database, path: Path, names: tuple[str, ...] = TABLES) -> None:
    for name in names:
        assert delta_rows(path, name) == source_rows(db.conn, name), name


#: The writers of the tests that run both, and the Spark session each uses (classic or
#: Spark Connect; None: delta-rs, no Spark).
SPARK_MODE_OF = {"delta-rs": None, "spark": "classic", "spark-connect": "connect"}


@pytest.fixture
def workload(db: Database) -> Workload:
    db.conn.execute(SCHEMA)
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE items, codes, notes")
    return Workload(db.conn, seed=db.cluster.version % 1000 + 7)


def run(db: Database, path: Path, **options: Any) -> delta.ApplyStats:
    options.setdefault("until_lsn", current_lsn(db))
    options.setdefault("max_batch_rows", 53)
    return delta.run(db.dsn, path, publication="pub", slot="s1", **options)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "text"])
def test_delta_rs_tables_equal_source(
    db: Database, workload: Workload, tmp_path: Path, binary: bool, spark: Any
) -> None:
    workload.run(60)
    first = run(db, tmp_path, binary=binary)
    assert first.inserted > 0 and first.updated == 0
    assert_tables_equal_source(db, tmp_path)
    workload.run(200)
    later = run(db, tmp_path, binary=binary)
    assert later.updated and later.deleted and later.truncated
    assert later.skipped == 0
    assert_tables_equal_source(db, tmp_path)
    # Every table records the commit LSN it is complete up to.
    for name in TABLES:
        pos = delta.position(delta.table_path(tmp_path, name))
        assert pos is not None and pos.lsn is not None
    # Spark reads what delta-rs wrote, equal to the source.
    for name in TABLES:
        table = spark.read.format("delta").load(delta.table_path(tmp_path, name)).toArrow()
        got = sorted((tuple(norm(v) for v in r.values()) for r in table.to_pylist()), key=repr)
        assert got == source_rows(db.conn, name), name


def test_toast_fill_needs_no_replica_identity_full(
    db: Database, workload: Workload, tmp_path: Path
) -> None:
    """Rows whose toasted column was never sent again keep the table's value."""
    workload.run(30)
    run(db, tmp_path)
    db.conn.execute("UPDATE items SET qty = coalesce(qty, 0) + 1")
    db.conn.execute("UPDATE items SET id = id + 1000000 WHERE id % 3 = 0")
    stats = run(db, tmp_path)
    assert stats.updated > 0
    assert_tables_equal_source(db, tmp_path)
    big = dict(db.conn.execute("SELECT id, big FROM items").fetchall())
    table = delta.read_table(delta.table_path(tmp_path, "public.items"))
    assert dict(zip(table["id"].to_pylist(), table["big"].to_pylist(), strict=True)) == big


def test_a_batch_delivered_again_changes_nothing(
    db: Database, workload: Workload, tmp_path: Path
) -> None:
    """Batches applied but never acked (a crash before the ack), among them the parts of
    transactions that a small max_batch_rows cut in two, come again: every row at or
    below a table's recorded position is skipped."""
    workload.run(30)
    run(db, tmp_path)
    # Transactions of 400 changes each, cut every 37 rows.
    for i in range(3):
        with db.conn.transaction():
            db.conn.execute(
                f"INSERT INTO items (id, name, big) SELECT g, 'bulk', repeat('x', 3000)"
                f" FROM generate_series({10_000 + i * 1000}, {10_199 + i * 1000}) g"
            )
            db.conn.execute(f"UPDATE items SET qty = {i} WHERE id >= {10_000 + i * 1000}")
            db.conn.execute(
                "INSERT INTO notes (body, n) SELECT 'bag', 1 FROM generate_series(1, 50)"
            )
    until = current_lsn(db)
    sink = delta.DeltaSink(tmp_path)
    applied = 0
    for batch in pgwire_cdc.stream(
        db.dsn, publication="pub", slot="s1", until_lsn=until, max_batch_rows=37
    ):
        sink.apply(batch)  # never acked
        applied += 1
        if applied == 11:
            break
    again = run(db, tmp_path, until_lsn=until, max_batch_rows=37)
    assert again.skipped > 0
    assert_tables_equal_source(db, tmp_path)
    # Nothing left over: every position is complete.
    for name in ("public.items", "public.notes"):
        pos = delta.position(delta.table_path(tmp_path, name))
        assert pos is not None and pos.lsn is not None and pos.lsn <= until


@pytest.mark.parametrize("writer", list(SPARK_MODE_OF))
def test_schema_changes_evolve_the_tables(
    db: Database, tmp_path: Path, writer: str, spark_in: Any
) -> None:
    """The steps of ``schema_workload.EVOLVING``: columns added, widened and dropped."""
    keep_with(db, tmp_path, writer, spark_in, EVOLVING)


def test_an_existing_slot_without_tables_is_refused(
    db: Database, workload: Workload, tmp_path: Path
) -> None:
    workload.run(5)
    run(db, tmp_path / "a")
    with pytest.raises(DeltaError, match="exists but there is no Delta table"):
        run(db, tmp_path / "b")


def test_the_spark_writer_needs_a_session(db: Database, workload: Workload, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs a SparkSession"):
        run(db, tmp_path, writer="spark")
    with pytest.raises(ConfigError, match="unknown Delta writer"):
        run(db, tmp_path, writer="parquet")


class RefusingConf:
    """A session's settings that refuse one key, as Databricks serverless refuses the
    settings not on its list."""

    def __init__(self, refused: str) -> None:
        self.refused = refused
        self.values: dict[str, str] = {}

    def get(self, key: str, default: str | None = None) -> str | None:
        if key == self.refused:
            raise RuntimeError(f"[CONFIG_NOT_AVAILABLE] {key}")
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        if key == self.refused:
            raise RuntimeError(f"[CONFIG_NOT_AVAILABLE] {key}")
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.values.pop(key, None)


def test_the_spark_writer_merges_where_a_setting_that_saves_work_is_refused() -> None:
    from pgwire_cdc.delta.writers import MATERIALIZE_SOURCE, SparkWriter
    from pgwire_cdc.lakehouse.positions import Commit

    conf = RefusingConf(MATERIALIZE_SOURCE)
    writer = SparkWriter(type("Session", (), {"conf": conf})())
    seen: list[dict[str, str]] = []
    writer._with_confs(
        writer._confs(Commit("pgwire_cdc", 42)),
        lambda: seen.append(dict(conf.values)),
        optional={MATERIALIZE_SOURCE: "none"},
    )
    assert seen == [
        {
            "spark.databricks.delta.write.txnAppId": "pgwire_cdc",
            "spark.databricks.delta.write.txnVersion": "42",
        }
    ]
    assert conf.values == {}


def test_spark_writer_tables_equal_source(
    db: Database, workload: Workload, tmp_path: Path, spark: Any
) -> None:
    # Over Connect each MERGE is a round of RPCs: fewer, larger batches there, and a
    # smaller workload (what Connect changes is how the settings and the snapshot's sizing
    # reach the server, not what the MERGEs do).
    connect = is_connect(spark)
    batch_rows = 5000 if connect else 500
    workload.run(15 if connect else 40)
    first = run(db, tmp_path, writer="spark", spark=spark, max_batch_rows=batch_rows)
    assert first.inserted == 0, "Spark tasks wrote the snapshot, not the driver"
    assert_tables_equal_source(db, tmp_path)
    workload.run(30 if connect else 80)
    # The writer sets its MERGEs' settings around each MERGE and leaves the session's own.
    materialize = "spark.databricks.delta.merge.materializeSource"
    spark.conf.set(materialize, "all")
    try:
        later = run(db, tmp_path, writer="spark", spark=spark, max_batch_rows=batch_rows)
        assert spark.conf.get(materialize) == "all"
    finally:
        spark.conf.unset(materialize)
    for key in ("txnAppId", "txnVersion"):
        assert spark.conf.get(f"spark.databricks.delta.write.{key}", None) is None
    assert later.updated > 0 and later.deleted > 0
    assert_tables_equal_source(db, tmp_path)
    # Tables Spark wrote have deletion vectors on, and Spark reads them equal too.
    for name in TABLES:
        path = delta.table_path(tmp_path, name)
        props = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0]["properties"]
        assert props.get("delta.enableDeletionVectors") == "true", name
        rows = spark.read.format("delta").load(path).count()
        assert rows == len(source_rows(db.conn, name)), name
    # The as-of points the Spark writer records: every table at the run's last batch, read
    # by delta-rs and by Spark (versionAsOf) at the versions the newest point names.
    at = delta.read(tmp_path, TABLES)
    frames = delta.read(tmp_path, TABLES, spark=spark)
    assert frames.lsn == at.lsn
    for name in TABLES:
        want = source_rows(db.conn, name)
        got = sorted((tuple(norm(v) for v in r.values()) for r in at[name].to_pylist()), key=repr)
        assert got == want, name
        assert frames[name].count() == len(want), name


@pytest.mark.parametrize("writer", list(SPARK_MODE_OF))
def test_odd_names_and_moved_toast(
    db: Database, tmp_path: Path, writer: str, spark_in: Any
) -> None:
    """Column names and key values with quotes, spaces and backslashes; rows whose key
    changes with their toasted column left unchanged take it from the old key's row."""
    keep_with(db, tmp_path, writer, spark_in, (ODD, ODD_MOVES))


def keep_with(
    db: Database, tmp_path: Path, writer: str, spark_in: Any, steps: tuple[Step, ...]
) -> None:
    """Runs each step at the source, keeps the Delta tables with ``writer``, and checks
    them against the step's ``SELECT`` on the source."""
    mode = SPARK_MODE_OF[writer]
    spark = spark_in(mode) if mode else None
    for step in steps:
        step.run(db.conn)
        # delta-rs: a point after every batch (a Spark job each for the Spark writer, which
        # writes one when 30 s have passed and when the run ends).
        every = 30.0 if mode else 0.0
        run(db, tmp_path, writer="spark" if mode else writer, spark=spark, as_of_every=every)
        step.check(db.conn, lambda name: delta.read_table(delta.table_path(tmp_path, name)))
    # The as-of points this writer recorded (read by delta-rs, and by the writer's own
    # session with versionAsOf): the newest is the last step's source.
    at = delta.read(tmp_path, list(steps[-1].want))
    steps[-1].check(db.conn, lambda name: at[name])
    if spark is not None:
        frames = delta.read(tmp_path, list(steps[-1].want), spark=spark)
        steps[-1].check(db.conn, lambda name: frames[name].toArrow())


def test_a_copy_in_progress_is_found_behind_other_commits(db: Database, tmp_path: Path) -> None:
    """A table half copied by an incremental snapshot, then more commits of other writers
    (with their own userMetadata) than a short look back at the log would read: the next
    run still finds where the copy stands, completes it, and the table equals the
    source."""
    from deltalake import write_deltalake
    from deltalake.transaction import CommitProperties

    db.conn.execute(
        "CREATE TABLE lp_a (id int PRIMARY KEY, v text);"
        " CREATE TABLE lp_b (id int PRIMARY KEY, v text);"
        " INSERT INTO lp_a SELECT g, 'a' || g FROM generate_series(1, 300) g;"
        " INSERT INTO lp_b SELECT g, 'b' || g FROM generate_series(1, 1000) g"
    )
    common: dict[str, Any] = {"publication": "lp", "slot": "lp_slot"}
    delta.run(db.dsn, tmp_path, tables=["public.lp_a"], until_lsn=current_lsn(db), **common)
    db.conn.execute("ALTER PUBLICATION lp ADD TABLE lp_b")
    sink = delta.DeltaSink(tmp_path)
    batches = pgwire_cdc.stream(db.dsn, held_tables=sink.held_tables(), chunk_rows=100, **common)
    for batch in batches:
        sink.apply(batch)
        batch.ack()
        if batch.snapshot_progress.get("public.lp_b"):
            break  # stopped in the middle of lp_b's copy
    batches.close()
    path = delta.table_path(tmp_path, "public.lp_b")
    half = delta.position(path)
    assert half is not None and isinstance(half.progress, list) and half.progress
    assert delta.read_table(path).num_rows < 1000
    # Commits of another writer: empty appends, and a compaction.
    empty = delta.read_table(path, "false")
    for i in range(25):
        write_deltalake(
            path,
            empty,
            mode="append",
            commit_properties=CommitProperties(custom_metadata={"userMetadata": f"job {i}"}),
        )
    from deltalake import DeltaTable

    DeltaTable(path).optimize.compact()
    assert DeltaTable(path).version() >= 26
    after = delta.position(path)
    assert after is not None and after.progress == half.progress
    db.conn.execute("UPDATE lp_b SET v = 'late' WHERE id IN (5, 500, 999)")
    delta.run(db.dsn, tmp_path, idle_timeout=1, chunk_rows=100, **common)
    for name in ("lp_a", "lp_b"):
        got = delta.read_table(delta.table_path(tmp_path, f"public.{name}")).to_pylist()
        want = db.conn.execute(f"SELECT id, v FROM {name}").fetchall()  # type: ignore[arg-type]
        assert sorted((r["id"], r["v"]) for r in got) == sorted(want), name
    done = delta.position(path)
    assert done is not None and done.progress is None
