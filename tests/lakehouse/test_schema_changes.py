"""Schema changes captured in the WAL (``pgwire_cdc.ddl_capture``'s messages), applied
by the lakehouse sink at their place among the rows, without a server: the made-up
source (``support.pgoutput``) writes the DDL messages its event triggers would, and the
tables must equal the source after every batch — on the in-memory tables and on Delta
tables kept by the delta-rs writer, with deletion vectors and copy-on-write.

The migrations a Relation message alone gets wrong: ``ADD COLUMN ... DEFAULT`` (held rows
take the default, a later explicit NULL stays NULL), on a keyless table too; ``RENAME
COLUMN``; ``DROP COLUMN`` then ``ADD COLUMN`` of the same name; ``ALTER COLUMN ... TYPE
... USING`` (a rewrite: held values go null until the table's rows come again). Each DDL
sits inside a transaction between rows, batches are cut inside it, delivered again and
crashed at every commit.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest
from pgwire_cdc.lakehouse.reshape import (
    DROPPED_PROPERTY,
    ColumnOp,
    column_ops,
    dropped_name,
    reshape_rows,
)
from pgwire_cdc.lakehouse.sink import LakehouseSink, interleave
from pgwire_cdc.lsn import int_to_lsn
from pgwire_cdc.schema_changes import changes_of
from pgwire_cdc.streaming import Batch
from support.lakes import BAG, KEYED, Crash, Lake, assert_equal, source
from support.pgoutput import Source, Transaction, cut


def captured() -> Source:
    src = source()
    src.ddl_capture = True
    return src


def seeded(src: Source, lake: Lake) -> None:
    with src.transaction() as tx:
        for i in range(1, 6):
            tx.insert(KEYED, {"id": i, "name": f"n{i}", "note": "t", "n": i})
            tx.insert(BAG, {"k": i % 2, "v": "same"})
    lake.sink().apply(src.batch())


def test_add_column_with_a_default(lake: Lake) -> None:
    src = captured()
    seeded(src, lake)
    with src.transaction() as tx:
        tx.update(KEYED, {"id": 1}, {"n": 10})
        tx.add_column(KEYED, "c", "int4", default=7)
        tx.insert(KEYED, {"id": 6, "name": "n6", "note": "t", "n": 6, "c": None})
        tx.update(KEYED, {"id": 2}, {"n": 20})
    sink = lake.sink()
    sink.apply(src.batch())
    assert_equal(lake, src)
    kept = {r["id"]: r["c"] for r in lake.rows(KEYED)}
    assert kept[1] == 7 and kept[2] == 7 and kept[6] is None


def test_add_column_with_a_default_on_a_keyless_table(lake: Lake) -> None:
    """Rows of a keyless table are matched whole: with the held rows lacking the new
    column's value, updates would match nothing and insert instead."""
    src = captured()
    seeded(src, lake)
    with src.transaction() as tx:
        tx.add_column(BAG, "c", "int4", default=7)
    lake.sink().apply(src.batch())
    with src.transaction() as tx:
        tx.update(BAG, {"k": 1}, {"v": "changed"})
        tx.delete(BAG, {"k": 0})
    lake.sink().apply(src.batch())
    assert_equal(lake, src)
    assert len(lake.rows(BAG)) == len(src.rows(BAG)) == 4


def test_rename_column(lake: Lake) -> None:
    src = captured()
    seeded(src, lake)
    with src.transaction() as tx:
        tx.update(KEYED, {"id": 1}, {"name": "before"})
        tx.rename_column(KEYED, "name", "label")
        tx.update(KEYED, {"id": 2}, {"label": "after"})
    lake.sink().apply(src.batch())
    assert_equal(lake, src)
    assert lake.columns(KEYED) == ["id", "label", "note", "n"]


def test_drop_column_then_add_one_of_the_same_name(lake: Lake) -> None:
    src = captured()
    seeded(src, lake)
    with src.transaction() as tx:
        tx.drop_column(KEYED, "note")
    with src.transaction() as tx:
        tx.add_column(KEYED, "note", "text")
        tx.insert(KEYED, {"id": 6, "name": "n6", "n": 6, "note": "new"})
    lake.sink().apply(src.batch())
    assert_equal(lake, src)
    assert {r["id"]: r["note"] for r in lake.rows(KEYED)} == {
        **dict.fromkeys(range(1, 6)),
        6: "new",
    }


def test_a_dropped_column_kept_under_its_dropped_name(lake: Lake) -> None:
    """``keep_dropped_columns``: the column stays, renamed, its values kept for the rows
    held and none for rows written after; a new column of the old name is another one; a
    keyless table drops it all the same (its rows are matched whole); a crash replayed
    keeps one column."""
    src = captured()
    seeded(src, lake)
    with src.transaction() as tx:
        tx.update(KEYED, {"id": 1}, {"note": "last"})
        tx.drop_column(KEYED, "note")
        tx.drop_column(BAG, "v")
    drop_lsn = src.schema_changes[0].lsn
    with src.transaction() as tx:
        tx.update(KEYED, {"id": 2}, {"n": 22})
        tx.add_column(KEYED, "note", "text")
        tx.insert(KEYED, {"id": 6, "name": "n6", "n": 6, "note": "new"})
    batch = src.batch()
    sink = LakehouseSink(lake.format, keep_dropped_columns=True)
    sink.apply(batch)
    LakehouseSink(lake.format, keep_dropped_columns=True).apply(batch)  # delivered again
    kept = dropped_name("note", drop_lsn)
    assert kept == f"note__dropped_{drop_lsn:X}"
    assert lake.columns(KEYED) == ["id", "name", kept, "n", "note"]
    rows = {r["id"]: (r[kept], r["note"], r["n"]) for r in lake.rows(KEYED)}
    assert rows == {
        1: ("last", None, 1),
        2: ("t", None, 22),
        3: ("t", None, 3),
        4: ("t", None, 4),
        5: ("t", None, 5),
        6: (None, "new", 6),
    }
    assert lake.columns(BAG) == ["k"]
    assert_equal(lake, src, BAG)


@pytest.mark.parametrize("capture", [True, False], ids=["capture", "no-capture"])
def test_a_new_primary_key_and_back_to_replica_identity_full(lake: Lake, capture: bool) -> None:
    """A keyless ``REPLICA IDENTITY FULL`` table (a multiset) gets a primary key: from the
    next change on, rows are matched by it (a key change, a delete by key); then back to
    FULL, matched whole again. Without the DDL capture the change tables of each key
    alone tell it, rows of one transaction on both sides of it."""
    src = captured() if capture else source()
    name = "public.t"
    src.table(name, [("id", "int4"), ("v", "text")], [])
    with src.transaction() as tx:
        for i in range(1, 5):
            tx.insert(name, {"id": i, "v": "a"})
    lake.sink().apply(src.batch())
    with src.transaction() as tx:
        tx.update(name, {"id": 1, "v": "a"}, {"v": "before"})
        tx.set_key(name, ["id"])
        tx.update(name, {"id": 2}, {"v": "b"})
        tx.update(name, {"id": 3}, {"id": 30, "v": "c"})
        tx.delete(name, {"id": 4})
    lake.sink().apply(src.batch())
    assert_equal(lake, src, name)
    with src.transaction() as tx:
        tx.set_key(name, [])
        tx.update(name, {"id": 2, "v": "b"}, {"v": "full again"})
        tx.insert(name, {"id": 2, "v": "full again"})  # a duplicate row: a multiset again
    lake.sink().apply(src.batch())
    assert_equal(lake, src, name)
    assert sorted((r["id"], r["v"]) for r in lake.rows(name)) == [
        (1, "before"),
        (2, "full again"),
        (2, "full again"),
        (30, "c"),
    ]


def test_a_type_changed_by_a_rewrite_is_null_until_the_rows_come_again(lake: Lake) -> None:
    src = captured()
    seeded(src, lake)
    with src.transaction() as tx:
        tx.retype_column(KEYED, "n", "text", using=lambda v: f"n={v}")
        tx.update(KEYED, {"id": 1}, {"note": "later"})
    batch = src.batch()
    assert [c.kind for c in batch.schema_changes] == ["alter_column_type", "rewrite"]
    sink = lake.sink()
    sink.apply(batch)
    kept = {r["id"]: r["n"] for r in lake.rows(KEYED)}
    # Never the stale value cast ('3'): unknown until the rows are read again.
    assert kept == {1: "n=1", **dict.fromkeys(range(2, 6))}
    # The stream reads the table again (an incremental copy): its rows as `read` rows.
    with src.transaction() as tx:
        for row in src.rows(KEYED):
            tx.update(KEYED, {"id": row["id"]}, row)
    again = src.batch()
    again.tables = {
        name: t.set_column(
            t.schema.get_field_index("_change_type"),
            "_change_type",
            pa.array(["read"] * t.num_rows),
        )
        for name, t in again.tables.items()
    }
    sink.apply(again)
    assert_equal(lake, src)


MIGRATIONS: dict[str, Callable[[Transaction], None]] = {
    "add_default": lambda tx: tx.add_column(KEYED, "c", "int4", default=7),
    "rename": lambda tx: tx.rename_column(KEYED, "name", "label"),
    "drop": lambda tx: tx.drop_column(KEYED, "note"),
}


def ddl_workload(src: Source, migration: str) -> None:
    """Rows, the DDL and more rows in one transaction, then a transaction after it."""
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 6, "name": "n6", "note": "t", "n": 6})
        tx.update(KEYED, {"id": 1}, {"n": 10})
        MIGRATIONS[migration](tx)
        names = [c for c, _ in src.tables[KEYED].columns]
        tx.update(KEYED, {"id": 2}, {"n": 20})
        tx.insert(KEYED, {c: 7 if c in ("id", "n") else None for c in names})
    with src.transaction() as tx:
        tx.update(KEYED, {"id": 3}, {"n": 30})


@pytest.mark.parametrize("migration", sorted(MIGRATIONS))
@pytest.mark.parametrize("rows", [1, 2, 3, 4])
def test_a_batch_cut_around_the_ddl_then_delivered_again(
    lake: Lake, migration: str, rows: int
) -> None:
    src = captured()
    seeded(src, lake)
    ddl_workload(src, migration)
    first, second = cut(src.batch(), rows)
    lake.sink().apply(first)
    lake.sink().apply(first)
    sink = lake.sink()
    sink.apply(second)
    assert_equal(lake, src)
    assert sink.apply(second).commits == 0
    assert lake.sink().apply(first).commits == 0
    assert_equal(lake, src)


@pytest.mark.parametrize("migration", sorted(MIGRATIONS))
@pytest.mark.parametrize("crash_before", [1, 2, 3])
def test_a_crash_at_each_commit_then_a_replay(
    lake: Lake, migration: str, crash_before: int
) -> None:
    src = captured()
    seeded(src, lake)
    ddl_workload(src, migration)
    batch = src.batch()
    with pytest.raises(Crash):
        lake.sink(crash_before=crash_before).apply(batch)
    lake.sink().apply(batch)
    assert_equal(lake, src)


# -- the pieces -----------------------------------------------------------------------


def test_ddl_and_rows_interleave_at_the_ddl_place() -> None:
    src = captured()
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 1, "name": "a", "note": "t", "n": 1})
        tx.add_column(KEYED, "c", "int4", default=7)
        tx.insert(KEYED, {"id": 2, "name": "b", "note": "t", "n": 2, "c": 8})
        tx.rename_column(KEYED, "c", "d")
    batch = src.batch()
    parts = [batch.tables[k] for k in sorted(batch.tables)]
    items = interleave(parts, [[c] for c in batch.schema_changes])
    kinds = [
        f"rows:{item.num_rows}" if isinstance(item, pa.Table) else item[0].kind for item in items
    ]
    assert kinds == ["rows:1", "add_column", "rows:1", "rename_column"]


def test_a_message_of_another_version_is_skipped() -> None:
    assert changes_of(8, b'{"version": 99}') == []
    assert changes_of(8, b"not json") == []


def test_column_ops_leave_out_what_is_done() -> None:
    src = captured()
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 1, "name": "a", "note": "t", "n": 1})
        tx.rename_column(KEYED, "name", "label")
        tx.drop_column(KEYED, "note")
    renamed, dropped = (c for c in src.batch().schema_changes)
    held = pa.schema([("id", pa.int64()), ("name", pa.string()), ("note", pa.string())])
    assert column_ops([renamed], held) == [ColumnOp("rename", "name", new_name="label")]
    done = pa.schema([("id", pa.int64()), ("label", pa.string())])
    assert column_ops([renamed], done) == []
    assert column_ops([dropped], done) == []
    rows = pa.table({"id": [1], "name": ["a"], "note": ["t"]})
    out = reshape_rows(rows, column_ops([renamed], held) + column_ops([dropped], held))
    assert out.to_pylist() == [{"id": 1, "label": "a"}]


def test_a_batch_of_schema_changes_alone_is_applied(lake: Lake) -> None:
    src = captured()
    seeded(src, lake)
    with src.transaction() as tx:
        tx.add_column(KEYED, "c", "int4", default=7)
    batch = src.batch()
    assert batch.tables == {}
    lake.sink().apply(batch)
    assert_equal(lake, src, KEYED)
    assert {r["c"] for r in lake.rows(KEYED)} == {7}
    replay = Batch(tables={}, lsn=batch.lsn, schema_changes=batch.schema_changes)
    assert lake.sink().apply(replay).commits == 0


def test_a_dropped_table_is_kept_and_marked(lake: Lake) -> None:
    src = captured()
    seeded(src, lake)
    held = lake.rows(KEYED)
    with src.transaction() as tx:
        tx.drop_table(KEYED)
    batch = src.batch()
    assert [c.kind for c in batch.schema_changes] == ["drop_table"]
    lake.sink().apply(batch)
    assert lake.rows(KEYED) == held
    assert lake.property(KEYED, DROPPED_PROPERTY) == int_to_lsn(batch.schema_changes[0].lsn)
