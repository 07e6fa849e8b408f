"""The two ways of writing Delta commits, behind one :class:`Writer` protocol.

* :class:`DeltaRsWriter` (``"delta-rs"``): no JVM. A MERGE into a table with deletion
  vectors (the tables it creates on a local file system by default, the Spark writer's, or
  any turned on by
  :func:`~pgwire_cdc.delta.enable_deletion_vectors`) retires the changed rows by deletion
  vectors and appends their new images (``_native.DeltaDvTable``: only the key columns of the
  files that can hold a changed key are read, no data file is rewritten). Other tables
  (without the ``deletionVectors`` feature, partitioned, with column mapping, or on an
  object store) and batches with a truncate take the ``deltalake`` package's MERGE, which
  rewrites every data file holding a changed row (copy-on-write). After a MERGE by
  deletion vectors it compacts the table when its small files or deleted rows call for it
  (``auto_compact``, :mod:`~pgwire_cdc.delta.maintain`).
* :class:`SparkWriter` (``"spark"``): ``MERGE INTO`` run by Spark with Delta Lake's own
  jars; tables it creates have deletion vectors on.

Both speak the same MERGE (:func:`merge_clauses`) and record the same position with each
commit (:class:`~pgwire_cdc.lakehouse.positions.Commit`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from .. import _native
from ..errors import ConfigError, DeltaError
from ..lakehouse.positions import Commit
from ..lakehouse.sql import merge_clauses, quote_name, source_columns, split_name, unchanged_names
from ..spark.types import spark_schema
from .catalog import is_table_name
from .maintain import HAS_DV_WRITER, compact_after_merge
from .stores import bucket_of, s3a_conf, spark_path
from .table import DELETION_VECTORS, StorageOptions, open_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("pgwire_cdc")

WRITERS = ("delta-rs", "spark")


class Writer(Protocol):
    """One way of writing Delta commits. Every method commits at most once."""

    #: The name :class:`DeltaSink <pgwire_cdc.delta.DeltaSink>` knows it by (``WRITERS``).
    name: str

    def create(
        self, path: str, schema: pa.Schema, properties: Mapping[str, str] | None = None
    ) -> None:
        """Creates an empty table of ``schema`` at ``path`` (with the table
        ``properties`` besides the writer's own)."""
        ...

    def add_columns(self, path: str, fields: list[pa.Field]) -> None:
        """Adds ``fields`` to the table at ``path``, null in the rows it holds."""
        ...

    def merge(
        self, path: str, source: pa.Table, keys: list[str], truncate: bool, commit: Commit
    ) -> None:
        """One MERGE of ``source`` (one final change per key) into the table at ``path``,
        matched on ``keys``; ``truncate``: rows the source does not name are deleted."""
        ...

    def write(self, path: str, table: pa.Table, mode: str, commit: Commit | None) -> None:
        """Appends or overwrites (``mode``) the table at ``path`` with ``table``."""
        ...


class DeltaRsWriter:
    """Commits through the ``deltalake`` package (delta-rs). ``storage_options``: for
    tables on an object store (None: from the environment). Commits go through delta-rs's
    conditional put on S3, which this writer leaves on."""

    name = "delta-rs"

    def __init__(
        self,
        storage_options: StorageOptions = None,
        *,
        deletion_vectors: bool | None = None,
        auto_compact: bool = True,
    ) -> None:
        try:
            import deltalake  # noqa: F401
        except ImportError as e:
            raise ConfigError(
                "the delta-rs writer needs the deltalake package: pip install 'deltalake>=1.6'"
            ) from e
        self.storage_options = dict(storage_options) if storage_options is not None else None
        #: Whether tables this writer creates have deletion vectors on; None: on a local
        #: file system, where its MERGEs use them, and off on an object store (where its
        #: MERGE copies files either way: :meth:`merge_in_place`) or in a build without
        #: the deletion-vector writer.
        self.deletion_vectors = deletion_vectors
        #: Whether a MERGE by deletion vectors is followed by the table's compaction
        #: when it needs one (:func:`~pgwire_cdc.delta.maintain.compact_after_merge`).
        self.auto_compact = auto_compact
        # Per table path: the table kept open for MERGEs by deletion vectors, or None
        # when the table cannot take them (the copy-on-write MERGE serves it).
        self._in_place: dict[str, _native.DeltaDvTable | None] = {}
        #: What the last MERGE by deletion vectors did and where its time went (files and
        #: rows read, rows retired and written, ``load_ms``/``scan_ms``/``write_ms``/
        #: ``commit_ms``), None before the first.
        self.last_merge: dict[str, Any] | None = None

    @staticmethod
    def _properties(commit: Commit | None) -> Any:
        from deltalake.transaction import CommitProperties, Transaction

        if commit is None:
            return None
        meta = commit.metadata()
        return CommitProperties(
            app_transactions=[Transaction(commit.app_id, commit.version)],
            custom_metadata={"userMetadata": meta} if meta else None,
        )

    def create(
        self, path: str, schema: pa.Schema, properties: Mapping[str, str] | None = None
    ) -> None:
        from deltalake import write_deltalake

        self._in_place.pop(path, None)
        configuration = {
            **(DELETION_VECTORS if self._with_deletion_vectors(path) else {}),
            **(properties or {}),
        }
        write_deltalake(
            path,
            schema.empty_table(),
            mode="append",
            configuration=configuration or None,
            storage_options=self.storage_options,
        )

    def _with_deletion_vectors(self, path: str) -> bool:
        if self.deletion_vectors is not None:
            return self.deletion_vectors
        return _local(path) and HAS_DV_WRITER

    def merge_in_place(
        self, path: str, source: pa.Table, keys: list[str], commit: Commit
    ) -> dict[str, Any] | None:
        """One MERGE of a reduced change table (with ``_from``) by deletion vectors;
        None, having done nothing, when the table at ``path`` cannot take them."""
        if path not in self._in_place:
            self._in_place[path] = None
            if _local(path) and HAS_DV_WRITER:
                opened = _native.DeltaDvTable(path, self.storage_options)
                reason = opened.unsupported()
                if reason is None:
                    self._in_place[path] = opened
                else:
                    log.debug("%s: copy-on-write MERGE (%s)", path, reason)
        table = self._in_place[path]
        if table is None:
            return None
        stats: dict[str, Any] = table.merge(
            source, keys, commit.app_id, commit.version, commit.metadata()
        )
        log.debug("%s: MERGE by deletion vectors: %s", path, stats)
        if self.auto_compact:
            started = time.perf_counter()
            try:
                compacted = compact_after_merge(table)
            except DeltaError as e:
                # The batch is committed: upkeep that lost a race (a compaction of the
                # user's own touched the same files) or failed is tried again after the
                # next MERGE rather than failing the stream.
                log.warning("%s: compaction after the MERGE failed, tried again later: %s", path, e)
                compacted = {"version": None, "error": str(e)}
                stats["compaction"] = compacted
            if compacted["version"] is not None:
                compacted["ms"] = round((time.perf_counter() - started) * 1000, 1)
                stats["compaction"] = compacted
                log.info(
                    "%s: compacted %d files into %d (%d deleted rows purged) in %.0f ms",
                    path,
                    compacted["files_removed"],
                    compacted["files_added"],
                    compacted["rows_purged"],
                    compacted["ms"],
                )
        self.last_merge = stats
        return stats

    def add_columns(self, path: str, fields: list[pa.Field]) -> None:
        from deltalake import DeltaTable, Schema

        delta_fields = Schema.from_arrow(pa.schema(fields)).fields
        DeltaTable(path, storage_options=self.storage_options).alter.add_columns(delta_fields)
        self._in_place.pop(path, None)

    def merge(
        self, path: str, source: pa.Table, keys: list[str], truncate: bool, commit: Commit
    ) -> None:
        from deltalake import DeltaTable

        clauses = merge_clauses(source_columns(source), keys, unchanged_names(source))
        merger = DeltaTable(path, storage_options=self.storage_options).merge(
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

    def write(self, path: str, table: pa.Table, mode: str, commit: Commit | None) -> None:
        from deltalake import write_deltalake

        properties = self._properties(commit)
        # An overwrite may change the schema: the table is opened again for the next MERGE.
        self._in_place.pop(path, None)
        # A table this write creates gets deletion vectors as create() gives them.
        new = self._with_deletion_vectors(path) and open_table(path, self.storage_options) is None
        configuration = DELETION_VECTORS if new else None
        if mode == "overwrite":
            write_deltalake(
                path,
                table,
                mode="overwrite",
                schema_mode="overwrite",
                configuration=configuration,
                commit_properties=properties,
                storage_options=self.storage_options,
            )
        else:
            write_deltalake(
                path,
                table,
                mode="append",
                configuration=configuration,
                commit_properties=properties,
                storage_options=self.storage_options,
            )


#: Delta's MERGE first copies a source that is not a plain Delta table scan to disk
#: ("materialize source": a Spark job, then a disk read for each of the MERGE's passes)
#: in case it changes between the passes. The Spark writer's source is an Arrow table
#: Spark holds as a local relation, which cannot change: its MERGEs run without the copy.
MATERIALIZE_SOURCE = "spark.databricks.delta.merge.materializeSource"


class SparkWriter:
    """Commits through Spark's ``MERGE INTO`` and DataFrame writer (delta-spark). Paths
    reach Spark as :func:`~pgwire_cdc.delta.stores.spark_path` maps them (``s3://`` as
    ``s3a://``); ``storage_options`` are delta-rs's, for the reads of the tables' logs."""

    name = "spark"

    def __init__(self, spark: SparkSession | None, storage_options: StorageOptions = None) -> None:
        if spark is None:
            raise ConfigError(
                "writer='spark' needs a SparkSession with Delta Lake: pass "
                "spark=pgwire_cdc.spark.session(delta=True), or your own session with the "
                "delta-spark jars and DeltaSparkSessionExtension"
            )
        self.spark = spark
        self.storage_options = dict(storage_options) if storage_options is not None else None
        self._view = 0
        #: Catalog tables to create as external tables: reference -> location.
        self.external: dict[str, str] = {}
        self._locations: dict[str, str] = {}

    def configure_store(self, path: str, storage_options: Mapping[str, str]) -> None:
        """Sets the S3A settings of ``path``'s bucket that match delta-rs's
        ``storage_options`` on the session (nothing for a path not on S3). They take
        effect when the session first opens the bucket."""
        bucket = bucket_of(path)
        if bucket is None:
            return
        for key, value in s3a_conf(storage_options, bucket=bucket, prefix="").items():
            self.spark.conf.set(key, value)

    def _frame(self, table: pa.Table) -> DataFrame:
        return self.spark.createDataFrame(table, schema=spark_schema(table.schema))

    def location(self, path: str) -> str | None:
        """Where the table ``path`` (a path, or a catalog name: see
        :mod:`~pgwire_cdc.delta.catalog`) keeps its files: a path itself; a catalog table's
        location as the catalog gives it, None while there is no such table."""
        if not is_table_name(path):
            return path
        if path not in self._locations:
            if not self.spark.catalog.tableExists(path):
                return None
            detail = self.spark.sql(f"DESCRIBE DETAIL {path}").collect()[0]
            if str(detail["format"]).lower() != "delta":
                raise DeltaError(f"{path} is a {detail['format']} table, not a Delta table")
            self._locations[path] = str(detail["location"])
        return self._locations[path]

    def _sql_table(self, path: str) -> str:
        """The table ``path`` as Spark SQL names it."""
        if is_table_name(path):
            return path
        return f"delta.{quote_name(spark_path(path))}"

    def create(
        self, path: str, schema: pa.Schema, properties: Mapping[str, str] | None = None
    ) -> None:
        writer = (
            self._frame(schema.empty_table())
            .write.format("delta")
            .mode("append")
            .option("delta.enableDeletionVectors", "true")
        )
        for key, value in (properties or {}).items():
            writer = writer.option(key, value)
        if any(set(name) & set(" ,;{}()\n\t=") for name in schema.names):
            # Delta Spark takes such column names only with column mapping.
            writer = writer.option("delta.columnMapping.mode", "name")
        if not is_table_name(path):
            writer.save(spark_path(path))
            return
        parent = split_name(path)[:-1]
        if parent:
            self.spark.sql(f"CREATE SCHEMA IF NOT EXISTS {'.'.join(map(quote_name, parent))}")
        if path in self.external:
            writer = writer.option("path", spark_path(self.external[path]))
        writer.saveAsTable(path)

    def add_columns(self, path: str, fields: list[pa.Field]) -> None:
        columns = ", ".join(
            f"{quote_name(f.name)} {spark_schema(pa.schema([f]))[0].dataType.simpleString()}"
            for f in fields
        )
        self.spark.sql(f"ALTER TABLE {self._sql_table(path)} ADD COLUMNS ({columns})")

    def _confs(self, commit: Commit | None) -> dict[str, str | None]:
        if commit is None:
            return {}
        return {
            "spark.databricks.delta.write.txnAppId": commit.app_id,
            "spark.databricks.delta.write.txnVersion": str(commit.version),
            "spark.databricks.delta.commitInfo.userMetadata": commit.metadata(),
        }

    def _with_confs(
        self,
        confs: dict[str, str | None],
        run: Callable[[], object],
        optional: Mapping[str, str] | None = None,
    ) -> None:
        """Runs ``run`` with ``confs`` set on the session (None: unset), then unsets them.
        ``optional``: settings that only save work, set too where the session takes them
        (a server may refuse some: Databricks serverless takes a listed few), then put
        back to the value they had."""
        conf = self.spark.conf
        restore: dict[str, str | None] = {}
        for key, setting in (optional or {}).items():
            try:
                before = conf.get(key, None)
                conf.set(key, setting)
            except Exception as e:
                log.debug("Spark setting %s left as it is: %s", key, e)
                continue
            restore[key] = before
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
            for key, previous in restore.items():
                if previous is None:
                    conf.unset(key)
                else:
                    conf.set(key, previous)

    def merge(
        self, path: str, source: pa.Table, keys: list[str], truncate: bool, commit: Commit
    ) -> None:
        columns = source_columns(source)
        clauses = merge_clauses(columns, keys, unchanged_names(source), spark=True)
        self._view += 1
        view = f"pgwire_cdc_merge_source_{self._view}"
        self._frame(source).createOrReplaceTempView(view)
        update = ", ".join(f"t.{c} = {e}" for c, e in clauses["update"].items())
        names = ", ".join(clauses["insert"])
        values = ", ".join(clauses["insert"].values())
        sql = (
            f"MERGE INTO {self._sql_table(path)} t USING {view} s "
            f"ON {clauses['on']} "
            "WHEN MATCHED AND s._delete THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {update} "
            f"WHEN NOT MATCHED AND NOT s._delete THEN INSERT ({names}) VALUES ({values})"
        )
        if truncate:
            sql += " WHEN NOT MATCHED BY SOURCE THEN DELETE"
        try:
            # A command runs within sql() itself, classic and Spark Connect alike; its
            # result (four counts) is not needed.
            self._with_confs(
                self._confs(commit),
                lambda: self.spark.sql(sql),
                optional={MATERIALIZE_SOURCE: "none"},
            )
        finally:
            self.spark.catalog.dropTempView(view)

    def write(self, path: str, table: pa.Table, mode: str, commit: Commit | None) -> None:
        where = self.location(path)
        if where is None or open_table(where, self.storage_options) is None:
            self.create(path, table.schema)
        self.save(self._frame(table), path, mode, commit)

    def save(self, frame: DataFrame, path: str, mode: str, commit: Commit | None) -> None:
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
        # A catalog table is written at its location: the same Delta table, and the one
        # DataFrame write that takes a transaction identifier and a new schema alike.
        writer.save(spark_path(self.location(path) or path))


def writer_for(
    writer: str | Writer,
    spark: SparkSession | None = None,
    storage_options: StorageOptions = None,
    deletion_vectors: bool | None = None,
    auto_compact: bool = True,
) -> Writer:
    """The writer named ``writer`` (one of :data:`WRITERS`), or ``writer`` itself.
    ``deletion_vectors``: whether the delta-rs writer creates tables with deletion vectors
    on (None: on a local file system; the Spark writer always does); ``auto_compact``: it
    compacts tables kept by deletion vectors after its MERGEs
    (:func:`~pgwire_cdc.delta.maintain.compact_after_merge`)."""
    if not isinstance(writer, str):
        return writer
    if writer == "delta-rs":
        return DeltaRsWriter(
            storage_options, deletion_vectors=deletion_vectors, auto_compact=auto_compact
        )
    if writer == "spark":
        return SparkWriter(spark, storage_options)
    raise ConfigError(f"unknown Delta writer {writer!r}: use one of {', '.join(WRITERS)}")


def _local(path: str) -> bool:
    """Whether the table at ``path`` is on the local file system, where the deletion-vector
    MERGE runs (it has no object-store client)."""
    return "://" not in path or path.startswith("file://")
