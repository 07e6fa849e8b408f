"""Rows the source no longer has, found by a re-copy (a resnapshot).

An incremental copy reads a table in key-ordered chunks (:mod:`pgwire_cdc.incremental`);
each chunk tells which key range it read whole and which keys the source held there
(:class:`~pgwire_cdc.incremental.CopyRange`, ``Batch.snapshot_ranges``). A table's rows
whose key lies in that range and is not among them are rows the source no longer has —
deleted behind the pipeline's back, or by a change a lost slot took with it — and a re-copy
deletes them at the chunk's place in the stream, as ``delete`` rows of the batch's change
table: the history, soft deletes and the change feed treat them like any delete.

A table without a key is copied whole (``CopyRange.whole``): a ``truncate`` row right
before the copy's rows replaces what the table held.

Only keys whose order in PostgreSQL is the order Arrow compares them in can be ranged
here: integers, numerics, dates, times, timestamps and UUIDs. Text follows the column's
collation at the source; such tables keep the rows (``verify --repair`` finds them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..tables import KEY_RUNS

#: ``pg_type`` OID of uuid (Arrow: its canonical text, which sorts as its bytes do).
UUID_OID = b"2950"


def rangeable(schema: pa.Schema, keys: Sequence[str]) -> bool:
    """Whether ``keys`` of a change table compare in Arrow as PostgreSQL orders them, and
    its rows are matched on one key throughout (no :data:`~pgwire_cdc.tables.KEY_RUNS`)."""
    if KEY_RUNS in (schema.metadata or {}):
        return False
    for k in keys:
        field = schema.field(k)
        t = field.type
        ordered = (
            pa.types.is_integer(t)
            or pa.types.is_decimal(t)
            or pa.types.is_date(t)
            or pa.types.is_time(t)
            or pa.types.is_timestamp(t)
        )
        uuid = (field.metadata or {}).get(b"pg_type_oid") == UUID_OID
        if not (ordered or uuid):
            return False
    return True


def _compare(
    rows: pa.Table, keys: Sequence[str], bound: Sequence[Any], strict: str, equal: str
) -> pa.ChunkedArray | pa.Array:
    """Row-wise ``(k1, k2, ...) <op> bound`` in key order: ``strict`` compares a column
    before the last (``greater`` / ``less``), ``equal`` the last one (the same, or
    ``less_equal`` for an inclusive bound)."""
    result: Any = None
    for k, value in reversed(list(zip(keys, bound, strict=True))):
        scalar = pa.scalar(value, rows.schema.field(k).type)
        if result is None:
            result = getattr(pc, equal)(rows[k], scalar)
        else:
            here = getattr(pc, strict)(rows[k], scalar)
            result = pc.or_(here, pc.and_(pc.equal(rows[k], scalar), result))
    return result


def in_range(
    rows: pa.Table,
    keys: Sequence[str],
    after: Sequence[Any] | None,
    upto: Sequence[Any] | None,
) -> pa.ChunkedArray | pa.Array:
    """Which of ``rows`` have a key after ``after`` (None: any) and up to ``upto``
    (None: any), in key order."""
    mask: Any = pa.array([True] * rows.num_rows, pa.bool_())
    if after is not None:
        mask = pc.and_(mask, _compare(rows, keys, after, "greater", "greater"))
    if upto is not None:
        mask = pc.and_(mask, _compare(rows, keys, upto, "less", "less_equal"))
    return mask


def within(
    held: pa.Table, keys: Sequence[str], after: Sequence[Any] | None, upto: Sequence[Any] | None
) -> pa.Table:
    """The rows of ``held`` (sorted by ``keys``) in the range: by binary search for one
    integer key, else by :func:`in_range`."""
    if len(keys) == 1 and pa.types.is_integer(held.schema.field(keys[0]).type):
        column = held[keys[0]].to_numpy()
        start = 0 if after is None else int(np.searchsorted(column, after[0], side="right"))
        end = held.num_rows if upto is None else int(np.searchsorted(column, upto[0], "right"))
        return held.slice(start, max(end - start, 0))
    return held.filter(in_range(held, keys, after, upto))


def made_changes(
    schema: pa.Schema, rows: pa.Table, kinds: Sequence[str], lsn: int, first: int = 0
) -> pa.Table:
    """Changes no transaction made (no xid): ``rows`` (data columns, those it lacks null)
    as a change table of ``schema``, the ``kinds`` (``insert``, ``delete``, ``truncate``)
    given, at ``lsn``, ordinals from ``first``."""
    n = len(kinds)
    columns = []
    for f in schema:
        if f.name in rows.column_names:
            columns.append(rows[f.name].cast(f.type))
        elif f.name == "_change_type":
            columns.append(pa.array(list(kinds)).cast(f.type))
        elif f.name in ("_lsn", "_commit_lsn"):
            columns.append(pa.array([lsn] * n, f.type))
        elif f.name == "_tx_ordinal":
            columns.append(pa.array(range(first, first + n), f.type))
        elif f.name == "_unchanged":
            columns.append(pa.array([[]] * n, f.type))
        else:
            columns.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def delete_rows(changes: pa.Table, gone: pa.Table, lsn: int) -> pa.Table:
    """``delete`` rows of the keys ``gone``, in ``changes``' schema, committed at ``lsn``,
    ordered after every row ``changes`` has at that LSN."""
    same = changes.filter(pc.equal(changes["_commit_lsn"], lsn))
    first = int(pc.max(same["_tx_ordinal"]).as_py()) + 1 if same.num_rows else 0
    return made_changes(changes.schema, gone, ["delete"] * gone.num_rows, lsn, first)


def truncate_row(changes: pa.Table, lsn: int) -> pa.Table:
    """A ``truncate`` row in ``changes``' schema at ``lsn``: before a whole table's copy
    (its rows one LSN later), what the table held goes."""
    return made_changes(changes.schema, pa.table({}), ["truncate"], lsn)


def with_deletes(changes: pa.Table, deletes: pa.Table, lsn: int) -> pa.Table:
    """``changes`` with ``deletes`` (at ``lsn``) in commit order: after every row
    committed at or before ``lsn``."""
    before = int(pc.sum(pc.less_equal(changes["_commit_lsn"], lsn)).as_py() or 0)
    return pa.concat_tables([changes.slice(0, before), deletes, changes.slice(before)])
