"""Upkeep of Delta tables kept by deletion vectors: compaction, and turning deletion
vectors on for a table that lacks them.

A table kept by deletion vectors gathers, batch after batch, small files of new row
images and deletion vectors that readers must apply. :func:`compact` rewrites the files
that hold deleted rows, and the files smaller than ``min_file_rows``, into files of about
``target_file_size`` bytes without the deleted rows, in one commit marked as changing no
data (``dataChange: false``, as Delta's OPTIMIZE commits are). It is safe while a stream
keeps the table: it records no stream position, so the sink's position (the ``txn``
actions of its own commits) is untouched, and a MERGE and a compaction that both touch a
file conflict in the deltalake crate's commit checks, so one of them runs again on the
new version (the stream's MERGE retries by itself; :func:`compact` raises
:class:`~pgwire_cdc.errors.DeltaError` and is run again).
"""

from __future__ import annotations

from typing import Any

from .. import _native
from ..errors import DeltaError
from .table import StorageOptions, open_table
from .writers import DELETION_VECTORS

#: Files with fewer rows than this are rewritten by :func:`compact`.
MIN_FILE_ROWS = 100_000
#: The size :func:`compact` aims its files at (bytes).
TARGET_FILE_SIZE = 128 * 1024 * 1024


def compact(
    path: str,
    *,
    storage_options: StorageOptions = None,
    min_file_rows: int = MIN_FILE_ROWS,
    target_file_size: int = TARGET_FILE_SIZE,
) -> dict[str, Any]:
    """Compacts the Delta table at ``path`` (see the module documentation): what it did
    (``files_removed``, ``files_added``, ``rows_purged`` (deleted rows dropped),
    ``rows_kept``, ``version``: the commit, None when nothing needed rewriting)."""
    table = _native.DeltaDvTable(path, dict(storage_options) if storage_options else None)
    stats: dict[str, Any] = table.compact(min_file_rows, target_file_size)
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
