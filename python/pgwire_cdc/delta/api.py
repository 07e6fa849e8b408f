"""The public ways into the Delta sink: :func:`run` (a stream kept in Delta tables),
:func:`apply` (one batch), :func:`merge_changes` (a DataFrame of changes, for Spark's
``foreachBatch``) and :func:`verify` (the tables compared with their source)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import ConfigError
from ..lakehouse.changes import batch_lsn, change_rows, run_counted
from ..lakehouse.stats import ApplyStats
from ..lakehouse.verify import VerifyReport
from ..lakehouse.verify import verify as verify_lake
from ..streaming import DEFAULT_PUBLICATION, DEFAULT_SLOT, StreamOptions
from .catalog import table_ref
from .sink import DELTA_RS_IN_CATALOG, DeltaSink
from .table import base_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..streaming import Batch


def apply(
    batch: Batch,
    path: str | os.PathLike[str] | None = None,
    writer: str = "delta-rs",
    spark: SparkSession | None = None,
    storage_options: Mapping[str, str] | None = None,
    *,
    catalog: str | None = None,
    schema: str | None = None,
    table_name: Callable[[str], str] | None = None,
    deletion_vectors: bool | None = None,
    auto_compact: bool = True,
) -> ApplyStats:
    """Commits one ``stream()`` batch to the Delta tables under ``path`` (or, with
    ``schema``, in a Spark catalog: see :func:`run`, also for ``deletion_vectors`` and
    ``auto_compact``); the caller acks the batch after this returns."""
    _need_target(path, schema)
    sink = DeltaSink(
        path,
        writer,
        spark,
        storage_options=storage_options,
        catalog=catalog,
        schema=schema,
        table_name=table_name,
        deletion_vectors=deletion_vectors,
        auto_compact=auto_compact,
    )
    return sink.apply(batch)


def _need_target(path: str | os.PathLike[str] | None, schema: str | None) -> None:
    if path is None and schema is None:
        raise ConfigError(
            "give the tables' place: a path (a directory or object-store URI), or "
            "schema= for tables in a Spark catalog (writer='spark')"
        )


def merge_changes(
    changes: DataFrame | pa.Table,
    path: str | os.PathLike[str] | None = None,
    keys: Sequence[str] | None = None,
    writer: str = "spark",
    spark: SparkSession | None = None,
    storage_options: Mapping[str, str] | None = None,
    *,
    table: str | None = None,
) -> ApplyStats:
    """MERGEs a Spark DataFrame (or Arrow table) of changes of one table — the rows the
    ``format("pgwire_cdc")`` streaming source yields, complete transactions — into the
    Delta table ``path`` (that table's own path, see :func:`table_path`). Made for
    ``foreachBatch``: a micro-batch run again after a failure is skipped row by row
    against the table's recorded position, so it is idempotent.

    ``table`` instead of ``path``: a table in a Spark catalog, named as Spark SQL names it
    (``catalog.schema.table``, parts in backticks where needed); created, managed by the
    catalog, when it does not exist. Spark writer only.

    ``keys``: the table's replica-identity key columns (an empty list for a table without
    one, kept as a multiset). A Spark DataFrame does not carry them; a change table from
    ``stream()`` does, and then they may be left out."""
    if (path is None) == (table is None):
        raise ConfigError("merge_changes() takes the Delta table's path or table=, one of them")
    if table is not None and writer != "spark":
        raise ConfigError(DELTA_RS_IN_CATALOG)
    if not isinstance(changes, pa.Table):
        spark = spark or changes.sparkSession
    rows = change_rows(changes, keys)
    if rows.num_rows == 0:
        return ApplyStats(batches=1)
    if table is not None:
        target = table_ref(table)
        sink = DeltaSink(None, writer, spark, storage_options=storage_options)
    else:
        assert path is not None
        target = base_path(path)
        sink = DeltaSink(os.path.dirname(target), writer, spark, storage_options=storage_options)
    return sink.apply_table(target, rows, batch_lsn(rows))


def run(
    dsn: str,
    path: str | os.PathLike[str] | None = None,
    *,
    catalog: str | None = None,
    schema: str | None = None,
    table_name: Callable[[str], str] | None = None,
    publication: str = DEFAULT_PUBLICATION,
    slot: str = DEFAULT_SLOT,
    tables: Iterable[str] | None = None,
    writer: str = "delta-rs",
    spark: SparkSession | None = None,
    on_batch: Callable[[DeltaSink, Batch, ApplyStats], None] | None = None,
    on_step: Callable[[str], None] | None = None,
    storage_options: Mapping[str, str] | None = None,
    deletion_vectors: bool | None = None,
    auto_compact: bool = True,
    as_of_every: float | None = 30.0,
    keep_dropped_columns: bool = False,
    history: str | None = None,
    history_tables: Iterable[str] | None = None,
    deletes: str = "hard",
    change_data_feed: bool = False,
    **stream_options: Any,
) -> ApplyStats:
    """Keeps one Delta table per published table under ``path`` until the stream ends
    (give ``until_lsn`` or ``idle_timeout`` for a run that ends by itself). Each batch is
    committed to Delta before it is acked; ``on_batch`` is called after each one.

    ``path`` may be an object-store location (``s3://bucket/prefix``); ``storage_options``
    are delta-rs's for it (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...; None: the
    environment's), given to the Spark writer's session too (see
    :mod:`~pgwire_cdc.delta.stores`).

    Tables in a Spark catalog instead (``writer="spark"``): ``schema`` names the catalog
    schema (created when missing) of ``catalog`` (None: the session's current catalog);
    each source table ``s.t`` becomes ``catalog.schema.s_t`` in lower case, every
    character other than ``a-z``, ``0-9`` and ``_`` written ``_``, or
    ``table_name("s.t")`` when given. The catalog places the tables (managed tables);
    with ``path`` too, they are external tables at :func:`table_path` under it.

    ``deletion_vectors``: tables the delta-rs writer creates on a local file system have
    deletion vectors on by default (None), so its MERGEs retire changed rows in deletion
    vectors instead of rewriting files (see *Deletion vectors without a JVM* in
    docs/delta.md: readers must apply them); ``False`` creates copy-on-write tables,
    ``True`` deletion-vector tables on object stores too. Tables that exist keep what
    they have.
    ``auto_compact`` (default): after a MERGE by deletion vectors the delta-rs writer
    compacts the table when it has gathered enough small files or deleted rows (see
    :mod:`~pgwire_cdc.delta.maintain`); False leaves that to :func:`compact`.
    ``as_of_every``: seconds between the as-of points :func:`read` reads all tables at
    one source LSN by (:mod:`~pgwire_cdc.lakehouse.points`; None: none are written).
    ``keep_dropped_columns``: a column dropped at the source (with the DDL capture) stays
    in a table with a key, renamed ``<column>__dropped_<LSN>``, its values kept.
    ``history="scd2"``: each table (of ``history_tables``, None: all) also gets a history
    table at :func:`history_path` (catalog mode: ``<table>_history`` beside it), one row
    per version of each source row (docs/history.md). ``deletes="soft"``: a deleted row
    stays, ``_deleted`` true and ``_deleted_lsn`` the commit LSN that removed it.
    ``change_data_feed``: the tables keep Delta's change data feed
    (``delta.enableChangeDataFeed``; tables that exist have it turned on), written by both
    writers, the deletion-vector MERGE included: ``table_changes`` returns every change
    as ``insert``, ``update_preimage``, ``update_postimage`` or ``delete``, and a table
    with a key holds ``_commit_lsn``, the commit LSN of the source transaction that wrote
    the row (docs/history.md)."""
    _need_target(path, schema)
    sink = DeltaSink(
        path,
        writer,
        spark,
        on_step=on_step,
        storage_options=storage_options,
        catalog=catalog,
        schema=schema,
        table_name=table_name,
        deletion_vectors=deletion_vectors,
        auto_compact=auto_compact,
        as_of_every=as_of_every,
        keep_dropped_columns=keep_dropped_columns,
        history=history,
        history_tables=history_tables,
        deletes=deletes,
        change_data_feed=change_data_feed,
    )
    options = StreamOptions(
        publication=publication,
        slot=slot,
        tables=list(tables) if tables is not None else None,
        **stream_options,
    )
    return run_counted(dsn, options, sink, on_batch, "delta")


def verify(
    dsn: str,
    path: str | os.PathLike[str] | None = None,
    *,
    publication: str = DEFAULT_PUBLICATION,
    slot: str = DEFAULT_SLOT,
    tables: Sequence[str] | None = None,
    repair: bool = False,
    recover: bool = False,
    wait: float = 300.0,
    catch_up: bool = False,
    on_progress: Callable[[str], None] | None = None,
    catalog: str | None = None,
    schema: str | None = None,
    table_name: Callable[[str], str] | None = None,
    writer: str = "delta-rs",
    spark: SparkSession | None = None,
    storage_options: Mapping[str, str] | None = None,
    spark_source: bool | None = None,
    spill_dir: str | None = None,
    **stream_options: Any,
) -> VerifyReport:
    """Compares the Delta tables :func:`run` keeps for ``publication`` and ``slot`` with
    their source tables, each at the source LSN its table stands at, while the pipeline
    runs (see :mod:`pgwire_cdc.lakehouse.verify`): rows missing, extra and different, by
    key. ``repair=True`` fixes what differs, one commit per table that keeps the table's
    position. ``recover=True``: the pipeline's slot is gone or invalidated; each table is
    repaired to a new snapshot of the source and the slot made there, so the pipeline
    streams on without a new copy. ``catch_up=True``: when no consumer streams ``slot``,
    run the pipeline first up to the source's snapshot (with ``stream_options``);
    otherwise verify waits up to ``wait`` seconds for the running pipeline. The other
    arguments name the tables as :func:`run` does."""
    _need_target(path, schema)
    sink = DeltaSink(
        path,
        writer,
        spark,
        storage_options=storage_options,
        catalog=catalog,
        schema=schema,
        table_name=table_name,
    )

    def run_until(lsn: int) -> None:
        run(
            dsn,
            path,
            catalog=catalog,
            schema=schema,
            table_name=table_name,
            publication=publication,
            slot=slot,
            writer=writer,
            spark=spark,
            storage_options=storage_options,
            until_lsn=lsn,
            **stream_options,
        )

    from ..spark.source_digests import verify_reader

    return verify_lake(
        dsn,
        sink.format,
        publication=publication,
        slot=slot,
        tables=tables,
        repair=repair,
        recover=recover,
        wait=wait,
        catch_up=run_until if catch_up else None,
        on_progress=on_progress,
        source_reader=verify_reader(spark, dsn, publication, spark_source),
        spill_dir=spill_dir,
    )
