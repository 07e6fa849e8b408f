"""Delta tables kept by deletion vectors from the delta-rs writer (``_native.DeltaDvTable``)
against real PostgreSQL 15 and 18: a MERGE retires the changed rows in deletion vectors
and appends their new images without rewriting a data file; the tables equal the source
read by delta-rs and by Spark; compaction purges the deletion vectors, while a stream runs
too; tables without the feature keep the copy-on-write MERGE.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from cli.test_cli import run_cli
from conftest import Database
from deltalake.exceptions import DeltaProtocolError
from live.test_stream import current_lsn
from pgwire_cdc import delta
from pgwire_cdc.delta.writers import DeltaRsWriter
from pgwire_cdc.errors import DeltaError
from support import requires
from support.stream_workload import SCHEMA, TABLES, Workload, norm, source_rows

from delta.test_delta import assert_tables_equal_source

TABLE = "public.dv"


def source(db: Database) -> list[tuple[Any, ...]]:
    rows = db.conn.execute("SELECT id, v, big FROM dv").fetchall()
    return sorted((tuple(norm(x) for x in r) for r in rows), key=repr)


def lake(path: str) -> list[tuple[Any, ...]]:
    table = delta.read_table(path).select(["id", "v", "big"])
    return sorted((tuple(norm(x) for x in r.values()) for r in table.to_pylist()), key=repr)


def spark_rows(spark: Any, path: str) -> list[tuple[Any, ...]]:
    table = spark.read.format("delta").load(path).select("id", "v", "big").toArrow()
    return sorted((tuple(norm(x) for x in r.values()) for r in table.to_pylist()), key=repr)


def duckdb_rows(path: str) -> list[tuple[Any, ...]]:
    """The table as DuckDB's delta extension reads it (deletion vectors applied)."""
    duckdb = requires.module("duckdb", "reading Delta tables with DuckDB")
    duckdb_extension_delta = requires.module(
        "duckdb_extension_delta", "reading Delta tables with DuckDB"
    )

    where = Path(duckdb_extension_delta.__file__).parent / "extensions"
    extension = next(where.glob("*/delta.duckdb_extension"))
    conn = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    try:
        conn.execute(f"LOAD '{extension}'")
        rows = conn.execute(f"SELECT id, v, big FROM delta_scan('{path}')").fetchall()
    finally:
        conn.close()
    return sorted((tuple(norm(x) for x in r) for r in rows), key=repr)


def log_actions(path: str, version: int) -> list[dict[str, Any]]:
    text = (Path(path) / "_delta_log" / f"{version:020}.json").read_text()
    return [json.loads(line) for line in text.splitlines()]


def latest_version(path: str) -> int:
    return max(int(p.stem) for p in (Path(path) / "_delta_log").glob("*.json"))


def live_files(path: str) -> dict[str, dict[str, Any]]:
    """The table's data files by path, each with its last ``add`` action: the log
    replayed (deltalake's add-action listing does not show deletion vectors)."""
    live: dict[str, dict[str, Any]] = {}
    for version in range(latest_version(path) + 1):
        for action in log_actions(path, version):
            if "add" in action:
                live[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    return live


def rows_of(add: dict[str, Any]) -> int:
    return int(json.loads(add["stats"])["numRecords"])


@pytest.fixture
def dv_db(db: Database) -> Database:
    db.conn.execute(
        "CREATE TABLE dv (id bigint PRIMARY KEY, v int, big text);"
        "ALTER TABLE dv ALTER COLUMN big SET STORAGE EXTERNAL;"
        "INSERT INTO dv SELECT g, g, CASE WHEN g % 7 = 0 THEN repeat(md5(g::text), 200) END"
        " FROM generate_series(1, 3000) g;"
        "CREATE PUBLICATION pub FOR TABLE dv"
    )
    return db


def change_in_slices(db: Database, slices: int, last_deleted: int) -> None:
    """``slices`` transactions, each updating the rows ``id % slices = i`` and deleting
    one row (``last_deleted``, then the ids below it)."""
    for i in range(slices):
        db.conn.execute(f"UPDATE dv SET v = v + 1 WHERE id % {slices} = {i}")
        db.conn.execute(f"DELETE FROM dv WHERE id = {last_deleted - i}")


@pytest.fixture
def merges(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What each MERGE by deletion vectors of the test does, in order (the writer's own
    account of it, ``DeltaRsWriter.last_merge``)."""
    done: list[dict[str, Any]] = []
    merge_in_place = DeltaRsWriter.merge_in_place

    def recorded(self: DeltaRsWriter, *args: Any) -> Any:
        result = merge_in_place(self, *args)
        done.append(dict(self.last_merge or {}))
        return result

    monkeypatch.setattr(DeltaRsWriter, "merge_in_place", recorded)
    return done


def run(db: Database, path: Path, **options: Any) -> delta.ApplyStats:
    options.setdefault("until_lsn", current_lsn(db))
    options.setdefault("deletion_vectors", True)
    return delta.run(db.dsn, path, publication="pub", slot="s1", **options)


def test_a_merge_retires_rows_by_deletion_vectors_and_rewrites_no_file(
    dv_db: Database, tmp_path: Path, classic_spark: Any
) -> None:
    db = dv_db
    run(db, tmp_path)
    path = delta.table_path(tmp_path, TABLE)
    from deltalake import DeltaTable

    table = DeltaTable(path)
    assert "deletionVectors" in (table.protocol().writer_features or [])
    files_before = set(table.file_uris())
    # Updates that leave the toasted column unchanged, deletes, inserts, a key change of
    # a row with a toasted value, and a row updated twice in the batch.
    db.conn.execute("UPDATE dv SET v = v + 1 WHERE id % 100 = 7")
    db.conn.execute("DELETE FROM dv WHERE id % 250 = 3")
    db.conn.execute("INSERT INTO dv SELECT g, -g, NULL FROM generate_series(5001, 5010) g")
    db.conn.execute("UPDATE dv SET id = 9999 WHERE id = 2807")
    db.conn.execute("UPDATE dv SET v = 0 WHERE id = 1407")
    stats = run(db, tmp_path)
    assert stats.updated and stats.deleted and stats.inserted
    assert lake(path) == source(db)
    assert spark_rows(classic_spark, path) == source(db)
    assert duckdb_rows(path) == source(db)
    # deltalake's pyarrow reader refuses such a table rather than show retired rows.
    with pytest.raises(DeltaProtocolError, match="deletionVectors"):
        DeltaTable(path).to_pyarrow_table()
    actions = log_actions(path, latest_version(path))
    removed = {a["remove"]["path"] for a in actions if "remove" in a}
    readded = [a["add"] for a in actions if "add" in a and a["add"]["path"] in removed]
    # Every file the batch touched comes back with a deletion vector; none was rewritten.
    assert readded and all(a["deletionVector"]["cardinality"] > 0 for a in readded)
    # Their statistics still count the retired rows: bounds, not exact values.
    assert all(json.loads(a["stats"])["tightBounds"] is False for a in readded)
    assert {a["path"] for a in readded} == removed
    assert any("txn" in a and a["txn"]["appId"] == "pgwire_cdc" for a in actions)
    assert files_before <= set(DeltaTable(path).file_uris())
    # A second batch extends the deletion vectors the first one wrote.
    db.conn.execute("UPDATE dv SET v = v + 1 WHERE id % 100 = 8")
    run(db, tmp_path)
    assert lake(path) == source(db)
    assert spark_rows(classic_spark, path) == source(db)
    assert duckdb_rows(path) == source(db)


def test_a_running_stream_finds_retired_rows_in_its_key_index(
    dv_db: Database, tmp_path: Path, merges: list[dict[str, Any]]
) -> None:
    """Data files never change once written: a stream's later MERGEs find the rows they
    retire in the keys read by the earlier ones, reading only the files written since."""
    db = dv_db
    run(db, tmp_path)
    path = delta.table_path(tmp_path, TABLE)
    change_in_slices(db, 12, 2000)
    db.conn.execute("UPDATE dv SET id = 7777 WHERE id = 700")
    stats = run(db, tmp_path, max_batch_rows=300)
    assert stats.updated >= 2900 and stats.deleted >= 12
    assert len(merges) >= 12, merges
    first, later = merges[0], merges[1:]
    # The first MERGE of the run reads the snapshot's file and keeps its keys.
    assert first["files_indexed"] == 0 and first["rows_read"] == 3000, first
    assert first["index_files"] == 1 and first["index_bytes"] == 3000 * 8, first
    for m in later:
        # Files seen before are searched in memory: the snapshot's file is never read
        # again, and each file a MERGE wrote is read once, by the first MERGE after it
        # whose keys its statistics cannot rule out.
        assert m["files_indexed"] >= 1 and m["index_files"] >= m["files_read"], m
    assert sum(m["rows_read"] for m in later) <= sum(m["written"] for m in merges)
    assert lake(path) == source(db)
    assert duckdb_rows(path) == source(db)


def test_compaction_purges_deletion_vectors_and_keeps_the_position(
    dv_db: Database, tmp_path: Path, classic_spark: Any
) -> None:
    db = dv_db
    run(db, tmp_path)
    path = delta.table_path(tmp_path, TABLE)
    for i in range(4):
        db.conn.execute(f"UPDATE dv SET v = v + 1 WHERE id % 10 = {i}")
        run(db, tmp_path)
    position = delta.position(path)
    stats = delta.compact(path)
    assert stats["version"] is not None and stats["rows_purged"] > 0
    assert stats["rows_kept"] == 3000

    # No file left with a deletion vector.
    live = live_files(path)
    assert live and not any(a.get("deletionVector") for a in live.values()), live
    assert lake(path) == source(db)
    assert spark_rows(classic_spark, path) == source(db)
    assert duckdb_rows(path) == source(db)
    assert delta.position(path) == position
    compaction = log_actions(path, latest_version(path))
    assert all(not a[k]["dataChange"] for a in compaction for k in ("add", "remove") if k in a)
    # Nothing left to do (the CLI says so), then the stream goes on from where it stood.
    proc = run_cli("compact", path, "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["version"] is None, proc.stderr
    db.conn.execute("UPDATE dv SET v = v * 2 WHERE id % 3 = 0")
    later = run(db, tmp_path)
    assert later.skipped == 0 and later.updated == 1000
    assert lake(path) == source(db)


def test_compaction_of_worn_files_only(dv_db: Database, tmp_path: Path) -> None:
    """``max_deleted_ratio``: only the files with more than that share of their rows
    deleted are rewritten; the others keep their deletion vectors."""
    db = dv_db
    run(db, tmp_path, auto_compact=False)
    path = delta.table_path(tmp_path, TABLE)
    # The snapshot's rows 1..3000 lose two thirds; the file of their new images, a
    # quarter of its rows.
    db.conn.execute("UPDATE dv SET v = -v WHERE id <= 2000")
    run(db, tmp_path, auto_compact=False)
    db.conn.execute("UPDATE dv SET v = 0 WHERE id <= 500")
    run(db, tmp_path, auto_compact=False)

    def worn(add: dict[str, Any]) -> float:
        dv = add.get("deletionVector")
        return dv["cardinality"] / rows_of(add) if dv else 0.0

    before = live_files(path)
    over = {p for p, a in before.items() if worn(a) > 0.5}
    under = {p for p, a in before.items() if 0 < worn(a) <= 0.5}
    assert over and under, {p: worn(a) for p, a in before.items()}
    stats = delta.compact(path, min_file_rows=1, max_deleted_ratio=0.5)
    after = live_files(path)
    assert set(before) - set(after) == over
    assert all(after[p].get("deletionVector") for p in under)
    assert stats["files_removed"] == len(over) and stats["version"] is not None
    assert lake(path) == source(db)
    assert duckdb_rows(path) == source(db)
    # With any deleted row counting, the rest go too.
    delta.compact(path, min_file_rows=1)
    assert not any(a.get("deletionVector") for a in live_files(path).values())
    assert lake(path) == source(db)
    proc = run_cli("compact", path, "--max-deleted-ratio", "1.5")
    assert proc.returncode == 2 and "below 1" in proc.stderr


def test_a_stream_compacts_its_small_files_by_itself(
    dv_db: Database, tmp_path: Path, merges: list[dict[str, Any]]
) -> None:
    """After its MERGEs, the delta-rs writer compacts a table that has gathered
    ``AUTO_MIN_SMALL_FILES`` small files: the files stay few, the position and the rows
    stay right."""
    db = dv_db
    run(db, tmp_path)
    path = delta.table_path(tmp_path, TABLE)
    change_in_slices(db, 70, 2900)
    stats = run(db, tmp_path, max_batch_rows=50)
    assert stats.updated >= 2900 and stats.deleted == 70
    assert len(merges) >= delta.maintain.AUTO_MIN_SMALL_FILES, len(merges)
    compactions = [m["compaction"] for m in merges if "compaction" in m]
    assert all(c["version"] is not None for c in compactions), compactions
    assert compactions, merges
    first = compactions[0]
    assert first["files_removed"] >= delta.maintain.AUTO_MIN_SMALL_FILES, first
    assert first["rows_purged"] > 0 and first["files_added"] == 1, first
    # Never more small files than the bound, batch after batch: here every file is small
    # (the table has 3,000 rows), so the table never holds more than the bound.
    live = live_files(path)
    assert len(live) < delta.maintain.AUTO_MIN_SMALL_FILES, len(live)
    optimize = [
        v
        for v in range(latest_version(path) + 1)
        if any(a.get("commitInfo", {}).get("operation") == "OPTIMIZE" for a in log_actions(path, v))
    ]
    assert len(optimize) == len(compactions)
    for v in optimize:
        actions = log_actions(path, v)
        assert not any("txn" in a for a in actions)
        assert all(not a[k]["dataChange"] for a in actions for k in ("add", "remove") if k in a)
    assert lake(path) == source(db)
    assert duckdb_rows(path) == source(db)
    # The position is the stream's last commit's: nothing is delivered again.
    fifths = db.conn.execute("SELECT count(*) FROM dv WHERE id % 5 = 0").fetchone()[0]
    db.conn.execute("UPDATE dv SET v = 0 WHERE id % 5 = 0")
    later = run(db, tmp_path)
    assert later.skipped == 0 and later.updated == fifths
    assert lake(path) == source(db)


def test_compaction_while_the_stream_runs(dv_db: Database, tmp_path: Path) -> None:
    """Compactions and the stream's MERGEs commit concurrently: whichever loses a conflict
    runs again; the table ends equal to the source."""
    db = dv_db
    run(db, tmp_path)
    path = delta.table_path(tmp_path, TABLE)
    change_in_slices(db, 30, 3000)
    stop = threading.Event()
    compactions: list[int] = []
    conflicts: list[str] = []

    def compact_loop() -> None:
        while not stop.is_set():
            try:
                if delta.compact(path, min_file_rows=1_000_000)["version"] is not None:
                    compactions.append(1)
            except DeltaError as e:
                conflicts.append(str(e))

    worker = threading.Thread(target=compact_loop)
    worker.start()
    try:
        stats = run(db, tmp_path, max_batch_rows=40)
    finally:
        stop.set()
        worker.join()
    assert stats.updated > 2900 and stats.deleted == 30
    assert compactions, conflicts
    assert lake(path) == source(db)


def test_tables_without_the_feature_keep_the_copy_on_write_merge(
    dv_db: Database, tmp_path: Path
) -> None:
    db = dv_db
    run(db, tmp_path, deletion_vectors=False)
    path = delta.table_path(tmp_path, TABLE)
    from deltalake import DeltaTable

    assert "deletionVectors" not in (DeltaTable(path).protocol().writer_features or [])
    db.conn.execute("UPDATE dv SET v = v + 1 WHERE id % 100 = 7")
    run(db, tmp_path)
    assert lake(path) == source(db)
    actions = log_actions(path, latest_version(path))
    assert not any("deletionVector" in a.get("add", {}) for a in actions)
    # Turned on later, the next MERGE retires rows by deletion vectors.
    delta.enable_deletion_vectors(path)
    db.conn.execute("UPDATE dv SET v = v + 1 WHERE id % 100 = 9")
    run(db, tmp_path)
    assert lake(path) == source(db)
    actions = log_actions(path, latest_version(path))
    assert any(a.get("add", {}).get("deletionVector") for a in actions)


def test_the_stream_workload_kept_by_deletion_vectors(
    db: Database, tmp_path: Path, classic_spark: Any
) -> None:
    """The seeded random workload of the stream tests (unchanged TOAST, key changes,
    truncates, the keyless FULL table) on tables created with deletion vectors."""
    db.conn.execute(SCHEMA)
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE items, codes, notes")
    workload = Workload(db.conn, seed=db.cluster.version % 1000 + 11)
    workload.run(60)
    options = {"publication": "pub", "slot": "s1", "max_batch_rows": 53}
    delta.run(db.dsn, tmp_path, until_lsn=current_lsn(db), deletion_vectors=True, **options)
    workload.run(200)
    later = delta.run(db.dsn, tmp_path, until_lsn=current_lsn(db), **options)
    assert later.updated and later.deleted and later.truncated
    assert_tables_equal_source(db, tmp_path)
    kept = delta.table_path(tmp_path, "public.items")
    assert any(
        '"deletionVector":{' in p.read_text() for p in Path(kept, "_delta_log").glob("*.json")
    )
    for name in TABLES:
        table = classic_spark.read.format("delta").load(delta.table_path(tmp_path, name)).toArrow()
        got = sorted((tuple(norm(v) for v in r.values()) for r in table.to_pylist()), key=repr)
        assert got == source_rows(db.conn, name), name
