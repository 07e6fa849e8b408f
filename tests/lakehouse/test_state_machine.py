"""The lakehouse sink's state machine, without a server: :class:`~pgwire_cdc.lakehouse.
sink.LakehouseSink` fed the change tables the package's own decoder makes of pgoutput
messages (``support.pgoutput``), checked against what the made-up source holds.

Key changes, unchanged TOAST values (also on rows that moved to a new key), truncates,
keyless REPLICA IDENTITY FULL tables (multisets), columns added and dropped, batches
delivered again, batches that end inside a transaction, crashes before any commit of a
batch, and incremental-copy progress. Each runs on the in-memory tables
(:class:`~pgwire_cdc.lakehouse.memory.MemoryTables`) and on Delta tables in a temporary
directory kept by the delta-rs writer, with deletion vectors and copy-on-write (no JVM);
what only the in-memory tables show (the commits made and what each recorded) on those.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from pgwire_cdc.lakehouse.memory import MemoryTables
from pgwire_cdc.lakehouse.positions import Mark, txn_id
from pgwire_cdc.lakehouse.sink import LakehouseSink, segments
from pgwire_cdc.streaming import Batch
from support.lakes import (
    BAG,
    KEYED,
    Crash,
    Lake,
    as_multiset,
    assert_equal,
    random_transaction,
    source,
)
from support.pgoutput import UNCHANGED, Source, cut, snapshot_batch


@pytest.mark.parametrize("seed", range(8))
def test_a_random_workload_equals_the_source_after_every_batch(lake: Lake, seed: int) -> None:
    rng = random.Random(seed)
    src = source()
    sink = lake.sink()
    next_id = [0]
    for _ in range(12 if lake.kind == "memory" else 6):
        for _ in range(rng.randint(1, 4)):
            random_transaction(src, rng, next_id)
        stats = sink.apply(src.batch())
        assert stats.skipped == 0
        assert_equal(lake, src)


@pytest.mark.parametrize("seed", range(4))
def test_batches_delivered_again_change_nothing(lake: Lake, seed: int) -> None:
    """After a crash between the commits and the ack, the stream delivers the batches
    from the last ack again: a new sink on the same tables skips every row and commits
    nothing."""
    rng = random.Random(seed)
    src = source()
    next_id = [0]
    batches = []
    for _ in range(6):
        random_transaction(src, rng, next_id)
        batches.append(src.batch())
    sink = lake.sink()
    for batch in batches:
        sink.apply(batch)
    again = lake.sink()
    for batch in batches[rng.randint(0, 5) :]:
        stats = again.apply(batch)
        assert stats.skipped == batch.rows
        assert stats.commits == 0
    assert_equal(lake, src)


@pytest.mark.parametrize("crash_before", range(1, 6))
def test_a_crash_before_any_commit_of_a_batch_then_a_replay(lake: Lake, crash_before: int) -> None:
    """The process dies before the n-th commit (between tables, between the two commits
    of a cut transaction, before a batch's first): nothing was acked since, so every
    batch after the last ack comes again, to a new sink."""
    src = source()
    with src.transaction() as tx:
        for i in range(1, 5):
            tx.insert(KEYED, {"id": i, "name": f"n{i}", "note": "long", "n": i})
        tx.insert(BAG, {"k": 1, "v": "a"})
        tx.insert(BAG, {"k": 1, "v": "a"})
    lake.sink().apply(src.batch())
    with src.transaction() as tx:
        tx.update(KEYED, {"id": 1}, {"n": 10, "note": UNCHANGED})
        tx.update(KEYED, {"id": 2}, {"id": 20, "note": UNCHANGED})
        tx.delete(BAG, {"k": 1, "v": "a"})
        tx.insert(BAG, {"k": 2, "v": "b"})
    both = src.batch()  # two tables: two commits
    with src.transaction() as tx:
        tx.update(KEYED, {"id": 3}, {"name": "three"})
        tx.delete(KEYED, {"id": 4})
    with src.transaction() as tx:
        tx.update(KEYED, {"id": 20}, {"n": 21, "note": UNCHANGED})
        tx.update(KEYED, {"id": 3}, {"id": 30, "note": UNCHANGED})
        tx.insert(KEYED, {"id": 5, "name": "five", "note": "t", "n": 5})
    # Cut inside the second transaction: two commits, then one.
    first, second = cut(src.batch(), 3)
    pending = [both, first, second]
    with pytest.raises(Crash):
        sink = lake.sink(crash_before=crash_before)
        for batch in pending:
            sink.apply(batch)
    replay = lake.sink()
    for batch in pending:
        replay.apply(batch)
    assert_equal(lake, src)


@pytest.mark.parametrize("nth", range(1, 7))
def test_a_commit_whose_answer_was_lost_is_found_in_the_table(lake: Lake, nth: int) -> None:
    """The n-th commit is done but raises (an object store did the write and lost its
    answer): the table, read again, holds the commit's position, so the batch goes on,
    committing nothing twice, and the tables equal the source; batches cut inside a
    transaction among them."""
    rng = random.Random(nth)
    src = source()
    lake.sink().apply(src.batch())  # nothing yet: the tables come with the first rows
    sink = lake.sink(lose_answer=nth)
    next_id = [0]
    commits = 0
    for i in range(4):
        if i % 2 == 0:
            for _ in range(2):
                random_transaction(src, rng, next_id)
            parts = [src.batch()]
        else:  # one transaction of one table, cut in two
            with src.transaction() as tx:
                for _ in range(4):
                    next_id[0] += 1
                    tx.insert(KEYED, {"id": 1000 + next_id[0], "name": "c", "note": "t", "n": i})
            parts = list(cut(src.batch(), 2))
        for part in parts:
            commits += sink.apply(part).commits
        assert_equal(lake, src)
    assert commits >= nth
    if isinstance(lake.format, MemoryTables):
        marks = [(c.ref, c.mark) for c in lake.format.commits() if c.mark is not None]
        assert len(marks) == len(set(map(repr, marks)))


def test_a_commit_that_failed_is_not_taken_for_done(lake: Lake) -> None:
    """A commit that raised and is not in the table (the table's position did not move
    to its mark) raises: nothing is taken for done that is not."""
    src = source()
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 1, "name": "a", "note": "t", "n": 1})
    lake.sink().apply(src.batch())
    with src.transaction() as tx:
        tx.update(KEYED, {"id": 1}, {"n": 2})
    with pytest.raises(Crash):
        lake.sink(crash_before=1).apply(src.batch())


def test_a_batch_that_ends_inside_a_transaction_is_two_commits(lake: Lake) -> None:
    src = source()
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 1, "name": "a", "note": "t", "n": 1})
    with src.transaction() as tx:
        for i in range(2, 8):
            tx.insert(KEYED, {"id": i, "name": "b", "note": "t", "n": i})
    first, second = cut(src.batch(), 3)
    assert lake.sink().apply(first).commits == 2
    position = lake.format.position(lake.format.ref(KEYED))
    assert position is not None and position.lsn == src.commits[0]
    # The first two rows of the second transaction (ordinals 0 and 1).
    assert position.ordinal_of(txn_id(src.commits[1])) == 1
    # The first batch again (a crash before its ack), then the rest, to a new sink.
    again = lake.sink()
    assert again.apply(first).skipped == 3
    stats = again.apply(second)
    assert stats.skipped == 0 and stats.inserted == 4
    assert_equal(lake, src, KEYED)


def test_the_marks_of_a_cut_batch() -> None:
    """What each commit of a batch cut inside a transaction records: the complete
    transactions at the last of their commit LSNs, then the cut one as partial."""
    src = source()
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 1, "name": "a", "note": "t", "n": 1})
    with src.transaction() as tx:
        for i in range(2, 8):
            tx.insert(KEYED, {"id": i, "name": "b", "note": "t", "n": i})
    first, _ = cut(src.batch(), 3)
    tables = MemoryTables()
    LakehouseSink(tables).apply(first)
    marks = [c.mark for c in tables.commits(KEYED) if c.kind == "merge"]
    assert marks == [Mark(src.commits[0]), Mark(src.commits[0], (src.commits[1], 1))]


def test_rows_moved_to_a_new_key_keep_their_unchanged_toast_value(lake: Lake) -> None:
    src = source()
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 1, "name": "a", "note": "big value", "n": 1})
        tx.insert(KEYED, {"id": 2, "name": "b", "note": "other", "n": 2})
    sink = lake.sink()
    sink.apply(src.batch())
    with src.transaction() as tx:
        tx.update(KEYED, {"id": 1}, {"id": 10, "note": UNCHANGED})
    with src.transaction() as tx:
        tx.update(KEYED, {"id": 2}, {"n": 5, "note": UNCHANGED})
    sink.apply(src.batch())
    assert sorted(lake.rows(KEYED), key=lambda r: r["id"]) == [
        {"id": 2, "name": "b", "note": "other", "n": 5},
        {"id": 10, "name": "a", "note": "big value", "n": 1},
    ]


def test_a_truncate_deletes_the_rows_the_batch_does_not_name(lake: Lake) -> None:
    src = source()
    with src.transaction() as tx:
        for i in range(1, 6):
            tx.insert(KEYED, {"id": i, "name": "a", "note": "t", "n": i})
    sink = lake.sink()
    sink.apply(src.batch())
    with src.transaction() as tx:
        tx.update(KEYED, {"id": 1}, {"n": 100})
        tx.truncate(KEYED)
        tx.insert(KEYED, {"id": 2, "name": "again", "note": None, "n": 0})
    stats = sink.apply(src.batch())
    assert stats.truncated == 1
    assert_equal(lake, src, KEYED)
    assert [r["id"] for r in lake.rows(KEYED)] == [2]


def test_a_keyless_table_is_a_multiset(lake: Lake) -> None:
    src = source()
    with src.transaction() as tx:
        for _ in range(3):
            tx.insert(BAG, {"k": 1, "v": "same"})
    sink = lake.sink()
    sink.apply(src.batch())
    with src.transaction() as tx:
        tx.update(BAG, {"k": 1, "v": "same"}, {"v": "changed"})
        tx.delete(BAG, {"k": 1, "v": "same"})
    sink.apply(src.batch())
    assert as_multiset(lake.rows(BAG)) == Counter(
        {(("k", 1), ("v", "same")): 1, (("k", 1), ("v", "changed")): 1}
    )


def test_columns_added_and_dropped(lake: Lake) -> None:
    """A column added at the source is added to the table; a column dropped stays in a
    keyed table (its rows keep their values, new rows have it null) and goes from a
    keyless one (whole rows are matched)."""
    src = source()
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 1, "name": "a", "note": "t", "n": 1})
        tx.insert(BAG, {"k": 1, "v": "a"})
    sink = lake.sink()
    sink.apply(src.batch())
    with src.transaction() as tx:
        tx.add_column(KEYED, "extra", "int4")
        tx.insert(KEYED, {"id": 2, "name": "b", "note": "t", "n": 2, "extra": 7})
        tx.drop_column(BAG, "v")
        tx.insert(BAG, {"k": 2})
    sink.apply(src.batch())
    assert lake.columns(KEYED) == ["id", "name", "note", "n", "extra"]
    assert_equal(lake, src)
    with src.transaction() as tx:
        tx.drop_column(KEYED, "note")
        tx.update(KEYED, {"id": 1}, {"n": 11})
        tx.insert(KEYED, {"id": 3, "name": "c", "n": 3})
    sink.apply(src.batch())
    kept = {r["id"]: r for r in lake.rows(KEYED)}
    assert kept[1]["note"] == "t" and kept[1]["n"] == 11
    assert kept[3]["note"] is None
    assert lake.columns(BAG) == ["k"]


def test_a_new_snapshot_replaces_the_table_and_records_its_lsn(lake: Lake) -> None:
    src = source()
    with src.transaction() as tx:
        for i in range(1, 4):
            tx.insert(KEYED, {"id": i, "name": "a", "note": "t", "n": i})
    first = src.batch()
    with src.transaction() as tx:
        for i in range(4, 6):
            tx.insert(KEYED, {"id": i, "name": "a", "note": "t", "n": i})
    sink = lake.sink()
    sink.apply(snapshot_batch(first, start=True))
    sink.apply(snapshot_batch(src.batch(), start=False))
    position = lake.format.position(lake.format.ref(KEYED))
    # Every transaction committed before the consistent point (snapshot_position).
    assert position is not None and position.lsn == src.commits[0] - 1
    assert_equal(lake, src, KEYED)
    # A table holding changes past a new snapshot's LSN was written from elsewhere.
    old = Source()
    old.lsn = 0x10
    old.table(KEYED, src.tables[KEYED].columns, ["id"])
    with old.transaction() as tx:
        tx.insert(KEYED, {"id": 9, "name": "z", "note": "t", "n": 9})
    with pytest.raises(lake.format.error, match="later LSN"):
        lake.sink().apply(snapshot_batch(old.batch(), start=True))


def test_a_transaction_committing_at_the_consistent_point_is_applied(lake: Lake) -> None:
    """The record after the one that made the slot consistent can be the commit record
    of a transaction the snapshot does not see: the slot streams it, its commit LSN the
    consistent point itself, which the snapshot's rows carry too. It must be applied, not
    taken for part of the snapshot (the loss ``make chaos`` found under pgbench)."""
    src = source()
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 1, "name": "a", "note": "t", "n": 1})
    sink = lake.sink()
    sink.apply(snapshot_batch(src.batch(), start=True))
    consistent_point = src.commits[0]
    # Two messages: the commit record starts 24 bytes after ``src.lsn``.
    src.lsn = consistent_point - 24
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 2, "name": "b", "note": "t", "n": 2})
        tx.update(KEYED, {"id": 1}, {"n": 5})
    assert src.commits[-1] == consistent_point
    changes = src.batch()
    assert sink.apply(changes).skipped == 0
    assert_equal(lake, src, KEYED)
    # Delivered again (a restart before the ack): nothing twice.
    assert lake.sink().apply(changes).skipped == 2
    assert_equal(lake, src, KEYED)


def test_incremental_copy_progress_travels_with_the_commits(lake: Lake) -> None:
    """Progress comes with the table's last commit of the batch; progress without rows
    gets a commit of its own, once (a batch delivered again does not record it twice);
    a new sink learns it from the table (``held_tables``)."""
    src = source()
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 1, "name": "a", "note": "t", "n": 1})
    sink = lake.sink()
    batch = src.batch()
    batch.snapshot_progress = {KEYED: [1]}
    sink.apply(batch)
    assert lake.sink().held_tables([KEYED]) == {KEYED: [1]}
    empty = Batch(tables={}, lsn=src.lsn + 100, snapshot_progress={KEYED: [5]})
    assert sink.apply(empty).commits == 1
    assert lake.sink().held_tables([KEYED]) == {KEYED: [5]}
    assert lake.sink().apply(empty).commits == 0
    done = Batch(tables={}, lsn=src.lsn + 200, snapshot_progress={KEYED: None})
    sink.apply(done)
    assert lake.sink().held_tables([KEYED]) == {KEYED: None}
    assert_equal(lake, src, KEYED)


def test_a_table_reported_complete_without_rows_is_made_from_the_catalog(lake: Lake) -> None:
    sink = lake.sink()
    sink.apply(Batch(tables={}, lsn=100, snapshot_progress={KEYED: None}))
    assert sink.missing_tables() == [KEYED]
    src = source()
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 1, "name": "a", "note": "t", "n": 1})
    sink.create_tables({KEYED: src.take()[KEYED].schema})
    assert sink.missing_tables() == []
    assert lake.rows(KEYED) == []
    assert lake.columns(KEYED) == ["id", "name", "note", "n"]


def test_a_resumed_slot_without_tables_is_refused(lake: Lake) -> None:
    with pytest.raises(lake.format.error, match="slot exists but there is no"):
        lake.sink().held_tables([KEYED], slot_exists=True)


def test_segments_order_a_tables_schema_versions() -> None:
    src = source()
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 1, "name": "a", "note": "t", "n": 1})
    t = src.take()[KEYED]
    assert list(segments({f"{KEYED}@3": t, KEYED: t, f"{KEYED}@2": t, BAG: t})) == [KEYED, BAG]
    assert [len(p) for p in segments({f"{KEYED}@10": t, f"{KEYED}@2": t}).values()] == [2]


def test_the_same_sink_skips_a_batch_delivered_again(lake: Lake) -> None:
    """A stream that reconnects delivers what it had not acked again, to the same sink:
    the positions the sink keeps as committed skip it."""
    src = source()
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 1, "name": "a", "note": "t", "n": 1})
        tx.insert(BAG, {"k": 1, "v": "a"})
    sink = lake.sink()
    batch = src.batch()
    sink.apply(batch)
    stats = sink.apply(batch)
    assert stats.skipped == 2 and stats.commits == 0
    assert_equal(lake, src)


def test_a_batch_inside_one_transaction_keeps_the_position_it_had(lake: Lake) -> None:
    """A batch of rows of one transaction only, cut before its end: the table's position
    stays at the last complete transaction, the cut one recorded as partial, so an
    earlier batch delivered again is still skipped whole."""
    src = source()
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 1, "name": "a", "note": "t", "n": 1})
    done = src.batch()
    with src.transaction() as tx:
        for i in range(2, 8):
            tx.insert(KEYED, {"id": i, "name": "b", "note": "t", "n": i})
    first, second = cut(src.batch(), 2)
    sink = lake.sink()
    sink.apply(done)
    sink.apply(first)
    position = lake.format.position(lake.format.ref(KEYED))
    assert position is not None and position.lsn == src.commits[0]
    again = lake.sink()
    assert again.apply(done).skipped == 1
    assert again.apply(first).skipped == 2
    again.apply(second)
    assert_equal(lake, src, KEYED)


def test_progress_goes_with_the_last_commit_of_a_cut_batch(lake: Lake) -> None:
    """A copy's progress is recorded by the batch's last commit only: a crash between the
    commits of a cut batch leaves the progress of before, so the copy resumes where the
    table's rows end."""
    src = source()
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 1, "name": "a", "note": "t", "n": 1})
    with src.transaction() as tx:
        for i in range(2, 8):
            tx.insert(KEYED, {"id": i, "name": "b", "note": "t", "n": i})
    first, _ = cut(src.batch(), 3)
    first.snapshot_progress = {KEYED: [3]}
    with pytest.raises(Crash):
        lake.sink(crash_before=3).apply(first)
    assert lake.sink().held_tables([KEYED]) == {KEYED: None}
    lake.sink().apply(first)
    assert lake.sink().held_tables([KEYED]) == {KEYED: [3]}


def test_unchanged_values_survive_a_table_rewritten_for_a_type_change(lake: Lake) -> None:
    """A type change the format makes by rewriting the table (Delta) may leave the
    table's columns in another order than the changes'; rows updated after it, with
    columns left unchanged (TOAST, a column dropped at the source), keep their values."""
    src = source()
    with src.transaction() as tx:
        for i in range(1, 4):
            tx.insert(KEYED, {"id": i, "name": f"n{i}", "note": "big" * 3, "n": i})
    sink = lake.sink()
    sink.apply(src.batch())
    with src.transaction() as tx:
        table = src.tables[KEYED]
        table.columns = [(c, "int8" if c == "n" else t) for c, t in table.columns]
        table.announced = False
        tx.drop_column(KEYED, "name")
        tx.update(KEYED, {"id": 2}, {"n": 50, "note": UNCHANGED})
        tx.update(KEYED, {"id": 3}, {"id": 30, "note": UNCHANGED})
    sink.apply(src.batch())
    rows = {r["id"]: r for r in lake.rows(KEYED)}
    assert {i: (r["name"], r["note"], r["n"]) for i, r in rows.items()} == {
        1: ("n1", "bigbigbig", 1),
        2: ("n2", "bigbigbig", 50),
        30: ("n3", "bigbigbig", 3),
    }


def test_an_empty_change_table_still_carries_the_copy_progress(lake: Lake) -> None:
    """A copy's last chunk may be an empty change table: the progress it brings (the copy
    complete) is recorded all the same."""
    src = source()
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 1, "name": "a", "note": "t", "n": 1})
    batch = src.batch()
    batch.snapshot_progress = {KEYED: [1]}
    lake.sink().apply(batch)
    empty = batch.tables[KEYED].slice(0, 0)
    done = Batch(tables={KEYED: empty}, lsn=src.lsn + 100, snapshot_progress={KEYED: None})
    lake.sink().apply(done)
    assert lake.sink().held_tables([KEYED]) == {KEYED: None}
