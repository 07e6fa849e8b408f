"""Rows that moved to a new key: the columns they leave unchanged (an unchanged TOAST
value, a column the change did not carry) take the value of the table row under their
old key, since no table row stands under the new key yet.

A reduced change table (``_native.reduce_changes``) names the old key of such a row in
``_from``; :func:`fill_moved` fills those columns with one read of the table (the rows
under the old keys) and a join, for every format. The deletion-vector writer of Delta
does the same inside its MERGE, from the rows it retires anyway.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from .sql import source_columns


def fill_moved(
    source: pa.Table, keys: list[str], lookup: Callable[[pa.Table], pa.Table]
) -> pa.Table:
    """``source`` (a reduced change table) without ``_from``, the unchanged columns of
    its moved rows filled from ``lookup(old_keys)``: the table's rows (at least) under the
    keys of ``old_keys`` (a table of the key columns). A moved row whose old key has no
    table row keeps its ``_unchanged`` list (the MERGE keeps what it can)."""
    moved = source["_from"].is_valid()
    if not pc.any(moved).as_py():
        return source.drop_columns(["_from"])
    rows = source.filter(moved)
    old = pa.Table.from_struct_array(rows["_from"].combine_chunks())
    columns = source_columns(source)
    found = lookup(old.select(keys)).select(columns)
    # Join on the keys alone (Arrow joins carry no list payloads), then take the rows.
    right = pa.table({f"__k{i}": found[k] for i, k in enumerate(keys)})
    right = right.append_column("__at", pa.array(range(found.num_rows), pa.int64()))
    left = pa.table({f"__k{i}": old[k] for i, k in enumerate(keys)})
    left = left.append_column("__row", pa.array(range(rows.num_rows), pa.int64()))
    names_k = [f"__k{i}" for i in range(len(keys))]
    joined = left.join(right, names_k, join_type="left outer").sort_by("__row")
    hit = joined["__at"].is_valid()
    taken = found.take(joined["__at"])
    unchanged = rows["_unchanged"]
    names = pc.list_flatten(unchanged)
    parents = pc.list_parent_indices(unchanged)
    filled = []
    for c in columns:
        marked = pc.is_in(
            pa.array(range(rows.num_rows), pa.int64()),
            value_set=parents.filter(pc.equal(names, c)).cast(pa.int64()),
        )
        target = taken[c].cast(rows.schema.field(c).type)
        filled.append(pc.if_else(pc.and_(marked, hit), target, rows[c]))
    filled.append(rows["_delete"])
    none = pa.array([[]] * rows.num_rows, unchanged.type)
    filled.append(pc.if_else(hit, none, unchanged.combine_chunks()))
    out = [*columns, "_delete", "_unchanged"]
    patched = pa.Table.from_arrays(filled, schema=pa.schema([rows.schema.field(c) for c in out]))
    rest = source.filter(pc.invert(moved)).select(out)
    return pa.concat_tables([rest, patched])
