"""The Iceberg tables of one stream: :class:`IcebergTables`, Iceberg (through Spark) as a
:class:`~pgwire_cdc.lakehouse.format.TableFormat`, and :class:`IcebergSink`, the
:class:`~pgwire_cdc.lakehouse.sink.LakehouseSink` over it.

What is Iceberg's own: tables named in a Spark catalog, the position a snapshot records
in its summary (:mod:`~pgwire_cdc.iceberg.table`), schema changes by ``ALTER TABLE`` (a
column added, a type widened in place, a column dropped), and Spark's ``MERGE INTO``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import ConfigError, IcebergError
from ..lakehouse.format import TablePosition, library_errors
from ..lakehouse.moved import fill_moved
from ..lakehouse.positions import Mark, Source
from ..lakehouse.reshape import ColumnOp, reshape_rows
from ..lakehouse.shape import plain_schema
from ..lakehouse.sink import LakehouseSink
from ..lakehouse.sql import (
    default_table_name,
    key_filter,
    quote_name,
    source_columns,
    sql_string,
    unchanged_names,
)
from ..spark.types import spark_schema
from .merge import applied, key_bounds, merge_statement, row_kinds
from .table import (
    SNAPSHOT_PROPERTY,
    Position,
    current_snapshot,
    exists,
    pinned_position,
    position,
    refresh,
    table_ref,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..lakehouse.digests import LakeDigests
    from ..streaming import StreamOptions

log = logging.getLogger("pgwire_cdc")

#: Table properties of the tables the sink creates: merge-on-read (a MERGE marks changed
#: rows in delete files instead of rewriting data files), format v3 (deletion vectors).
DEFAULT_PROPERTIES = {
    "format-version": "3",
    "write.merge.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.delete.mode": "merge-on-read",
}

#: Table properties a table with a change data feed gets over :data:`DEFAULT_PROPERTIES`
#: (and under the user's): copy-on-write, since Iceberg's changelog scan (the Spark
#: procedure ``create_changelog_view``) refuses snapshots whose data files carry delete
#: files ("Delete files are currently not supported in changelog scans"), deletion
#: vectors included. Format v3 stays.
CHANGE_FEED_PROPERTIES = {
    "write.merge.mode": "copy-on-write",
    "write.update.mode": "copy-on-write",
    "write.delete.mode": "copy-on-write",
}

NEEDS_SPARK = (
    "the Iceberg sink needs a SparkSession with Iceberg: pass "
    "spark=pgwire_cdc.spark.session(iceberg=True, **iceberg.local_catalog_conf(...)), or "
    "your own session with the Iceberg runtime, IcebergSparkSessionExtensions and the catalog"
)

#: Iceberg stores Spark's byte and short integers as int.
_WIDENED = {"tinyint": "int", "smallint": "int"}


class IcebergTables:
    """The Iceberg tables of one stream in ``catalog.namespace`` of ``spark``'s catalogs
    (see :class:`IcebergSink` for the arguments)."""

    error = IcebergError
    kind = "Iceberg table"

    @property
    def foreign_errors(self) -> tuple[type[BaseException], ...]:
        return library_errors("pyspark.errors.PySparkException", "py4j.protocol.Py4JError")

    def __init__(
        self,
        spark: SparkSession | None,
        catalog: str,
        namespace: str,
        *,
        table_name: Callable[[str], str] | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        if spark is None:
            raise ConfigError(NEEDS_SPARK)
        self.spark = spark
        self.catalog = catalog
        self.namespace = namespace
        self.table_name = table_name or default_table_name
        self.properties = {**DEFAULT_PROPERTIES, **(properties or {})}
        #: The properties of the tables created with a change data feed.
        self.change_feed_properties = {
            **DEFAULT_PROPERTIES,
            **CHANGE_FEED_PROPERTIES,
            **(properties or {}),
        }
        # The history tables' references handed out: made without the change feed's
        # properties (a history table is the history already; it stays merge-on-read).
        self._history_refs: set[str] = set()
        self._view = 0
        # Table references known to exist (found or created): only refreshed, not looked
        # up in the catalog's listings again.
        self._existing: set[str] = set()

    # -- where the tables are ----------------------------------------------------------

    def ref(self, name: str) -> str:
        """The Spark SQL name of the source table ``name``'s Iceberg table."""
        return table_ref(self.catalog, self.namespace, name, self.table_name)

    #: Iceberg reserves ``_deleted`` (the metadata column of rows a delete file removes).
    deleted_column = "_is_deleted"
    change_data_feed = False

    def history_ref(self, name: str) -> str:
        """``<table>_history`` beside the table."""
        table_name = self.table_name
        ref = table_ref(
            self.catalog, self.namespace, name, lambda source: table_name(source) + "_history"
        )
        self._history_refs.add(ref)
        return ref

    def where(self) -> str:
        return f"in {self.catalog}.{self.namespace}"

    def found_tables(self) -> list[str]:
        return []

    # -- reading -------------------------------------------------------------------------

    def _recorded(self, ref: str) -> Position | None:
        found = position(self.spark, ref)
        if found is not None:
            self._existing.add(ref)
        return found

    def position(self, ref: str) -> TablePosition | None:
        found = self._recorded(ref)
        if found is None:
            return None
        return TablePosition(found.lsn, found.ordinal_of, partial=found.partial)

    def pinned(self, ref: str, reduce: LakeDigests) -> tuple[TablePosition | None, pa.Table | None]:
        """The rows reduced in Spark tasks (``mapInArrow``): the driver receives keys and
        digests, never the table's rows."""
        from pyspark.sql.types import LongType, StructField, StructType

        found = pinned_position(self.spark, ref)
        if found is None:
            return None, None
        recorded, snapshot = found
        frame = self.spark.table(ref)
        if snapshot is not None:
            frame = self.spark.sql(f"SELECT * FROM {ref} VERSION AS OF {int(snapshot)}")
        fields = [frame.schema[k] for k in reduce.keys or ()]
        fields += [StructField(name, LongType()) for name in reduce.output_names()[len(fields) :]]
        reduced = frame.mapInArrow(reduce.reduce, StructType(fields))
        rows: pa.Table = reduced.toArrow()
        return TablePosition(recorded.lsn, recorded.ordinal_of, partial=recorded.partial), rows

    def progress(self, ref: str) -> Any:
        found = self._recorded(ref)
        if found is None:
            raise IcebergError(f"no Iceberg table {ref}")
        return found.progress

    def source(self, ref: str) -> Source | None:
        found = self._recorded(ref)
        return None if found is None else found.source

    def exists(self, ref: str) -> bool:
        """:func:`~pgwire_cdc.iceberg.table.exists`, the table's state read afresh; a
        table known to exist is only refreshed (listing a catalog's namespace can cost as
        much as a remote call per table there)."""
        found = refresh(self.spark, ref) if ref in self._existing else exists(self.spark, ref)
        if found:
            self._existing.add(ref)
        else:
            self._existing.discard(ref)
        return found

    def version(self, ref: str) -> int | None:
        """The table's current snapshot id (its ``main`` branch), -1 before its first."""
        if not self.exists(ref):
            return None
        return current_snapshot(self.spark, ref)

    def schema(self, ref: str) -> pa.Schema:
        from pyspark.sql.pandas.types import to_arrow_type

        fields = self.spark.table(ref).schema.fields
        return plain_schema(
            pa.schema([pa.field(f.name, to_arrow_type(f.dataType)) for f in fields])
        )

    def read(self, ref: str, columns: list[str], keys: pa.Table | None = None) -> pa.Table:
        frame = self.spark.table(ref).select(*map(quote_name, columns))
        where = key_filter(keys, spark=True) if keys is not None else None
        if where is not None:
            frame = frame.where(where)
        rows: pa.Table = frame.toArrow()
        return rows

    # -- writing -------------------------------------------------------------------------

    def _frame(self, table: pa.Table) -> DataFrame:
        return self.spark.createDataFrame(table, schema=spark_schema(table.schema))

    def create(self, ref: str, schema: pa.Schema) -> None:
        """Creates the empty table ``ref`` of ``schema`` (and its namespace), with
        :attr:`properties`, or with a change data feed (:attr:`change_data_feed`, a
        history table aside) :attr:`change_feed_properties`."""
        namespace = ref.rsplit(".", 1)[0]
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
        writer = self._frame(schema.empty_table()).writeTo(ref).using("iceberg")
        feed = self.change_data_feed and ref not in self._history_refs
        properties = self.change_feed_properties if feed else self.properties
        for key, value in properties.items():
            writer = writer.tableProperty(key, value)
        writer.create()
        self._existing.add(ref)

    @contextmanager
    def _recording(self, pos: Position | None) -> Iterator[None]:
        """Every snapshot committed inside records ``pos`` in its summary."""
        conf = self.spark.conf
        summary = pos.summary() if pos is not None else {}
        try:
            for key, value in summary.items():
                if value is None:
                    conf.unset(SNAPSHOT_PROPERTY + key)
                else:
                    conf.set(SNAPSHOT_PROPERTY + key, value)
            yield
        finally:
            for key in summary:
                conf.unset(SNAPSHOT_PROPERTY + key)

    @staticmethod
    def _summary(mark: Mark | None) -> Position | None:
        return (
            None if mark is None else Position(mark.lsn, mark.partial, mark.progress, mark.source)
        )

    def _overwrite(self, ref: str, frame: DataFrame, mark: Mark | None) -> None:
        from pyspark.sql import functions as F

        with self._recording(self._summary(mark)):
            frame.writeTo(ref).overwrite(F.lit(True))

    def write(self, ref: str, rows: pa.Table, mode: str, mark: Mark | None) -> None:
        if not self.exists(ref):
            self.create(ref, rows.schema)
        if mode == "overwrite":
            self._overwrite(ref, self._frame(rows), mark)
            return
        with self._recording(self._summary(mark)):
            self._frame(rows).writeTo(ref).append()

    def record_progress(self, ref: str, batch_lsn: int, progress: Any) -> None:
        current = position(self.spark, ref) or Position(None)
        empty = self.spark.table(ref).limit(0)
        with self._recording(Position(current.lsn, current.partial, progress, current.source)):
            empty.writeTo(ref).append()

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
        """One MERGE of ``source`` into ``ref``, moved rows filled first
        (:func:`~pgwire_cdc.lakehouse.moved.fill_moved`), shaped so that its cost follows
        the batch (:func:`~pgwire_cdc.iceberg.merge.merge_statement`)."""
        source = fill_moved(source, keys, lambda old: self.read(ref, source_columns(source), old))
        summary = self._summary(mark)
        if source.num_rows == 0 and not truncate:
            # Nothing to change, but the position to record.
            with self._recording(summary):
                self.spark.table(ref).limit(0).writeTo(ref).append()
            return
        columns = source_columns(source)
        self._view += 1
        view = f"pgwire_cdc_iceberg_source_{self._view}"
        self._frame(source).createOrReplaceTempView(view)
        statement = merge_statement(
            ref,
            view,
            columns,
            keys,
            unchanged_names(source),
            truncate=truncate,
            bounds=key_bounds(source.select(keys)),
            **row_kinds(source, adds=adds),
        )
        try:
            with applied(self.spark.conf, statement.settings), self._recording(summary):
                self.spark.sql(statement.sql).collect()
        finally:
            self.spark.catalog.dropTempView(view)

    def evolve(self, ref: str, name: str, wanted: pa.Schema, *, drop: bool) -> pa.Schema:
        """ADD COLUMN, and a type Iceberg can widen in place (int to bigint, float to
        double, a wider decimal); with ``drop``, DROP COLUMN of the columns ``wanted``
        lacks. Other type changes are refused."""
        want = spark_schema(wanted)
        have = {f.name: f for f in self.spark.table(ref).schema.fields}
        new = [f for f in want.fields if f.name not in have]
        if new:
            added = ", ".join(f"{quote_name(f.name)} {f.dataType.simpleString()}" for f in new)
            self.spark.sql(f"ALTER TABLE {ref} ADD COLUMNS ({added})")
        for f in want.fields:
            if f.name not in have:
                continue
            to = f.dataType.simpleString()
            got = have[f.name].dataType.simpleString()
            if _WIDENED.get(to, to) == got:
                continue
            try:
                self.spark.sql(f"ALTER TABLE {ref} ALTER COLUMN {quote_name(f.name)} TYPE {to}")
            except Exception as e:
                raise IcebergError(
                    f"{name}: column {f.name!r} changed type from {got} to {to}, which "
                    "Iceberg cannot widen in place; re-snapshot the table (pgwire-cdc "
                    "resnapshot, or drop the slot and the table)"
                ) from e
            log.info("%s: column %s widened to %s", name, f.name, to)
        missing = [c for c in have if c not in wanted.names]
        if missing and drop:
            # Rows of a table without a key are matched whole: a column no change carries
            # cannot take part, so it goes.
            for c in missing:
                self.spark.sql(f"ALTER TABLE {ref} DROP COLUMN {quote_name(c)}")
            log.info("%s: columns %s dropped (no longer published)", name, ", ".join(missing))
        return self.schema(ref)

    def reshape(self, ref: str, name: str, ops: Sequence[ColumnOp], mark: Mark) -> None:
        """Drops, renames and adds columns in the table's metadata (Iceberg tracks
        columns by field id: no file is rewritten), widens a type in place where Iceberg
        can; a type it cannot change in place becomes a new column of that name. Then,
        when held rows get a value (an added column's value for existing rows, a
        converted type), one overwrite of the rows, else an empty commit, records
        ``mark``."""
        data: list[ColumnOp] = []
        for op in ops:
            column = quote_name(op.column)
            if op.kind == "drop":
                self.spark.sql(f"ALTER TABLE {ref} DROP COLUMN {column}")
            elif op.kind == "rename":
                assert op.new_name is not None
                self.spark.sql(
                    f"ALTER TABLE {ref} RENAME COLUMN {column} TO {quote_name(op.new_name)}"
                )
            elif op.kind == "add":
                self.spark.sql(f"ALTER TABLE {ref} ADD COLUMNS ({column} {self._spark_type(op)})")
                if op.touches_rows:
                    data.append(op)
            elif op.kind == "set":
                data.append(op)
            elif op.kind == "retype":
                assert op.type is not None
                to = self._spark_type(op)
                got = self.spark.table(ref).schema[op.column].dataType.simpleString()
                if op.cast and _WIDENED.get(to, to) == got:
                    continue
                if op.cast:
                    try:
                        self.spark.sql(f"ALTER TABLE {ref} ALTER COLUMN {column} TYPE {to}")
                        continue
                    except Exception:  # not a type Iceberg widens to: the column anew
                        log.debug("%s: %s cannot become %s in place", name, op.column, to)
                data.append(op)
        if not data:
            empty = self.spark.table(ref).limit(0)
            with self._recording(self._summary(mark)):
                empty.writeTo(ref).append()
            return
        rows = self.read(ref, self.spark.table(ref).columns)
        try:
            # Added columns are in the table already (null): their values are set.
            rows = reshape_rows(
                rows, [replace(op, kind="set") if op.kind == "add" else op for op in data]
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise IcebergError(
                f"{name}: a schema change could not be applied to the rows the Iceberg "
                f"table holds ({e}); copy the table again (pgwire-cdc resnapshot)"
            ) from e
        held = self.spark.table(ref).schema
        for op in data:
            to = self._spark_type(op)
            if held[op.column].dataType.simpleString() == to:
                continue
            # A type Iceberg cannot change in place: the column anew (a new field id).
            self.spark.sql(f"ALTER TABLE {ref} DROP COLUMN {quote_name(op.column)}")
            self.spark.sql(f"ALTER TABLE {ref} ADD COLUMNS ({quote_name(op.column)} {to})")
        self._overwrite(ref, self._frame(rows.select(self.spark.table(ref).columns)), mark)

    def property(self, ref: str, key: str) -> str | None:
        rows = self.spark.sql(f"SHOW TBLPROPERTIES {ref}").collect()
        found = [r["value"] for r in rows if r["key"] == key]
        return str(found[0]) if found else None

    def set_property(self, ref: str, key: str, value: str) -> None:
        self.spark.sql(
            f"ALTER TABLE {ref} SET TBLPROPERTIES"
            f" ({sql_string(key, spark=True)} = {sql_string(value, spark=True)})"
        )

    @staticmethod
    def _spark_type(op: ColumnOp) -> str:
        assert op.type is not None
        spark_type = spark_schema(pa.schema([pa.field(op.column, op.type)]))[0]
        return str(spark_type.dataType.simpleString())

    def copier(
        self, dsn: str, options: StreamOptions
    ) -> Callable[[str, str, Mark | None], None] | None:
        """A table's initial snapshot read by Spark tasks and written over its Iceberg
        table; rows never pass through the driver."""
        from ..spark.lake import copier

        return copier(self, self.spark, dsn, options, self._overwrite)


class IcebergSink(LakehouseSink):
    """The Iceberg tables of one stream in ``catalog.namespace`` of ``spark``'s catalogs,
    one per source table, named by ``table_name`` (default: ``schema_table`` in lower
    case, see :func:`~pgwire_cdc.iceberg.table.table_ref`); tables it creates get
    ``properties`` over :data:`DEFAULT_PROPERTIES`.

    ``change_data_feed=True``: tables with a key get the column ``_commit_lsn`` (the commit
    LSN of the source transaction that wrote the row as it stands), and the tables it
    creates (history tables aside) are copy-on-write (:data:`CHANGE_FEED_PROPERTIES`
    between the defaults and ``properties``), so that Iceberg's changelog view over their
    snapshots (``CALL <catalog>.system.create_changelog_view(...)``: docs/iceberg.md,
    "Change feed") reads each batch's inserts, updates (pre- and post-images) and
    deletes."""

    format: IcebergTables

    def __init__(
        self,
        spark: SparkSession | None,
        catalog: str,
        namespace: str,
        *,
        table_name: Callable[[str], str] | None = None,
        properties: Mapping[str, str] | None = None,
        on_step: Callable[[str], None] | None = None,
        as_of_every: float | None = 30.0,
        keep_dropped_columns: bool = False,
        history: str | None = None,
        history_tables: Iterable[str] | None = None,
        deletes: str = "hard",
        change_data_feed: bool = False,
    ) -> None:
        tables = IcebergTables(
            spark, catalog, namespace, table_name=table_name, properties=properties
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
        self.spark = tables.spark
        self.catalog = catalog
        self.namespace = namespace
        self.properties = tables.properties

    def table_ref(self, name: str) -> str:
        """The Spark SQL name of the source table ``name``'s Iceberg table."""
        return self.format.ref(name)

    def create(self, ref: str, schema: pa.Schema) -> None:
        """Creates the empty table ``ref`` of ``schema`` (and its namespace)."""
        self.format.create(ref, schema)
