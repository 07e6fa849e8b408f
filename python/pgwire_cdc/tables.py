"""Change tables: assembling the decoder's Arrow segments into one table per source table.

The decoder starts a new *segment* when a Relation message changes a table's columns (ADD /
DROP / RENAME COLUMN, a type change). ``take()`` presents them as one table per source
table whenever the segments can be unified: the columns of every version, in the order
they first appeared (a row has nulls in the columns its version did not have), then the
metadata columns. A segment whose column types cannot be unified with the earlier ones (a
column that changed type, for example int4 to text) goes under the key
``"schema.table@2"`` (``@3`` and so on for later ones), so nothing is ever dropped. When
the segments of one table are matched on different keys (``ADD PRIMARY KEY``, a
``REPLICA IDENTITY`` changed inside the batch), the table's schema metadata says which
rows are matched on which (:data:`KEY_RUNS`; :func:`key_runs` cuts the table there).
``take_segments()`` gives every segment as it is, in order.

A column a change did not carry (its segment has no such column: the publication's
column list did not name it then, or the column did not exist) is not a NULL value: in the
merged table it is null *and* named in the row's ``_unchanged`` (for ``read``, ``insert``
and ``update`` rows), so a consumer keeps the value it holds, as PostgreSQL's own
subscriber does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from . import _native

#: The metadata columns of every change table, after the table's own columns (defined
#: once, in the extension).
METADATA_COLUMNS: tuple[str, ...] = tuple(_native.METADATA_COLUMNS)


def key_columns(table: pa.Table | pa.Schema) -> list[str] | None:
    """The columns a change table's rows are matched on: its replica-identity key, or None
    (whole rows, a multiset) for REPLICA IDENTITY FULL and tables without a key."""
    schema = table if isinstance(table, pa.Schema) else table.schema
    metadata = schema.metadata or {}
    if metadata.get(b"pg_replica_identity") == b"f":
        return None
    keys = [
        f.name
        for f in schema
        if f.name not in METADATA_COLUMNS
        and (f.metadata or {}).get(b"pg_replica_identity") == b"true"
    ]
    return keys or None


def segment_key(name: str, version: int) -> str:
    """The key of a source table's change table of schema ``version`` (1, 2, ...):
    ``"schema.table"``, then ``"schema.table@2"`` (see the module documentation)."""
    return name if version == 1 else f"{name}@{version}"


def parse_segment_key(key: str) -> tuple[str, int]:
    """The source table and schema version a change table's key names
    (:func:`segment_key`): ``"s.t@2"`` → ``("s.t", 2)``."""
    name, _, version = key.partition("@")
    return name, int(version or 1)


def table_of(stream: Any) -> pa.Table:
    """A pyarrow Table of an Arrow C stream (``__arrow_c_stream__``), without a copy.

    Not ``pa.table(stream)``: that imports pandas to check whether its argument is a
    DataFrame, 45 MB of memory and a fifth of a second the first time.
    """
    return pa.RecordBatchReader.from_stream(stream).read_all()


def _ordered(table: pa.Table, data_columns: list[str]) -> pa.Table:
    return table.select([*data_columns, *METADATA_COLUMNS])


def merge_segments(segments: Iterable[tuple[str, pa.Table]]) -> dict[str, pa.Table]:
    """One table per source table (see the module documentation)."""
    groups: dict[str, list[list[pa.Table]]] = {}
    for name, table in segments:
        versions = groups.setdefault(name, [[]])
        versions[-1].append(table)
        if len(versions[-1]) > 1:
            try:
                _merge(versions[-1])
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                # The new schema cannot join the earlier ones: a new key.
                versions[-1].pop()
                versions.append([table])
    out: dict[str, pa.Table] = {}
    for name, versions in groups.items():
        for i, tables in enumerate(versions):
            out[segment_key(name, i + 1)] = _merge(tables)
    return out


def _merge(tables: list[pa.Table]) -> pa.Table:
    if len(tables) == 1:
        return tables[0]
    data_columns: list[str] = []
    for table in tables:
        for column in table.column_names:
            if column not in METADATA_COLUMNS and column not in data_columns:
                data_columns.append(column)
    marked = [
        mark_unchanged(t, [c for c in data_columns if c not in t.column_names]) for t in tables
    ]
    merged = _ordered(pa.concat_tables(marked, promote_options="permissive"), data_columns)
    runs: list[list[Any]] = []
    first = 0
    for table in tables:
        identity, keys = _key_of(table)
        if not runs or runs[-1][1:] != [identity, keys]:
            runs.append([first, identity, keys])
        first += table.num_rows
    if len(runs) == 1:
        return merged
    metadata = {**(merged.schema.metadata or {}), KEY_RUNS: json.dumps(runs).encode()}
    return merged.replace_schema_metadata(metadata)


#: Schema metadata of a change table whose rows are matched on different keys (a replica
#: identity changed inside the batch): JSON ``[[first row, identity, [key columns]], ...]``
#: in row order, ``identity`` as the ``pg_replica_identity`` metadata has it.
KEY_RUNS = b"pg_key_runs"


def _key_of(table: pa.Table) -> tuple[str, list[str]]:
    """A change table's replica identity and key columns, as its metadata says them."""
    identity = ((table.schema.metadata or {}).get(b"pg_replica_identity") or b"").decode()
    keys = [
        f.name
        for f in table.schema
        if f.name not in METADATA_COLUMNS
        and (f.metadata or {}).get(b"pg_replica_identity") == b"true"
    ]
    return identity, keys


def key_runs(table: pa.Table) -> list[pa.Table]:
    """``table`` cut where its rows start being matched on another key (:data:`KEY_RUNS`),
    each piece with the metadata of its own key (:func:`key_columns` reads it); the table
    itself when all its rows have one."""
    runs = (table.schema.metadata or {}).get(KEY_RUNS)
    if runs is None:
        return [table]
    parsed = json.loads(runs)
    bounds = [r[0] for r in parsed[1:]] + [table.num_rows]
    metadata = {k: v for k, v in (table.schema.metadata or {}).items() if k != KEY_RUNS}
    pieces = []
    for (first, identity, keys), end in zip(parsed, bounds, strict=True):
        fields = [
            f
            if f.name in METADATA_COLUMNS
            else f.with_metadata(
                {**(f.metadata or {}), b"pg_replica_identity": str(f.name in keys).lower().encode()}
            )
            for f in table.schema
        ]
        schema = pa.schema(fields, metadata={**metadata, b"pg_replica_identity": identity.encode()})
        piece = table.slice(first, end - first)
        pieces.append(pa.Table.from_arrays(piece.columns, schema=schema))
    return pieces


def without_columns(table: pa.Table, names: Iterable[str]) -> pa.Table:
    """``table`` without the data columns ``names``: gone from the columns, from the
    ``_before`` images and from the ``_unchanged`` lists."""
    import pyarrow.compute as pc

    gone = [n for n in names if n in table.column_names and n not in METADATA_COLUMNS]
    if not gone:
        return table
    table = table.drop_columns(gone)
    if "_unchanged" in table.column_names:
        lists = table["_unchanged"].combine_chunks()
        flat = lists.flatten()
        keep = pc.invert(pc.is_in(flat, value_set=pa.array(gone, flat.type)))
        counts = pc.list_value_length(lists).to_numpy(zero_copy_only=False)
        kept = keep.to_numpy(zero_copy_only=False)
        offsets = [0]
        at = 0
        for n in counts:
            offsets.append(offsets[-1] + int(kept[at : at + int(n)].sum()))
            at += int(n)
        rebuilt = pa.ListArray.from_arrays(
            pa.array(offsets, pa.int32()), flat.filter(keep), type=lists.type, mask=lists.is_null()
        )
        i = table.schema.get_field_index("_unchanged")
        table = table.set_column(i, table.schema.field(i), rebuilt)
    if "_before" in table.column_names:
        before = table["_before"].combine_chunks()
        fields = [f for f in before.type if f.name not in gone]
        struct = pa.StructArray.from_arrays(
            [before.field(f.name) for f in fields], fields=fields, mask=before.is_null()
        )
        i = table.schema.get_field_index("_before")
        table = table.set_column(i, table.schema.field(i).with_type(struct.type), struct)
    return table


def mark_unchanged(table: pa.Table, names: list[str]) -> pa.Table:
    """``table`` with ``names`` added to ``_unchanged`` of its ``read``, ``insert`` and
    ``update`` rows: columns those changes did not carry (see the module documentation)."""
    if not names or table.num_rows == 0:
        return table
    return table_of(_native.mark_unchanged(unsliced(table), names))


def _holds_struct(t: pa.DataType) -> bool:
    if pa.types.is_struct(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _holds_struct(t.value_type)
    if pa.types.is_map(t):
        return _holds_struct(t.key_type) or _holds_struct(t.item_type)
    return False


def unsliced(table: pa.Table) -> pa.Table:
    """``table`` with every nested column that starts inside its buffers (a slice, as
    ``Table.slice`` and a batch reader over unevenly chunked columns make) copied to
    start at zero: Arrow's Rust import of a sliced struct holding a struct misreads its
    children (an out-of-bounds panic in ``_native``). Other columns are left as they are,
    and a table without such columns is returned itself. Columns chunked unevenly are
    combined first: exporting them slices the others at each chunk boundary."""
    if not any(_holds_struct(c.type) for c in table.columns):
        return table
    layouts = {tuple(len(chunk) for chunk in column.chunks) for column in table.columns}
    if len(layouts) > 1:
        table = table.combine_chunks()
    columns = []
    changed = False
    for column in table.columns:
        if _holds_struct(column.type) and any(chunk.offset for chunk in column.chunks):
            chunks = [pa.concat_arrays([c]) if c.offset else c for c in column.chunks]
            column = pa.chunked_array(chunks, column.type)
            changed = True
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=table.schema) if changed else table
