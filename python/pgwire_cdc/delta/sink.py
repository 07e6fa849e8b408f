"""The Delta tables of one stream: :class:`DeltaTables`, Delta Lake as a
:class:`~pgwire_cdc.lakehouse.format.TableFormat` (either writer), and :class:`DeltaSink`,
the :class:`~pgwire_cdc.lakehouse.sink.LakehouseSink` over it.

What is Delta's own: where tables are (paths, or a Spark catalog's names), the position a
commit records as ``txn`` actions (:meth:`~pgwire_cdc.lakehouse.positions.Mark.commit`),
a schema change made by adding columns or by rewriting the table, and the MERGE of the
writer (by deletion vectors where the table has them).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa

from ..errors import ConfigError, DeltaError
from ..lakehouse.format import TablePosition, library_errors
from ..lakehouse.moved import fill_moved
from ..lakehouse.points import is_points
from ..lakehouse.positions import APP_ID, PROGRESS_APP_ID, Commit, Mark, Source
from ..lakehouse.reshape import ColumnOp, reshape_rows
from ..lakehouse.shape import plain_schema
from ..lakehouse.sink import LakehouseSink
from ..lakehouse.sql import default_table_name, key_filter, quote_name, source_columns
from ..lakehouse.stats import ApplyStats
from .catalog import CatalogNames, is_table_name
from .table import (
    CHANGE_DATA_FEED,
    base_path,
    history_path,
    open_table,
    position,
    read_table,
    recorded_source,
    reduce_version,
    table_path,
)
from .writers import SparkWriter, Writer, writer_for

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..lakehouse.digests import LakeDigests
    from ..streaming import StreamOptions

log = logging.getLogger("pgwire_cdc")

DELTA_RS_IN_CATALOG = (
    "tables in a Spark catalog need writer='spark': the delta-rs writer keeps path tables "
    "only (it cannot register a table in a Spark catalog); give a path instead of schema="
)


class DeltaTables:
    """The Delta tables of one stream under ``path``, kept by one writer (see
    :class:`DeltaSink` for the arguments)."""

    error = DeltaError
    kind = "Delta table"

    @property
    def foreign_errors(self) -> tuple[type[BaseException], ...]:
        return library_errors(
            "deltalake.exceptions.DeltaError",
            "pyspark.errors.PySparkException",
            "py4j.protocol.Py4JError",
        )

    #: Catalog mode: how source tables are named in the catalog (None: path tables).
    names: CatalogNames | None

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        writer: str | Writer = "delta-rs",
        spark: SparkSession | None = None,
        storage_options: Mapping[str, str] | None = None,
        *,
        catalog: str | None = None,
        schema: str | None = None,
        table_name: Callable[[str], str] | None = None,
        deletion_vectors: bool | None = None,
        auto_compact: bool = True,
    ) -> None:
        self.path = base_path(path) if path is not None else None
        self.storage_options = dict(storage_options) if storage_options is not None else None
        self.writer = writer_for(
            writer, spark, self.storage_options, deletion_vectors, auto_compact
        )
        if schema is None:
            if catalog is not None or table_name is not None:
                raise ConfigError("catalog= and table_name= name tables in schema=: give it")
            self.names = None
        elif not isinstance(self.writer, SparkWriter):
            raise ConfigError(DELTA_RS_IN_CATALOG)
        else:
            self.names = CatalogNames(catalog, schema, table_name or default_table_name)
        if (
            isinstance(self.writer, SparkWriter)
            and self.storage_options is not None
            and self.path is not None
        ):
            self.writer.configure_store(self.path, self.storage_options)
        # Per table reference: the table as last opened, until this sink commits to it
        # (one read of its log per batch serves the position, the check that it exists
        # and its schema).
        self._opened: dict[str, Any] = {}
        # History tables' references (never given a change data feed), and the tables
        # known to have their change data feed on.
        self._history_refs: set[str] = set()
        self._feeding: set[str] = set()

    # -- where the tables are ----------------------------------------------------------

    def ref(self, name: str) -> str:
        """The reference of the source table ``name``'s Delta table: its path under
        ``path``, or in catalog mode its quoted catalog name (an external table at that
        path when ``path`` is given too)."""
        if self.names is None:
            if self.path is None:
                raise ConfigError("this Delta sink has no path: name the table itself")
            return table_path(self.path, name)
        ref = self.names.ref(name)
        if self.path is not None and isinstance(self.writer, SparkWriter):
            self.writer.external[ref] = table_path(self.path, name)
        return ref

    def where(self) -> str:
        return f"in {self.names.schema_ref()}" if self.names else f"under {self.path}"

    deleted_column = "_deleted"
    change_data_feed = False

    def history_ref(self, name: str) -> str:
        """The history table's reference: :func:`~pgwire_cdc.delta.table.history_path`
        under ``path``, or in catalog mode ``<table>_history`` beside the table."""
        if self.names is None:
            if self.path is None:
                raise ConfigError("this Delta sink has no path: name the table itself")
            ref = history_path(self.path, name)
        else:
            table = self.names.table_name(name)
            ref = f"{self.names.schema_ref()}.{quote_name(table + '_history')}"
            if self.path is not None and isinstance(self.writer, SparkWriter):
                self.writer.external[ref] = history_path(self.path, name)
        self._history_refs.add(ref)
        return ref

    def _with_feed(self, ref: str) -> None:
        """Turns the change data feed on for the (existing) table ``ref`` when the sink
        keeps one and the table has none yet (a table made before, or by a write that
        created it): ``delta.enableChangeDataFeed``, which adds the ``changeDataFeed``
        writer feature. History tables keep none (their rows are versions already)."""
        if not self.change_data_feed or ref in self._history_refs or ref in self._feeding:
            return
        if self.property(ref, CHANGE_DATA_FEED) != "true":
            self.set_property(ref, CHANGE_DATA_FEED, "true")
            log.info("%s: change data feed turned on", ref)
        self._feeding.add(ref)

    def found_tables(self) -> list[str]:
        """The source tables with a Delta table in a local ``path`` (none in catalog
        mode)."""
        if self.names is not None or self.path is None or not os.path.isdir(self.path):
            return []
        found = (
            unquote(entry.name)
            for entry in os.scandir(self.path)
            if os.path.isdir(os.path.join(entry.path, "_delta_log"))
        )
        return sorted(name for name in found if not is_points(name))

    def _where(self, ref: str) -> str | None:
        """Where the table ``ref`` keeps its files, for delta-rs to read: a path itself,
        a catalog table's location (None while the table does not exist)."""
        if not is_table_name(ref):
            return ref
        if not isinstance(self.writer, SparkWriter):
            raise ConfigError(DELTA_RS_IN_CATALOG)
        return self.writer.location(ref)

    def _open(self, ref: str) -> Any:
        if self._opened.get(ref) is None:
            where = self._where(ref)
            self._opened[ref] = None if where is None else open_table(where, self.storage_options)
        return self._opened[ref]

    def _changed(self, ref: str) -> None:
        self._opened.pop(ref, None)

    # -- reading -------------------------------------------------------------------------

    def position(self, ref: str) -> TablePosition | None:
        self._changed(ref)
        table = self._open(ref)
        if table is None:
            return None
        return TablePosition(
            table.transaction_version(APP_ID),
            table.transaction_version,
            table.transaction_version(PROGRESS_APP_ID),
        )

    def pinned(self, ref: str, reduce: LakeDigests) -> tuple[TablePosition | None, pa.Table | None]:
        where = self._where(ref)
        table = None if where is None else open_table(where, self.storage_options)
        if table is None:
            return None, None
        position = TablePosition(
            table.transaction_version(APP_ID),
            table.transaction_version,
            table.transaction_version(PROGRESS_APP_ID),
        )
        return position, reduce_version(table, reduce)

    def progress(self, ref: str) -> Any:
        where = self._where(ref)
        found = None if where is None else position(where, self.storage_options)
        if found is None:
            raise DeltaError(f"no Delta table at {ref}")
        return found.progress

    def source(self, ref: str) -> Source | None:
        self._changed(ref)
        table = self._open(ref)
        return None if table is None else recorded_source(table)

    def exists(self, ref: str) -> bool:
        return self._open(ref) is not None

    def version(self, ref: str) -> int | None:
        table = self._open(ref)
        return None if table is None else int(table.version())

    def schema(self, ref: str) -> pa.Schema:
        return plain_schema(pa.schema(self._open(ref).schema().to_arrow()))

    def read(self, ref: str, columns: list[str], keys: pa.Table | None = None) -> pa.Table:
        where = key_filter(keys) if keys is not None else None
        return read_table(self._where(ref) or ref, where, self.storage_options).select(columns)

    # -- writing -------------------------------------------------------------------------

    def create(self, ref: str, schema: pa.Schema) -> None:
        feeds = self.change_data_feed and ref not in self._history_refs
        self.writer.create(ref, schema, {CHANGE_DATA_FEED: "true"} if feeds else None)
        self._changed(ref)
        if feeds:
            self._feeding.add(ref)

    def write(self, ref: str, rows: pa.Table, mode: str, mark: Mark | None) -> None:
        if self.change_data_feed and not self.exists(ref):
            self.create(ref, rows.schema)
        self._with_feed(ref)
        self.writer.write(ref, rows, mode, mark.commit() if mark is not None else None)
        self._changed(ref)

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
        commit = mark.commit()
        self._with_feed(ref)
        try:
            in_place = getattr(self.writer, "merge_in_place", None)
            # The deletion-vector MERGE fills moved rows itself, from the rows it retires;
            # a truncate deletes the rows the batch does not name: a copy-on-write MERGE.
            if in_place is not None and not truncate:
                if in_place(ref, source, keys, commit) is not None:
                    return
            read = lambda old: self.read(ref, source_columns(source), old)  # noqa: E731
            self.writer.merge(ref, fill_moved(source, keys, read), keys, truncate, commit)
        finally:
            # After the commit (a table opened while merging is the version before it).
            self._changed(ref)

    def record_progress(self, ref: str, batch_lsn: int, progress: Any) -> None:
        empty = self.schema(ref).empty_table()
        self.writer.write(ref, empty, "append", Commit(PROGRESS_APP_ID, batch_lsn, progress))
        self._changed(ref)

    def evolve(self, ref: str, name: str, wanted: pa.Schema, *, drop: bool) -> pa.Schema:
        """New columns are added (null in the rows the table holds); a changed type, or
        with ``drop`` a column ``wanted`` lacks, rewrites the table in ``wanted``'s
        columns and types (the values cast; columns ``wanted`` lacks kept without
        ``drop``)."""
        from deltalake import Schema

        table = self._open(ref)
        have = {f.name: f for f in table.schema().fields}
        want = Schema.from_arrow(wanted)
        new = [wanted.field(f.name) for f in want.fields if f.name not in have]
        changed = [
            f.name for f in want.fields if f.name in have and str(have[f.name].type) != str(f.type)
        ]
        if changed or (drop and any(n not in wanted.names for n in have)):
            self._rewrite(ref, name, wanted, changed, keep=not drop)
        elif new:
            self.writer.add_columns(ref, new)
            self._changed(ref)
        return self.schema(ref)

    def _rewrite(
        self, ref: str, name: str, wanted: pa.Schema, changed: list[str], *, keep: bool
    ) -> None:
        """Rewrites the table in ``wanted``'s column types (and, unless ``keep``, its
        columns alone)."""
        rows = read_table(self._where(ref) or ref, None, self.storage_options)
        arrays = []
        fields = []
        for f in wanted:
            if f.name in rows.column_names:
                column = rows[f.name]
                try:
                    column = column.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise DeltaError(
                        f"{name}: column {f.name!r} changed type to {f.type} and the rows "
                        f"the Delta table holds cannot be converted ({e}); re-snapshot the "
                        "table (pgwire-cdc resnapshot, or drop the slot and the table)"
                    ) from e
            else:
                column = pa.nulls(rows.num_rows, f.type)
            arrays.append(column)
            fields.append(f)
        if keep:
            for f in rows.schema:
                if f.name not in wanted.names:
                    arrays.append(rows[f.name])
                    fields.append(f)
        table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
        self.writer.write(ref, table, "overwrite", None)
        self._changed(ref)
        log.info("%s: Delta table rewritten for a schema change (%s)", name, ", ".join(changed))

    def reshape(self, ref: str, name: str, ops: Sequence[ColumnOp], mark: Mark) -> None:
        """Rewrites the table in one overwrite that records ``mark``: without column
        mapping a Delta table's columns are its files' columns, so a rename or a drop is
        a rewrite too, as is giving held rows a value. Columns added null alone change
        the schema in the log, and an empty commit records ``mark``."""
        if all(op.kind == "add" and not op.touches_rows for op in ops):
            self.writer.add_columns(ref, [pa.field(op.column, op.type) for op in ops])
            self._changed(ref)
            empty = self.schema(ref).empty_table()
            self.writer.write(ref, empty, "append", mark.commit())
            self._changed(ref)
            return
        rows = read_table(self._where(ref) or ref, None, self.storage_options)
        try:
            rows = reshape_rows(rows, ops)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise DeltaError(
                f"{name}: a schema change could not be applied to the rows the Delta table "
                f"holds ({e}); copy the table again (pgwire-cdc resnapshot)"
            ) from e
        self.writer.write(ref, rows, "overwrite", mark.commit())
        self._changed(ref)

    def property(self, ref: str, key: str) -> str | None:
        value = self._open(ref).metadata().configuration.get(key)
        return None if value is None else str(value)

    def set_property(self, ref: str, key: str, value: str) -> None:
        from deltalake import DeltaTable

        where = self._where(ref) or ref
        table = DeltaTable(where, storage_options=self.storage_options)
        table.alter.set_table_properties({key: value}, raise_if_not_exists=False)
        self._changed(ref)

    def copier(
        self, dsn: str, options: StreamOptions
    ) -> Callable[[str, str, Mark | None], None] | None:
        """With the Spark writer, a table's initial snapshot read by Spark tasks and
        written to its Delta table (rows go from the tasks to Delta files); None with the
        delta-rs writer."""
        writer = self.writer
        if not isinstance(writer, SparkWriter):
            return None
        from ..spark.lake import copier

        def save(ref: str, frame: DataFrame, mark: Mark | None) -> None:
            writer.save(frame, ref, "overwrite", mark.commit() if mark is not None else None)
            self._changed(ref)

        return copier(self, writer.spark, dsn, options, save)


class DeltaSink(LakehouseSink):
    """The Delta tables of one stream under ``path``, kept by one writer.

    ``storage_options``: delta-rs's options for a ``path`` on an object store (see
    :mod:`~pgwire_cdc.delta.stores`; None: from the environment). With the Spark writer
    they are also set on the Spark session as S3A settings of the path's bucket.

    Catalog mode (``schema`` given, Spark writer only): the tables are ``catalog.schema.<
    table_name(source)>`` in the session's catalog (``catalog`` None: its current one),
    managed by the catalog, or external tables under ``path`` when it is given too (see
    :mod:`~pgwire_cdc.delta.catalog`).

    ``deletion_vectors``: whether tables the delta-rs writer creates have deletion
    vectors, so its MERGEs retire changed rows instead of rewriting files (None, the
    default: on a local file system); tables that exist keep what they have."""

    format: DeltaTables

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        writer: str | Writer = "delta-rs",
        spark: SparkSession | None = None,
        on_step: Callable[[str], None] | None = None,
        storage_options: Mapping[str, str] | None = None,
        *,
        catalog: str | None = None,
        schema: str | None = None,
        table_name: Callable[[str], str] | None = None,
        deletion_vectors: bool | None = None,
        auto_compact: bool = True,
        as_of_every: float | None = 30.0,
        keep_dropped_columns: bool = False,
        history: str | None = None,
        history_tables: Iterable[str] | None = None,
        deletes: str = "hard",
        change_data_feed: bool = False,
    ) -> None:
        tables = DeltaTables(
            path,
            writer,
            spark,
            storage_options,
            catalog=catalog,
            schema=schema,
            table_name=table_name,
            deletion_vectors=deletion_vectors,
            auto_compact=auto_compact,
        )
        super().__init__(
            tables,
            on_step,
            as_of_every=as_of_every,
            keep_dropped_columns=keep_dropped_columns,
            history=history,
            history_tables=history_tables,
            deletes=deletes,
            change_data_feed=change_data_feed,
        )
        self.path = tables.path
        self.storage_options = tables.storage_options
        self.writer = tables.writer
        self.names = tables.names

    def table_path(self, name: str) -> str:
        """The reference of the source table ``name``'s Delta table (see
        :meth:`DeltaTables.ref`)."""
        return self.format.ref(name)

    def local_tables(self) -> list[str]:
        """The source tables with a Delta table in a local ``path`` (none in catalog
        mode)."""
        return self.format.found_tables()

    def apply_table(self, path: str | os.PathLike[str], changes: pa.Table, lsn: int) -> ApplyStats:
        """Commits one change table to the Delta table ``path`` (any table path, made
        absolute, or a catalog table's reference:
        :func:`~pgwire_cdc.delta.catalog.table_ref`), skipping the rows at or below the
        table's recorded position; ``lsn``: everything committed before it is in
        ``changes`` or earlier (a batch's LSN)."""
        given = os.fspath(path)
        ref = given if is_table_name(given) else base_path(given)
        return super().apply_table(ref, changes, lsn)
