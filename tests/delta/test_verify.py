"""``delta.verify`` against real PostgreSQL: the seeded workload's tables (unchanged TOAST,
key changes, truncates, a keyless FULL table) kept by ``delta.run`` compare equal, also
while the pipeline runs and the source writes; differences made by hand in the Delta
tables (a row deleted, one altered, one added, a keyless row doubled) are each found, by
kind and key; ``repair=True`` fixes them in commits that keep the tables' positions, and
the next verify finds nothing; ``pgwire-cdc verify`` exits 1, then 0.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import Database
from live.test_stream import current_lsn
from pgwire_cdc import delta
from pgwire_cdc.cli import main as cli_main
from pgwire_cdc.errors import ConfigError
from pgwire_cdc.lsn import lsn_to_int
from support.stream_workload import SCHEMA, TABLES, Workload


@pytest.fixture
def workload(db: Database) -> Workload:
    db.conn.execute(SCHEMA)
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE items, codes, notes")
    return Workload(db.conn, seed=db.cluster.version % 1000 + 11)


def keep(db: Database, path: Path, **options: Any) -> delta.ApplyStats:
    options.setdefault("until_lsn", current_lsn(db))
    options.setdefault("max_batch_rows", 97)
    return delta.run(db.dsn, path, publication="pub", slot="s1", **options)


def check(db: Database, path: Path, **options: Any) -> delta.VerifyReport:
    return delta.verify(db.dsn, path, publication="pub", slot="s1", catch_up=True, **options)


def cli_verify(db: Database, path: Path) -> int:
    """``pgwire-cdc verify`` of the lake at ``path``: its exit code."""
    args = ["--dsn", db.dsn, "--delta", str(path), "--publication", "pub", "--slot", "s1"]
    return cli_main(["verify", *args, "--catch-up"])


def test_a_kept_lake_verifies_equal(db: Database, workload: Workload, tmp_path: Path) -> None:
    workload.run(150)
    keep(db, tmp_path)
    workload.run(100)  # not yet in the lake: verify's catch-up runs the pipeline first
    report = check(db, tmp_path)
    assert report.equal, report.summary()
    assert set(report.tables) == set(TABLES)
    for name, table in report.tables.items():
        count = db.conn.execute(f"SELECT count(*) FROM {name.split('.')[1]}").fetchone()
        assert count is not None and table.source_rows == table.lake_rows == count[0], name
        assert (table.lsn is not None and table.lsn >= report.lsn) or table.source_rows == 0


def test_without_catch_up_an_idle_pipeline_is_named(
    db: Database, workload: Workload, tmp_path: Path
) -> None:
    workload.run(20)
    keep(db, tmp_path)
    with pytest.raises(ConfigError, match="not streamed by any consumer"):
        delta.verify(db.dsn, tmp_path, publication="pub", slot="s1", wait=1)
    with pytest.raises(ConfigError, match="no replication slot 'nope'"):
        delta.verify(db.dsn, tmp_path, publication="pub", slot="nope", wait=1)


def spoil_items(lake: Path) -> tuple[int, int]:
    """The Delta table of ``items`` changed by hand: its first key's row deleted, the
    second's altered, a copy of the third's added under the key 10**9; the first two
    keys."""
    from deltalake import DeltaTable, write_deltalake

    items_path = delta.table_path(lake, "public.items")
    ids = sorted(delta.read_table(items_path)["id"].to_pylist())
    gone, altered = ids[0], ids[1]
    items = DeltaTable(items_path)
    items.delete(f"id = {gone}")
    items.update(updates={"name": "'not the source'"}, predicate=f"id = {altered}")
    extra_row = delta.read_table(items_path, f"id = {ids[2]}")
    extra_row = extra_row.set_column(0, "id", pa.array([10**9], extra_row.schema.field("id").type))
    write_deltalake(items_path, extra_row, mode="append")
    return gone, altered


def test_differences_are_found_by_kind_and_repaired(
    db: Database, workload: Workload, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from deltalake import write_deltalake

    workload.run(150)
    keep(db, tmp_path, deletion_vectors=False)
    notes_path = delta.table_path(tmp_path, "public.notes")
    before = {n: delta.position(delta.table_path(tmp_path, n)) for n in TABLES}
    gone, altered = spoil_items(tmp_path)
    note = delta.read_table(notes_path).slice(0, 1)
    write_deltalake(notes_path, note, mode="append")

    report = check(db, tmp_path)
    assert not report.equal
    found = report.tables["public.items"]
    assert (found.missing, found.extra, found.different) == (1, 1, 1), report.summary()
    assert found.examples == {"missing": [gone], "extra": [10**9], "different": [altered]}
    notes = report.tables["public.notes"]
    assert (notes.missing, notes.extra, notes.different) == (0, 1, 0), report.summary()
    assert report.tables["public.codes"].equal

    assert cli_verify(db, tmp_path) == 1
    assert "DIFFERS" in capsys.readouterr().out

    repaired = check(db, tmp_path, repair=True)
    assert (repaired.tables["public.items"].upserted, repaired.tables["public.items"].deleted) == (
        2,
        1,
    )
    assert repaired.tables["public.notes"].not_repaired is None
    after = check(db, tmp_path)
    assert after.equal, after.summary()
    # The repairs kept every table's position: the stream goes on exactly once.
    for name in TABLES:
        now = delta.position(delta.table_path(tmp_path, name))
        assert now is not None and before[name] is not None, name
        assert now.lsn == before[name].lsn, name  # type: ignore[union-attr]
    workload.run(80)
    keep(db, tmp_path)
    assert check(db, tmp_path).equal
    assert cli_verify(db, tmp_path) == 0


def overwrites(path: Path, name: str) -> int:
    """The commits that replaced a Delta table's rows (a snapshot, a keyless repair)."""
    from deltalake import DeltaTable

    history = DeltaTable(delta.table_path(path, name)).history()
    return sum(1 for c in history if c.get("operationParameters", {}).get("mode") == "Overwrite")


def test_a_lake_whose_slot_was_lost_is_recovered_without_a_new_copy(
    db: Database, workload: Workload, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload.run(120)
    keep(db, tmp_path)
    with pytest.raises(ConfigError, match="exists and is usable"):
        check(db, tmp_path, recover=True)
    db.conn.execute("SELECT pg_drop_replication_slot('s1')")
    workload.run(120)  # changes no slot keeps for the lake
    copied = {n: overwrites(tmp_path, n) for n in TABLES}
    args = ["--dsn", db.dsn, "--delta", str(tmp_path), "--publication", "pub", "--slot", "s1"]
    assert cli_main(["verify", *args, "--recover"]) == 1  # differences found, and repaired
    out = capsys.readouterr().out
    assert "DIFFERS" in out and "slot s1 made at" in out
    slot = db.conn.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 's1'"
    ).fetchone()
    assert slot is not None
    for name in TABLES:
        position = delta.position(delta.table_path(tmp_path, name))
        assert position is not None and position.lsn == lsn_to_int(slot[0]) - 1, name
    # The pipeline streams on from the new slot, and the lake equals the source. No keyed
    # table was copied again (the keyless one takes every change by a rewrite anyway).
    workload.run(80)
    stats = keep(db, tmp_path)
    assert stats.inserted + stats.updated + stats.deleted > 0
    for name in ("public.items", "public.codes"):
        assert overwrites(tmp_path, name) == copied[name], name
    report = check(db, tmp_path)
    assert report.equal, report.summary()


def test_verify_while_the_pipeline_runs_and_the_source_writes(
    db: Database, workload: Workload, tmp_path: Path
) -> None:
    workload.run(100)
    keep(db, tmp_path)
    stop = threading.Event()
    errors: list[BaseException] = []

    def pipeline() -> None:
        try:
            delta.run(
                db.dsn, tmp_path, publication="pub", slot="s1", idle_timeout=4, max_batch_rows=113
            )
        except BaseException as e:
            errors.append(e)

    writer_conn = db.cluster.connect(db.name)

    def writes() -> None:
        n = 0
        try:
            while not stop.is_set():
                n += 1
                key = 10_000_000 + n
                writer_conn.execute(
                    "INSERT INTO items (id, name, qty) VALUES (%s, %s, %s)", (key, f"w{n}", n)
                )
                writer_conn.execute(
                    "UPDATE items SET qty = coalesce(qty, 0) + 1 WHERE id %% 11 = %s", (n % 11,)
                )
                writer_conn.execute("DELETE FROM items WHERE id = %s", (key - 3,))
                writer_conn.execute("INSERT INTO notes (body, n, at) VALUES ('w', %s, now())", (n,))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=pipeline), threading.Thread(target=writes)]
    for t in threads:
        t.start()
    try:
        report = delta.verify(db.dsn, tmp_path, publication="pub", slot="s1", wait=120)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=300)
        writer_conn.close()
    assert not errors, errors
    assert report.equal, report.summary()
    assert sum(t.source_rows for t in report.tables.values()) > 0


def test_the_spark_writers_tables_are_verified_and_repaired(
    db: Database, workload: Workload, tmp_path: Path, spark: Any
) -> None:
    """The Spark writer's tables (deletion vectors on): a row deleted and one altered by
    Spark SQL are found, and repaired through the Spark writer's MERGE."""
    workload.run(80)
    keep(db, tmp_path, writer="spark", spark=spark, max_batch_rows=500)
    path = delta.table_path(tmp_path, "public.items")
    ids = sorted(r["id"] for r in spark.sql(f"SELECT id FROM delta.`{path}`").collect())
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = {ids[0]}")
    spark.sql(f"UPDATE delta.`{path}` SET name = 'not the source' WHERE id = {ids[1]}")
    options: dict[str, Any] = {"writer": "spark", "spark": spark, "max_batch_rows": 500}
    found = check(db, tmp_path, **options)
    items = found.tables["public.items"]
    assert (items.missing, items.extra, items.different) == (1, 0, 1), found.summary()
    repaired = check(db, tmp_path, repair=True, **options)
    assert repaired.tables["public.items"].upserted == 2, repaired.summary()
    after = check(db, tmp_path, **options)
    assert after.equal, after.summary()


def test_the_source_read_by_spark_tasks_finds_and_repairs_differences(
    db: Database, workload: Workload, tmp_path: Path, spark: Any
) -> None:
    """``spark_source=True``: every source table read by Spark tasks (CTID ranges under
    verify's snapshot, rows to files in the spill directory, digests to the driver). A
    lake kept by delta-rs compares equal; a row deleted, one altered and one added are
    found with their keys, and repaired from the tasks' files; the next verify is equal."""

    from pgwire_cdc.spark.source_digests import verify_reader

    # By default a session of this machine's cores leaves the source to verify's stream.
    assert verify_reader(spark, db.dsn, "pub", None) is None
    assert verify_reader(spark, db.dsn, "pub", True) is not None
    workload.run(150)
    keep(db, tmp_path, deletion_vectors=False)
    options: dict[str, Any] = {"spark": spark, "spark_source": True}
    assert check(db, tmp_path, **options).equal
    gone, altered = spoil_items(tmp_path)
    progress: list[str] = []
    report = check(db, tmp_path, on_progress=progress.append, **options)
    found = report.tables["public.items"]
    assert (found.missing, found.extra, found.different) == (1, 1, 1), report.summary()
    assert found.examples == {"missing": [gone], "extra": [10**9], "different": [altered]}
    assert any("source read: public.items" in line for line in progress), progress
    repaired = check(db, tmp_path, repair=True, **options)
    assert repaired.tables["public.items"].upserted == 2, repaired.summary()
    assert check(db, tmp_path, **options).equal
