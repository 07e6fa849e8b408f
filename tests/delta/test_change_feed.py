"""Delta's change data feed (``change_data_feed=True``) against PostgreSQL, checked
against the table itself: read at every version, the difference between a version and
the one before must be exactly what the feed returns for that commit (``delete`` and
``update_preimage`` the rows as they were, ``insert`` and ``update_postimage`` as they are),
every row carries a commit LSN, never older than the row's previous version's, and the
table ends equal to the source. A random workload (key changes, unchanged TOAST, truncates) kept
by a delta-rs consumer with deletion vectors, SIGKILLed once, read by delta-rs and by
Delta Spark; and by the Spark writer."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import Database
from deltalake import DeltaTable
from live.test_stream import current_lsn
from pgwire_cdc import delta
from pgwire_cdc.delta.table import read_version
from support import history_oracle as oracle

WORKER = Path(__file__).resolve().parents[1] / "support" / "delta_worker.py"
KEEP = {"publication": "pub", "slot": "s1", "change_data_feed": True}
ROW = [*oracle.COLUMNS, "_commit_lsn"]
BEFORE = ("delete", "update_preimage")
AFTER = ("insert", "update_postimage")


def worker(db: Database, path: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, str(WORKER), db.dsn, str(path), str(2**63 - 1)]
    options = ["--deletion-vectors", "--max-batch-rows", "9", "--change-data-feed"]
    return subprocess.Popen([*command, *options], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def rows_at(path: str, version: int) -> dict[int, tuple[Any, ...]]:
    table = read_version(DeltaTable(path, version=version))
    return {r["id"]: tuple(r[c] for c in ROW) for r in table.to_pylist()}


def check_feed(path: str, feed: list[dict[str, Any]]) -> int:
    """Asserts the feed ``feed`` (rows with ``_change_type`` and ``_commit_version``)
    is, commit by commit, the difference between the table's versions; the commits that
    changed rows."""
    by_version: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for change in feed:
        by_version[change["_commit_version"]].append(change)
    table = DeltaTable(path)
    first = min(by_version)
    before = rows_at(path, first - 1) if first > 0 else {}
    changed = 0
    for version in range(first, table.version() + 1):
        now = rows_at(path, version)
        old: dict[int, tuple[Any, ...]] = {}
        new: dict[int, tuple[Any, ...]] = {}
        kinds: dict[int, set[str]] = defaultdict(set)
        for change in by_version.get(version, []):
            key, kind = change["id"], change["_change_type"]
            side = old if kind in BEFORE else new
            assert key not in side, (version, key, kind)
            side[key] = tuple(change[c] for c in ROW)
            kinds[key].add(kind)
        for key, seen in kinds.items():
            # An update is both images; a key's delete and insert in one commit (a rewrite)
            # are no update.
            assert ("update_preimage" in seen) == ("update_postimage" in seen), (version, key)
        same = {k for k in old.keys() & new.keys() if old[k] == new[k]}
        gone = {k: r for k, r in before.items() if now.get(k) != r}
        came = {k: r for k, r in now.items() if before.get(k) != r}
        assert {k: r for k, r in old.items() if k not in same} == gone, version
        assert {k: r for k, r in new.items() if k not in same} == came, version
        for key in gone.keys() & came.keys():
            # A changed row is an update (no workload here rewrites the table).
            assert kinds[key] == {"update_preimage", "update_postimage"}, (version, key)
        for key, row in came.items():
            # Written by a source transaction not before the row's previous version.
            assert row[-1] is not None, (version, key)
            if key in gone and gone[key][-1] is not None:
                assert row[-1] >= gone[key][-1], (version, key)
        changed += bool(gone or came)
        before = now
    return changed


def delta_rs_feed(path: str) -> list[dict[str, Any]]:
    return pa.table(DeltaTable(path).load_cdf(starting_version=0).read_all()).to_pylist()


def spark_feed(spark: Any, path: str) -> list[dict[str, Any]]:
    frame = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .load(path)
    )
    return [r.asDict() for r in frame.collect()]


def equals_source(db: Database, path: str) -> None:
    lake = delta.read_table(path)
    got = sorted(tuple(r[c] for c in oracle.COLUMNS) for r in lake.to_pylist())
    assert got == sorted(db.conn.execute("SELECT id, name, doc, n FROM acct").fetchall())


@pytest.mark.timeout(600)
def test_the_deletion_vector_writers_feed_is_each_commits_difference(
    db: Database, tmp_path: Path, spark: Any
) -> None:
    rng = random.Random(11)
    oracle.create(db.conn)
    delta.run(db.dsn, tmp_path, until_lsn=current_lsn(db), deletion_vectors=True, **KEEP)
    start = lambda: worker(db, tmp_path)  # noqa: E731
    oracle.workload_with_a_kill(db.conn, rng, start, steps=30, kill_at=12, pause=0.15)
    delta.run(db.dsn, tmp_path, until_lsn=current_lsn(db), max_batch_rows=9, **KEEP)
    path = delta.table_path(tmp_path, "public.acct")
    equals_source(db, path)
    assert any(p.name.startswith("deletion_vector_") for p in Path(path).iterdir())
    # verify compares the source's columns (not _commit_lsn); a repair is a change too.
    verify = {"publication": "pub", "slot": "s1", "catch_up": True}
    assert delta.verify(db.dsn, tmp_path, **verify).equal
    DeltaTable(path).delete(f"id = {min(delta.read_table(path)['id'].to_pylist())}")
    repaired = delta.verify(db.dsn, tmp_path, repair=True, **verify)
    assert repaired.tables["public.acct"].upserted == 1, repaired.summary()
    assert delta.verify(db.dsn, tmp_path, **verify).equal
    assert check_feed(path, delta_rs_feed(path)) >= 10
    assert check_feed(path, spark_feed(spark, path)) >= 10


def test_the_spark_writers_feed_is_each_commits_difference(
    db: Database, tmp_path: Path, spark: Any
) -> None:
    rng = random.Random(12)
    oracle.create(db.conn)
    keep = {**KEEP, "writer": "spark", "spark": spark, "max_batch_rows": 40}
    delta.run(db.dsn, tmp_path, until_lsn=current_lsn(db), **keep)
    next_id = [100]
    for _ in range(2):
        for _ in range(6):
            oracle.workload(db.conn, rng, next_id)
        delta.run(db.dsn, tmp_path, until_lsn=current_lsn(db), **keep)
    path = delta.table_path(tmp_path, "public.acct")
    equals_source(db, path)
    assert check_feed(path, spark_feed(spark, path)) >= 2
