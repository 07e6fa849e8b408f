"""Delta Lake tables kept equal to the source tables by MERGE, exactly once.

One Delta table per published table, at :func:`table_path`, holding the source's published
columns under their own names, typed as :func:`pgwire_cdc.spark.spark_type` types them
(``time`` as a ``HH:MM:SS.ffffff`` string: Delta has no time type). The sink adds no
column of its own.

Two writers, one semantics:

* ``"delta-rs"`` (default): no JVM. Its MERGE into a table with deletion vectors (the
  tables it creates in a local directory, unless ``run(..., deletion_vectors=False)``; the
  Spark writer's; any after :func:`enable_deletion_vectors`) marks the changed rows in
  deletion vectors and appends their new images, rewriting no data file
  (``_native.DeltaDvTable``, Rust: it reads only the key columns of the files whose
  statistics can hold a changed key; the commit goes through the deltalake crate's
  transaction machinery). A table without the feature, partitioned, with column mapping or
  on an object store, and a batch with a truncate, take the ``deltalake`` package's MERGE,
  which rewrites every data file holding a changed row (copy-on-write). :func:`compact`
  purges deletion vectors and small files (safe while the stream runs).
  ``deletion_vectors=False`` keeps new tables copy-on-write, for readers that cannot apply
  deletion vectors (``DeltaTable.to_pyarrow_table`` refuses them; docs/delta.md lists
  them).
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

The modules
-----------
:mod:`pgwire_cdc.lakehouse` (the sink's state machine, pure state and SQL shared with the
Iceberg sink),
:mod:`~pgwire_cdc.delta.table` (paths,
reading, the stored types, positions read from the log), :mod:`~pgwire_cdc.delta.stores`
(object stores: the ``s3://``/``s3a://`` mapping and S3A settings),
:mod:`~pgwire_cdc.delta.catalog` (tables named in a Spark catalog, Spark writer only),
:mod:`~pgwire_cdc.delta.writers` (the :class:`Writer` protocol and both writers),
:mod:`~pgwire_cdc.delta.sink` (:class:`DeltaTables`, Delta as a table format, and
:class:`DeltaSink`) and :mod:`~pgwire_cdc.delta.api` (:func:`run`, :func:`apply`,
:func:`merge_changes`, :func:`verify`); this package re-exports their public names.
"""

from __future__ import annotations

from ..lakehouse.positions import APP_ID
from ..lakehouse.stats import ApplyStats
from .api import apply, merge_changes, run, verify
from .maintain import compact, enable_deletion_vectors
from .sink import DeltaSink, DeltaTables
from .stores import s3a_conf, spark_path
from .table import Position, history_path, position, read, read_table, table_path
from .writers import WRITERS, DeltaRsWriter, SparkWriter, Writer

__all__ = [
    "APP_ID",
    "WRITERS",
    "ApplyStats",
    "DeltaRsWriter",
    "DeltaSink",
    "DeltaTables",
    "Position",
    "SparkWriter",
    "Writer",
    "apply",
    "compact",
    "enable_deletion_vectors",
    "history_path",
    "merge_changes",
    "position",
    "read",
    "read_table",
    "run",
    "s3a_conf",
    "spark_path",
    "table_path",
    "verify",
]
