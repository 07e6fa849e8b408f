"""As-of points (:mod:`pgwire_cdc.lakehouse.points`), without a server: money moves between
two tables in transactions that batches sometimes cut in two, and every table read as of
every point the sink wrote must be the source as it was at that point's LSN (so the
balances sum to the invariant). On the in-memory tables and on Delta tables kept by the
delta-rs writer (read back by ``delta.read``), with deletion vectors and copy-on-write."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pgwire_cdc.errors import DeltaError
from pgwire_cdc.lakehouse.memory import MemoryTables
from pgwire_cdc.lakehouse.points import (
    POINTS,
    AsOf,
    NoPoint,
    choose,
    point_rows,
)
from pgwire_cdc.lakehouse.sink import LakehouseSink
from pgwire_cdc.streaming import Batch
from support.lakes import Lake, as_multiset, cuts
from support.pgoutput import Source, snapshot_batch

A, B = "public.a", "public.b"
ACCOUNTS = 6
TOTAL = 2 * ACCOUNTS * 100


def bank() -> Source:
    src = Source()
    for name in (A, B):
        src.table(name, [("id", "int8"), ("balance", "int8")], ["id"])
    return src


def cut_at(batch: Batch, place: tuple[int, int]) -> tuple[Batch, Batch]:
    """``batch`` as two: the rows up to ``place`` (commit LSN, ordinal), and the rest; the
    first ends inside that transaction (its LSN short of the commit) as ``max_batch_rows``
    cuts."""
    head: dict[str, pa.Table] = {}
    tail: dict[str, pa.Table] = {}
    commit, ordinal = place
    for name, rows in batch.tables.items():
        c, o = rows["_commit_lsn"], rows["_tx_ordinal"]
        early = pc.or_(pc.less(c, commit), pc.and_(pc.equal(c, commit), pc.less_equal(o, ordinal)))
        head[name], tail[name] = rows.filter(early), rows.filter(pc.invert(early))
    return Batch(tables=head, lsn=commit), Batch(tables=tail, lsn=batch.lsn)


def read_points(lake: Lake) -> pa.Table:
    ref = lake.format.ref(POINTS)
    if not lake.format.exists(ref):
        return pa.table({"lsn": pa.array([], pa.int64())})
    return lake.format.read(ref, ["lsn", "table", "version", "written_at"])


def read_as_of(lake: Lake, as_of_lsn: int | None) -> AsOf:
    """Every table at the point ``as_of_lsn`` picks, as the format's reader reads it."""
    if isinstance(lake.format, MemoryTables):
        lsn, versions = choose(read_points(lake), None, as_of_lsn)
        return AsOf(lsn, {n: lake.format.at(n, v) for n, v in versions.items()})
    from pgwire_cdc import delta

    return delta.read(lake.where, as_of_lsn=as_of_lsn)


def source_at(history: list[tuple[int, dict[str, list[dict[str, Any]]]]], lsn: int) -> Any:
    """The source's tables as every transaction committed before ``lsn`` left them."""
    state = {A: [], B: []}
    for commit, tables in history:
        if commit < lsn:
            state = tables
    return state


def started(lake: Lake, every: float | None = 0) -> LakehouseSink:
    """A sink as a pipeline run starts it: told the published tables first."""
    sink = lake.sink(as_of_every=every)
    sink.held_tables([A, B])
    return sink


def transfer(src: Source, rng: random.Random) -> None:
    amount = rng.randint(1, 50)
    (giver, taker) = rng.sample([A, B], 2) if rng.random() < 0.7 else [A, A]
    g, t = rng.randint(1, ACCOUNTS), rng.randint(1, ACCOUNTS)
    with src.transaction() as tx:
        for name, key, delta in ((giver, g, -amount), (taker, t, amount)):
            row = src.tables[name].rows[src.tables[name].find({"id": key})]
            tx.update(name, {"id": key}, {"balance": row["balance"] + delta})


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_point_reads_as_the_source_at_its_lsn(lake: Lake, seed: int) -> None:
    rng = random.Random(seed)
    src = bank()
    history: list[tuple[int, dict[str, list[dict[str, Any]]]]] = []

    def committed() -> None:
        history.append((src.commits[-1], {n: src.rows(n) for n in (A, B)}))

    with src.transaction() as tx:
        for name in (A, B):
            for i in range(1, ACCOUNTS + 1):
                tx.insert(name, {"id": i, "balance": 100})
    committed()
    sink = started(lake)
    sink.apply(src.batch())
    # A point at every batch's LSN, but one cut inside a transaction whose rows a crashed
    # process committed in part (its tables' versions without them are not known).
    must = [history[-1][0] + 16]
    may = list(must)
    for _ in range(12):
        for _ in range(rng.randint(1, 3)):
            transfer(src, rng)
            committed()
        batch = src.batch()
        if rng.random() < 0.5:
            # Cut between the two updates of the last transfer: the point there holds
            # every table as it was before that transfer.
            first, second = cut_at(batch, (src.commits[-1], 0))
            assert cuts(first) and not cuts(second)
            sink.apply(first)
            may.append(first.lsn)
            if rng.random() < 0.5:
                sink = started(lake)  # a crash before the ack: delivered again
                sink.apply(first)
            else:
                must.append(first.lsn)
            sink.apply(second)
        else:
            sink.apply(batch)
            if rng.random() < 0.3:
                started(lake).apply(batch)  # delivered again: nothing changes
        must.append(batch.lsn)
        may.append(batch.lsn)
    points = sorted(set(read_points(lake)["lsn"].to_pylist()))
    assert set(must) <= set(points) <= set(may)
    for lsn in points:
        got = read_as_of(lake, lsn)
        assert got.lsn == lsn and set(got) == {A, B}
        want = source_at(history, lsn)
        for name in (A, B):
            assert as_multiset(got[name].to_pylist()) == as_multiset(want[name]), (lsn, name)
        assert sum(sum(got[n]["balance"].to_pylist()) for n in (A, B)) == TOTAL
    # Between two points: the one before; none before the first.
    assert read_as_of(lake, points[1] + 4).lsn == points[1]
    assert read_as_of(lake, None).lsn == points[-1]
    with pytest.raises((NoPoint, DeltaError), match="no as-of point"):
        read_as_of(lake, points[0] - 1)


def test_a_transaction_cut_across_a_restart_makes_no_point_until_it_ends(lake: Lake) -> None:
    """A transaction cut three times, the process restarted after the first part: the
    new process cannot know a version of ``a`` without the rows the old one committed, so
    it writes no point before the transaction ends; before the restart, the point at the
    first cut holds both tables as they were before it."""
    src = bank()
    with src.transaction() as tx:
        for name in (A, B):
            for i in (1, 2):
                tx.insert(name, {"id": i, "balance": 100})
    sink = started(lake)
    sink.apply(src.batch())
    before = {n: src.rows(n) for n in (A, B)}
    with src.transaction() as tx:
        tx.update(A, {"id": 1}, {"balance": 90})
        tx.update(B, {"id": 1}, {"balance": 110})
        tx.update(A, {"id": 2}, {"balance": 80})
        tx.update(B, {"id": 2}, {"balance": 120})
    commit = src.commits[-1]
    first, rest = cut_at(src.batch(), (commit, 0))
    middle, last = cut_at(rest, (commit, 2))
    sink.apply(first)
    at_first = read_as_of(lake, None)
    assert at_first.lsn == first.lsn == commit
    for name in (A, B):
        assert as_multiset(at_first[name].to_pylist()) == as_multiset(before[name])
    again = started(lake)  # a crash before the first part's ack
    again.apply(first)
    again.apply(middle)
    assert read_as_of(lake, None).lsn == commit  # the same point: none written since
    assert read_points(lake)["lsn"].to_pylist().count(commit) == 2  # a and b, once
    again.apply(last)
    done = read_as_of(lake, None)
    assert done.lsn == last.lsn
    assert sum(sum(done[n]["balance"].to_pylist()) for n in (A, B)) == 400


def test_points_wait_for_their_interval_and_the_end_of_the_run(lake: Lake) -> None:
    src = bank()
    with src.transaction() as tx:
        tx.insert(A, {"id": 1, "balance": 100})
    sink = started(lake, 3600)
    sink.apply(src.batch())  # the first point of a run is written at once
    for _ in range(3):
        with src.transaction() as tx:
            tx.update(A, {"id": 1}, {"balance": 100})
        last = src.batch()
        sink.apply(last)
    assert read_points(lake)["lsn"].to_pylist() == [src.commits[0] + 16]
    sink.finish()
    assert sorted(set(read_points(lake)["lsn"].to_pylist())) == [src.commits[0] + 16, last.lsn]
    sink.finish()  # nothing new since: no second point at the same LSN
    assert read_points(lake).num_rows == 2
    # No points at all when asked for none.
    with src.transaction() as tx:
        tx.update(A, {"id": 1}, {"balance": 7})
    quiet = started(lake, None)
    quiet.apply(src.batch())
    quiet.finish()
    assert read_points(lake).num_rows == 2


def test_a_table_being_copied_and_the_initial_snapshot_make_no_point_meanwhile(lake: Lake) -> None:
    src = bank()
    with src.transaction() as tx:
        tx.insert(A, {"id": 1, "balance": 100})
        tx.insert(B, {"id": 1, "balance": 100})
    sink = started(lake)
    snap = src.batch()
    sink.apply(snapshot_batch(snap, start=True))
    assert read_points(lake).num_rows == 0
    # B is copied again (a table added later, a re-snapshot): its chunks carry progress.
    with src.transaction() as tx:
        tx.update(A, {"id": 1}, {"balance": 50})
        tx.update(B, {"id": 1}, {"balance": 150})
    batch = src.batch()
    progress = Batch(tables=batch.tables, lsn=batch.lsn, snapshot_progress={B: [1]})
    sink.apply(progress)
    points = read_points(lake)
    assert set(points["table"].to_pylist()) == {A}
    with src.transaction() as tx:
        tx.update(A, {"id": 1}, {"balance": 60})
    done = src.batch()
    sink.apply(Batch(tables=done.tables, lsn=done.lsn, snapshot_progress={B: None}))
    latest = choose(read_points(lake), None)
    assert latest[0] == done.lsn and set(latest[1]) == {A, B}
    # The points table is none of the source's tables.
    assert lake.format.found_tables() in ([A, B], [])


def test_a_copys_last_chunk_past_the_batchs_lsn_is_no_cut_transaction(lake: Lake) -> None:
    """A chunk's rows stand at its high watermark, which can lie past the batch's LSN (the
    last commit before it): the stream has passed it, so the table with them holds the
    source at the batch's LSN, and the point there names it at its newest version."""
    src = bank()
    with src.transaction() as tx:
        tx.insert(A, {"id": 1, "balance": 100})
    sink = started(lake)
    sink.apply(snapshot_batch(src.batch(), start=True))
    with src.transaction() as tx:
        tx.insert(B, {"id": 1, "balance": 100})
        tx.insert(B, {"id": 2, "balance": 50})
    chunk = src.batch().tables[B]
    high = src.lsn + 40  # the watermark, a message, not a commit
    read = chunk.set_column(
        chunk.schema.get_field_index("_change_type"),
        "_change_type",
        pa.array(["read"] * chunk.num_rows, chunk.schema.field("_change_type").type),
    ).set_column(
        chunk.schema.get_field_index("_commit_lsn"),
        "_commit_lsn",
        pa.array([high] * chunk.num_rows, chunk.schema.field("_commit_lsn").type),
    )
    with src.transaction() as tx:
        tx.update(A, {"id": 1}, {"balance": 70})
    changes = src.batch()
    tables = {**changes.tables, B: read}
    sink.apply(Batch(tables=tables, lsn=changes.lsn, snapshot_progress={B: None}))
    got = read_as_of(lake, None)
    assert got.lsn == changes.lsn
    for name in (A, B):
        assert as_multiset(got[name].to_pylist()) == as_multiset(src.rows(name)), name


def test_a_run_that_only_copied_the_tables_ends_with_a_point(lake: Lake) -> None:
    src = bank()
    with src.transaction() as tx:
        tx.insert(A, {"id": 1, "balance": 100})
    with src.transaction() as tx:
        tx.insert(B, {"id": 1, "balance": 100})
    snap = src.batch()
    sink = started(lake, 3600)
    sink.apply(snapshot_batch(Batch(tables={A: snap.tables[A]}, lsn=snap.lsn), start=True))
    sink.apply(snapshot_batch(Batch(tables={B: snap.tables[B]}, lsn=snap.lsn), start=False))
    assert read_points(lake).num_rows == 0  # not before the snapshot's last batch
    sink.finish()
    got = read_as_of(lake, None)
    assert got.lsn == snap.lsn and {n: t.num_rows for n, t in got.items()} == {A: 1, B: 1}


def test_choose_takes_the_newest_point_that_names_every_table() -> None:
    import datetime as dt

    at = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    points = pa.concat_tables(
        [
            point_rows(100, {A: 1, B: 1}, at),
            point_rows(200, {A: 2}, at),  # B was being copied
            point_rows(300, {A: 3, B: 5}, at),
        ]
    )
    assert choose(points, None) == (300, {A: 3, B: 5})
    assert choose(points, [A, B], 299) == (100, {A: 1, B: 1})
    assert choose(points, [A], 299) == (200, {A: 2})
    assert choose(points, None, 250) == (200, {A: 2})
    with pytest.raises(NoPoint, match=r"at or before LSN 0/63 with public\.a"):
        choose(points, [A], 99)
    with pytest.raises(NoPoint):
        choose(points, ["public.c"])


def test_an_empty_lake_has_no_points(tmp_path: Path) -> None:
    pytest.importorskip("deltalake")
    from pgwire_cdc import delta

    with pytest.raises(DeltaError, match="no as-of points under"):
        delta.read(tmp_path / "lake", [A])
    sink = LakehouseSink(MemoryTables(), as_of_every=0)
    sink.finish()
    assert not sink.format.exists(POINTS)
