"""A re-copy's key ranges (``Batch.snapshot_ranges``,
:mod:`pgwire_cdc.lakehouse.vanished`) without a server: the table's rows of a range that
the range does not keep are deleted at the chunk's place (before later changes of the same
batch), a batch delivered again deletes nothing more, soft deletes mark them, keys
compared in key order (composite keys too), and keys whose order may differ at the source
(text) are left alone."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pgwire_cdc.incremental import CopyRange
from pgwire_cdc.lakehouse import vanished
from pgwire_cdc.lakehouse.sink import LakehouseSink
from pgwire_cdc.streaming import Batch
from support.lakes import KEYED, Lake, source
from support.pgoutput import Source


def keys(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


def seeded(lake: Lake, n: int) -> tuple[Source, LakehouseSink]:
    src = source()
    with src.transaction() as tx:
        for i in range(1, n + 1):
            tx.insert(KEYED, {"id": i, "name": f"n{i}", "note": "x", "n": i})
    sink = LakehouseSink(lake.format, as_of_every=None)
    sink.apply(src.batch())
    return src, sink


def ranged(batch: Batch, name: str, *ranges: CopyRange) -> Batch:
    batch.snapshot_ranges = {name: list(ranges)}
    return batch


def ids(lake: Lake) -> list[int]:
    return sorted(r["id"] for r in lake.rows(KEYED))


def test_rows_of_a_range_it_does_not_keep_go_at_the_chunks_place(lake: Lake) -> None:
    src, sink = seeded(lake, 10)
    # The source lost 4 and 9 behind the stream's back (the made-up source still lists
    # them); a later change of the batch inserts 9 again, after the chunk's place.
    with src.transaction() as tx:
        tx.update(KEYED, {"id": 2}, {"n": 20})
    place = src.lsn
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 11, "name": "n11", "note": "x", "n": 11})
    batch = src.batch()
    with src.transaction() as tx:
        tx.delete(KEYED, {"id": 9})
    src.batch()  # not delivered: the lake never saw this delete
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 9, "name": "again", "note": "y", "n": 99})
    later = src.batch()
    batch.tables[KEYED] = pa.concat_tables([batch.tables[KEYED], later.tables[KEYED]])
    batch.lsn = later.lsn
    first = CopyRange(None, (5,), keys(1, 2, 3, 5), place)
    rest = CopyRange((5,), None, keys(6, 7, 8, 10, 11), place)
    sink.apply(ranged(batch, KEYED, first, rest))
    assert ids(lake) == [1, 2, 3, 5, 6, 7, 8, 9, 10, 11]
    assert {r["id"]: r["name"] for r in lake.rows(KEYED)}[9] == "again"
    # Delivered again (the table holds it): nothing more goes, though 6 is not kept now.
    again = CopyRange((5,), None, keys(7, 8, 10, 11), place)
    LakehouseSink(lake.format, as_of_every=None).apply(ranged(batch, KEYED, again))
    assert ids(lake) == [1, 2, 3, 5, 6, 7, 8, 9, 10, 11]


def test_soft_deletes_mark_the_rows_the_source_no_longer_has(lake: Lake) -> None:
    src = source()
    with src.transaction() as tx:
        for i in range(1, 6):
            tx.insert(KEYED, {"id": i, "name": f"n{i}", "note": "x", "n": i})
    sink = LakehouseSink(lake.format, as_of_every=None, deletes="soft")
    sink.apply(src.batch())
    with src.transaction() as tx:
        tx.update(KEYED, {"id": 1}, {"n": 10})
    batch = src.batch()
    place = int(pc.max(batch.tables[KEYED]["_commit_lsn"]).as_py()) + 1
    sink.apply(ranged(batch, KEYED, CopyRange(None, None, keys(1, 2, 5), place)))
    rows = {r["id"]: r for r in lake.rows(KEYED)}
    flag = lake.format.deleted_column
    assert sorted(i for i, r in rows.items() if r[flag]) == [3, 4]
    assert {rows[3]["_deleted_lsn"], rows[4]["_deleted_lsn"]} == {place}
    assert rows[3]["name"] == "n3"  # the row as it was


def test_ranges_compare_composite_keys_in_key_order() -> None:
    rows = pa.table({"a": [1, 1, 1, 2, 2, 3], "b": [1, 5, 9, 0, 7, 1]})
    got = rows.filter(vanished.in_range(rows, ["a", "b"], (1, 5), (2, 7)))
    assert list(zip(got["a"].to_pylist(), got["b"].to_pylist(), strict=True)) == [
        (1, 9),
        (2, 0),
        (2, 7),
    ]
    assert rows.filter(vanished.in_range(rows, ["a", "b"], None, (1, 5))).num_rows == 2
    assert rows.filter(vanished.in_range(rows, ["a", "b"], (2, 7), None)).num_rows == 1


def test_only_keys_ordered_alike_are_ranged() -> None:
    def schema(t: pa.DataType, **meta: Any) -> pa.Schema:
        return pa.schema([pa.field("k", t, metadata={k: str(v) for k, v in meta.items()})])

    assert vanished.rangeable(schema(pa.int32()), ["k"])
    assert vanished.rangeable(schema(pa.timestamp("us", "UTC")), ["k"])
    assert vanished.rangeable(schema(pa.string(), pg_type_oid=2950), ["k"])  # uuid
    assert not vanished.rangeable(schema(pa.string(), pg_type_oid=25), ["k"])  # text


def test_a_sorted_integer_key_is_ranged_by_binary_search_alike() -> None:
    import random

    rng = random.Random(3)
    values = sorted(rng.sample(range(-500, 500), 200))
    held = pa.table({"id": pa.array(values, pa.int64())})
    for _ in range(200):
        a, b = sorted(rng.sample(range(-600, 600), 2))
        after = None if rng.random() < 0.2 else (a,)
        upto = None if rng.random() < 0.2 else (b,)
        fast = vanished.within(held, ["id"], after, upto)["id"].to_pylist()
        slow = held.filter(vanished.in_range(held, ["id"], after, upto))["id"].to_pylist()
        assert fast == slow, (after, upto)
