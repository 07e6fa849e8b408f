"""What both lakehouse sinks do around a sink's own work: the change table of
``merge_changes`` (:func:`change_rows`, :func:`batch_lsn`) and a counted
:func:`~pgwire_cdc.pipeline.run` (:func:`run_counted`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from .. import pipeline
from ..errors import ConfigError
from ..tables import key_columns
from .shape import with_keys
from .stats import ApplyStats

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ..streaming import Batch, StreamOptions

log = logging.getLogger("pgwire_cdc")

S = TypeVar("S", bound=pipeline.Sink)


def change_rows(changes: DataFrame | pa.Table, keys: Sequence[str] | None) -> pa.Table:
    """The Arrow change table of ``merge_changes(changes, keys=...)``: a DataFrame is
    collected; ``keys`` (the replica-identity key columns, ``[]`` for a keyless REPLICA
    IDENTITY FULL table) are recorded in its schema. A Spark DataFrame does not carry
    them, a change table from ``stream()`` does: without either, a ConfigError."""
    rows = changes if isinstance(changes, pa.Table) else changes.toArrow()
    if keys is not None:
        return with_keys(rows, list(keys))
    if (
        key_columns(rows) is None
        and (rows.schema.metadata or {}).get(b"pg_replica_identity") is None
    ):
        raise ConfigError(
            "merge_changes() needs keys=[...]: the table's replica-identity key columns "
            "(keys=[] for a REPLICA IDENTITY FULL table without a key)"
        )
    return rows


def batch_lsn(rows: pa.Table) -> int:
    """The LSN of a change table of complete transactions (a streaming source's
    micro-batch): past every commit in it."""
    return int(pc.max(rows["_commit_lsn"]).as_py()) + 1


def run_counted(
    dsn: str,
    options: StreamOptions,
    sink: S,
    on_batch: Callable[[S, Batch, ApplyStats], None] | None,
    what: str,
) -> ApplyStats:
    """:func:`pipeline.run` into ``sink``, whose ``apply`` returns
    :class:`ApplyStats`: their sum over the run, logged at the end as ``what`` (``"delta:
    ... commits"``); ``on_batch(sink, batch, stats)`` after each batch."""
    total = ApplyStats()
    started = time.monotonic()

    def applied(batch: Batch, stats: Any) -> None:
        total.add(stats)
        if on_batch is not None:
            on_batch(sink, batch, stats)

    pipeline.run(dsn, options, sink, on_batch=applied)
    log.info(
        "%s: %d changes in %d batches (%d commits) in %.1f s",
        what,
        total.changes,
        total.batches,
        total.commits,
        time.monotonic() - started,
    )
    return total
