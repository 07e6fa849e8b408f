"""Iceberg tables kept equal to the source tables by Spark ``MERGE INTO``, exactly once.

One Iceberg table per published table, ``catalog.namespace.<schema>_<table>`` in one of
the Spark session's catalogs (:func:`catalog_conf`; :func:`local_catalog_conf` for a
JDBC catalog on one SQLite file that pyiceberg opens too), holding the source's published
columns under their own names, typed as :func:`pgwire_cdc.spark.spark_type` types them
(``time`` as strings; Iceberg keeps ``smallint`` as ``int``). Without options, the sink
adds no column of its own. Tables it creates are merge-on-read, format v3
(:data:`DEFAULT_PROPERTIES`): a MERGE writes deletion vectors for the rows it changes
instead of rewriting data files; :func:`maintain` compacts. With
``change_data_feed=True`` (:func:`run`) tables with a key hold ``_commit_lsn`` too and the
tables created are copy-on-write (:data:`CHANGE_FEED_PROPERTIES`), for Iceberg's
changelog view over their snapshots (docs/iceberg.md, "Change feed").

Applying one batch, per table
-----------------------------
As the Delta sink does (:mod:`pgwire_cdc.delta`): the change table is reduced in Rust to
one final change per key (a key change is a delete of the old key plus an upsert of the
new; an unchanged-TOAST column takes the value an earlier change of the batch gave it, or
stays marked), then **one** ``MERGE INTO`` per table::

    MERGE INTO t USING s ON <key columns equal>
      WHEN MATCHED AND s._delete THEN DELETE
      WHEN MATCHED THEN UPDATE SET c = CASE WHEN array_contains(s._unchanged, 'c')
                                            THEN t.c ELSE s.c END, ...
      WHEN NOT MATCHED AND NOT s._delete THEN INSERT ...
      [WHEN NOT MATCHED BY SOURCE THEN DELETE]      -- when a truncate came

A row that moved to a new key with a column unchanged takes it from the row under the
old key, read just before the MERGE (:mod:`pgwire_cdc.lakehouse.moved`). A table
without a replica-identity key (REPLICA IDENTITY FULL) is a multiset of rows: read,
changed (``_native.apply_changes``) and overwritten in one snapshot. The initial snapshot
of a new slot is read by Spark tasks under the slot's exported snapshot and written
straight to the tables (``format("pgwire_cdc")``); tables published later are copied
while streaming (incremental snapshots), their progress recorded as below.

Schema changes: a column added at the source is added to the table (null in the rows it
holds); a column type Iceberg can widen in place (int to bigint, float to double, a
wider decimal) is widened, any other change raises :class:`~pgwire_cdc.errors.IcebergError`
saying to re-snapshot; a column no longer carried stays, kept by updates (a row moved to
a new key takes the old key's value) and null in new rows (a keyless table drops it: its
rows are matched whole).

Exactly once
------------
Every snapshot the sink commits records where the stream stands in its summary (Spark's
``spark.sql.iceberg.snapshot-property.<key>`` session settings, set and unset around each
write — plain settings, so Spark Connect sessions work the same): ``pgwire_cdc.lsn``, the
commit LSN of the last transaction applied in full, and ``pgwire_cdc.partial`` (``<commit
LSN>:<ordinal>``) when a batch ended inside a transaction (its rows are committed in a
snapshot of their own, the position says how far). On start the position is read from the
newest snapshot that records one, walking back from the current snapshot past those others
made (compaction, a user's writes; :func:`position`); rows at or below it are skipped, so
a batch delivered again after a crash changes nothing. The slot is acked only after every
table's snapshot is committed.

The modules
-----------
:mod:`pgwire_cdc.lakehouse` (the sink's state machine, shared with Delta),
:mod:`~pgwire_cdc.iceberg.catalog` (catalog settings), :mod:`~pgwire_cdc.iceberg.table`
(names, positions, pyiceberg reads), :mod:`~pgwire_cdc.iceberg.sink` (:class:`IcebergTables`,
Iceberg as a table format, and :class:`IcebergSink`) and :mod:`~pgwire_cdc.iceberg.api`
(:func:`run`, :func:`apply`, :func:`merge_changes`, :func:`maintain`); this package
re-exports their public names.
"""

from __future__ import annotations

from ..lakehouse.stats import ApplyStats
from .api import apply, maintain, merge_changes, read, run, table_sql_name, verify
from .catalog import catalog_conf, local_catalog, local_catalog_conf, local_catalog_properties
from .sink import CHANGE_FEED_PROPERTIES, DEFAULT_PROPERTIES, IcebergSink, IcebergTables
from .table import LSN_KEY, PARTIAL_KEY, PROGRESS_KEY, Position, position, read_table, table_ref

__all__ = [
    "CHANGE_FEED_PROPERTIES",
    "DEFAULT_PROPERTIES",
    "LSN_KEY",
    "PARTIAL_KEY",
    "PROGRESS_KEY",
    "ApplyStats",
    "IcebergSink",
    "IcebergTables",
    "Position",
    "apply",
    "catalog_conf",
    "local_catalog",
    "local_catalog_conf",
    "local_catalog_properties",
    "maintain",
    "merge_changes",
    "position",
    "read",
    "read_table",
    "run",
    "table_ref",
    "table_sql_name",
    "verify",
]
