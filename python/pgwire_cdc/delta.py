"""Delta Lake tables kept equal to the source tables by MERGE, exactly once.

One Delta table per published table, at :func:`table_path`, holding the source's published
columns under their own names, typed as :func:`pgwire_cdc.spark.spark_type` types them
(``time`` as a ``HH:MM:SS.ffffff`` string: Delta has no time type). The sink adds no
column of its own.

Two writers, one semantics:

* ``"delta-rs"`` (default): the ``deltalake`` package, no JVM. Its MERGE rewrites every
  data file holding a changed row (copy-on-write).
* ``"spark"``: ``MERGE INTO`` run by Spark with Delta Lake's own jars
  (:func:`pgwire_cdc.spark.session` with ``delta=True``). Tables it creates have deletion
  vectors on, so a MERGE marks changed rows instead of rewriting their files.

Applying one batch, per table
-----------------------------
The change table is cut where the table's Delta commits go (see *Exactly once*), and each
part is reduced in Rust (``_native.reduce_changes``) to **one final change per key**: a
key's changes fold in commit order, a key change is a delete of the old key plus an
upsert of the new one, and an unchanged-TOAST column (``_unchanged``) takes the value an
earlier change of the batch gave it, else stays marked for the MERGE to keep the table's
value (when the row moved to a new key, that value is read from the table row under the
old key first). Then one MERGE per part::

    MERGE INTO t USING s ON <key columns equal>
      WHEN MATCHED AND s._delete THEN DELETE
      WHEN MATCHED THEN UPDATE SET c = CASE WHEN array_contains(s._unchanged, 'c')
                                            THEN t.c ELSE s.c END, ...
      WHEN NOT MATCHED AND NOT s._delete THEN INSERT ...
      [WHEN NOT MATCHED BY SOURCE THEN DELETE]      -- when a truncate came

A truncate empties the table at its point in the batch: the changes after it are the
whole table. A table without a replica-identity key (REPLICA IDENTITY FULL) is a
*multiset* of whole rows, where an update or a delete removes one equal row; no MERGE can
do that, so such a table is read, changed (``_native.apply_changes``) and overwritten in
one commit: its cost grows with the table. The initial snapshot (``read`` rows) replaces
each table: its first part overwrites the table, later parts append.

Schema changes: a column the changes carry that the table lacks (ADD COLUMN) is added to
the table, null in the rows it holds (PostgreSQL may have filled them with a default: the
sink cannot know). A column the table has that the changes do not carry (DROP COLUMN, or
a publication column list that no longer names it) stays: the rows those changes update
keep their value, rows they insert have it null. A column whose type changed is cast in a
rewrite of the table when Arrow can cast every value; otherwise :class:`DeltaError` says
to re-snapshot the table.

Exactly once
------------
Every commit records where the stream stands in the table's own log, in the same commit,
as Delta transaction identifiers (``txn`` actions, which Spark's MERGE checks itself):

* ``pgwire_cdc`` → the commit LSN of the last transaction applied in full;
* ``pgwire_cdc@<commit LSN>`` → the last ``_tx_ordinal`` applied of a transaction that a
  batch cut in two (a batch ends inside a transaction when it holds more rows than
  ``max_batch_rows``): its rows are committed in a commit of their own.

A batch delivered again after a crash (the slot is acked only after every table's commits)
is filtered against these: rows at or below the table's position are skipped, so nothing
is applied twice, whichever table's commit the crash came between. Incremental-snapshot
progress (``Batch.snapshot_progress``) travels in the same commit, in the commit's
``userMetadata`` (progress that comes without rows of the table gets a commit of its own,
under ``pgwire_cdc.progress``), so a restart resumes a table's copy where its rows end;
:func:`position` finds it however many commits of other writers came after.
:mod:`pgwire_cdc.delta_position` holds these rules as pure functions.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc

from . import _native
from .delta_position import (
    APP_ID,
    NO_PROGRESS,
    PROGRESS_APP_ID,
    Commit,
    cut,
    progress_of,
    unapplied,
)
from .errors import ConfigError, DeltaError
from .spark import for_spark, spark_schema
from .tables import METADATA_COLUMNS, mark_unchanged, table_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from .streaming import Batch, StreamOptions

log = logging.getLogger("pgwire_cdc")

__all__ = [
    "APP_ID",
    "WRITERS",
    "ApplyStats",
    "DeltaRsWriter",
    "DeltaSink",
    "Position",
    "SparkWriter",
    "apply",
    "key_columns",
    "merge_changes",
    "position",
    "read_table",
    "run",
    "table_path",
]

WRITERS = ("delta-rs", "spark")
_NO_PROGRESS = NO_PROGRESS
_Commit = Commit


@dataclass
class ApplyStats:
    """What applying batches did, summed over tables."""

    batches: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    truncated: int = 0
    #: Rows at or below a table's position, delivered again after a restart and skipped.
    skipped: int = 0
    #: Delta commits written.
    commits: int = 0

    def add(self, other: dict[str, int] | ApplyStats) -> None:
        items = other.items() if isinstance(other, dict) else vars(other).items()
        for name, value in items:
            if name in vars(self):
                setattr(self, name, getattr(self, name) + int(value))

    @property
    def changes(self) -> int:
        return self.inserted + self.updated + self.deleted + self.truncated


def table_path(path: str | os.PathLike[str], name: str) -> str:
    """The Delta table of the source table ``name`` ("schema.table") under ``path`` (a
    directory, made absolute, or an object-store URI)."""
    return f"{_base(path)}/{quote(name, safe='._-')}"


def _base(path: str | os.PathLike[str]) -> str:
    # Spark takes `delta.`<path>`` for a table only when the path is absolute.
    base = os.fspath(path)
    if "://" not in base:
        base = os.path.abspath(base)
    return base.rstrip("/") or "/"


def key_columns(table: pa.Table | pa.Schema) -> list[str] | None:
    """The columns a change table's rows are matched on: the replica-identity key, or
    None (whole rows, a multiset) for REPLICA IDENTITY FULL and tables without a key."""
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


def data_columns(table: pa.Table) -> list[str]:
    return [c for c in table.column_names if c not in METADATA_COLUMNS]


# -- reading what a table holds (both writers: the deltalake package reads every table,
#    deletion vectors included) ------------------------------------------------------


def _open(path: str) -> Any:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(path)
    except TableNotFoundError:
        return None


def read_table(path: str, where: str | None = None) -> pa.Table:
    """The rows of the Delta table at ``path`` (``where``: an SQL filter)."""
    from deltalake import QueryBuilder

    table = _open(path)
    if table is None:
        raise DeltaError(f"no Delta table at {path}")
    query = "SELECT * FROM t" + (f" WHERE {where}" if where else "")
    rows = table_of(QueryBuilder().register("t", table).execute(query))
    # DataFusion reads strings as views; the sink works in the plain types.
    return rows.cast(_plain_schema(rows.schema))


def _plain_type(t: pa.DataType) -> pa.DataType:
    """``t`` as the sink stores it: plain (not view or large) strings and binaries, every
    nested field nullable (a NOT NULL field is an ``invariants`` table feature to Delta
    Spark, which delta-rs does not write: delta-io/delta-rs#2882)."""
    if t == pa.string_view() or pa.types.is_large_string(t):
        return pa.string()
    if t == pa.binary_view() or pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_dictionary(t):
        return _plain_type(t.value_type)
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain_type(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return pa.list_(pa.field(t.value_field.name, _plain_type(t.value_type)))
    return t


def _plain_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema(
        [pa.field(f.name, _plain_type(f.type), True, f.metadata) for f in schema],
        metadata=schema.metadata,
    )


@dataclass
class Position:
    """Where a table stands in the stream (see *Exactly once*)."""

    #: Commit LSN of the last transaction applied in full (None: nothing yet).
    lsn: int | None
    #: Incremental-snapshot progress recorded with the table's last commit (a key list,
    #: or None once complete), or absent.
    progress: Any = _NO_PROGRESS


def position(path: str) -> Position | None:
    """The stream position recorded in the Delta table at ``path``, None without table."""
    table = _open(path)
    if table is None:
        return None
    return Position(table.transaction_version(APP_ID), _recorded_progress(table))


#: Commits read by the first look for a table's progress; each further look reads four
#: times as many.
_HISTORY_PAGE = 32


def _recorded_progress(table: Any) -> Any:
    """The progress recorded by the newest commit that records one, however many commits
    of other writers (OPTIMIZE, VACUUM, a user's own writes) came after it. The sink's
    commits record it whenever the sink knows it, so the look usually ends at the sink's
    last commit."""
    limit = _HISTORY_PAGE
    while True:
        commits = table.history(limit)
        for commit in commits:  # newest first
            progress = progress_of(commit.get("userMetadata"))
            if progress is not NO_PROGRESS:
                return progress
        if len(commits) < limit:
            return NO_PROGRESS
        limit *= 4


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _sql_string(value: str, spark: bool = False) -> str:
    """A string literal: Spark SQL escapes with backslashes, DataFusion (delta-rs) doubles
    the quote as standard SQL does."""
    if spark:
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return "'" + value.replace("'", "''") + "'"


def merge_clauses(
    columns: list[str], keys: list[str], unchanged: set[str], spark: bool = False
) -> dict[str, Any]:
    """The SQL of one MERGE (both writers speak it; ``spark``: Spark SQL's string
    escapes): the ON condition, the UPDATE assignments and the INSERT values, by target
    column. Only the ``unchanged`` columns (named in some row's ``_unchanged``) need the
    CASE that keeps the table's value; the others are plain assignments, which spares the
    MERGE reading them from the target."""

    def assign(c: str) -> str:
        if c not in unchanged:
            return f"s.{_quote(c)}"
        return (
            f"CASE WHEN array_contains(s._unchanged, {_sql_string(c, spark)}) "
            f"THEN t.{_quote(c)} ELSE s.{_quote(c)} END"
        )

    on = " AND ".join(f"t.{_quote(k)} = s.{_quote(k)}" for k in keys)
    update = {_quote(c): assign(c) for c in columns}
    insert = {_quote(c): f"s.{_quote(c)}" for c in columns}
    return {"on": on, "update": update, "insert": insert}


def _unchanged_names(source: pa.Table) -> set[str]:
    names = pc.unique(pc.list_flatten(source["_unchanged"])).to_pylist()
    return {n for n in names if n is not None}


class _Writer:
    """One way of writing Delta commits. Every method commits at most once."""

    name = ""

    def create(self, path: str, schema: pa.Schema) -> None:
        raise NotImplementedError

    def add_columns(self, path: str, fields: list[pa.Field]) -> None:
        raise NotImplementedError

    def merge(
        self, path: str, source: pa.Table, keys: list[str], truncate: bool, commit: _Commit
    ) -> None:
        raise NotImplementedError

    def write(self, path: str, table: pa.Table, mode: str, commit: _Commit | None) -> None:
        raise NotImplementedError


class DeltaRsWriter(_Writer):
    """Commits through the ``deltalake`` package (delta-rs)."""

    name = "delta-rs"

    def __init__(self) -> None:
        try:
            import deltalake  # noqa: F401
        except ImportError as e:
            raise ConfigError(
                "the delta-rs writer needs the deltalake package: pip install 'deltalake>=1.6'"
            ) from e

    @staticmethod
    def _properties(commit: _Commit | None) -> Any:
        from deltalake.transaction import CommitProperties, Transaction

        if commit is None:
            return None
        meta = commit.metadata()
        return CommitProperties(
            app_transactions=[Transaction(commit.app_id, commit.version)],
            custom_metadata={"userMetadata": meta} if meta else None,
        )

    def create(self, path: str, schema: pa.Schema) -> None:
        from deltalake import write_deltalake

        write_deltalake(path, schema.empty_table(), mode="append")

    def add_columns(self, path: str, fields: list[pa.Field]) -> None:
        from deltalake import DeltaTable, Schema

        delta_fields = Schema.from_arrow(pa.schema(fields)).fields
        DeltaTable(path).alter.add_columns(delta_fields)

    def merge(
        self, path: str, source: pa.Table, keys: list[str], truncate: bool, commit: _Commit
    ) -> None:
        from deltalake import DeltaTable

        clauses = merge_clauses(_data(source), keys, _unchanged_names(source))
        merger = DeltaTable(path).merge(
            source,
            predicate=clauses["on"],
            source_alias="s",
            target_alias="t",
            commit_properties=self._properties(commit),
            # Source statistics prune the files the MERGE reads (keys that cluster touch
            # few files).
            streamed_exec=False,
        )
        merger = (
            merger.when_matched_delete(predicate="s._delete")
            .when_matched_update(updates=clauses["update"], predicate="NOT s._delete")
            .when_not_matched_insert(updates=clauses["insert"], predicate="NOT s._delete")
        )
        if truncate:
            merger = merger.when_not_matched_by_source_delete()
        merger.execute()

    def write(self, path: str, table: pa.Table, mode: str, commit: _Commit | None) -> None:
        from deltalake import write_deltalake

        properties = self._properties(commit)
        if mode == "overwrite":
            write_deltalake(
                path, table, mode="overwrite", schema_mode="overwrite", commit_properties=properties
            )
        else:
            write_deltalake(path, table, mode="append", commit_properties=properties)


class SparkWriter(_Writer):
    """Commits through Spark's ``MERGE INTO`` and DataFrame writer (delta-spark)."""

    name = "spark"

    def __init__(self, spark: SparkSession | None) -> None:
        if spark is None:
            raise ConfigError(
                "writer='spark' needs a SparkSession with Delta Lake: pass "
                "spark=pgwire_cdc.spark.session(delta=True), or your own session with the "
                "delta-spark jars and DeltaSparkSessionExtension"
            )
        self.spark = spark
        self._view = 0

    def _frame(self, table: pa.Table) -> DataFrame:
        return self.spark.createDataFrame(table, schema=spark_schema(table.schema))

    def create(self, path: str, schema: pa.Schema) -> None:
        writer = (
            self._frame(schema.empty_table())
            .write.format("delta")
            .mode("append")
            .option("delta.enableDeletionVectors", "true")
        )
        if any(set(name) & set(" ,;{}()\n\t=") for name in schema.names):
            # Delta Spark takes such column names only with column mapping.
            writer = writer.option("delta.columnMapping.mode", "name")
        writer.save(path)

    def add_columns(self, path: str, fields: list[pa.Field]) -> None:
        columns = ", ".join(
            f"{_quote(f.name)} {spark_schema(pa.schema([f]))[0].dataType.simpleString()}"
            for f in fields
        )
        self.spark.sql(f"ALTER TABLE delta.{_quote(path)} ADD COLUMNS ({columns})")

    def _confs(self, commit: _Commit | None) -> dict[str, str | None]:
        if commit is None:
            return {}
        return {
            "spark.databricks.delta.write.txnAppId": commit.app_id,
            "spark.databricks.delta.write.txnVersion": str(commit.version),
            "spark.databricks.delta.commitInfo.userMetadata": commit.metadata(),
        }

    def _with_confs(self, confs: dict[str, str | None], run: Callable[[], object]) -> None:
        conf = self.spark.conf
        try:
            for key, value in confs.items():
                if value is None:
                    conf.unset(key)
                else:
                    conf.set(key, value)
            run()
        finally:
            for key in confs:
                conf.unset(key)

    def merge(
        self, path: str, source: pa.Table, keys: list[str], truncate: bool, commit: _Commit
    ) -> None:
        columns = _data(source)
        clauses = merge_clauses(columns, keys, _unchanged_names(source), spark=True)
        self._view += 1
        view = f"pgwire_cdc_merge_source_{self._view}"
        self._frame(source).createOrReplaceTempView(view)
        update = ", ".join(f"t.{c} = {e}" for c, e in clauses["update"].items())
        names = ", ".join(clauses["insert"])
        values = ", ".join(clauses["insert"].values())
        sql = (
            f"MERGE INTO delta.{_quote(path)} t USING {view} s ON {clauses['on']} "
            "WHEN MATCHED AND s._delete THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {update} "
            f"WHEN NOT MATCHED AND NOT s._delete THEN INSERT ({names}) VALUES ({values})"
        )
        if truncate:
            sql += " WHEN NOT MATCHED BY SOURCE THEN DELETE"
        try:
            self._with_confs(self._confs(commit), lambda: self.spark.sql(sql).collect())
        finally:
            self.spark.catalog.dropTempView(view)

    def write(self, path: str, table: pa.Table, mode: str, commit: _Commit | None) -> None:
        if _open(path) is None:
            self.create(path, table.schema)
        self.save(self._frame(table), path, mode, commit)

    def save(self, frame: DataFrame, path: str, mode: str, commit: _Commit | None) -> None:
        """Writes a DataFrame to the (existing) table at ``path`` in one commit."""
        writer = frame.write.format("delta").mode(mode)
        if mode == "overwrite":
            writer = writer.option("overwriteSchema", "true")
        if commit is not None:
            writer = writer.option("txnAppId", commit.app_id).option(
                "txnVersion", str(commit.version)
            )
            meta = commit.metadata()
            if meta:
                writer = writer.option("userMetadata", meta)
        writer.save(path)


def _data(source: pa.Table) -> list[str]:
    """The table columns of a MERGE source (everything before ``_delete``)."""
    names = source.column_names
    return list(names[: names.index("_delete")] if "_delete" in names else names)


def writer_for(writer: str | _Writer, spark: SparkSession | None = None) -> _Writer:
    if isinstance(writer, _Writer):
        return writer
    if writer == "delta-rs":
        return DeltaRsWriter()
    if writer == "spark":
        return SparkWriter(spark)
    raise ConfigError(f"unknown Delta writer {writer!r}: use one of {', '.join(WRITERS)}")


def _delta_shape(changes: pa.Table) -> pa.Table:
    """The change table in the types the Delta table holds: time as strings (see
    :mod:`pgwire_cdc.spark`), dictionaries decoded, nested fields nullable. The metadata
    columns stay as they are."""
    changes = for_spark(changes)
    fields = [
        f if f.name in METADATA_COLUMNS else pa.field(f.name, _plain_type(f.type), True, f.metadata)
        for f in changes.schema
    ]
    schema = pa.schema(fields, metadata=changes.schema.metadata)
    return changes if schema.equals(changes.schema) else changes.cast(schema)


class DeltaSink:
    """The Delta tables of one stream under ``path``, kept by one writer."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        writer: str | _Writer = "delta-rs",
        spark: SparkSession | None = None,
        on_step: Callable[[str], None] | None = None,
    ) -> None:
        self.path = _base(path)
        self.writer = writer_for(writer, spark)
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
        return table_path(self.path, name)

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
            pos = position(self.table_path(name))
            if pos is None:
                continue
            held[name] = None if pos.progress is _NO_PROGRESS else pos.progress
            # Kept, and recorded again with the table's next commit (see position()).
            self._progress[name] = held[name]
        if slot_exists and not held:
            raise DeltaError(
                f"the replication slot exists but there is no Delta table under {self.path},"
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
        from . import spark_snapshot
        from .connection import connect as _connect

        spark = writer.spark
        partitions = max(1, int(spark.sparkContext.defaultParallelism))
        for name in names:
            path = self.table_path(name)
            current = position(path)
            if current is not None and current.lsn is not None and current.lsn > consistent_point:
                raise DeltaError(
                    f"{name}: the Delta table at {path} holds changes up to a later LSN than "
                    "this stream's initial snapshot (was it written from another server or "
                    "slot?); remove it or point the sink elsewhere"
                )
            with _connect(dsn) as conn:
                info = spark_snapshot.describe(conn, name, publication)
            schema = _delta_shape(spark_snapshot.data_schema(info).empty_table()).schema
            if _open(path) is None:
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
            commit = _Commit(APP_ID, consistent_point, None) if newer else None
            writer.save(reader.load(), path, "overwrite", commit)
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
            if _open(path) is None:
                data = pa.schema([f for f in schema if f.name not in METADATA_COLUMNS])
                self.writer.create(path, _delta_shape(data.empty_table()).schema)
        self.missing = [name for name in self.missing if name not in schemas]

    def local_tables(self) -> list[str]:
        """The source tables with a Delta table in a local ``path``."""
        if not os.path.isdir(self.path):
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
            progress = batch.snapshot_progress.get(name, _NO_PROGRESS)
            for i, (_, changes) in enumerate(sorted(parts, key=lambda p: p[0])):
                last = i == len(parts) - 1
                if batch.snapshot:
                    self._snapshot_part(name, changes, stats)
                else:
                    self._changes(
                        name, changes, batch.lsn, progress if last else _NO_PROGRESS, stats
                    )
        for name in batch.snapshot_progress:
            if name in groups:
                continue
            path = self.table_path(name)
            if batch.snapshot:
                if name not in self._snapshot_written:
                    self._empty_for_snapshot(name)
            elif _open(path) is None:
                self.missing.append(name)
            else:
                progress = batch.snapshot_progress[name]
                if self._progress.get(name, _NO_PROGRESS) != progress:
                    self._record_progress(name, path, progress, batch.lsn, stats)
        return stats

    def _record_progress(
        self, name: str, path: str, progress: Any, lsn: int, stats: ApplyStats
    ) -> None:
        """Records a copy's progress that came without rows of the table to commit (its
        last chunk was empty, or the copy completed after it) in a commit of its own,
        unless the table already holds commits of a later batch (this one is delivered
        again)."""
        table = _open(path)
        if table is None:
            self.missing.append(name)
            return
        done = (table.transaction_version(PROGRESS_APP_ID), table.transaction_version(APP_ID))
        if any(v is not None and v >= lsn for v in done):
            return
        rows = read_table(path, "false")
        self.writer.write(path, rows, "append", _Commit(PROGRESS_APP_ID, lsn, progress))
        self._progress[name] = progress
        stats.commits += 1
        self._on_step("committed")

    def _snapshot_part(self, name: str, changes: pa.Table, stats: ApplyStats) -> None:
        path = self.table_path(name)
        lsn = int(changes["_commit_lsn"][0].as_py()) if changes.num_rows else None
        rows = _delta_shape(changes).select(data_columns(changes))
        stats.inserted += rows.num_rows
        if name in self._snapshot_written:
            self.writer.write(path, rows, "append", None)
        else:
            current = position(path)
            if current is not None and current.lsn is not None and lsn is not None:
                if current.lsn > lsn:
                    raise DeltaError(
                        f"{name}: the Delta table at {path} holds changes up to a later LSN "
                        "than this stream's initial snapshot (was it written from another "
                        "server or slot?); remove it or point the sink elsewhere"
                    )
            commit = None
            if lsn is not None and (current is None or current.lsn is None or lsn > current.lsn):
                commit = _Commit(APP_ID, lsn, None)
            self.writer.write(path, rows, "overwrite", commit)
            self._snapshot_written.add(name)
            self._positions.pop(path, None)
            self._progress[name] = None
        stats.commits += 1
        self._on_step("committed")

    def _empty_for_snapshot(self, name: str) -> None:
        path = self.table_path(name)
        table = _open(path)
        self._snapshot_written.add(name)
        if table is None:
            self.missing.append(name)
            return
        rows = read_table(path, "false")
        self.writer.write(path, rows, "overwrite", None)
        self._positions.pop(path, None)
        self._progress[name] = None

    def apply_table(self, path: str | os.PathLike[str], changes: pa.Table, lsn: int) -> ApplyStats:
        """Commits one change table to the Delta table at ``path`` (any table path, made
        absolute), skipping the rows at or below the table's recorded position; ``lsn``:
        everything committed before it is in ``changes`` or earlier (a batch's LSN)."""
        target = _base(path)
        stats = ApplyStats(batches=1)
        self._changes(os.path.basename(target), changes, lsn, _NO_PROGRESS, stats, path=target)
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
        given, known = progress, self._progress.get(name, _NO_PROGRESS)
        if progress is _NO_PROGRESS:
            progress = known
        else:
            self._progress[name] = progress
        table = None
        if path not in self._positions:
            table = _open(path)
            self._positions[path] = table.transaction_version(APP_ID) if table else None
        current = self._positions[path]
        if changes.num_rows:
            opened = table or _open(path)
            kept = unapplied(
                changes,
                current,
                lambda app_id: opened.transaction_version(app_id) if opened else None,
            )
            stats.skipped += changes.num_rows - kept.num_rows
            changes = kept
        if changes.num_rows == 0:
            if progress is not _NO_PROGRESS and _open(path) is None:
                self.missing.append(name)
            elif given is not _NO_PROGRESS and given != known:
                self._record_progress(name, path, given, lsn, stats)
            return
        for part, commit_info in cut(changes, lsn, progress):
            self._commit(name, path, part, commit_info, stats)
            if commit_info.app_id == APP_ID:
                self._positions[path] = commit_info.version

    def _commit(
        self, name: str, path: str, changes: pa.Table, commit: _Commit, stats: ApplyStats
    ) -> None:
        changes = _delta_shape(changes)
        columns = data_columns(changes)
        keys = key_columns(changes)
        table = _open(path)
        if table is None:
            self.writer.create(path, changes.select(columns).schema)
            table = _open(path)
        changes = self._fit(name, path, table, changes, keyed=keys is not None)
        columns = data_columns(changes)
        if keys is None:
            base = read_table(path).select(columns)
            base = base.cast(pa.schema([changes.schema.field(c) for c in columns]))
            stream, counts = _native.apply_changes(base, changes, None)
            self.writer.write(path, table_of(stream), "overwrite", commit)
            stats.add({k: v for k, v in counts.items() if k in vars(stats)})
        else:
            stream, counts = _native.reduce_changes(changes, columns, keys)
            source = _fill_moved(path, table_of(stream), keys)
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
            current = pa.schema(_open(path).schema().to_arrow())
        elif new:
            self.writer.add_columns(path, new)
            current = pa.schema(_open(path).schema().to_arrow())
        missing = [f for f in _plain_schema(current) if f.name not in columns]
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
        rows = read_table(path)
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


def _fill_moved(path: str, source: pa.Table, keys: list[str]) -> pa.Table:
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
            f"{_quote(k)} IN ({', '.join(_literal(v) for v in pc.unique(old[k]).to_pylist())})"
            for k in keys
        )
    columns = _data(source)
    found = read_table(path, where).select(columns)
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
    return _sql_string(value)


# -- the public functions ------------------------------------------------------------


def apply(
    batch: Batch,
    path: str | os.PathLike[str],
    writer: str = "delta-rs",
    spark: SparkSession | None = None,
) -> ApplyStats:
    """Commits one ``stream()`` batch to the Delta tables under ``path``; the caller acks
    the batch after this returns."""
    return DeltaSink(path, writer, spark).apply(batch)


def merge_changes(
    changes: DataFrame | pa.Table,
    path: str | os.PathLike[str],
    keys: Sequence[str] | None = None,
    writer: str = "spark",
    spark: SparkSession | None = None,
) -> ApplyStats:
    """MERGEs a Spark DataFrame (or Arrow table) of changes of one table — the rows the
    ``format("pgwire_cdc")`` streaming source yields, complete transactions — into the
    Delta table ``path`` (that table's own path, see :func:`table_path`). Made for
    ``foreachBatch``: a micro-batch run again after a failure is skipped row by row
    against the table's recorded position, so it is idempotent.

    ``keys``: the table's replica-identity key columns (an empty list for a table without
    one, kept as a multiset). A Spark DataFrame does not carry them; a change table from
    ``stream()`` does, and then they may be left out."""
    if isinstance(changes, pa.Table):
        table = changes
    else:
        spark = spark or changes.sparkSession
        table = changes.toArrow()
    if keys is not None:
        table = _with_keys(table, list(keys))
    elif (
        key_columns(table) is None
        and (table.schema.metadata or {}).get(b"pg_replica_identity") is None
    ):
        raise ConfigError(
            "merge_changes() needs keys=[...]: the table's replica-identity key columns "
            "(keys=[] for a REPLICA IDENTITY FULL table without a key)"
        )
    if table.num_rows == 0:
        return ApplyStats(batches=1)
    target = _base(path)
    sink = DeltaSink(os.path.dirname(target), writer, spark)
    # Complete transactions: the batch's LSN lies past every commit in it.
    lsn = int(pc.max(table["_commit_lsn"]).as_py()) + 1
    return sink.apply_table(target, table, lsn)


def _with_keys(table: pa.Table, keys: list[str]) -> pa.Table:
    """``table`` with its key columns marked as the change tables mark them."""
    missing = [k for k in keys if k not in table.column_names]
    if missing:
        raise ConfigError(f"key column(s) {missing} are not among the changes' columns")
    fields = [
        f.with_metadata({**(f.metadata or {}), b"pg_replica_identity": b"true"})
        if f.name in keys
        else f
        for f in table.schema
    ]
    identity = b"d" if keys else b"f"
    metadata = {**(table.schema.metadata or {}), b"pg_replica_identity": identity}
    return table.replace_schema_metadata(None).cast(pa.schema(fields, metadata=metadata))


def run(
    dsn: str,
    path: str | os.PathLike[str],
    *,
    publication: str = "pgwire_cdc",
    slot: str = "pgwire_cdc_slot",
    tables: Iterable[str] | None = None,
    writer: str = "delta-rs",
    spark: SparkSession | None = None,
    on_batch: Callable[[DeltaSink, Batch, ApplyStats], None] | None = None,
    on_step: Callable[[str], None] | None = None,
    **stream_options: Any,
) -> ApplyStats:
    """Keeps one Delta table per published table under ``path`` until the stream ends
    (give ``until_lsn`` or ``idle_timeout`` for a run that ends by itself). Each batch is
    committed to Delta before it is acked; ``on_batch`` is called after each one."""
    from . import pipeline
    from .streaming import StreamOptions

    sink = DeltaSink(path, writer, spark, on_step=on_step)
    options = StreamOptions(
        publication=publication,
        slot=slot,
        tables=list(tables) if tables is not None else None,
        **stream_options,
    )
    total = ApplyStats()
    started = time.monotonic()

    def applied(batch: Batch, stats: ApplyStats) -> None:
        total.add(stats)
        if on_batch is not None:
            on_batch(sink, batch, stats)

    pipeline.run(dsn, options, sink, on_batch=applied)
    log.info(
        "delta: %d changes in %d batches (%d commits) in %.1f s",
        total.changes,
        total.batches,
        total.commits,
        time.monotonic() - started,
    )
    return total
