"""Tables held in memory: a :class:`~pgwire_cdc.lakehouse.format.TableFormat` with no
storage, the reference the other formats are held to.

:class:`MemoryTables` carries out each step the way a table format must: a commit is
atomic and records its :class:`~pgwire_cdc.lakehouse.positions.Mark` with its rows; a
MERGE keeps, for the columns a row names in ``_unchanged``, the table's value. It keeps
every commit, with what it recorded, in :attr:`MemoryTables.log`, so tests see what
:class:`~pgwire_cdc.lakehouse.sink.LakehouseSink` commits without a server. Rows are
Python values: made for tests, not for volume.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import Error
from .format import TablePosition
from .moved import fill_moved
from .points import is_points
from .positions import NO_PROGRESS, Mark, Source
from .reshape import ColumnOp, reshape_rows
from .sql import source_columns

#: Where the in-memory history tables are (names no source table has).
HISTORY_PREFIX = "_pgwire_cdc.history/"

if TYPE_CHECKING:
    from ..streaming import StreamOptions
    from .digests import LakeDigests


class MemoryTableError(Error):
    """A step the in-memory tables refuse (a column type its rows cannot take)."""


@dataclass
class MemoryTable:
    """One table: its columns, rows and what its commits recorded."""

    schema: pa.Schema
    rows: list[dict[str, Any]] = field(default_factory=list)
    lsn: int | None = None
    partial: tuple[int, int] | None = None
    progress: Any = NO_PROGRESS
    progress_lsn: int | None = None
    properties: dict[str, str] = field(default_factory=dict)
    source: Source | None = None

    def table(self) -> pa.Table:
        return pa.Table.from_pylist(self.rows, schema=self.schema)


@dataclass(frozen=True)
class LoggedCommit:
    """One commit of :attr:`MemoryTables.log`."""

    ref: str
    #: "create", "overwrite", "append", "merge", "evolve", "reshape", "properties",
    #: "progress".
    kind: str
    mark: Mark | None = None
    rows: int = 0


class MemoryTables:
    """Tables in memory, by source table name (the reference is the name itself)."""

    error: type[Exception] = MemoryTableError
    kind = "table"
    foreign_errors: tuple[type[BaseException], ...] = ()

    def __init__(self) -> None:
        self.tables: dict[str, MemoryTable] = {}
        #: Every commit, in order.
        self.log: list[LoggedCommit] = []
        # The rows of each version :meth:`version` has named, by (reference, version).
        self._versions: dict[tuple[str, int], pa.Table] = {}

    # -- what tests look at --------------------------------------------------------

    def rows(self, ref: str) -> list[dict[str, Any]]:
        """The rows of ``ref``, in no particular order."""
        return [dict(r) for r in self.tables[ref].rows]

    def commits(self, ref: str | None = None) -> list[LoggedCommit]:
        return [c for c in self.log if ref is None or c.ref == ref]

    def at(self, ref: str, version: int) -> pa.Table:
        """The rows of ``ref`` at a version :meth:`version` named (as a format's reader
        travels back to it)."""
        return self._versions[(ref, version)]

    def _commit(self, entry: LoggedCommit) -> None:
        self.log.append(entry)

    @staticmethod
    def _record(table: MemoryTable, mark: Mark | None) -> None:
        if mark is None:
            return
        table.lsn = mark.lsn
        table.partial = mark.partial
        if mark.progress is not NO_PROGRESS:
            table.progress = mark.progress
        if mark.source is not None:
            table.source = mark.source

    # -- TableFormat ---------------------------------------------------------------

    def ref(self, name: str) -> str:
        return name

    deleted_column = "_deleted"
    change_data_feed = False

    def history_ref(self, name: str) -> str:
        return f"{HISTORY_PREFIX}{name}"

    def where(self) -> str:
        return "in memory"

    def found_tables(self) -> list[str]:
        return sorted(
            name
            for name in self.tables
            if not is_points(name) and not name.startswith(HISTORY_PREFIX)
        )

    def position(self, ref: str) -> TablePosition | None:
        table = self.tables.get(ref)
        if table is None:
            return None
        return TablePosition(
            table.lsn, Mark(table.lsn, table.partial).ordinal_of, table.progress_lsn, table.partial
        )

    def pinned(self, ref: str, reduce: LakeDigests) -> tuple[TablePosition | None, pa.Table | None]:
        if ref not in self.tables:
            return None, None
        rows = self.tables[ref].table()
        found = reduce.reduce(rows.to_batches())
        return self.position(ref), pa.Table.from_batches(found, reduce.output_schema(rows.schema))

    def progress(self, ref: str) -> Any:
        return self.tables[ref].progress

    def source(self, ref: str) -> Source | None:
        return self.tables[ref].source

    def exists(self, ref: str) -> bool:
        return ref in self.tables

    def version(self, ref: str) -> int | None:
        """The number of commits to ``ref`` less one (its creation is version 0, as in
        Delta); the rows of that version are kept for :meth:`at`."""
        if ref not in self.tables:
            return None
        version = len(self.commits(ref)) - 1
        self._versions[(ref, version)] = self.tables[ref].table()
        return version

    def create(self, ref: str, schema: pa.Schema) -> None:
        self._commit(LoggedCommit(ref, "create"))
        self.tables[ref] = MemoryTable(schema)

    def schema(self, ref: str) -> pa.Schema:
        return self.tables[ref].schema

    def evolve(self, ref: str, name: str, wanted: pa.Schema, *, drop: bool) -> pa.Schema:
        table = self.tables[ref]
        held = {f.name: f for f in table.schema}
        fields = []
        for f in table.schema:
            if f.name in wanted.names:
                fields.append(wanted.field(f.name))
            elif not drop:
                fields.append(f)
        fields += [f for f in wanted if f.name not in held]
        schema = pa.schema(fields)
        if schema.equals(table.schema):
            return table.schema
        arrays = []
        current = table.table()
        for f in schema:
            if f.name not in held:
                arrays.append(pa.nulls(current.num_rows, f.type))
                continue
            try:
                arrays.append(current[f.name].cast(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise MemoryTableError(
                    f"{name}: column {f.name!r} cannot change to {f.type}: {e}"
                ) from e
        self._commit(LoggedCommit(ref, "evolve"))
        table.schema = schema
        table.rows = pa.Table.from_arrays(arrays, schema=schema).to_pylist()
        return schema

    def read(self, ref: str, columns: list[str], keys: pa.Table | None = None) -> pa.Table:
        rows = self.tables[ref].table().select(columns)
        if keys is None:
            return rows
        wanted = {tuple(r.values()) for r in keys.to_pylist()}
        names = keys.column_names
        kept = [r for r in self.tables[ref].rows if tuple(r[k] for k in names) in wanted]
        return pa.Table.from_pylist(kept, schema=self.tables[ref].schema).select(columns)

    def write(self, ref: str, rows: pa.Table, mode: str, mark: Mark | None) -> None:
        self._commit(LoggedCommit(ref, mode, mark, rows.num_rows))
        table = self.tables.get(ref)
        if table is None or mode == "overwrite":
            kept = table
            table = self.tables[ref] = MemoryTable(rows.schema)
            if kept is not None:
                table.lsn, table.partial = kept.lsn, kept.partial
                table.progress, table.progress_lsn = kept.progress, kept.progress_lsn
            table.rows = rows.to_pylist()
        else:
            table.rows += rows.select(table.schema.names).cast(table.schema).to_pylist()
        self._record(table, mark)

    def merge(
        self,
        ref: str,
        source: pa.Table,
        keys: list[str],
        truncate: bool,
        mark: Mark,
        *,
        adds: bool = True,
    ) -> None:
        source = fill_moved(source, keys, lambda old: self.read(ref, source_columns(source), old))
        self._commit(LoggedCommit(ref, "merge", mark, source.num_rows))
        table = self.tables[ref]
        columns = source_columns(source)
        at = {tuple(r[k] for k in keys): i for i, r in enumerate(table.rows)}
        kept: list[dict[str, Any] | None] = list(table.rows)
        named = set()
        inserted = []
        for change in source.to_pylist():
            key = tuple(change[k] for k in keys)
            named.add(key)
            i = at.get(key)
            if change["_delete"]:
                if i is not None:
                    kept[i] = None
                continue
            unchanged = set(change["_unchanged"] or ())
            if i is not None and kept[i] is not None:
                row = kept[i]
                assert row is not None
                kept[i] = {c: row[c] if c in unchanged else change[c] for c in columns} | {
                    c: row[c] for c in row if c not in columns
                }
            elif not adds:
                raise MemoryTableError(
                    f"{ref}: a MERGE told no key is new upserts a key the table lacks"
                )
            else:
                inserted.append({c: change[c] for c in columns})
        rows = [r for r in kept if r is not None]
        if truncate:
            rows = [r for r in rows if tuple(r[k] for k in keys) in named]
        table.rows = rows + inserted
        self._record(table, mark)

    def reshape(self, ref: str, name: str, ops: Sequence[ColumnOp], mark: Mark) -> None:
        try:
            rows = reshape_rows(self.tables[ref].table(), ops)
        except pa.ArrowInvalid as e:
            raise MemoryTableError(f"{name}: {e}") from e
        self._commit(LoggedCommit(ref, "reshape", mark, rows.num_rows))
        table = self.tables[ref]
        table.schema, table.rows = rows.schema, rows.to_pylist()
        self._record(table, mark)

    def property(self, ref: str, key: str) -> str | None:
        return self.tables[ref].properties.get(key)

    def set_property(self, ref: str, key: str, value: str) -> None:
        self._commit(LoggedCommit(ref, "properties"))
        self.tables[ref].properties[key] = value

    def record_progress(self, ref: str, batch_lsn: int, progress: Any) -> None:
        self._commit(LoggedCommit(ref, "progress"))
        table = self.tables[ref]
        table.progress = progress
        table.progress_lsn = batch_lsn

    def copier(
        self, dsn: str, options: StreamOptions
    ) -> Callable[[str, str, Mark | None], None] | None:
        return None
