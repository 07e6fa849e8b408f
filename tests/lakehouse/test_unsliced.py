"""Change tables that start inside their buffers (``Table.slice``, unevenly chunked
columns) reach the Rust kernels whole: a ``_before`` image holding a struct column (an
``interval``, a composite type) sliced by pyarrow is copied to start at zero first
(``tables.unsliced``), where Arrow's Rust import would misread it and panic."""

from __future__ import annotations

import pyarrow as pa
from pgwire_cdc import _native
from pgwire_cdc.tables import mark_unchanged, table_of, unsliced

SPAN = pa.struct([pa.field("months", pa.int32(), nullable=False)])
ROW = pa.struct([("id", pa.int32()), ("span", SPAN)])


def changes(n: int, before: pa.Array) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(n), pa.int32()),
            "span": pa.array([{"months": i} for i in range(n)], SPAN),
            "_change_type": pa.array(["insert"] * n),
            "_lsn": pa.array([0] * n, pa.uint64()),
            "_commit_lsn": pa.array(range(n), pa.uint64()),
            "_tx_ordinal": pa.array([0] * n, pa.uint64()),
            "_commit_ts": pa.nulls(n, pa.timestamp("us", "UTC")),
            "_xid": pa.nulls(n, pa.uint32()),
            "_before": before,
            "_before_kind": pa.nulls(n, pa.string()),
            "_unchanged": pa.array([[]] * n, pa.list_(pa.string())),
        }
    )


def test_a_sliced_nested_image_reaches_the_kernels_whole() -> None:
    images = pa.array([{"id": 9, "span": {"months": 1}}, None, None, None], ROW)
    sliced = changes(3, images.slice(1))
    assert sliced["_before"].chunk(0).offset == 1
    fresh = changes(3, pa.nulls(3, ROW))
    want, _ = _native.reduce_changes(fresh, ["id", "span"], ["id"])
    got, _ = _native.reduce_changes(unsliced(sliced), ["id", "span"], ["id"])
    assert table_of(got).equals(table_of(want))
    assert mark_unchanged(sliced, ["span"])["_unchanged"].to_pylist() == [["span"]] * 3


def test_tables_without_sliced_nested_columns_are_left_alone() -> None:
    fresh = changes(3, pa.nulls(3, ROW))
    assert unsliced(fresh) is fresh
    flat = pa.table({"a": pa.array(range(5))}).slice(2)
    assert unsliced(flat) is flat


def test_unevenly_chunked_columns_are_combined() -> None:
    # Exporting a table whose columns are chunked differently slices the other columns at
    # each chunk boundary: the nested image would arrive sliced.
    fresh = changes(3, pa.nulls(3, ROW))
    uneven = fresh.set_column(0, "id", pa.chunked_array([[0, 1], [2]], pa.int32()))
    got, _ = _native.reduce_changes(unsliced(uneven), ["id", "span"], ["id"])
    want, _ = _native.reduce_changes(fresh, ["id", "span"], ["id"])
    assert table_of(got).equals(table_of(want))
