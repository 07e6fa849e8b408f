"""The Delta tables of one stream: :class:`DeltaSink`, a :class:`pgwire_cdc.pipeline.Sink`.

Applying a batch, schema evolution and exactly-once commits as :mod:`pgwire_cdc.delta`
describes them; :func:`fill_moved` fills the unchanged columns of rows that moved to a
new key from the table row under their old key.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc

from .. import _native
from ..errors import ConfigError, DeltaError
from ..lakehouse.positions import APP_ID, NO_PROGRESS, PROGRESS_APP_ID, Commit, cut, unapplied
from ..lakehouse.shape import data_columns, lake_shape, plain_schema
from ..lakehouse.sql import default_table_name, quote_name, source_columns, sql_string
from ..lakehouse.stats import ApplyStats
from ..tables import METADATA_COLUMNS, key_columns, mark_unchanged, table_of
from .catalog import CatalogNames, is_table_name
from .table import (
    Position,
    StorageOptions,
    base_path,
    open_table,
    position,
    read_table,
    table_path,
)
from .writers import SparkWriter, Writer, writer_for

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..streaming import Batch, StreamOptions

log = logging.getLogger("pgwire_cdc")

DELTA_RS_IN_CATALOG = (
    "tables in a Spark catalog need writer='spark': the delta-rs writer keeps path tables "
    "only (it cannot register a table in a Spark catalog); give a path instead of schema="
)


class DeltaSink:
    """The Delta tables of one stream under ``path``, kept by one writer.

    ``storage_options``: delta-rs's options for a ``path`` on an object store (see
    :mod:`~pgwire_cdc.delta.stores`; None: from the environment). With the Spark writer
    they are also set on the Spark session as S3A settings of the path's bucket.

    Catalog mode (``schema`` given, Spark writer only): the tables are ``catalog.schema.<
    table_name(source)>`` in the session's catalog (``catalog`` None: its current one),
    managed by the catalog, or external tables under ``path`` when it is given too (see
    :mod:`~pgwire_cdc.delta.catalog`)."""

    #: Catalog mode: how source tables are named in the catalog (None: path tables).
    names: CatalogNames | None

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
        deletion_vectors: bool = False,
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
        self._on_step = on_step or (lambda _step: None)
        # Tables the initial snapshot in progress has written (their first part replaced
        # the table; later parts append).
        self._snapshot_written: set[str] = set()
        # Tables whose initial snapshot Spark tasks wrote before the snapshot's batch.
        self._prewritten: set[str] = set()
        #: Tables an initial snapshot reported complete that have no Delta table yet
        #: (the source table was empty): :func:`run` creates them from the catalog.
        self.missing: list[str] = []
        # Per table path: the recorded position (commit LSN of the last transaction
        # applied in full), read from the table's log once, then kept as committed.
        self._positions: dict[str, int | None] = {}
        # Per table: the incremental-snapshot progress of a copy still in progress.
        # Every commit of such a table records it (see position()).
        self._progress: dict[str, Any] = {}

    def table_path(self, name: str) -> str:
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

    def _where(self, path: str) -> str | None:
        """Where the table ``path`` (a reference) keeps its files, for delta-rs to read:
        a path itself, a catalog table's location (None while the table does not
        exist)."""
        if not is_table_name(path):
            return path
        if not isinstance(self.writer, SparkWriter):
            raise ConfigError(DELTA_RS_IN_CATALOG)
        return self.writer.location(path)

    def _open(self, path: str) -> Any:
        where = self._where(path)
        return None if where is None else open_table(where, self.storage_options)

    def _position(self, path: str) -> Position | None:
        where = self._where(path)
        return None if where is None else position(where, self.storage_options)

    def _read(self, path: str, where: str | None = None) -> pa.Table:
        return read_table(self._where(path) or path, where, self.storage_options)

    def held_tables(
        self, published: Iterable[str] | None = None, slot_exists: bool = False
    ) -> dict[str, Any]:
        """``stream(held_tables=...)``: of the tables ``published`` and those with a Delta
        table in a local ``path`` (default: only the latter), the ones with a Delta table,
        None when complete, or the key their incremental snapshot reached. With
        ``slot_exists`` (the stream resumes a slot), :class:`DeltaError` when there is no
        table at all: the changes would land on top of nothing, the rows from before the
        slot was made missing."""
        names = sorted(set(published or ()) | set(self.local_tables()))
        held: dict[str, Any] = {}
        for name in names:
            pos = self._position(self.table_path(name))
            if pos is None:
                continue
            held[name] = None if pos.progress is NO_PROGRESS else pos.progress
            # Kept, and recorded again with the table's next commit (see position()).
            self._progress[name] = held[name]
        if slot_exists and not held:
            where = f"in {self.names.schema_ref()}" if self.names else f"under {self.path}"
            raise DeltaError(
                f"the replication slot exists but there is no Delta table {where},"
                " so the rows from before the slot was created would be missing; drop the"
                " slot (pg_drop_replication_slot) to start with a new snapshot, or point the"
                " sink at the directory that used it"
            )
        return held

    def snapshot_reader(
        self, dsn: str, options: StreamOptions
    ) -> Callable[[str, int, list[str]], None] | None:
        """``stream(snapshot_reader=...)``: with the Spark writer, a new slot's initial
        snapshot read by Spark tasks under the slot's exported snapshot
        (``format("pgwire_cdc")``, CTID ranges) and written to the Delta tables, with the
        consistent point as each table's position. Rows go from the tasks to Delta files,
        never through the driver. None with the delta-rs writer."""
        writer = self.writer
        if not isinstance(writer, SparkWriter) or not options.snapshot:
            return None
        publications = options.publications
        publication = publications[0] if len(publications) == 1 else None
        return lambda snapshot, point, names: self._read_with_spark(
            writer, dsn, publication, snapshot, point, names
        )

    def _read_with_spark(
        self,
        writer: SparkWriter,
        dsn: str,
        publication: str | None,
        snapshot: str,
        consistent_point: int,
        names: list[str],
    ) -> None:
        from ..connection import connect as _connect
        from ..spark import snapshot as spark_snapshot
        from ..spark.sessions import default_parallelism, missing_package_error

        spark = writer.spark
        partitions = default_parallelism(spark)
        for name in names:
            path = self.table_path(name)
            current = self._position(path)
            if current is not None and current.lsn is not None and current.lsn > consistent_point:
                raise DeltaError(
                    f"{name}: the Delta table at {path} holds changes up to a later LSN than "
                    "this stream's initial snapshot (was it written from another server or "
                    "slot?); remove it or point the sink elsewhere"
                )
            with _connect(dsn) as conn:
                info = spark_snapshot.describe(conn, name, publication)
            schema = lake_shape(spark_snapshot.data_schema(info).empty_table()).schema
            if self._open(path) is None:
                writer.create(path, schema)
            reader = (
                spark.read.format("pgwire_cdc")
                .option("dsn", dsn)
                .option("table", name)
                .option("snapshot", snapshot)
                .option("partitions", str(partitions))
            )
            if publication is not None:
                reader = reader.option("publication", publication)
            newer = current is None or current.lsn is None or consistent_point > current.lsn
            commit = Commit(APP_ID, consistent_point, None) if newer else None
            try:
                writer.save(reader.load(), path, "overwrite", commit)
            except Exception as e:
                clear = missing_package_error(e)
                if clear is None:
                    raise
                raise clear from e
            self._prewritten.add(name)
            log.info("%s: initial snapshot written by Spark", name)

    def missing_tables(self) -> list[str]:
        """Tables a snapshot reported complete that have no Delta table yet (the source
        table had no rows): :meth:`create_tables` makes them."""
        return list(self.missing)

    def create_tables(self, schemas: Mapping[str, pa.Schema]) -> None:
        """Creates the Delta tables of ``schemas`` (change-table schemas, by source table)
        that do not exist yet, with the change tables' data columns."""
        for name, schema in schemas.items():
            path = self.table_path(name)
            if self._open(path) is None:
                data = pa.schema([f for f in schema if f.name not in METADATA_COLUMNS])
                self.writer.create(path, lake_shape(data.empty_table()).schema)
        self.missing = [name for name in self.missing if name not in schemas]

    def local_tables(self) -> list[str]:
        """The source tables with a Delta table in a local ``path`` (none in catalog
        mode)."""
        if self.names is not None or self.path is None or not os.path.isdir(self.path):
            return []
        return sorted(
            unquote(entry.name)
            for entry in os.scandir(self.path)
            if os.path.isdir(os.path.join(entry.path, "_delta_log"))
        )

    # -- applying ------------------------------------------------------------------

    def apply(self, batch: Batch) -> ApplyStats:
        """Commits one batch to the Delta tables it touches. Ack it only after this
        returns."""
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
            for i, (_, changes) in enumerate(sorted(parts, key=lambda p: p[0])):
                last = i == len(parts) - 1
                if batch.snapshot:
                    self._snapshot_part(name, changes, stats)
                else:
                    self._changes(
                        name, changes, batch.lsn, progress if last else NO_PROGRESS, stats
                    )
        for name in batch.snapshot_progress:
            if name in groups:
                continue
            path = self.table_path(name)
            if batch.snapshot:
                if name not in self._snapshot_written:
                    self._empty_for_snapshot(name)
            elif self._open(path) is None:
                self.missing.append(name)
            else:
                progress = batch.snapshot_progress[name]
                if self._progress.get(name, NO_PROGRESS) != progress:
                    self._record_progress(name, path, progress, batch.lsn, stats)
        return stats

    def _record_progress(
        self, name: str, path: str, progress: Any, lsn: int, stats: ApplyStats
    ) -> None:
        """Records a copy's progress that came without rows of the table to commit (its
        last chunk was empty, or the copy completed after it) in a commit of its own,
        unless the table already holds commits of a later batch (this one is delivered
        again)."""
        table = self._open(path)
        if table is None:
            self.missing.append(name)
            return
        done = (table.transaction_version(PROGRESS_APP_ID), table.transaction_version(APP_ID))
        if any(v is not None and v >= lsn for v in done):
            return
        rows = self._read(path, "false")
        self.writer.write(path, rows, "append", Commit(PROGRESS_APP_ID, lsn, progress))
        self._progress[name] = progress
        stats.commits += 1
        self._on_step("committed")

    def _snapshot_part(self, name: str, changes: pa.Table, stats: ApplyStats) -> None:
        path = self.table_path(name)
        lsn = int(changes["_commit_lsn"][0].as_py()) if changes.num_rows else None
        rows = lake_shape(changes).select(data_columns(changes))
        stats.inserted += rows.num_rows
        if name in self._snapshot_written:
            self.writer.write(path, rows, "append", None)
        else:
            current = self._position(path)
            if current is not None and current.lsn is not None and lsn is not None:
                if current.lsn > lsn:
                    raise DeltaError(
                        f"{name}: the Delta table at {path} holds changes up to a later LSN "
                        "than this stream's initial snapshot (was it written from another "
                        "server or slot?); remove it or point the sink elsewhere"
                    )
            commit = None
            if lsn is not None and (current is None or current.lsn is None or lsn > current.lsn):
                commit = Commit(APP_ID, lsn, None)
            self.writer.write(path, rows, "overwrite", commit)
            self._snapshot_written.add(name)
            self._positions.pop(path, None)
            self._progress[name] = None
        stats.commits += 1
        self._on_step("committed")

    def _empty_for_snapshot(self, name: str) -> None:
        path = self.table_path(name)
        table = self._open(path)
        self._snapshot_written.add(name)
        if table is None:
            self.missing.append(name)
            return
        rows = self._read(path, "false")
        self.writer.write(path, rows, "overwrite", None)
        self._positions.pop(path, None)
        self._progress[name] = None

    def apply_table(self, path: str | os.PathLike[str], changes: pa.Table, lsn: int) -> ApplyStats:
        """Commits one change table to the Delta table ``path`` (any table path, made
        absolute, or a catalog table's reference: :func:`~pgwire_cdc.delta.catalog.table_ref`),
        skipping the rows at or below the table's recorded position; ``lsn``: everything
        committed before it is in ``changes`` or earlier (a batch's LSN)."""
        given = os.fspath(path)
        target = given if is_table_name(given) else base_path(given)
        name = target if is_table_name(target) else os.path.basename(target)
        stats = ApplyStats(batches=1)
        self._changes(name, changes, lsn, NO_PROGRESS, stats, path=target)
        return stats

    def _changes(
        self,
        name: str,
        changes: pa.Table,
        lsn: int,
        progress: Any,
        stats: ApplyStats,
        path: str | None = None,
    ) -> None:
        path = path or self.table_path(name)
        given, known = progress, self._progress.get(name, NO_PROGRESS)
        if progress is NO_PROGRESS:
            progress = known
        else:
            self._progress[name] = progress
        table = None
        if path not in self._positions:
            table = self._open(path)
            self._positions[path] = table.transaction_version(APP_ID) if table else None
        current = self._positions[path]
        if changes.num_rows:
            opened = table or self._open(path)
            kept = unapplied(
                changes,
                current,
                lambda app_id: opened.transaction_version(app_id) if opened else None,
            )
            stats.skipped += changes.num_rows - kept.num_rows
            changes = kept
            table = opened
        if changes.num_rows == 0:
            if progress is not NO_PROGRESS and self._open(path) is None:
                self.missing.append(name)
            elif given is not NO_PROGRESS and given != known:
                self._record_progress(name, path, given, lsn, stats)
            return
        for i, (part, commit_info) in enumerate(cut(changes, lsn, progress)):
            # The table as just read serves the first commit (one log read per batch); a
            # second one (a batch cut inside a transaction) reads what the first left.
            self._commit(name, path, part, commit_info, stats, table if i == 0 else None)
            if commit_info.app_id == APP_ID:
                self._positions[path] = commit_info.version

    def _commit(
        self,
        name: str,
        path: str,
        changes: pa.Table,
        commit: Commit,
        stats: ApplyStats,
        table: Any = None,
    ) -> None:
        """Commits ``changes`` to the table ``path``; ``table``: that table as just read
        (None: read it here)."""
        changes = lake_shape(changes)
        columns = data_columns(changes)
        keys = key_columns(changes)
        if table is None:
            table = self._open(path)
        if table is None:
            self.writer.create(path, changes.select(columns).schema)
            table = self._open(path)
        changes = self._fit(name, path, table, changes, keyed=keys is not None)
        columns = data_columns(changes)
        if keys is None:
            base = self._read(path).select(columns)
            base = base.cast(pa.schema([changes.schema.field(c) for c in columns]))
            stream, counts = _native.apply_changes(base, changes, None)
            self.writer.write(path, table_of(stream), "overwrite", commit)
            stats.add({k: v for k, v in counts.items() if k in vars(stats)})
        else:
            stream, counts = _native.reduce_changes(changes, columns, keys)
            reduced = table_of(stream)
            in_place = getattr(self.writer, "merge_in_place", None)
            # A truncate deletes the rows the batch does not name: a copy-on-write MERGE.
            if in_place is None or counts["truncated"] or not in_place(path, reduced, keys, commit):
                source = fill_moved(self._where(path) or path, reduced, keys, self.storage_options)
                self.writer.merge(path, source, keys, counts["truncated"] > 0, commit)
            stats.add({k: v for k, v in counts.items() if k in vars(stats)})
        stats.commits += 1
        self._on_step("committed")

    def _fit(self, name: str, path: str, table: Any, changes: pa.Table, *, keyed: bool) -> pa.Table:
        """Evolves the Delta table to the change table's columns and the change table to
        the Delta table's (see *Schema changes*)."""
        from deltalake import Schema

        current = pa.schema(table.schema().to_arrow())
        columns = data_columns(changes)
        wanted = Schema.from_arrow(changes.select(columns).schema)
        have = {f.name: f for f in table.schema().fields}
        new = [changes.schema.field(f.name) for f in wanted.fields if f.name not in have]
        changed = [
            f.name
            for f in wanted.fields
            if f.name in have and str(have[f.name].type) != str(f.type)
        ]
        if changed or (not keyed and any(n not in columns for n in have)):
            self._rewrite(name, path, changes, changed, keep=keyed)
            current = pa.schema(self._open(path).schema().to_arrow())
        elif new:
            self.writer.add_columns(path, new)
            current = pa.schema(self._open(path).schema().to_arrow())
        missing = [f for f in plain_schema(current) if f.name not in columns]
        if missing and keyed:
            for f in missing:
                changes = changes.append_column(f, pa.nulls(changes.num_rows, f.type))
            changes = mark_unchanged(changes, [f.name for f in missing])
            changes = changes.select([*data_columns(changes), *METADATA_COLUMNS])
        return changes

    def _rewrite(
        self, name: str, path: str, changes: pa.Table, changed: list[str], *, keep: bool
    ) -> None:
        """Rewrites the table in the change table's column types (and, for a keyless
        table, its columns: rows matched whole cannot match on a column not carried)."""
        rows = self._read(path)
        columns = data_columns(changes)
        arrays = []
        fields = []
        for f in changes.select(columns).schema:
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
                if f.name not in columns:
                    arrays.append(rows[f.name])
                    fields.append(f)
        self.writer.write(
            path, pa.Table.from_arrays(arrays, schema=pa.schema(fields)), "overwrite", None
        )
        log.info("%s: Delta table rewritten for a schema change (%s)", name, ", ".join(changed))


def fill_moved(
    path: str, source: pa.Table, keys: list[str], storage_options: StorageOptions = None
) -> pa.Table:
    """Fills the unchanged columns of rows that moved to a new key in the batch from the
    table row under their old key (``_from``), with one filtered read and a join."""
    moved = source["_from"].is_valid()
    if not pc.any(moved).as_py():
        return source.drop_columns(["_from"])
    rows = source.filter(moved)
    old = pa.Table.from_struct_array(rows["_from"].combine_chunks())
    # Keys of integer and string types (nearly all) narrow the read; others read all.
    simple = all(
        pa.types.is_integer(old.schema.field(k).type)
        or pa.types.is_string(old.schema.field(k).type)
        for k in keys
    )
    where = None
    if simple:
        where = " AND ".join(
            f"{quote_name(k)} IN ({', '.join(_literal(v) for v in pc.unique(old[k]).to_pylist())})"
            for k in keys
        )
    columns = source_columns(source)
    found = read_table(path, where, storage_options).select(columns)
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


def _literal(value: int | str | None) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(value)
    return sql_string(value)
