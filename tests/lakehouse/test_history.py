"""History tables (``history="scd2"``, :mod:`pgwire_cdc.lakehouse.history`), without a
server: a random workload on the made-up source (key changes, unchanged TOAST, deletes,
truncates) in batches that sometimes end inside a transaction, some delivered again after
a crash, and the history table checked against the source's own record of every
transaction: read as of each commit LSN it is the source right after that commit, it
holds one version per transaction that left a row changed, and its current versions are
the source now. On the in-memory tables and on Delta tables kept by delta-rs, with
deletion vectors and copy-on-write."""

from __future__ import annotations

import random
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pgwire_cdc.lakehouse.format import TableFormat
from pgwire_cdc.lakehouse.history import HISTORY_COLUMNS
from pgwire_cdc.lakehouse.sink import LakehouseSink
from pgwire_cdc.streaming import Batch
from support.lakes import BAG, KEYED, Crash, Crashing, Lake, as_multiset, source
from support.pgoutput import UNCHANGED, Source, snapshot_batch

COLUMNS = ["id", "name", "note", "n"]


class Record:
    """The source's own history: the rows after each commit, and per commit the keys
    whose row it left changed (inserted, updated or moved to)."""

    def __init__(self, src: Source) -> None:
        self.src = src
        self.after: list[tuple[int, list[dict[str, Any]]]] = []
        self.versions = 0

    def committed(self, touched: set[int]) -> None:
        rows = self.src.rows(KEYED)
        alive = {r["id"] for r in rows}
        self.versions += len(touched & alive)
        self.after.append((self.src.commits[-1], rows))


def random_transaction(src: Source, rng: random.Random, next_id: list[int], rec: Record) -> None:
    items = src.tables[KEYED]
    touched: set[int] = set()
    with src.transaction() as tx:
        for _ in range(rng.randint(1, 5)):
            roll = rng.random()
            if roll < 0.03:
                tx.truncate(KEYED)
                touched.clear()
            elif roll < 0.35 or not items.rows:
                next_id[0] += 1
                tx.insert(
                    KEYED,
                    {"id": next_id[0], "name": f"n{next_id[0]}", "note": "x" * rng.randint(1, 3)},
                )
                touched.add(next_id[0])
            elif roll < 0.8:
                row = rng.choice(items.rows)
                new: dict[str, Any] = {"n": rng.randint(0, 99)}
                if rng.random() < 0.5:
                    new["note"] = UNCHANGED
                key = row["id"]
                if rng.random() < 0.2:
                    next_id[0] += 1
                    new["id"] = key = next_id[0]
                tx.update(KEYED, {"id": row["id"]}, new)
                touched.add(key)
            else:
                tx.delete(KEYED, {"id": rng.choice(items.rows)["id"]})
    rec.committed(touched)


def cut(batch: Batch, rows: int) -> list[Batch]:
    """``batch`` (of one table) as two, the first ending after its first ``rows`` rows,
    inside their transaction when the next row belongs to it too (its LSN then short of
    that transaction's commit, as ``max_batch_rows`` cuts)."""
    ((name, table),) = batch.tables.items()
    head, tail = table.slice(0, rows), table.slice(rows)
    commit = int(head["_commit_lsn"][-1].as_py())
    inside = tail.num_rows > 0 and int(tail["_commit_lsn"][0].as_py()) == commit
    first = Batch(tables={name: head}, lsn=commit if inside else commit + 8)
    return [first, Batch(tables={name: tail}, lsn=batch.lsn)]


def first_rows(src: Source, rec: Record, n: int, note: str, *, counted: bool) -> None:
    """Rows 1 to ``n`` in one transaction (``counted``: the rows count as versions the
    history must hold; else they reach it as an initial snapshot's)."""
    with src.transaction() as tx:
        for i in range(1, n + 1):
            tx.insert(KEYED, {"id": i, "name": f"n{i}", "note": note, "n": i})
    rec.committed(set(range(1, n + 1)) if counted else set())


def drive(sink: LakehouseSink, src: Source, rng: random.Random, rec: Record, rounds: int) -> None:
    """``rounds`` batches of one to four random transactions each (new keys past the
    source's highest) into ``sink``, half of them cut inside a transaction."""
    next_id = [max((r["id"] for r in src.rows(KEYED)), default=0) + 1000]
    for _ in range(rounds):
        for _ in range(rng.randint(1, 4)):
            random_transaction(src, rng, next_id, rec)
        batch = src.batch()
        table = batch.tables.get(KEYED)
        if table is not None and table.num_rows > 2 and rng.random() < 0.5:
            for part in cut(Batch(tables={KEYED: table}, lsn=batch.lsn), rng.randint(1, 2)):
                sink.apply(part)
        else:
            sink.apply(batch)


def sink_for(lake: Lake, crash_before: int | None = None) -> LakehouseSink:
    fmt = lake.format
    if crash_before is not None:
        fmt = cast(TableFormat, Crashing(lake.format, crash_before))
    return LakehouseSink(fmt, as_of_every=None, history="scd2")


def history(lake: Lake) -> pa.Table:
    ref = lake.format.history_ref(KEYED)
    return lake.format.read(ref, [*COLUMNS, *HISTORY_COLUMNS])


def as_of(table: pa.Table, lsn: int) -> list[dict[str, Any]]:
    """The history's rows valid at ``lsn``, as the docs' query reads them."""
    valid = pc.and_(
        pc.less_equal(table["_valid_from_lsn"], lsn),
        pc.or_kleene(pc.is_null(table["_valid_to_lsn"]), pc.greater(table["_valid_to_lsn"], lsn)),
    )
    live = table.filter(pc.and_(valid, pc.invert(table["_deleted"])))
    return live.select(COLUMNS).to_pylist()


def check(lake: Lake, rec: Record, start: int = 0) -> None:
    table = history(lake)
    for lsn, rows in rec.after[start:]:
        assert as_multiset(as_of(table, lsn)) == as_multiset(rows), f"as of {lsn:X}"
    current = table.filter(table["_is_current"]).select(COLUMNS).to_pylist()
    assert as_multiset(current) == as_multiset(rec.src.rows(KEYED))
    assert as_multiset(lake.rows(KEYED)) == as_multiset(rec.src.rows(KEYED))
    versions = table.filter(pc.invert(table["_deleted"]))
    snapshot_rows = pc.sum(pc.is_null(versions["_xid"])).as_py() or 0
    assert versions.num_rows - snapshot_rows == rec.versions
    # One row per key and version start; a tombstone is never current.
    keys = table.group_by(["id", "_valid_from_lsn"]).aggregate([([], "count_all")])
    assert pc.max(keys["count_all"]).as_py() == 1
    assert not pc.any(pc.and_(table["_deleted"], table["_is_current"])).as_py()


@pytest.mark.parametrize("seed", range(6))
def test_the_history_reads_as_the_source_after_every_commit(lake: Lake, seed: int) -> None:
    rng = random.Random(seed)
    src = source()
    rec = Record(src)
    first_rows(src, rec, 5, "toast", counted=False)
    sink = sink_for(lake)
    sink.apply(snapshot_batch(src.batch(), start=True))
    drive(sink, src, rng, rec, 10 if lake.kind == "memory" else 5)
    check(lake, rec)


@pytest.mark.parametrize("crash_before", range(1, 7))
def test_a_crash_between_the_tables_then_a_replay_adds_no_version(
    lake: Lake, crash_before: int
) -> None:
    """The process dies before its n-th commit (the history table's, the current-state
    table's, between the two commits of a cut transaction); the batches since the last
    ack come again to a new sink: each table takes what it lacks, nothing twice."""
    rng = random.Random(crash_before)
    src = source()
    rec = Record(src)
    first_rows(src, rec, 4, "long", counted=True)
    sink_for(lake).apply(src.batch())
    next_id = [4]
    pending = []
    for _ in range(3):
        random_transaction(src, rng, next_id, rec)
        random_transaction(src, rng, next_id, rec)
        batch = src.batch()
        table = batch.tables[KEYED]
        if table.num_rows > 2:
            pending += cut(Batch(tables={KEYED: table}, lsn=batch.lsn), 2)
        else:
            pending.append(batch)
    with pytest.raises(Crash):
        crashing = sink_for(lake, crash_before)
        for batch in pending:
            crashing.apply(batch)
        raise Crash("no commit left to crash before")
    replay = sink_for(lake)
    for batch in pending:
        replay.apply(batch)
        # Between two batches too, each key has one open version at most: the history
        # skips what it holds already (its own position) rather than writing it again.
        table = history(lake)
        open_ = table.filter(pc.is_null(table["_valid_to_lsn"]))
        counts = open_.group_by(["id"]).aggregate([([], "count_all")])
        assert (pc.max(counts["count_all"]).as_py() or 0) <= 1
    check(lake, rec)


def test_a_row_moved_to_a_new_key_with_its_toast_unchanged(lake: Lake) -> None:
    src = source()
    rec = Record(src)
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 1, "name": "one", "note": "big value", "n": 1})
    rec.committed({1})
    sink = sink_for(lake)
    sink.apply(src.batch())
    with src.transaction() as tx:
        tx.update(KEYED, {"id": 1}, {"id": 2, "n": 2, "note": UNCHANGED})
    rec.committed({2})
    with src.transaction() as tx:
        tx.update(KEYED, {"id": 2}, {"n": 3, "note": UNCHANGED})
    rec.committed({2})
    sink.apply(src.batch())
    check(lake, rec)
    table = history(lake).sort_by([("_valid_from_lsn", "ascending"), ("id", "ascending")])
    assert [(r["id"], r["note"], r["_deleted"]) for r in table.to_pylist()] == [
        (1, "big value", False),
        (1, None, True),  # the old key's tombstone
        (2, "big value", False),
        (2, "big value", False),
    ]


def soft_sink(lake: Lake, crash_before: int | None = None) -> LakehouseSink:
    fmt = lake.format
    if crash_before is not None:
        fmt = cast(TableFormat, Crashing(lake.format, crash_before))
    return LakehouseSink(fmt, as_of_every=None, deletes="soft")


@pytest.mark.parametrize("seed", range(4))
def test_soft_deletes_keep_every_row_that_went(lake: Lake, seed: int) -> None:
    """``deletes="soft"``: the live rows are the source's; every key the lake held that
    the source no longer has stays, ``_deleted`` true and ``_deleted_lsn`` the commit LSN
    that removed it (a delete, a key change, a truncate); a key inserted again lives."""
    rng = random.Random(seed)
    src = source()
    rec = Record(src)
    sink = soft_sink(lake)
    first_rows(src, rec, 5, "toast", counted=False)
    sink.apply(snapshot_batch(src.batch(), start=True))
    seen: dict[int, dict[str, Any]] = {r["id"]: r for r in src.rows(KEYED)}
    gone_at: dict[int, int] = {}
    next_id = [5]
    for _ in range(6 if lake.kind == "memory" else 3):
        for _ in range(rng.randint(1, 3)):
            before = {r["id"] for r in src.rows(KEYED)}
            random_transaction(src, rng, next_id, rec)
            now = {r["id"]: r for r in src.rows(KEYED)}
            for key in before - set(now):
                gone_at[key] = src.commits[-1]
            for key in now:
                gone_at.pop(key, None)
            seen.update(now)
        sink.apply(src.batch())
        rows = lake.rows(KEYED)
        live = [{c: r[c] for c in COLUMNS} for r in rows if not r["_deleted"]]
        assert as_multiset(live) == as_multiset(src.rows(KEYED))
        # Rows inserted and removed between two batches never reached the lake.
        dead = {r["id"]: r for r in rows if r["_deleted"]}
        assert set(dead) <= set(gone_at)
        for key, row in dead.items():
            assert row["_deleted_lsn"] == gone_at[key], key
            assert {c: row[c] for c in COLUMNS} == {c: seen[key][c] for c in COLUMNS}
        assert all(r["_deleted_lsn"] is None for r in rows if not r["_deleted"])


class LastChange(Record):
    """:class:`Record`, and per live key the commit LSN of the last transaction that
    changed its row (what a change-feed table's ``_commit_lsn`` holds)."""

    def __init__(self, src: Source) -> None:
        super().__init__(src)
        self.lsn: dict[int, int] = {}

    def committed(self, touched: set[int]) -> None:
        super().committed(touched)
        alive = {r["id"] for r in self.src.rows(KEYED)}
        self.lsn = {k: v for k, v in self.lsn.items() if k in alive}
        self.lsn.update({k: self.src.commits[-1] for k in touched & alive})


@pytest.mark.parametrize("seed", range(3))
def test_a_change_feed_table_holds_each_rows_last_commit_lsn(lake: Lake, seed: int) -> None:
    """With ``change_data_feed``: a table with a key holds ``_commit_lsn``, the commit LSN
    of the transaction that last changed the row (key changes, unchanged TOAST, truncates,
    batches ending inside a transaction), through a later run without the option too; a
    keyless table holds no such column. On Delta tables the feed is on
    (``delta.enableChangeDataFeed``)."""
    rng = random.Random(seed)
    src = source()
    rec = LastChange(src)
    first_rows(src, rec, 5, "toast", counted=True)
    sink = LakehouseSink(lake.format, as_of_every=None, change_data_feed=True)
    sink.apply(snapshot_batch(src.batch(), start=True))
    drive(sink, src, rng, rec, 6 if lake.kind == "memory" else 4)
    # A later run without the option keeps the column current all the same.
    drive(LakehouseSink(lake.format, as_of_every=None), src, rng, rec, 1)
    with src.transaction() as tx:
        tx.insert(BAG, {"k": 1, "v": "a"})
        tx.insert(BAG, {"k": 1, "v": "a"})
    with src.transaction() as tx:
        tx.delete(BAG, {"k": 1, "v": "a"})
    sink.apply(src.batch())
    assert lake.rows(BAG) == [{"k": 1, "v": "a"}]
    rows = lake.rows(KEYED)
    assert as_multiset([{c: r[c] for c in COLUMNS} for r in rows]) == as_multiset(src.rows(KEYED))
    assert {r["id"]: r["_commit_lsn"] for r in rows} == rec.lsn
    if lake.kind != "memory":
        assert lake.property(KEYED, "delta.enableChangeDataFeed") == "true"
