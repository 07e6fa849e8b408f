"""SCD type 2 history tables: every version of every source row, dated by the source's LSNs.

With ``history="scd2"`` the sink keeps, beside a table's current-state table, a history
table (:meth:`~pgwire_cdc.lakehouse.format.TableFormat.history_ref`) holding one row per
version of each source row: the row as one source transaction left it. Its columns are
the source table's, then :data:`HISTORY_COLUMNS`:

* ``_valid_from_lsn`` / ``_valid_from``: the commit LSN and commit time of the transaction
  that made the version (an initial snapshot's rows: its consistent point, no time);
* ``_valid_to_lsn`` / ``_valid_to``: those of the transaction that replaced it (a later
  update, a delete, a key change, a ``TRUNCATE``), null while it is current;
* ``_is_current``: the version is the source row now;
* ``_deleted``: a tombstone — a delete (or a key change, for the old key) ends the row's
  last version and starts one of these, its key columns set, the other columns null,
  never current; it ends when the key is inserted again;
* ``_xid``: the source transaction's id.

The source at any LSN ``x`` is ``_valid_from_lsn <= x AND (_valid_to_lsn IS NULL OR
x < _valid_to_lsn) AND NOT _deleted``. A ``TRUNCATE`` ends every current version at once
(no tombstones).

A batch's versions come from :func:`pgwire_cdc._native.history_changes` (one change per
key and transaction, unchanged TOAST filled from the batch's earlier versions), the
versions the history table holds as current for the keys they touch are read (each
ends at the first of their key's changes), and both go into the table in one MERGE on the
key and ``_valid_from_lsn``: new versions are inserted, ended ones updated in place. A
transaction a batch cut in two writes its versions again when its rest comes: the
version of ``(key, commit LSN)`` is replaced, never doubled. The history table keeps a
position of its own, so a batch delivered again adds nothing to it even where the
current-state table took the batch and the history table did not.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import _native
from ..errors import ConfigError
from ..tables import table_of, unsliced

#: The columns a history table adds to the source table's.
HISTORY_COLUMNS: tuple[str, ...] = (
    "_valid_from_lsn",
    "_valid_to_lsn",
    "_valid_from",
    "_valid_to",
    "_is_current",
    "_deleted",
    "_xid",
)

#: ``history=`` values.
HISTORY_MODES = (None, "scd2")


def history_fields(commit_ts: pa.DataType) -> list[pa.Field]:
    """The fields of :data:`HISTORY_COLUMNS` (times typed as the change tables'
    ``_commit_ts``)."""
    return [
        pa.field("_valid_from_lsn", pa.int64(), False),
        pa.field("_valid_to_lsn", pa.int64()),
        pa.field("_valid_from", commit_ts),
        pa.field("_valid_to", commit_ts),
        pa.field("_is_current", pa.bool_(), False),
        pa.field("_deleted", pa.bool_(), False),
        pa.field("_xid", pa.int64()),
    ]


def check_mode(history: str | None) -> None:
    if history not in HISTORY_MODES:
        raise ConfigError(f"history={history!r}: None or 'scd2'")


def merge_keys(keys: Sequence[str]) -> list[str]:
    """The columns a history table's rows are matched on."""
    return [*keys, "_valid_from_lsn"]


def versions(changes: pa.Table, columns: list[str], keys: list[str]) -> pa.Table:
    """One row per key and source transaction of ``changes`` (a change table in commit
    order), as :func:`pgwire_cdc._native.history_changes` gives them."""
    stream, _ = _native.history_changes(unsliced(changes), columns, keys)
    return table_of(stream)


def touched_keys(found: pa.Table, keys: list[str]) -> pa.Table:
    """The keys whose current versions ``found`` (:func:`versions`) may end or take
    values from: each version's own key and the key it moved from."""
    rows = found.filter(pc.invert(found["_truncate"]))
    parts = [rows.select(keys)]
    moved = rows.filter(rows["_from"].is_valid())
    if moved.num_rows:
        src = moved["_from"].combine_chunks()
        parts.append(pa.table({k: src.field(k).cast(rows.schema.field(k).type) for k in keys}))
    return pa.concat_tables(parts).group_by(keys, use_threads=False).aggregate([])


def scd2_rows(found: pa.Table, current: pa.Table, columns: list[str], keys: list[str]) -> pa.Table:
    """The rows a batch writes to a history table, matched on :func:`merge_keys`: the
    versions ``found`` (:func:`versions`) with their validity, and the versions
    ``current`` (the history table's rows whose ``_valid_to_lsn`` is null, for the keys
    :func:`touched_keys` names — all of them when ``found`` holds a truncate) ended at
    their key's first change or the first truncate. ``columns``: the source table's
    columns, as the history table holds them."""
    position = np.arange(found.num_rows)
    is_truncate = found["_truncate"].to_numpy(zero_copy_only=False)
    truncates = position[is_truncate]
    rows = found.filter(pc.invert(found["_truncate"]))
    at = position[~is_truncate]
    lookup = _lookup_keys(rows, keys)
    cur = current.select(keys).cast(rows.select(keys).schema)
    ids = _key_ids(pa.concat_tables([rows.select(keys), cur, lookup]), keys)
    n, m = rows.num_rows, current.num_rows
    row_ids, cur_ids, lookup_ids = ids[:n], ids[n : n + m], ids[n + m :]

    # Each version ends at its key's next change in the batch, or a truncate after it
    # (a transaction's truncate comes before the versions it leaves: the marker is
    # placed when it happens, the versions when the transaction ends).
    by_key = np.lexsort((at, row_ids))
    end = np.full(n, -1, dtype=np.int64)
    same = row_ids[by_key][1:] == row_ids[by_key][:-1]
    end[by_key[:-1][same]] = at[by_key[1:][same]]
    end = _earliest(end, _next(truncates, at))

    filled = _fill_unchanged(rows, current, lookup_ids, cur_ids, columns)
    deleted = rows["_delete"].combine_chunks()
    versions = _with_validity(filled.select(columns), found, end, deleted, rows)
    if m == 0:
        return versions
    # Each current version ends at its key's first change, or the batch's first truncate.
    first = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
    keyed = row_ids[by_key]
    starts = np.ones(len(keyed), dtype=bool)
    starts[1:] = keyed[1:] != keyed[:-1]
    first[keyed[starts]] = at[by_key][starts]
    ends = _earliest(first[cur_ids], np.full(m, truncates[0] if len(truncates) else -1))
    closing = ends >= 0
    if not closing.any():
        return versions
    ended = _ended(current.filter(pa.array(closing)), ends[closing], found)
    # A version of a transaction this batch goes on with (a batch cut it) is replaced by
    # the version the batch gives it, not ended; one that the transaction's truncate
    # ended never was.
    ended = ended.filter(pc.invert(matching(ended, versions, merge_keys(keys))))
    never = pc.equal(ended["_valid_from_lsn"], ended["_valid_to_lsn"])
    kept = ended.filter(pc.invert(never)).select(versions.column_names).cast(versions.schema)
    gone = ended.filter(never).select(versions.column_names).cast(versions.schema)
    if gone.num_rows == 0:
        return pa.concat_tables([versions, kept])
    # Removed (the MERGE source's _delete), matched on their keys.
    flag = pa.field("_gone", pa.bool_())
    return pa.concat_tables(
        [
            # Typed: an empty list alone would make a column of nulls, not of booleans.
            versions.append_column(flag, pa.array([False] * versions.num_rows, pa.bool_())),
            kept.append_column(flag, pa.array([False] * kept.num_rows, pa.bool_())),
            gone.append_column(flag, pa.array([True] * gone.num_rows, pa.bool_())),
        ]
    )


def snapshot_rows(rows: pa.Table, lsn: int, commit_ts: pa.DataType) -> pa.Table:
    """An initial snapshot's rows (the source table's columns) as current versions from
    its consistent point ``lsn``."""
    n = rows.num_rows
    values = (
        pa.array([lsn] * n, pa.int64()),
        pa.nulls(n, pa.int64()),
        pa.nulls(n, commit_ts),
        pa.nulls(n, commit_ts),
        pa.array([True] * n),
        pa.array([False] * n),
        pa.nulls(n, pa.int64()),
    )
    out = rows
    for f, value in zip(history_fields(commit_ts), values, strict=True):
        out = out.append_column(f, value)
    return out


def ended_at(current: pa.Table, lsn: int) -> pa.Table:
    """The versions ``current`` ended at ``lsn`` (a new snapshot's consistent point:
    its rows start versions of their own)."""
    n = current.num_rows
    out = _set(current, "_valid_to_lsn", pa.array([lsn] * n, pa.int64()))
    return _set(out, "_is_current", pa.array([False] * n))


def merge_source(rows: pa.Table, keys: list[str]) -> pa.Table:
    """``rows`` as a MERGE source (the shape of :func:`pgwire_cdc._native.reduce_changes`'s
    output): every row an upsert of its :func:`merge_keys` (a delete where ``_gone``,
    which :func:`scd2_rows` adds, is true), no value kept from the table."""
    n = rows.num_rows
    gone = pa.array([False] * n)
    if "_gone" in rows.column_names:
        gone = pc.fill_null(rows["_gone"], False).combine_chunks()
        rows = rows.drop_columns(["_gone"])
    fields = [rows.schema.field(k).with_nullable(True) for k in merge_keys(keys)]
    moved = pa.StructArray.from_arrays(
        [pa.nulls(n, f.type) for f in fields], fields=fields, mask=pa.array([True] * n)
    )
    return (
        rows.append_column(pa.field("_delete", pa.bool_(), False), gone)
        .append_column(
            pa.field("_unchanged", pa.list_(pa.string()), False),
            pa.array([[]] * n, pa.list_(pa.string())),
        )
        .append_column(pa.field("_from", moved.type), moved)
    )


# -- helpers ---------------------------------------------------------------------------


def matching(table: pa.Table, other: pa.Table, keys: list[str]) -> pa.Array:
    """Per row of ``table``, whether ``other`` has a row of the same ``keys`` (joined on
    the keys alone: other columns may be of types a join cannot carry)."""
    n = table.num_rows
    if n == 0 or other.num_rows == 0:
        return pa.array([False] * n, pa.bool_())
    indexed = table.select(keys).append_column("_row", pa.array(np.arange(n)))
    wanted = other.select(keys).cast(table.select(keys).schema)
    hit = indexed.join(wanted, keys, join_type="left semi", use_threads=False)["_row"]
    mask = np.zeros(n, dtype=bool)
    mask[hit.to_numpy()] = True
    return pa.array(mask)


def _lookup_keys(rows: pa.Table, keys: list[str]) -> pa.Table:
    """Per version, the key of the row version before the batch that holds its
    unchanged values: the key it moved from, else its own."""
    moved = rows["_from"].combine_chunks()
    return pa.table(
        {
            k: pc.if_else(
                moved.is_valid(),
                moved.field(k).cast(rows.schema.field(k).type),
                rows[k].combine_chunks(),
            )
            for k in keys
        }
    )


def _key_ids(table: pa.Table, keys: list[str]) -> np.ndarray:
    """An integer per row of ``table``, equal for equal keys."""
    n = table.num_rows
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    indexed = table.select(keys).append_column("_row", pa.array(np.arange(n)))
    distinct = indexed.group_by(keys, use_threads=False).aggregate([])
    distinct = distinct.append_column("_id", pa.array(np.arange(distinct.num_rows)))
    joined = indexed.join(distinct, keys, join_type="inner", use_threads=False)
    ids = np.empty(n, dtype=np.int64)
    ids[joined["_row"].to_numpy()] = joined["_id"].to_numpy()
    return ids


def _next(positions: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Per value of ``after``, the first of the sorted ``positions`` past it (-1: none)."""
    if len(positions) == 0:
        return np.full(len(after), -1, dtype=np.int64)
    i = np.searchsorted(positions, after, side="right")
    return np.where(i < len(positions), positions[np.minimum(i, len(positions) - 1)], -1)


def _earliest(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per position, the smaller of two indexes, -1 meaning none."""
    big = np.iinfo(np.int64).max
    m = np.minimum(np.where(a < 0, big, a), np.where(b < 0, big, b))
    return np.where(m == big, -1, m)


def _at(found: pa.Table, column: str, end: np.ndarray) -> pa.Array:
    """``found``'s ``column`` at each index of ``end``; null where it is -1."""
    field = found.schema.field(column)
    taken = found[column].combine_chunks().take(pa.array(np.maximum(end, 0)))
    return pc.if_else(pa.array(end < 0), pa.scalar(None, field.type), taken)


def _with_validity(
    data: pa.Table, found: pa.Table, end: np.ndarray, deleted: pa.Array, rows: pa.Table
) -> pa.Table:
    ts_type = found.schema.field("_commit_ts").type
    values = (
        rows["_commit_lsn"],
        _at(found, "_commit_lsn", end),
        rows["_commit_ts"],
        _at(found, "_commit_ts", end),
        pc.and_(pa.array(end < 0), pc.invert(deleted)),
        deleted,
        rows["_xid"],
    )
    out = data
    for f, value in zip(history_fields(ts_type), values, strict=True):
        out = out.append_column(f, value.cast(f.type))
    return out


def _fill_unchanged(
    rows: pa.Table,
    current: pa.Table,
    lookup_ids: np.ndarray,
    cur_ids: np.ndarray,
    columns: list[str],
) -> pa.Table:
    """``rows`` with the values their ``_unchanged`` columns name taken from the current
    version before the batch (``current``) of the row they update."""
    unchanged = rows["_unchanged"].combine_chunks()
    if rows.num_rows == 0 or pc.sum(pc.list_value_length(unchanged)).as_py() == 0:
        return rows
    where = np.full(int(max(lookup_ids.max(), cur_ids.max(initial=0))) + 1, -1, dtype=np.int64)
    where[cur_ids] = np.arange(len(cur_ids))
    at = where[lookup_ids]
    known = pa.array(at >= 0)
    names = pc.list_flatten(unchanged)
    parents = pc.list_parent_indices(unchanged).to_numpy(zero_copy_only=False)
    out = rows
    for name in pc.unique(names).to_pylist():
        if name not in columns:
            continue
        hit = np.zeros(rows.num_rows, dtype=bool)
        hit[parents[pc.equal(names, name).to_numpy(zero_copy_only=False)]] = True
        field = rows.schema.field(name)
        if name in current.column_names and current.num_rows:
            src = current[name].combine_chunks().cast(field.type).take(pa.array(np.maximum(at, 0)))
            src = pc.if_else(known, src, pa.scalar(None, field.type))
        else:
            src = pa.nulls(rows.num_rows, field.type)
        out = _set(out, name, pc.if_else(pa.array(hit), src, rows[name].combine_chunks()))
    return out


def _ended(rows: pa.Table, ends: np.ndarray, found: pa.Table) -> pa.Table:
    """The current versions ``rows`` ended at the changes of ``found`` at ``ends``."""
    out = _set(rows, "_valid_to_lsn", _at(found, "_commit_lsn", ends))
    out = _set(out, "_valid_to", _at(found, "_commit_ts", ends))
    return _set(out, "_is_current", pa.array([False] * rows.num_rows))


def _set(table: pa.Table, name: str, values: pa.Array | pa.ChunkedArray) -> pa.Table:
    i = table.schema.get_field_index(name)
    field = table.schema.field(i)
    return table.set_column(i, field, values.cast(field.type))
