"""The public ways into the Iceberg sink: :func:`run` (a stream kept in Iceberg tables),
:func:`apply` (one batch), :func:`merge_changes` (a DataFrame of changes, for Spark's
``foreachBatch``), :func:`maintain` (compaction and snapshot expiry that keep the
position), :func:`verify` (the tables compared with their source) and :func:`read` (every
table as of one source LSN)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import ConfigError, IcebergError
from ..lakehouse.changes import batch_lsn, change_rows, run_counted
from ..lakehouse.points import POINTS, AsOf, NoPoint, choose
from ..lakehouse.sql import default_table_name, quote_name, split_name, sql_string
from ..lakehouse.stats import ApplyStats
from ..lakehouse.verify import VerifyReport
from ..lakehouse.verify import verify as verify_lake
from ..streaming import DEFAULT_PUBLICATION, DEFAULT_SLOT, StreamOptions
from .sink import IcebergSink
from .table import LSN_KEY, PARTIAL_KEY, exists, table_ref

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..streaming import Batch


def run(
    dsn: str,
    catalog: str,
    namespace: str,
    *,
    publication: str = DEFAULT_PUBLICATION,
    slot: str = DEFAULT_SLOT,
    tables: Iterable[str] | None = None,
    spark: SparkSession | None = None,
    table_name: Callable[[str], str] | None = None,
    properties: Mapping[str, str] | None = None,
    on_batch: Callable[[IcebergSink, Batch, ApplyStats], None] | None = None,
    on_step: Callable[[str], None] | None = None,
    as_of_every: float | None = 30.0,
    keep_dropped_columns: bool = False,
    history: str | None = None,
    history_tables: Iterable[str] | None = None,
    deletes: str = "hard",
    change_data_feed: bool = False,
    **stream_options: Any,
) -> ApplyStats:
    """Keeps one Iceberg table per published table in ``catalog.namespace`` (a catalog
    of ``spark``'s: :func:`~pgwire_cdc.iceberg.catalog_conf`) until the stream ends (give
    ``until_lsn`` or ``idle_timeout`` for a run that ends by itself). Each batch is
    committed before it is acked; ``on_batch`` is called after each one. Source table
    ``s.t`` becomes ``s_t`` in lower case (every character other than ``a-z``, ``0-9``
    and ``_`` written ``_``), or ``table_name("s.t")``; tables created get ``properties``
    over :data:`~pgwire_cdc.iceberg.DEFAULT_PROPERTIES`. ``as_of_every``: seconds between
    the as-of points that :func:`read` reads by (None: none). ``keep_dropped_columns``: a
    column dropped at the source (with the DDL capture) stays in a table with a key,
    renamed ``<column>__dropped_<LSN>``, its values kept. ``history="scd2"``: each table
    (of ``history_tables``, None: all) also gets a history table ``<table>_history`` (one
    row per version of each source row: docs/history.md). ``deletes="soft"``: a deleted
    row stays, ``_deleted`` true and ``_deleted_lsn`` the commit LSN that removed it.
    ``change_data_feed=True``: tables with a key get ``_commit_lsn`` (the commit LSN of
    the source transaction that wrote the row as it stands) and the tables created are
    copy-on-write, so that Iceberg's ``create_changelog_view`` reads each batch's changes
    from their snapshots (docs/iceberg.md, "Change feed")."""
    sink = IcebergSink(
        spark,
        catalog,
        namespace,
        table_name=table_name,
        properties=properties,
        on_step=on_step,
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
    return run_counted(dsn, options, sink, on_batch, "iceberg")


def apply(
    batch: Batch,
    catalog: str,
    namespace: str,
    spark: SparkSession | None = None,
    *,
    table_name: Callable[[str], str] | None = None,
    properties: Mapping[str, str] | None = None,
) -> ApplyStats:
    """Commits one ``stream()`` batch to the Iceberg tables in ``catalog.namespace``;
    the caller acks the batch after this returns."""
    sink = IcebergSink(spark, catalog, namespace, table_name=table_name, properties=properties)
    return sink.apply(batch)


def table_sql_name(table: str) -> str:
    """``table`` (``catalog.namespace.table``, parts in backticks where needed) with
    every part quoted."""
    parts = split_name(table)
    if len(parts) < 2:
        raise ConfigError(f"name the Iceberg table with its namespace: {table!r}")
    return ".".join(quote_name(p) for p in parts)


def merge_changes(
    changes: DataFrame | pa.Table,
    table: str,
    keys: Sequence[str] | None = None,
    spark: SparkSession | None = None,
    *,
    properties: Mapping[str, str] | None = None,
) -> ApplyStats:
    """MERGEs a Spark DataFrame (or Arrow table) of changes of one table — the rows the
    ``format("pgwire_cdc")`` streaming source yields, complete transactions — into the
    Iceberg table ``table`` (``catalog.namespace.table``; created when missing). Made for
    ``foreachBatch``: a micro-batch run again after a failure is skipped row by row
    against the table's recorded position.

    ``keys``: the table's replica-identity key columns (``[]`` for a table without one,
    kept as a multiset); a change table from ``stream()`` carries them already."""
    if not isinstance(changes, pa.Table):
        spark = spark or changes.sparkSession
    rows = change_rows(changes, keys)
    if rows.num_rows == 0:
        return ApplyStats(batches=1)
    ref = table_sql_name(table)
    parts = split_name(table)
    sink = IcebergSink(spark, parts[0], ".".join(parts[1:-1]), properties=properties)
    return sink.apply_table(ref, rows, batch_lsn(rows))


def maintain(
    spark: SparkSession,
    table: str,
    *,
    rewrite_data: bool = True,
    rewrite_deletes: bool = True,
    expire: bool = True,
    retain_last: int = 1,
    older_than: str | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Compacts the Iceberg table ``table`` (``catalog.namespace.table``) and expires
    its old snapshots, keeping its stream position: ``rewrite_data_files`` (small files
    and the delete files of merge-on-read folded into new data files),
    ``rewrite_position_delete_files``, then ``expire_snapshots`` of snapshots older than
    ``older_than`` (a timestamp literal, default: now) but never the newest snapshot
    that records the position, nor the ``retain_last`` newest. Returns each procedure's
    result rows.

    Snapshots of compaction carry no position of their own; the position is read from the
    newest snapshot that has one, walking back from the current snapshot, so it must not
    be expired. Other maintenance jobs must keep it too: expire only snapshots older than
    the one :func:`~pgwire_cdc.iceberg.position` reads (docs/iceberg.md)."""
    ref = table_sql_name(table)
    catalog = quote_name(split_name(table)[0])
    name = sql_string(ref, True)
    results: dict[str, list[dict[str, Any]]] = {}

    def call(procedure: str, args: str) -> None:
        rows = spark.sql(f"CALL {catalog}.system.{procedure}({args})").collect()
        results[procedure] = [r.asDict() for r in rows]

    if rewrite_data:
        call("rewrite_data_files", f"table => {name}")
    if rewrite_deletes:
        call("rewrite_position_delete_files", f"table => {name}")
    if expire:
        keys = f"'{LSN_KEY}', '{PARTIAL_KEY}'"
        bound = f"TIMESTAMP {sql_string(older_than, True)}" if older_than else "current_timestamp()"
        # As text in the session's time zone, read back as a literal in the same zone.
        (row,) = spark.sql(
            f"SELECT CAST(least({bound}, coalesce(max(committed_at), {bound})) AS STRING) AS t "
            f"FROM {ref}.snapshots WHERE size(map_filter(summary, (k, v) -> k IN ({keys}))) > 0"
        ).collect()
        stamp = sql_string(row["t"], True)
        call(
            "expire_snapshots",
            f"table => {name}, older_than => TIMESTAMP {stamp}, retain_last => {retain_last}",
        )
    return results


def verify(
    dsn: str,
    catalog: str,
    namespace: str,
    *,
    publication: str = DEFAULT_PUBLICATION,
    slot: str = DEFAULT_SLOT,
    spark: SparkSession | None = None,
    tables: Sequence[str] | None = None,
    repair: bool = False,
    recover: bool = False,
    wait: float = 300.0,
    catch_up: bool = False,
    on_progress: Callable[[str], None] | None = None,
    table_name: Callable[[str], str] | None = None,
    spark_source: bool | None = None,
    spill_dir: str | None = None,
    **stream_options: Any,
) -> VerifyReport:
    """Compares the Iceberg tables :func:`run` keeps in ``catalog.namespace`` for
    ``publication`` and ``slot`` with their source tables, each at the source LSN its
    table's current snapshot stands at, while the pipeline runs (see
    :mod:`pgwire_cdc.lakehouse.verify`); ``repair=True`` fixes what differs in one
    commit per table that keeps its position; ``recover=True`` repairs each table to a
    new snapshot of the source and makes the (lost) slot there. ``catch_up=True``: when
    no consumer streams ``slot``, run the pipeline first up to the source's snapshot."""
    sink = IcebergSink(spark, catalog, namespace, table_name=table_name)

    def run_until(lsn: int) -> None:
        run(
            dsn,
            catalog,
            namespace,
            publication=publication,
            slot=slot,
            spark=spark,
            table_name=table_name,
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
        source_reader=verify_reader(sink.format.spark, dsn, publication, spark_source),
        spill_dir=spill_dir,
    )


def read(
    spark: SparkSession,
    catalog: str,
    namespace: str,
    tables: Iterable[str] | None = None,
    *,
    as_of_lsn: int | None = None,
    table_name: Callable[[str], str] | None = None,
) -> AsOf:
    """The Iceberg tables of the source tables ``tables`` (None: every table the point
    holds) in ``catalog.namespace``, all as of one source LSN: each at the snapshot the
    sink's newest as-of point at or before ``as_of_lsn`` names (None: its newest point),
    so that they hold exactly the source transactions committed before that point's LSN
    (:mod:`pgwire_cdc.lakehouse.points`). Returns a dict of source table → Spark DataFrame
    with ``.lsn``, the point's LSN. Raises :class:`~pgwire_cdc.errors.IcebergError` when
    no point fits; a snapshot expired since cannot be read."""
    from pyspark.sql import functions as F

    naming = table_name or default_table_name
    points_ref = table_ref(catalog, namespace, POINTS, naming)
    if not exists(spark, points_ref):
        raise IcebergError(
            f"no as-of points in {catalog}.{namespace}: the sink (iceberg.run) records them "
            "as it runs"
        )
    frame = spark.table(points_ref)
    if as_of_lsn is not None:
        frame = frame.where(F.col("lsn") <= F.lit(int(as_of_lsn)))
    try:
        lsn, versions = choose(frame.toArrow(), tables, as_of_lsn)
    except NoPoint as e:
        raise IcebergError(f"{catalog}.{namespace}: {e}") from None
    out: dict[str, Any] = {}
    for name, snapshot in versions.items():
        ref = table_ref(catalog, namespace, name, naming)
        if snapshot < 0:  # no snapshot yet at the point: the table was empty
            out[name] = spark.table(ref).limit(0)
        else:
            out[name] = spark.sql(f"SELECT * FROM {ref} VERSION AS OF {int(snapshot)}")
    return AsOf(lsn, out)
