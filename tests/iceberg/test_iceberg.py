"""Iceberg tables kept by Spark MERGE (``pgwire_cdc.iceberg``) against real PostgreSQL 15
and 18, real Spark (a classic session and, for ``iceberg.run`` and ``foreachBatch``, a
Spark Connect one: ``support/spark_modes.py``) and real pyiceberg: PostgreSQL is the
oracle. The seeded random workload of the Delta tests (unchanged TOAST, key changes,
truncates, the keyless FULL table) kept as Iceberg tables equals ``SELECT`` on the
source, read by Spark and by pyiceberg (deletion vectors applied); a batch delivered
again changes nothing, cut transactions included; a table compacted and expired mid-run
keeps its position.
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pgwire_cdc
import pytest
from conftest import ICEBERG_CATALOG, Database
from live.test_stream import current_lsn
from pgwire_cdc import iceberg
from pgwire_cdc.errors import ConfigError
from support import bank
from support import history_oracle as oracle
from support.spark_modes import SPARK_MODES
from support.stream_workload import SCHEMA, TABLES, Workload, norm, source_rows

#: PySpark's loggers of the analysis errors it raises: each such error is logged at ERROR
#: level with its Java stack trace, caught by the caller or not.
PYSPARK_ERROR_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


@contextlib.contextmanager
def pyspark_errors() -> Iterator[list[logging.LogRecord]]:
    """The records PySpark's error loggers emit inside the block (they do not propagate,
    so caplog does not see them)."""
    # Made by PySpark's own factory: its loggers take keyword arguments a plain one refuses.
    from pyspark.logger import PySparkLogger

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    records: list[logging.LogRecord] = []
    handler = Collect(logging.DEBUG)
    loggers = [PySparkLogger.getLogger(name) for name in PYSPARK_ERROR_LOGGERS]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield records
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def rows_of(table: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(norm(v) for v in row.values()) for row in table.to_pylist()), key=repr)


class Lake:
    """One test's namespace in the shared catalog, seen by Spark and by pyiceberg."""

    def __init__(self, db: Database, spark: Any, catalog: Any) -> None:
        self.db = db
        self.spark = spark
        self.catalog = catalog
        self.namespace = re.sub(r"[^a-z0-9_]", "_", db.name.lower())

    def ref(self, name: str) -> str:
        return iceberg.table_ref(ICEBERG_CATALOG, self.namespace, name)

    def identifier(self, name: str) -> str:
        return f"{self.namespace}.{name.replace('.', '_').lower()}"

    def run(self, **options: Any) -> iceberg.ApplyStats:
        options.setdefault("until_lsn", current_lsn(self.db))
        options.setdefault("max_batch_rows", 500)
        return iceberg.run(
            self.db.dsn,
            ICEBERG_CATALOG,
            self.namespace,
            publication="pub",
            slot="s1",
            spark=self.spark,
            **options,
        )

    def spark_rows(self, name: str) -> list[tuple[Any, ...]]:
        return rows_of(self.spark.table(self.ref(name)).toArrow())

    def pyiceberg_rows(self, name: str) -> list[tuple[Any, ...]]:
        return rows_of(iceberg.read_table(self.catalog, self.identifier(name)))

    def assert_equal_source(self, names: tuple[str, ...] = TABLES) -> None:
        for name in names:
            want = source_rows(self.db.conn, name)
            assert self.spark_rows(name) == want, f"{name} read by Spark"
            assert self.pyiceberg_rows(name) == want, f"{name} read by pyiceberg"


@pytest.fixture
def lake(
    request: pytest.FixtureRequest, db: Database, iceberg_spark_in: Any, iceberg_catalog: Any
) -> Lake:
    """The test's tables, written through the classic session, or through the Spark
    Connect one when parametrized ``indirect`` with ``"connect"``."""
    return Lake(db, iceberg_spark_in(getattr(request, "param", "classic")), iceberg_catalog)


#: Tests with a classic and a Spark Connect variant (the latter runs where
#: ``support/spark_modes.py`` lists the test).
both_sparks = pytest.mark.parametrize("lake", SPARK_MODES, indirect=True)


@pytest.fixture
def workload(db: Database) -> Workload:
    db.conn.execute(SCHEMA)
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE items, codes, notes")
    return Workload(db.conn, seed=db.cluster.version % 1000 + 7)


@both_sparks
def test_tables_equal_source(db: Database, workload: Workload, lake: Lake) -> None:
    workload.run(40)
    with pyspark_errors() as errors:
        first = lake.run()
    # Tables and namespace are missing at first: looked up, not refreshed into an error.
    assert [r.getMessage()[:200] for r in errors] == []
    assert first.inserted == 0, "Spark tasks wrote the snapshot, not the driver"
    lake.assert_equal_source()
    workload.run(150)
    later = lake.run(max_batch_rows=97)
    assert later.updated and later.deleted and later.truncated
    assert later.skipped == 0
    lake.assert_equal_source()
    until = current_lsn(db)
    for name in TABLES:
        pos = iceberg.position(lake.spark, lake.ref(name))
        assert pos is not None and pos.lsn is not None and pos.lsn <= until
        # The source of the rows, as every commit of the sink records it.
        assert pos.source is not None and pos.source.database == db.name
        assert pos.source.timeline == 1 and pos.source.system.isdigit()
        props = dict(
            lake.spark.sql(f"SHOW TBLPROPERTIES {lake.ref(name)}").collect()  # type: ignore[arg-type]
        )
        assert props["format-version"] == "3" and props["write.merge.mode"] == "merge-on-read"
    # Merge-on-read: the MERGEs wrote deletion vectors rather than rewriting data files.
    deletes = lake.spark.sql(
        f"SELECT count(*) AS n FROM {lake.ref('public.items')}.delete_files"
    ).collect()[0]["n"]
    assert deletes > 0


@both_sparks
def test_a_batch_delivered_again_changes_nothing(
    db: Database, workload: Workload, lake: Lake
) -> None:
    """Batches applied but never acked (a crash before the ack), among them the parts of
    transactions that a small max_batch_rows cut in two, come again: every row at or
    below a table's recorded position is skipped."""
    workload.run(20)
    lake.run()
    for i in range(2):
        with db.conn.transaction():
            db.conn.execute(
                f"INSERT INTO items (id, name, big) SELECT g, 'bulk', repeat('x', 3000)"
                f" FROM generate_series({10_000 + i * 1000}, {10_099 + i * 1000}) g"
            )
            db.conn.execute(f"UPDATE items SET qty = {i} WHERE id >= {10_000 + i * 1000}")
            db.conn.execute(
                "INSERT INTO notes (body, n) SELECT 'bag', 1 FROM generate_series(1, 30)"
            )
    until = current_lsn(db)
    sink = iceberg.IcebergSink(lake.spark, ICEBERG_CATALOG, lake.namespace)
    applied = 0
    partial_seen = False
    for batch in pgwire_cdc.stream(
        db.dsn, publication="pub", slot="s1", until_lsn=until, max_batch_rows=90
    ):
        sink.apply(batch)  # never acked
        pos = iceberg.position(lake.spark, lake.ref("public.items"))
        partial_seen = partial_seen or (pos is not None and pos.partial is not None)
        applied += 1
        if applied == 3:
            break
    assert partial_seen, "a transaction was cut across batches"
    again = lake.run(until_lsn=until, max_batch_rows=90)
    assert again.skipped > 0
    lake.assert_equal_source()
    # Run once more over nothing new: nothing is written.
    snapshots = lake.spark.sql(f"SELECT * FROM {lake.ref('public.items')}.snapshots").count()
    lake.run(until_lsn=until)
    after = lake.spark.sql(f"SELECT * FROM {lake.ref('public.items')}.snapshots").count()
    assert after == snapshots
    # Both tables' positions reach the last transaction (which touched both): in full,
    # or by ordinal where a table's rows of it ended in a batch cut inside it.
    reached = set()
    for name in ("public.items", "public.notes"):
        pos = iceberg.position(lake.spark, lake.ref(name))
        assert pos is not None and pos.lsn is not None
        reached.add(pos.partial[0] if pos.partial else pos.lsn)
    assert len(reached) == 1 and reached.pop() <= until


@both_sparks
def test_foreach_batch_merges_into_iceberg(
    db: Database, workload: Workload, lake: Lake, tmp_path: Path
) -> None:
    """``iceberg.merge_changes`` in ``foreachBatch`` of ``format("pgwire_cdc")``: the table
    equals the source; a micro-batch run twice (a sink that fails after its commit)
    changes nothing the second time. State in files: over Spark Connect the function runs
    in the server's Python, with the server's session (``df.sparkSession``)."""
    workload.run(30)
    table = f"{ICEBERG_CATALOG}.{lake.namespace}.public_items"
    calls_dir = tmp_path / "calls"
    calls_dir.mkdir()

    def merge(df: Any, batch_id: int) -> None:
        stats = iceberg.merge_changes(df, table, keys=["id"], spark=df.sparkSession)
        calls = len(list(calls_dir.iterdir()))
        (calls_dir / f"{calls:04d}-{batch_id}-{stats.skipped}").touch()
        if calls + 1 == 2:
            raise RuntimeError("failed after the commit: Spark runs the batch again")

    def run() -> None:
        query = (
            lake.spark.readStream.format("pgwire_cdc")
            .option("dsn", db.dsn)
            .option("publication", "pub")
            .option("slot", "iceberg_slot")
            .option("table", "public.items")
            .option("snapshot_dir", str(tmp_path / "snapshot"))
            .load()
            .writeStream.foreachBatch(merge)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(240)
        except Exception:
            query.stop()

    run()
    workload.run(60)
    run()  # the failed batch
    run()  # ... again, and the rest
    calls = sorted(name.name.split("-") for name in calls_dir.iterdir())
    batch_ids = [batch_id for _, batch_id, _ in calls]
    again = [c for c in calls if batch_ids.count(c[1]) > 1]
    assert len(again) == 2, f"one micro-batch merged twice: {calls}"
    assert again[0][2] == "0" and int(again[1][2]) > 0, "the second time, every row skipped"
    lake.assert_equal_source(("public.items",))
    pos = iceberg.position(lake.spark, lake.ref("public.items"))
    assert pos is not None and pos.lsn is not None and pos.partial is None


def test_compacted_and_expired_tables_keep_their_position(
    db: Database, workload: Workload, lake: Lake
) -> None:
    workload.run(30)
    lake.run()
    workload.run(60)
    lake.run(max_batch_rows=71)
    ref = lake.ref("public.items")
    before = iceberg.position(lake.spark, ref)
    done = iceberg.maintain(lake.spark, ref.replace("`", ""))
    assert done["rewrite_data_files"][0]["rewritten_data_files_count"] > 0
    snapshots = lake.spark.sql(f"SELECT operation FROM {ref}.snapshots").collect()
    assert snapshots[-1]["operation"] == "replace"
    assert iceberg.position(lake.spark, ref) == before
    lake.assert_equal_source()
    workload.run(60)
    stats = lake.run(max_batch_rows=71)
    assert stats.skipped == 0
    lake.assert_equal_source()


def test_the_sink_needs_a_session(db: Database, workload: Workload) -> None:
    with pytest.raises(ConfigError, match="needs a SparkSession"):
        iceberg.run(db.dsn, "lake", "ns", publication="pub", slot="s1", until_lsn=1)


@pytest.mark.java
def test_the_cli_keeps_iceberg_tables(db: Database, tmp_path: Any) -> None:
    """``pgwire-cdc stream --iceberg lake.app --iceberg-dir DIR`` (its own Spark), read
    back by pyiceberg."""
    if db.conn.info.server_version < 180000:
        pytest.skip("one server is enough for the command line")
    from cli.test_cli import run_cli
    from pgwire_cdc import int_to_lsn

    db.conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    db.conn.execute("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 50) g")
    db.conn.execute("UPDATE t SET v = 'new' WHERE id <= 10")
    proc = run_cli(
        "stream", "--dsn", db.dsn, "--publication", "pub", "--table", "public.t",
        "--slot", "cli_ice", "--iceberg", "lake.app", "--iceberg-dir", str(tmp_path),
        "--until-lsn", int_to_lsn(current_lsn(db)), "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = iceberg.read_table(iceberg.local_catalog("lake", tmp_path), "app.public_t")
    assert sorted(rows["v"].to_pylist()).count("new") == 10 and rows.num_rows == 50


def test_verify_finds_and_repairs_differences(db: Database, workload: Workload, lake: Lake) -> None:
    """``iceberg.verify``: the kept tables compare equal; a row deleted and one altered by
    hand are found by kind and key, ``repair=True`` fixes them without moving the
    table's position, and the next verify finds nothing; with the slot dropped,
    ``recover=True`` makes it again and the pipeline streams on."""
    workload.run(80)
    lake.run()

    def check(**options: Any) -> Any:
        return iceberg.verify(
            db.dsn, ICEBERG_CATALOG, lake.namespace, publication="pub", slot="s1",
            spark=lake.spark, catch_up=True, max_batch_rows=500, **options,
        )  # fmt: skip

    first = check()
    assert first.equal, first.summary()
    ref = lake.ref("public.items")
    ids = sorted(r["id"] for r in lake.spark.sql(f"SELECT id FROM {ref}").collect())
    before = iceberg.position(lake.spark, ref)
    lake.spark.sql(f"DELETE FROM {ref} WHERE id = {ids[0]}")
    lake.spark.sql(f"UPDATE {ref} SET name = 'not the source' WHERE id = {ids[1]}")
    found = check()
    items = found.tables["public.items"]
    assert (items.missing, items.extra, items.different) == (1, 0, 1), found.summary()
    assert items.examples == {"missing": [ids[0]], "different": [ids[1]]}
    repaired = check(repair=True)
    assert repaired.tables["public.items"].upserted == 2, repaired.summary()
    after = check()
    assert after.equal, after.summary()
    now = iceberg.position(lake.spark, ref)
    assert now is not None and before is not None and now.lsn == before.lsn
    lake.assert_equal_source()
    # The slot lost: recovered without a new copy, the pipeline streams on from it.
    db.conn.execute("SELECT pg_drop_replication_slot('s1')")
    workload.run(40)
    recovered = check(recover=True)
    assert recovered.slot_made == "s1" and not recovered.equal, recovered.summary()
    workload.run(20)
    lake.run()
    lake.assert_equal_source()
    moved = iceberg.position(lake.spark, ref)
    assert moved is not None and moved.source is not None and moved.source.database == db.name


def test_every_table_read_as_of_one_point(db: Database, lake: Lake) -> None:
    """``iceberg.read``: money moving between two tables (``support.bank``), kept in a few
    batches, one of them cut inside a transaction: every point reads as one moment of the
    source, and the newest one as the source once the run ends."""
    db.conn.execute(bank.SCHEMA)
    lake.run(as_of_every=0)
    transfers = bank.Transfers(db.dsn, seed=5, count=8)
    transfers.start()
    transfers.join()
    assert transfers.error is None
    lake.run(as_of_every=0, max_batch_rows=40)
    points = lake.spark.table(lake.ref("_pgwire_cdc.points")).toArrow()
    lsns = sorted(set(points["lsn"].to_pylist()))
    assert len(lsns) >= 2  # the initial copy's batches make none
    for lsn in lsns:
        frames = iceberg.read(lake.spark, ICEBERG_CATALOG, lake.namespace, as_of_lsn=lsn)
        assert frames.lsn == lsn and set(frames) == set(bank.TABLES)
        bank.balanced({name: df.toArrow().to_pylist() for name, df in frames.items()})
    latest = iceberg.read(lake.spark, ICEBERG_CATALOG, lake.namespace, bank.TABLES)
    now = bank.source_rows(db.conn)
    for name in bank.TABLES:
        assert rows_of(latest[name].toArrow()) == rows_of_dicts(now[name]), name


def test_history_and_soft_deletes(db: Database, lake: Lake) -> None:
    """``history="scd2"`` and ``deletes="soft"`` on Iceberg tables, through three runs,
    checked against an audit trigger (``support/history_oracle.py``)."""
    rng = random.Random(9)
    oracle.create(db.conn)
    keep = {"history": "scd2", "deletes": "soft", "max_batch_rows": 9}
    lake.run(**keep)
    since = oracle.snapshot_seq(db.conn)
    next_id = [100]
    for _ in range(2):
        for _ in range(6):
            oracle.workload(db.conn, rng, next_id)
        lake.run(**keep)
    history = lake.spark.table(lake.ref("public.acct_history")).toArrow()
    table = lake.spark.table(lake.ref("public.acct")).toArrow()
    # Iceberg reserves the name _deleted: the column is _is_deleted.
    assert oracle.check(db.conn, since, history, table, "_is_deleted") >= 12


def rows_of_dicts(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((tuple(norm(v) for v in row.values()) for row in rows), key=repr)


def test_change_feed_read_by_the_changelog_view(db: Database, lake: Lake) -> None:
    """``change_data_feed=True``: the table is copy-on-write (Iceberg's changelog scan
    refuses delete files) and holds ``_commit_lsn``; ``create_changelog_view`` over its
    snapshots gives each batch's net changes per key — inserts, updates as pre- and
    post-images (one with an unchanged TOAST value, one that changes no value but the
    commit LSN), deletes, a key change as a delete and an insert — each row carrying the
    commit LSN of the source transaction that wrote it. A history table keeps the default
    properties."""
    from pgwire_cdc import lsn_to_int

    conn = db.conn
    conn.execute("CREATE TABLE t (id int PRIMARY KEY, name text, doc text)")
    conn.execute("ALTER TABLE t ALTER COLUMN doc SET STORAGE EXTERNAL")  # TOASTed as is
    conn.execute("CREATE PUBLICATION pub FOR TABLE t")
    conn.execute(
        "INSERT INTO t SELECT g, 'n' || g, repeat('d' || g, 1500) FROM generate_series(1, 3) g"
    )

    def wal() -> int:
        row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        assert row is not None
        return lsn_to_int(row[0])

    # Per label, the WAL window that holds the commit LSN of its transaction.
    windows: dict[str, tuple[int, int]] = {}

    def commit(label: str, *statements: str) -> None:
        with conn.transaction():
            for statement in statements:
                conn.execute(statement)
            before = wal()
        windows[label] = (before, wal())

    def run() -> None:
        lake.run(change_data_feed=True, until_lsn=current_lsn(db))

    before = wal()
    run()  # the initial snapshot (through the batches: their rows carry _commit_lsn)
    windows["snapshot"] = (before, wal())
    commit("A", "INSERT INTO t VALUES (4, 'n4', repeat('d4', 1500)), (5, 'n5', 'short')")
    run()
    commit(
        "B",
        "UPDATE t SET name = 'renamed' WHERE id = 1",  # doc: unchanged TOAST
        "UPDATE t SET name = name WHERE id = 5",  # no value changes, but _commit_lsn
    )
    run()
    commit("C", "DELETE FROM t WHERE id = 2")
    run()
    commit("D", "UPDATE t SET id = 30 WHERE id = 3")  # a key change, doc unchanged
    run()
    # Two transactions in one batch: one snapshot, the net change per key.
    commit("E1", "UPDATE t SET name = 'x' WHERE id = 4", "INSERT INTO t VALUES (6, 'n6', 'e')")
    commit("E2", "UPDATE t SET name = 'y' WHERE id = 4", "DELETE FROM t WHERE id = 6")
    run()

    ref = lake.ref("public.t")
    props = dict(lake.spark.sql(f"SHOW TBLPROPERTIES {ref}").collect())  # type: ignore[arg-type]
    assert props["format-version"] == "3"
    assert {props[f"write.{op}.mode"] for op in ("merge", "update", "delete")} == {"copy-on-write"}
    source = conn.execute("SELECT id, name, doc FROM t").fetchall()
    assert sorted(lake.spark.table(ref).drop("_commit_lsn").collect()) == sorted(source)

    def label(lsn: int | None) -> str:
        if lsn is None:
            return "NULL"
        (found,) = [k for k, (lo, hi) in windows.items() if lo <= lsn <= hi]
        return found

    def doc(i: int) -> str:
        return f"d{i}:3000"

    lake.spark.sql(
        f"CALL {ICEBERG_CATALOG}.system.create_changelog_view(table => '{ref}', "
        "changelog_view => 't_changes', identifier_columns => array('id'), "
        "compute_updates => true)"
    ).collect()
    changes = lake.spark.sql(
        "SELECT _change_ordinal AS o, _change_type AS type, id, name, _commit_lsn, "
        "substr(doc, 1, 2) || ':' || length(doc) AS doc FROM t_changes"
    ).collect()
    got = sorted((r.o, r.type, r.id, r.name, r.doc, label(r._commit_lsn)) for r in changes)
    # Snapshots of the sink that change no row (positions recorded) have no changes.
    ordinals = sorted({o for o, *_ in got})
    assert len(ordinals) == 6, got
    s, a, b, c, d, e = ordinals
    want = sorted(
        [
            *((s, "INSERT", i, f"n{i}", doc(i), "snapshot") for i in (1, 2, 3)),
            (a, "INSERT", 4, "n4", doc(4), "A"),
            (a, "INSERT", 5, "n5", "sh:5", "A"),
            (b, "UPDATE_BEFORE", 1, "n1", doc(1), "snapshot"),
            (b, "UPDATE_AFTER", 1, "renamed", doc(1), "B"),
            (b, "UPDATE_BEFORE", 5, "n5", "sh:5", "A"),
            (b, "UPDATE_AFTER", 5, "n5", "sh:5", "B"),
            (c, "DELETE", 2, "n2", doc(2), "snapshot"),
            (d, "DELETE", 3, "n3", doc(3), "snapshot"),
            (d, "INSERT", 30, "n3", doc(3), "D"),
            (e, "UPDATE_BEFORE", 4, "n4", doc(4), "A"),
            (e, "UPDATE_AFTER", 4, "y", doc(4), "E2"),
        ]
    )
    assert got == want, "\n".join(map(str, got))
    # A history table (history="scd2") keeps merge-on-read, change feed or not.
    tables = iceberg.IcebergTables(lake.spark, ICEBERG_CATALOG, lake.namespace)
    tables.change_data_feed = True
    history = tables.history_ref("public.t")
    tables.create(history, lake.spark.table(ref).limit(0).toArrow().schema)
    props = dict(lake.spark.sql(f"SHOW TBLPROPERTIES {history}").collect())  # type: ignore[arg-type]
    assert props["write.merge.mode"] == "merge-on-read"
