"""Iceberg tables as the sink keeps them: their names, where they stand in the stream, and
reading them without Spark.

A table's position lives in the summaries of the snapshots the sink commits (set through
``spark.sql.iceberg.snapshot-property.<key>`` around each write, see
:mod:`pgwire_cdc.iceberg`):

* ``pgwire_cdc.lsn``: the commit LSN of the last transaction applied in full;
* ``pgwire_cdc.partial``: ``<commit LSN>:<ordinal>`` when the commit ended inside a
  transaction that a batch cut in two (absent otherwise);
* ``pgwire_cdc.progress``: an incremental copy's progress (JSON, as
  :meth:`~pgwire_cdc.lakehouse.positions.Commit.metadata` writes it), when one is under
  way.

:func:`position` reads them from the newest snapshot that has them, walking back from the
table's current snapshot through its ancestors: snapshots others commit (compaction, a
user's own writes) carry none and are passed over.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..lakehouse.positions import NO_PROGRESS, Source, progress_of, source_of, txn_id
from ..lakehouse.sql import default_table_name, quote_name, split_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SUMMARY_PREFIX = "pgwire_cdc."
LSN_KEY = f"{SUMMARY_PREFIX}lsn"
PARTIAL_KEY = f"{SUMMARY_PREFIX}partial"
PROGRESS_KEY = f"{SUMMARY_PREFIX}progress"
SUMMARY_KEYS = (LSN_KEY, PARTIAL_KEY, PROGRESS_KEY)

#: The session settings whose values Iceberg copies into the summary of each snapshot
#: committed while they are set.
SNAPSHOT_PROPERTY = "spark.sql.iceberg.snapshot-property."


@dataclass(frozen=True)
class Position:
    """Where an Iceberg table stands in the stream (see the module documentation)."""

    #: Commit LSN of the last transaction applied in full (None: nothing yet).
    lsn: int | None
    #: (commit LSN, last ordinal applied) of a transaction cut in two, or None.
    partial: tuple[int, int] | None = None
    #: Incremental-copy progress (a key list, None once complete), or NO_PROGRESS.
    progress: Any = NO_PROGRESS
    #: The source the rows come from (:mod:`pgwire_cdc.lakehouse.identity`), or None.
    source: Source | None = None

    def ordinal_of(self, txn: str) -> int | None:
        """How far into the cut transaction ``txn`` (a
        :func:`~pgwire_cdc.lakehouse.positions.txn_id`) the table reaches."""
        if self.partial is not None and txn_id(self.partial[0]) == txn:
            return self.partial[1]
        return None

    def summary(self) -> dict[str, str | None]:
        """The snapshot properties recording this position (None: unset)."""
        from ..lakehouse.positions import Commit

        progress = Commit("", 0, self.progress, self.source).metadata()
        return {
            LSN_KEY: None if self.lsn is None else str(self.lsn),
            PARTIAL_KEY: None if self.partial is None else f"{self.partial[0]}:{self.partial[1]}",
            PROGRESS_KEY: progress,
        }

    @staticmethod
    def from_summary(summary: dict[str, str]) -> Position:
        lsn = summary.get(LSN_KEY)
        partial = summary.get(PARTIAL_KEY)
        cut = None
        if partial:
            commit, _, ordinal = partial.partition(":")
            cut = (int(commit), int(ordinal))
        recorded = summary.get(PROGRESS_KEY)
        return Position(int(lsn) if lsn else None, cut, progress_of(recorded), source_of(recorded))


def table_ref(
    catalog: str,
    namespace: str,
    source: str,
    table_name: Callable[[str], str] = default_table_name,
) -> str:
    """The Spark SQL name of the Iceberg table holding the source table ``source``
    ("schema.table"): ``catalog.namespace.<table_name(source)>``, each part quoted
    (``public.Orders`` → ``lake.app.public_orders`` by default)."""
    return _sql_name([catalog, *namespace.split("."), table_name(source)])


def exists(spark: SparkSession, ref: str) -> bool:
    """Whether the table ``ref`` exists, its state read afresh (:func:`refresh`). The
    catalog's listings are asked first (each namespace of ``ref`` among its parent's, the
    table among its namespace's tables), so a table that is not there yet, as on a first
    run, is not refreshed: a failed ``REFRESH TABLE`` has PySpark log the analysis error
    with its Java stack trace at ERROR level, though it is expected here. Listings read
    the catalog itself, never a session's cache of it. A two-part name (a namespace of
    the current catalog, or a catalog's default namespace) is only refreshed."""
    parts = split_name(ref)
    if len(parts) > 2 and not _listed(spark, parts):
        return False
    return refresh(spark, ref)


def refresh(spark: SparkSession, ref: str) -> bool:
    """``REFRESH TABLE ref``: drops what the session holds of the table, so the reads
    that follow (position, schema, rows) see its current snapshot; False when the table
    is missing after all. Needed over Spark Connect: in a ``foreachBatch`` function's
    session (a session attached to the query's) table names resolved to the table as it
    stood when the session first read it — a table created since was not found, a
    position read was the one before the session's own last commit — until the table was
    refreshed. A table not known to exist is checked with :func:`exists`."""
    from pyspark.errors import AnalysisException

    try:
        spark.sql(f"REFRESH TABLE {ref}")
    except AnalysisException as e:
        if e.getCondition() in ("TABLE_OR_VIEW_NOT_FOUND", "SCHEMA_NOT_FOUND"):
            return False
        raise
    return True


def _listed(spark: SparkSession, parts: list[str]) -> bool:
    """Whether ``parts`` (catalog, one or more namespace parts, table) name a table the
    catalog lists: every namespace below the catalog among its parent's namespaces (``SHOW
    TABLES`` in a missing namespace is an error), then the table among the namespace's
    tables. Names compare without case (catalogs differ in how they keep it): this only
    decides whether ``REFRESH TABLE`` is worth trying, which has the last word."""
    *container, name = parts
    for depth in range(1, len(container)):
        children = spark.sql(f"SHOW NAMESPACES IN {_sql_name(container[:depth])}").collect()
        wanted = container[depth].casefold()
        if not any(split_name(row[0])[-1].casefold() == wanted for row in children):
            return False
    tables = spark.sql(f"SHOW TABLES IN {_sql_name(container)}").collect()
    return any(row["tableName"].casefold() == name.casefold() for row in tables)


def _sql_name(parts: list[str]) -> str:
    return ".".join(quote_name(p) for p in parts)


def position(spark: SparkSession, ref: str) -> Position | None:
    """The stream position recorded in the Iceberg table ``ref`` (a Spark SQL name),
    Position(None) when no snapshot of it records one, None without table."""
    found = pinned_position(spark, ref)
    return None if found is None else found[0]


def pinned_position(spark: SparkSession, ref: str) -> tuple[Position, int | None] | None:
    """The position the Iceberg table ``ref``'s current snapshot records, and that
    snapshot's id (None: the table has no snapshot yet); None without table."""
    if not exists(spark, ref):
        return None
    head = current_snapshot(spark, ref)
    if head < 0:
        return Position(None), None
    keys = ", ".join(f"'{k}'" for k in SUMMARY_KEYS)
    snapshots = spark.sql(
        f"SELECT snapshot_id, parent_id, map_filter(summary, (k, v) -> k IN ({keys})) AS s "
        f"FROM {ref}.snapshots"
    ).collect()
    by_id = {r["snapshot_id"]: r for r in snapshots}
    current = head
    while current in by_id:
        row = by_id[current]
        summary = dict(row["s"] or {})
        if LSN_KEY in summary or PARTIAL_KEY in summary:
            return Position.from_summary(summary), head
        current = row["parent_id"]
    return Position(None), head


def current_snapshot(spark: SparkSession, ref: str) -> int:
    """The id of the snapshot the existing Iceberg table ``ref``'s ``main`` branch stands
    at, -1 while it has none."""
    heads = spark.sql(f"SELECT snapshot_id FROM {ref}.refs WHERE name = 'main'").collect()
    return int(heads[0]["snapshot_id"]) if heads else -1


def read_table(catalog: Any, identifier: str, row_filter: str | None = None) -> pa.Table:
    """The rows of an Iceberg table read by pyiceberg (no Spark), deletes applied:
    ``catalog`` a pyiceberg catalog (:func:`~pgwire_cdc.iceberg.catalog.local_catalog`, or
    ``pyiceberg.catalog.load_catalog(...)``), ``identifier`` ``namespace.table``."""
    table = catalog.load_table(identifier)
    scan = table.scan(row_filter=row_filter) if row_filter else table.scan()
    rows: pa.Table = scan.to_arrow()
    return rows
