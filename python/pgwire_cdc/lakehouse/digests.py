"""What verify keeps of a table's rows to compare them: per row its key (the key columns,
for the report's examples and a repair's deletes), the key's 64-bit digest ``_k`` and the
64-bit digest ``_d`` of the values compared (``_native.row_digests``), instead of the rows.

The source's rows wait in an Arrow IPC file on local disk (:class:`Spill`) for the few
keys a repair writes or changes after the snapshot touched; the lake's rows are reduced
batch by batch where the format reads them (:class:`LakeDigests`: by the delta-rs reader
for Delta, in Spark tasks for Iceberg), so neither side's rows are ever all in memory:
the key and 16 bytes per row are. Digests are int64 (Spark has no unsigned type), the
bits of ``row_digests``' uint64."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from .. import _native
from ..errors import ConfigError
from ..tables import unsliced
from .shape import CHANGE_FEED_COLUMN, data_columns

#: The key's digest and the compared values' digest.
KEY_DIGEST = "_k"
ROW_DIGEST = "_d"
DIGESTS = (KEY_DIGEST, ROW_DIGEST)
#: The columns a lake table holds besides the source's: soft deletes' and the change
#: data feed's.
DELETED_LSN = "_deleted_lsn"


def digest(table: pa.Table, columns: list[str]) -> pa.Array:
    """The 64-bit digest of each row's ``columns``, as int64."""
    if table.num_rows == 0:
        return pa.array([], pa.int64())
    found = pa.table(_native.row_digests(unsliced(table), columns))["_digest"]
    return found.combine_chunks().cast(pa.int64(), safe=False)


def digests(table: pa.Table, keys: list[str] | None, columns: list[str]) -> pa.Table:
    """``table``'s key columns, :data:`KEY_DIGEST` and :data:`ROW_DIGEST` of
    ``columns``; without keys only the latter (a keyless table compares as a multiset)."""
    if keys is None:
        return pa.table({ROW_DIGEST: digest(table, columns)})
    return pa.table(
        {
            **{k: owned(table[k]) for k in keys},
            KEY_DIGEST: digest(table, keys),
            ROW_DIGEST: digest(table, columns),
        }
    )


def owned(column: pa.ChunkedArray) -> pa.Array:
    """``column`` in buffers of its own: a column read from a file shares one buffer with
    the batch's other columns, which it would otherwise keep alive."""
    return pa.concat_arrays(column.chunks) if column.num_chunks else column.combine_chunks()


def as_types(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table``'s columns of ``schema`` in its types (a lake's types may be wider, or
    Spark's), so that digests of equal values are equal."""
    arrays = []
    for f in schema:
        if f.name not in table.column_names:
            raise ConfigError(
                f"column {f.name!r} left the lake table while verify read it: verify again"
                " once the DDL is done"
            )
        column = table[f.name]
        if column.type != f.type:
            try:
                column = column.cast(f.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise ConfigError(
                    f"column {f.name!r} is {column.type} in the lake but {f.type} at the source"
                    f" and cannot be compared: {e}"
                ) from e
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=schema)


def live_rows(table: pa.Table, deleted: str) -> pa.Table:
    """A lake table's rows as the source has them: without the rows ``deletes="soft"``
    keeps for deleted ones (``deleted``, as the format calls ``_deleted``, true)."""
    if deleted not in table.column_names:
        return table
    return table.filter(pc.invert(pc.fill_null(table[deleted], False)))


def lake_only(deleted: str) -> set[str]:
    """The columns a lake table may hold that its source table does not."""
    return {deleted, DELETED_LSN, CHANGE_FEED_COLUMN}


@dataclass(frozen=True)
class LakeDigests:
    """A lake table's batches reduced to :func:`digests`: live rows only, the compared
    columns (``schema``, in the source's types) cast. Picklable: Spark tasks run it."""

    schema: pa.Schema
    keys: tuple[str, ...] | None
    deleted: str

    def output_names(self) -> list[str]:
        """The reduced batches' columns."""
        keys = list(self.keys or ())
        return [*keys, KEY_DIGEST, ROW_DIGEST] if self.keys is not None else [ROW_DIGEST]

    def output_schema(self, lake: pa.Schema) -> pa.Schema:
        """The reduced batches' schema, the key columns in the lake's types."""
        fields = [lake.field(k) for k in self.keys or ()]
        if self.keys is not None:
            fields.append(pa.field(KEY_DIGEST, pa.int64()))
        return pa.schema([*fields, pa.field(ROW_DIGEST, pa.int64())])

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        rows = live_rows(pa.Table.from_batches([batch]), self.deleted)
        compared = as_types(rows, self.schema)
        keys = list(self.keys) if self.keys is not None else None
        found = digests(compared, keys, self.schema.names)
        if keys is not None:
            # The key columns as the lake holds them (a Spark task's output types).
            found = pa.table(
                {**{k: owned(rows[k]) for k in keys}, **{c: found[c] for c in DIGESTS}}
            )
        return pa.RecordBatch.from_arrays(
            [found[c].combine_chunks() for c in found.column_names], names=found.column_names
        )

    def reduce(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield self(batch)


class Spill:
    """One source table's snapshot rows (their data columns: a snapshot's change rows
    carry nothing else), written to an Arrow IPC file in ``directory`` as they come and
    read back batch by batch; or, read by Spark tasks, the files the tasks wrote
    (:meth:`adopt`), with the digests they made."""

    def __init__(self, directory: str | os.PathLike[str], number: int | str) -> None:
        self.path = Path(directory) / f"table-{number}.arrow"
        #: The files holding the rows: this spill's own, or the tasks'.
        self.parts = [self.path]
        #: The data columns the file holds; the change table's schema they came in (what
        #: a repair's change rows are made in).
        self.schema: pa.Schema | None = None
        self.change_schema: pa.Schema | None = None
        self.rows = 0
        #: :func:`digests` of every row over all its data columns (:data:`KEY_DIGEST` and
        #: :data:`ROW_DIGEST` only), where the tasks that read the rows made them.
        self.digests: pa.Table | None = None
        self._sink: pa.NativeFile | None = None
        self._writer: pa.ipc.RecordBatchFileWriter | None = None

    def adopt(
        self, parts: list[Path], change_schema: pa.Schema, rows: int, found: pa.Table | None
    ) -> None:
        """The rows are in the files ``parts`` (written by Spark tasks, each a spill of
        its own), ``found`` their digests."""
        self.parts = list(parts)
        self.change_schema = change_schema
        empty = change_schema.empty_table()
        self.schema = empty.select(data_columns(empty)).schema
        self.rows = rows
        self.digests = found

    def write(self, table: pa.Table) -> None:
        if self.change_schema is None:
            self.change_schema = table.schema
        table = table.select(data_columns(table))
        if self._writer is None:
            self.schema = table.schema
            self._sink = pa.OSFile(str(self.path), "wb")
            self._writer = pa.ipc.new_file(self._sink, table.schema)
        assert self.schema is not None
        if not table.schema.equals(self.schema):
            table = table.cast(self.schema)
        self._writer.write_table(table)
        self.rows += table.num_rows

    def template(self, schema: pa.Schema) -> None:
        """The schema of a table the snapshot found no rows in."""
        if self.schema is None:
            empty = schema.empty_table()
            self.schema = empty.select(data_columns(empty)).schema
            self.change_schema = schema

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            assert self._sink is not None
            self._sink.close()
            self._writer = None

    def batches(self) -> Iterator[pa.RecordBatch]:
        self.close()
        for path in self.parts:
            if not path.exists():
                continue
            # Read, not memory-mapped: a batch's memory goes with the batch, and the
            # file's pages never count as the process's own.
            with pa.OSFile(str(path)) as source:
                reader = pa.ipc.open_file(source)
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i)

    def select(self, keys: list[str], wanted: pa.Array) -> pa.Table:
        """The rows whose key digest is among ``wanted``."""
        assert self.schema is not None
        parts = [self.schema.empty_table()]
        for batch in self.batches():
            table = pa.Table.from_batches([batch])
            hit = table.filter(pc.is_in(digest(table, keys), value_set=wanted))
            if hit.num_rows:
                parts.append(hit)
        return pa.concat_tables(parts)

    def table(self) -> pa.Table:
        """Every row (a keyless table, which compares whole)."""
        assert self.schema is not None
        return pa.Table.from_batches(list(self.batches()), schema=self.schema)
