"""The pure parts of ``lakehouse.verify``, without a server: which streamed rows a lake
table at a given position holds (``held_rows``), the comparison of two tables by key and
as multisets (``compare``): counts and example keys of each kind of difference; and the
source as of a position from a snapshot spilled to disk and the changes after it
(``_source_at``), read back only for the keys those changes touched; and a repair
(``_repair``) on every kind of lake table of the offline suites."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from pgwire_cdc.lakehouse.digests import KEY_DIGEST, ROW_DIGEST, Spill, digests
from pgwire_cdc.lakehouse.format import TablePosition
from pgwire_cdc.lakehouse.positions import Mark
from pgwire_cdc.lakehouse.shape import data_columns, lake_shape
from pgwire_cdc.lakehouse.vanished import made_changes
from pgwire_cdc.lakehouse.verify import (
    LakeSide,
    _read_lake,
    _repair,
    _source_at,
    compare,
    held_rows,
)
from pgwire_cdc.tables import key_columns
from support.lakes import BAG, KEYED, Lake, as_multiset, random_transaction, source


def changes(rows: list[tuple[int, int, int]]) -> pa.Table:
    """Change rows (id, commit LSN, ordinal)."""
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int32()),
            "_commit_lsn": pa.array([r[1] for r in rows], pa.uint64()),
            "_tx_ordinal": pa.array([r[2] for r in rows], pa.uint64()),
        }
    )


ROWS = [(1, 100, 0), (2, 100, 1), (3, 200, 0), (4, 200, 1), (5, 200, 2), (6, 300, 0)]


def held(position: TablePosition | None, flushed: int) -> list[int]:
    return held_rows(changes(ROWS), position, flushed)["id"].to_pylist()


def test_a_table_holds_the_transactions_up_to_its_position() -> None:
    assert held(TablePosition(100), 0) == [1, 2]
    assert held(TablePosition(200), 0) == [1, 2, 3, 4, 5]
    assert held(TablePosition(None), 0) == []
    assert held(None, 0) == []


def test_a_cut_transaction_is_held_up_to_its_ordinal() -> None:
    cut = Mark(100, (200, 1))
    assert held(TablePosition(100, cut.ordinal_of), 0) == [1, 2, 3, 4]
    # Only the first transaction past the position can be cut.
    other = Mark(100, (300, 0))
    assert held(TablePosition(100, other.ordinal_of), 0) == [1, 2]


def test_what_the_pipeline_acked_is_held_whatever_the_position() -> None:
    # A change committed before the slot's confirmed position is in the lake: the
    # pipeline acks a batch only once every table holds it.
    assert held(TablePosition(100), 201) == [1, 2, 3, 4, 5]
    assert held(None, 301) == [1, 2, 3, 4, 5, 6]


def table(ids: list[int], names: list[str | None]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int32()), "name": pa.array(names, pa.string())})


def test_keyed_tables_differ_by_kind_with_example_keys() -> None:
    source = table([1, 2, 3, 4], ["a", "b", "c", None])
    lake = table([2, 3, 4, 5, 5], ["b", "C", None, "e", "e"])
    found = compare("t", source, lake, ["id"])
    assert (found.missing, found.extra, found.different) == (1, 2, 1)
    assert found.examples == {"missing": [1], "extra": [5, 5], "different": [3]}
    assert not found.equal
    assert compare("t", source, source, ["id"]).equal


def test_a_null_and_an_empty_string_differ() -> None:
    found = compare("t", table([1], [None]), table([1], [""]), ["id"])
    assert found.different == 1


def test_keyless_tables_compare_as_multisets() -> None:
    source = table([1, 1, 2], ["a", "a", "b"])
    lake = table([1, 2, 2], ["a", "b", "b"])
    found = compare("t", source, lake, None)
    assert (found.missing, found.extra, found.different) == (1, 1, 0)
    assert compare("t", source, table([2, 1, 1], ["b", "a", "a"]), None).equal


def test_columns_and_types_of_the_lake() -> None:
    source = table([1, 2], ["a", "b"])
    lake = pa.table({"id": pa.array([1, 2], pa.int64()), "other": [1, 2]})
    found = compare("t", source, lake, ["id"])
    assert found.columns_missing == ["name"] and found.columns_extra == ["other"]
    assert (found.missing, found.extra, found.different) == (0, 0, 0)
    assert not found.equal
    missing = compare("t", source, None, ["id"])
    assert missing.missing == 2 and missing.examples == {"missing": [1, 2]}


def pairs(table: pa.Table, keyed: bool) -> Counter[tuple[int, ...]]:
    names = [KEY_DIGEST, ROW_DIGEST] if keyed else [ROW_DIGEST]
    return Counter(zip(*(table[n].to_pylist() for n in names), strict=True))


@pytest.mark.parametrize("tasks", [False, True], ids=["stream", "tasks"])
@pytest.mark.parametrize("seed", range(10))
def test_the_source_as_of_a_position_from_a_spilled_snapshot(
    tmp_path: Path, seed: int, tasks: bool
) -> None:
    """A snapshot of the made-up source spilled in several batches (``tasks``: in files
    of their own with the digests made beside them, as Spark tasks spill them:
    ``spark.source_digests``), then random transactions (rows moved to new keys,
    unchanged TOAST values, truncates, a keyless table): the digests of the source as of
    the position equal those of the source's rows, the rows read back for every key are
    the source's, and a lake without the table reports every key missing, with examples
    read back from the files."""
    rng = random.Random(seed)
    src = source()
    next_id = [0]
    with src.transaction() as tx:
        for i in range(1, 41):
            tx.insert(KEYED, {"id": i, "name": f"n{i}", "note": "x" * (i % 4), "n": i % 7})
            tx.insert(BAG, {"k": i % 3, "v": "ab"[i % 2]})
    next_id[0] = 40
    snapshot = src.take()
    for _ in range(rng.randint(3, 12)):
        random_transaction(src, rng, next_id)
    if seed == 0:
        with src.transaction() as tx:
            tx.truncate(KEYED)
            tx.insert(KEYED, {"id": 1000, "name": "after", "note": "t", "n": 1})
    changes = src.take()
    for number, name in enumerate((KEYED, BAG)):
        spill = Spill(tmp_path, number)
        rows = lake_shape(snapshot[name])
        template = rows.slice(0, 0)
        keys = key_columns(template)
        columns = data_columns(template)
        if tasks:
            parts = []
            for start in range(0, rows.num_rows, 15):
                part = Spill(tmp_path, f"{number}-{start}")
                part.write(rows.slice(start, 15))
                part.close()
                parts.append(part.path)
            made = digests(rows, keys, columns)
            made = made.select([KEY_DIGEST, ROW_DIGEST] if keys else [ROW_DIGEST])
            spill.adopt(parts, rows.schema, rows.num_rows, made)
        else:
            for start in range(0, rows.num_rows, 15):
                spill.write(rows.slice(start, 15))
            spill.close()
        schema = pa.schema([template.schema.field(c) for c in columns])
        lake = LakeSide(TablePosition(None), None, keys, schema, [], [])
        held = [lake_shape(changes[name])] if name in changes else []
        side = _source_at(spill, held, lake, 2**62)
        expected = pa.Table.from_pylist(src.rows(name), schema=schema)
        assert pairs(side.digests, keys is not None) == pairs(
            digests(expected, keys, columns), keys is not None
        )
        if keys is not None:
            back = side.rows(side.digests[KEY_DIGEST].combine_chunks())
            assert sorted(back.to_pylist(), key=lambda r: r["id"]) == sorted(
                src.rows(name), key=lambda r: r["id"]
            )
            report = lake.compare(name, side)
            ids = {r["id"] for r in src.rows(name)}
            assert report.missing == len(ids)
            shown = report.examples.get("missing", [])
            assert len(shown) == min(5, len(ids)) and set(shown) <= ids


def test_a_repair_makes_the_lake_equal_the_source(lake: Lake, tmp_path: Path) -> None:
    """A lake that lacks the source's later transactions (rows changed, moved to new keys,
    deleted, inserted) compared with the source's rows and repaired: one commit per table
    keeping the table's position, and the lake then holds the source's rows (keyed and
    keyless)."""
    rng = random.Random(7)
    src = source()
    next_id = [0]
    for _ in range(4):
        random_transaction(src, rng, next_id)
    sink = lake.sink()
    sink.apply(src.batch())
    for _ in range(8):
        random_transaction(src, rng, next_id)
    later = src.batch()  # never applied: the lake now differs from the source
    for number, name in enumerate((KEYED, BAG)):
        changes = later.tables[name]
        data = pa.Table.from_pylist(
            src.rows(name), schema=changes.select(data_columns(changes)).schema
        )
        spill = Spill(tmp_path, number)
        spill.write(made_changes(changes.schema, data, ["read"] * data.num_rows, 1))
        spill.close()
        ref = lake.format.ref(name)
        before = lake.format.position(ref)
        side = _read_lake(lake.format, name, spill)
        found = side.compare(name, _source_at(spill, [], side, 0))
        assert not found.equal
        assert _repair(lake.format, name, found, _source_at(spill, [], side, 0), side)
        after = lake.format.position(ref)
        assert before is not None and after is not None and after.lsn == before.lsn
        assert as_multiset(lake.rows(name)) == as_multiset(src.rows(name))
        again = _read_lake(lake.format, name, spill)
        assert again.compare(name, _source_at(spill, [], again, 0)).equal
