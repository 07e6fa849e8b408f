"""The Iceberg tables of one stream: :class:`IcebergSink`, a
:class:`pgwire_cdc.pipeline.Sink`. Applying a batch, schema evolution and exactly-once
commits as :mod:`pgwire_cdc.iceberg` describes them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from .. import _native
from ..errors import ConfigError, IcebergError
from ..lakehouse.positions import NO_PROGRESS, reached, unapplied
from ..lakehouse.shape import data_columns, lake_shape
from ..lakehouse.sql import (
    default_table_name,
    merge_clauses,
    quote_name,
    source_columns,
    sql_string,
    unchanged_names,
)
from ..lakehouse.stats import ApplyStats
from ..spark.types import spark_schema
from ..tables import METADATA_COLUMNS, key_columns, mark_unchanged, table_of
from .table import SNAPSHOT_PROPERTY, Position, exists, position, refresh, table_ref

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..streaming import Batch, StreamOptions

log = logging.getLogger("pgwire_cdc")

#: Table properties of the tables the sink creates: merge-on-read (a MERGE marks changed
#: rows in delete files instead of rewriting data files), format v3 (deletion vectors).
DEFAULT_PROPERTIES = {
    "format-version": "3",
    "write.merge.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.delete.mode": "merge-on-read",
}

NEEDS_SPARK = (
    "the Iceberg sink needs a SparkSession with Iceberg: pass "
    "spark=pgwire_cdc.spark.session(iceberg=True, **iceberg.local_catalog_conf(...)), or "
    "your own session with the Iceberg runtime, IcebergSparkSessionExtensions and the catalog"
)

#: Iceberg stores Spark's byte and short integers as int.
_WIDENED = {"tinyint": "int", "smallint": "int"}


class IcebergSink:
    """The Iceberg tables of one stream in ``catalog.namespace`` of ``spark``'s catalogs,
    one per source table, named by ``table_name`` (default: ``schema_table`` in lower
    case, see :func:`~pgwire_cdc.iceberg.table.table_ref`); tables it creates get
    ``properties`` over :data:`DEFAULT_PROPERTIES`."""

    def __init__(
        self,
        spark: SparkSession | None,
        catalog: str,
        namespace: str,
        *,
        table_name: Callable[[str], str] | None = None,
        properties: Mapping[str, str] | None = None,
        on_step: Callable[[str], None] | None = None,
    ) -> None:
        if spark is None:
            raise ConfigError(NEEDS_SPARK)
        self.spark = spark
        self.catalog = catalog
        self.namespace = namespace
        self.table_name = table_name or default_table_name
        self.properties = {**DEFAULT_PROPERTIES, **(properties or {})}
        self._on_step = on_step or (lambda _step: None)
        self._view = 0
        # Tables the initial snapshot in progress has written (their first part replaced
        # the table; later parts append); those Spark tasks wrote before its batch.
        self._snapshot_written: set[str] = set()
        self._prewritten: set[str] = set()
        #: Tables a snapshot reported complete that have no Iceberg table yet.
        self.missing: list[str] = []
        # Per table reference: its position, read from its snapshots once, then kept.
        self._positions: dict[str, Position | None] = {}
        # Table references known to exist (found or created): only refreshed, not looked
        # up in the catalog's listings again.
        self._existing: set[str] = set()
        # Per source table: the incremental-copy progress of a copy under way.
        self._progress: dict[str, Any] = {}

    def table_ref(self, name: str) -> str:
        """The Spark SQL name of the source table ``name``'s Iceberg table."""
        return table_ref(self.catalog, self.namespace, name, self.table_name)

    def _position(self, ref: str) -> Position | None:
        if ref not in self._positions:
            self._positions[ref] = position(self.spark, ref)
            if self._positions[ref] is not None:
                self._existing.add(ref)
        return self._positions[ref]

    def _exists(self, ref: str) -> bool:
        """:func:`~pgwire_cdc.iceberg.table.exists`, the table's state read afresh; a
        table known to exist is only refreshed (listing a catalog's namespace can cost as
        much as a remote call per table there)."""
        found = refresh(self.spark, ref) if ref in self._existing else exists(self.spark, ref)
        if found:
            self._existing.add(ref)
        else:
            self._existing.discard(ref)
        return found

    # -- the Sink protocol -------------------------------------------------------------

    def held_tables(
        self, published: Iterable[str] | None = None, slot_exists: bool = False
    ) -> dict[str, Any]:
        """``stream(held_tables=...)``: of the tables ``published``, those with an Iceberg
        table: None when complete, or the key their incremental copy reached. With
        ``slot_exists``, :class:`IcebergError` when there is none at all (the changes
        would land on top of nothing)."""
        held: dict[str, Any] = {}
        for name in sorted(set(published or ())):
            pos = self._position(self.table_ref(name))
            if pos is None:
                continue
            held[name] = None if pos.progress is NO_PROGRESS else pos.progress
            self._progress[name] = held[name]
        if slot_exists and not held:
            raise IcebergError(
                f"the replication slot exists but there is no Iceberg table in "
                f"{self.catalog}.{self.namespace}, so the rows from before the slot was "
                "created would be missing; drop the slot (pg_drop_replication_slot) to start "
                "with a new snapshot, or point the sink at the namespace that used it"
            )
        return held

    def snapshot_reader(
        self, dsn: str, options: StreamOptions
    ) -> Callable[[str, int, list[str]], None] | None:
        """``stream(snapshot_reader=...)``: a new slot's initial snapshot read by Spark
        tasks under the slot's exported snapshot and written to the Iceberg tables, the
        consistent point as each table's position; rows never pass through the driver."""
        if not options.snapshot:
            return None
        publications = options.publications
        publication = publications[0] if len(publications) == 1 else None
        return lambda snapshot, point, names: self._read_with_spark(
            dsn, publication, snapshot, point, names
        )

    def _read_with_spark(
        self,
        dsn: str,
        publication: str | None,
        snapshot: str,
        consistent_point: int,
        names: list[str],
    ) -> None:
        from ..connection import connect
        from ..spark import snapshot as spark_snapshot
        from ..spark.sessions import default_parallelism, missing_package_error

        partitions = default_parallelism(self.spark)
        for name in names:
            ref = self.table_ref(name)
            self._check_not_ahead(name, ref, consistent_point)
            with connect(dsn) as conn:
                info = spark_snapshot.describe(conn, name, publication)
            if not self._exists(ref):
                self.create(ref, lake_shape(spark_snapshot.data_schema(info).empty_table()).schema)
            reader = (
                self.spark.read.format("pgwire_cdc")
                .option("dsn", dsn)
                .option("table", name)
                .option("snapshot", snapshot)
                .option("partitions", str(partitions))
            )
            if publication is not None:
                reader = reader.option("publication", publication)
            try:
                self._overwrite(ref, reader.load(), Position(consistent_point, None, None))
            except Exception as e:
                clear = missing_package_error(e)
                if clear is None:
                    raise
                raise clear from e
            self._prewritten.add(name)
            log.info("%s: initial snapshot written by Spark", name)

    def _check_not_ahead(self, name: str, ref: str, lsn: int) -> None:
        current = self._position(ref)
        if current is not None and current.lsn is not None and current.lsn > lsn:
            raise IcebergError(
                f"{name}: the Iceberg table {ref} holds changes up to a later LSN than this "
                "stream's initial snapshot (was it written from another server or slot?); "
                "drop it or point the sink elsewhere"
            )

    def missing_tables(self) -> list[str]:
        return list(self.missing)

    def create_tables(self, schemas: Mapping[str, pa.Schema]) -> None:
        """Creates the Iceberg tables of ``schemas`` (change-table schemas) that do not
        exist yet."""
        for name, schema in schemas.items():
            ref = self.table_ref(name)
            if not self._exists(ref):
                data = pa.schema([f for f in schema if f.name not in METADATA_COLUMNS])
                self.create(ref, lake_shape(data.empty_table()).schema)
        self.missing = [name for name in self.missing if name not in schemas]

    # -- writing -----------------------------------------------------------------------

    def _frame(self, table: pa.Table) -> DataFrame:
        return self.spark.createDataFrame(table, schema=spark_schema(table.schema))

    def create(self, ref: str, schema: pa.Schema) -> None:
        """Creates the empty table ``ref`` of ``schema`` (and its namespace)."""
        namespace = ref.rsplit(".", 1)[0]
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
        writer = self._frame(schema.empty_table()).writeTo(ref).using("iceberg")
        for key, value in self.properties.items():
            writer = writer.tableProperty(key, value)
        writer.create()
        self._positions[ref] = Position(None)
        self._existing.add(ref)

    @contextmanager
    def _recording(self, ref: str, pos: Position | None) -> Iterator[None]:
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
        if pos is not None:
            self._positions[ref] = pos

    def _overwrite(self, ref: str, frame: DataFrame, pos: Position | None) -> None:
        from pyspark.sql import functions as F

        with self._recording(ref, pos):
            frame.writeTo(ref).overwrite(F.lit(True))

    def _append(self, ref: str, frame: DataFrame, pos: Position | None) -> None:
        with self._recording(ref, pos):
            frame.writeTo(ref).append()

    # -- applying ----------------------------------------------------------------------

    def apply(self, batch: Batch) -> ApplyStats:
        """Commits one batch to the Iceberg tables it touches: one snapshot per table
        (per part, where a schema change splits a table's changes). Ack it only after
        this returns."""
        stats = ApplyStats(batches=1)
        if batch.snapshot_start:
            self._snapshot_written, self._prewritten = self._prewritten, set()
            self.missing = []
            self._positions = {}
            self._progress = {name: None for name in self._snapshot_written}
        groups: dict[str, list[tuple[int, pa.Table]]] = {}
        for key, changes in batch.tables.items():
            name, _, suffix = key.partition("@")
            groups.setdefault(name, []).append((int(suffix or 1), changes))
        for name, parts in groups.items():
            progress = batch.snapshot_progress.get(name, NO_PROGRESS)
            ordered = sorted(parts, key=lambda p: p[0])
            for i, (_, changes) in enumerate(ordered):
                last = i == len(ordered) - 1
                if batch.snapshot:
                    self._snapshot_part(name, changes, stats)
                else:
                    self._changes(
                        name,
                        self.table_ref(name),
                        changes,
                        batch.lsn,
                        progress if last else NO_PROGRESS,
                        stats,
                    )
        for name in batch.snapshot_progress:
            if name in groups:
                continue
            ref = self.table_ref(name)
            if batch.snapshot:
                if name not in self._snapshot_written:
                    self._empty_for_snapshot(name, ref)
            elif not self._exists(ref):
                self.missing.append(name)
            else:
                progress = batch.snapshot_progress[name]
                if self._progress.get(name, NO_PROGRESS) != progress:
                    self._record_progress(name, ref, progress, batch.lsn, stats)
        return stats

    def _record_progress(
        self, name: str, ref: str, progress: Any, lsn: int, stats: ApplyStats
    ) -> None:
        """Records a copy's progress that came without rows of the table in a snapshot
        of its own (an empty append), unless the table is past this batch already."""
        current = self._position(ref)
        if current is None:
            self.missing.append(name)
            return
        if current.lsn is not None and current.lsn >= lsn:
            return
        empty = self.spark.table(ref).limit(0)
        self._append(ref, empty, Position(current.lsn, current.partial, progress))
        self._progress[name] = progress
        stats.commits += 1
        self._on_step("committed")

    def _snapshot_part(self, name: str, changes: pa.Table, stats: ApplyStats) -> None:
        ref = self.table_ref(name)
        rows = lake_shape(changes).select(data_columns(changes))
        stats.inserted += rows.num_rows
        if not self._exists(ref):
            self.create(ref, rows.schema)
        if name in self._snapshot_written:
            self._append(ref, self._frame(rows), None)
        else:
            lsn = int(changes["_commit_lsn"][0].as_py()) if changes.num_rows else None
            pos = None
            if lsn is not None:
                self._check_not_ahead(name, ref, lsn)
                pos = Position(lsn, None, None)
            self._overwrite(ref, self._frame(rows), pos)
            self._snapshot_written.add(name)
            self._progress[name] = None
        stats.commits += 1
        self._on_step("committed")

    def _empty_for_snapshot(self, name: str, ref: str) -> None:
        self._snapshot_written.add(name)
        if not self._exists(ref):
            self.missing.append(name)
            return
        self._overwrite(ref, self.spark.table(ref).limit(0), None)
        self._positions.pop(ref, None)
        self._progress[name] = None

    def apply_table(self, ref: str, changes: pa.Table, lsn: int) -> ApplyStats:
        """Commits one change table to the Iceberg table ``ref`` (a Spark SQL name),
        skipping the rows at or below its recorded position; ``lsn``: everything
        committed before it is in ``changes`` or earlier."""
        stats = ApplyStats(batches=1)
        self._changes(ref, ref, changes, lsn, NO_PROGRESS, stats)
        return stats

    def _changes(
        self,
        name: str,
        ref: str,
        changes: pa.Table,
        lsn: int,
        progress: Any,
        stats: ApplyStats,
    ) -> None:
        given, known = progress, self._progress.get(name, NO_PROGRESS)
        if progress is NO_PROGRESS:
            progress = known
        else:
            self._progress[name] = progress
        current = self._position(ref) or Position(None)
        if changes.num_rows:
            kept = unapplied(changes, current.lsn, current.ordinal_of)
            stats.skipped += changes.num_rows - kept.num_rows
            changes = kept
        if changes.num_rows == 0:
            if progress is not NO_PROGRESS and not self._exists(ref):
                self.missing.append(name)
            elif given is not NO_PROGRESS and given != known:
                self._record_progress(name, ref, given, lsn, stats)
            return
        done, partial = reached(changes, lsn, current.lsn)
        self._commit(name, ref, changes, Position(done, partial, progress), stats)

    def _commit(
        self, name: str, ref: str, changes: pa.Table, pos: Position, stats: ApplyStats
    ) -> None:
        changes = lake_shape(changes)
        columns = data_columns(changes)
        keys = key_columns(changes)
        if not self._exists(ref):
            self.create(ref, changes.select(columns).schema)
        changes = self._fit(name, ref, changes, keyed=keys is not None)
        columns = data_columns(changes)
        if keys is None:
            base = self.spark.table(ref).select(*map(quote_name, columns)).toArrow()
            base = base.cast(pa.schema([changes.schema.field(c) for c in columns]))
            stream, counts = _native.apply_changes(base, changes, None)
            self._overwrite(ref, self._frame(table_of(stream)), pos)
        else:
            stream, counts = _native.reduce_changes(changes, columns, keys)
            self._merge(ref, table_of(stream), keys, counts["truncated"] > 0, pos)
        stats.add({k: v for k, v in counts.items() if k in vars(stats)})
        stats.commits += 1
        self._on_step("committed")

    def _merge(
        self, ref: str, source: pa.Table, keys: list[str], truncate: bool, pos: Position
    ) -> None:
        """One MERGE of ``source`` (one final change per key) into ``ref``. Rows that
        moved to a new key with columns unchanged take them from the table row under the
        old key, joined in the MERGE's own source query (same snapshot)."""
        columns = source_columns(source)
        moved = bool(pc.any(source["_from"].is_valid()).as_py())
        if not moved:
            source = source.drop_columns(["_from"])
        self._view += 1
        view = f"pgwire_cdc_iceberg_source_{self._view}"
        self._frame(source).createOrReplaceTempView(view)
        using = view
        if moved:
            hit = " AND ".join(f"o.{quote_name(k)} = s._from.{quote_name(k)}" for k in keys)
            found = f"o.{quote_name(keys[0])} IS NOT NULL"
            filled = ", ".join(
                f"CASE WHEN {found} AND array_contains(s._unchanged, {sql_string(c, True)}) "
                f"THEN o.{quote_name(c)} ELSE s.{quote_name(c)} END AS {quote_name(c)}"
                for c in columns
            )
            using = (
                f"(SELECT {filled}, s._delete, CASE WHEN {found} THEN CAST(array() AS "
                f"array<string>) ELSE s._unchanged END AS _unchanged "
                f"FROM {view} s LEFT JOIN {ref} o ON {hit})"
            )
        clauses = merge_clauses(columns, keys, unchanged_names(source), spark=True)
        update = ", ".join(f"t.{c} = {e}" for c, e in clauses["update"].items())
        names = ", ".join(clauses["insert"])
        values = ", ".join(clauses["insert"].values())
        sql = (
            f"MERGE INTO {ref} t USING {using} s ON {clauses['on']} "
            "WHEN MATCHED AND s._delete THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {update} "
            f"WHEN NOT MATCHED AND NOT s._delete THEN INSERT ({names}) VALUES ({values})"
        )
        if truncate:
            sql += " WHEN NOT MATCHED BY SOURCE THEN DELETE"
        try:
            with self._recording(ref, pos):
                self.spark.sql(sql).collect()
        finally:
            self.spark.catalog.dropTempView(view)

    # -- schema changes ----------------------------------------------------------------

    def _fit(self, name: str, ref: str, changes: pa.Table, *, keyed: bool) -> pa.Table:
        """Evolves the Iceberg table to the change table's columns: ADD COLUMN, and a
        type Iceberg can widen in place (int to bigint, float to double, a wider
        decimal); and the change table to the columns a keyed table keeps."""
        columns = data_columns(changes)
        wanted = spark_schema(changes.select(columns).schema)
        have = {f.name: f for f in self.spark.table(ref).schema.fields}
        new = [f for f in wanted.fields if f.name not in have]
        if new:
            added = ", ".join(f"{quote_name(f.name)} {f.dataType.simpleString()}" for f in new)
            self.spark.sql(f"ALTER TABLE {ref} ADD COLUMNS ({added})")
        for f in wanted.fields:
            if f.name not in have:
                continue
            want = f.dataType.simpleString()
            got = have[f.name].dataType.simpleString()
            if _WIDENED.get(want, want) == got:
                continue
            try:
                self.spark.sql(f"ALTER TABLE {ref} ALTER COLUMN {quote_name(f.name)} TYPE {want}")
            except Exception as e:
                raise IcebergError(
                    f"{name}: column {f.name!r} changed type from {got} to {want}, which "
                    "Iceberg cannot widen in place; re-snapshot the table (pgwire-cdc "
                    "resnapshot, or drop the slot and the table)"
                ) from e
            log.info("%s: column %s widened to %s", name, f.name, want)
        missing = [c for c in have if c not in columns]
        if missing and not keyed:
            # Rows of a table without a key are matched whole: a column no change carries
            # cannot take part, so it goes (as Delta's sink rewrites it away).
            for c in missing:
                self.spark.sql(f"ALTER TABLE {ref} DROP COLUMN {quote_name(c)}")
            log.info("%s: columns %s dropped (no longer published)", name, ", ".join(missing))
        elif missing:
            # A keyed table keeps them. The changes carry them null and marked unchanged,
            # as an unchanged TOAST value: updated rows keep the table's value, new rows
            # have null, and a row moved to a new key takes the old key's row's value
            # (left out of the MERGE instead, a moved row was inserted with them null).
            from pyspark.sql.pandas.types import to_arrow_type

            for c in missing:
                type_ = to_arrow_type(have[c].dataType)
                changes = changes.append_column(
                    pa.field(c, type_), pa.nulls(changes.num_rows, type_)
                )
            changes = mark_unchanged(changes, missing)
            changes = changes.select([*data_columns(changes), *METADATA_COLUMNS])
        return changes
