"""The pure parts of ``lakehouse.verify``, without a server: which streamed rows a lake
table at a given position holds (``held_rows``), and the comparison of two tables by key
and as multisets (``compare``): counts and example keys of each kind of difference."""

from __future__ import annotations

import pyarrow as pa
from pgwire_cdc.lakehouse.format import TablePosition
from pgwire_cdc.lakehouse.positions import Mark
from pgwire_cdc.lakehouse.verify import compare, held_rows


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
