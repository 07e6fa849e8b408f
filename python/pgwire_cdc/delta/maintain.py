"""Upkeep of Delta tables kept by deletion vectors: compaction, and turning deletion
vectors on for a table that lacks them.

A table kept by deletion vectors gathers, batch after batch, small files of new row
images and deletion vectors that readers must apply. :func:`compact` rewrites the files
that hold deleted rows, and the files smaller than ``min_file_rows``, into files of about
``target_file_size`` bytes without the deleted rows, in one commit marked as changing no
data (``dataChange: false``, as Delta's OPTIMIZE commits are). It is safe while a stream
keeps the table: it records no stream position, so the sink's position (the ``txn``
actions of its own commits) is untouched, and a MERGE and a compaction that race both
commit at the next version only, so one of them fails and runs again on the new version
(the stream's MERGE by itself; :func:`compact` raises :class:`~pgwire_cdc.errors.DeltaError`
and is run again).

A stream kept by the delta-rs writer also compacts by itself (``auto_compact``, on by
default; :func:`compact_after_merge`), after the manner of Delta's auto compaction: after
a MERGE by deletion vectors, once the table holds :data:`AUTO_MIN_SMALL_FILES` small files
it rewrites them together, and it rewrites the files with more than
:data:`AUTO_MAX_DELETED_RATIO` of their rows deleted, most worn first, up to
:data:`TARGET_FILE_SIZE` bytes of them per batch, so a table whose every file wears at
once (changes to random keys) is rewritten over several batches rather than in one stall.
"""

from __future__ import annotations

from typing import Any

from .. import _native
from ..errors import ConfigError, DeltaError
from .table import DELETION_VECTORS, StorageOptions, open_table

#: Files with fewer rows than this are rewritten by :func:`compact`.
MIN_FILE_ROWS = 100_000
#: The size :func:`compact` aims its files at (bytes).
TARGET_FILE_SIZE = 128 * 1024 * 1024
#: A stream compacts its small files once a table has this many (Delta's auto compaction
#: waits for 50 too: ``spark.databricks.delta.autoCompact.minNumFiles``).
AUTO_MIN_SMALL_FILES = 50
#: A stream rewrites a larger file once more than this share of its rows is deleted (a
#: full scan then reads 1.25 rows for each live one).
AUTO_MAX_DELETED_RATIO = 0.2

#: Whether this build of the extension has the deletion-vector writer (Cargo feature
#: ``delta``: every wheel and ``make build`` do; ``make demo``'s quick first build does
#: not, and its delta-rs writer MERGEs copy-on-write).
HAS_DV_WRITER = hasattr(_native, "DeltaDvTable")

NO_DV_WRITER = (
    "this build of pgwire_cdc has no Delta deletion-vector writer (it was built without the "
    "Cargo feature `delta`): install the wheel, or run `make build` in the source tree"
)


def compact(
    path: str,
    *,
    storage_options: StorageOptions = None,
    min_file_rows: int = MIN_FILE_ROWS,
    target_file_size: int = TARGET_FILE_SIZE,
    max_deleted_ratio: float = 0.0,
) -> dict[str, Any]:
    """Compacts the Delta table at ``path`` (see the module documentation): rewrites its
    files with fewer than ``min_file_rows`` rows and those with more than
    ``max_deleted_ratio`` of their rows deleted (0: any). Returns what it did
    (``files_removed``, ``files_added``, ``rows_purged`` (deleted rows dropped),
    ``rows_kept``, ``version``: the commit, None when nothing needed rewriting)."""
    if not 0.0 <= max_deleted_ratio < 1.0:
        raise ConfigError(f"max_deleted_ratio must be in [0, 1), not {max_deleted_ratio}")
    if not HAS_DV_WRITER:
        raise ConfigError(NO_DV_WRITER)
    table = _native.DeltaDvTable(path, dict(storage_options) if storage_options else None)
    stats: dict[str, Any] = table.compact(min_file_rows, target_file_size, max_deleted_ratio)
    return stats


def compact_after_merge(table: _native.DeltaDvTable) -> dict[str, Any]:
    """The compaction a stream runs after its MERGE into ``table`` (see the module
    documentation); what it did, as :func:`compact` says it."""
    stats: dict[str, Any] = table.compact(
        MIN_FILE_ROWS,
        TARGET_FILE_SIZE,
        AUTO_MAX_DELETED_RATIO,
        AUTO_MIN_SMALL_FILES,
        TARGET_FILE_SIZE,
    )
    return stats


def enable_deletion_vectors(path: str, storage_options: StorageOptions = None) -> None:
    """Gives the Delta table at ``path`` the ``deletionVectors`` feature, so that the
    delta-rs writer's MERGEs retire rows by deletion vectors from then on. Readers must
    apply deletion vectors to read the table afterwards (see *Readers* in
    docs/delta.md)."""
    table = open_table(path, storage_options)
    if table is None:
        raise DeltaError(f"no Delta table at {path}")
    table.alter.set_table_properties(DELETION_VECTORS, raise_if_not_exists=True)
