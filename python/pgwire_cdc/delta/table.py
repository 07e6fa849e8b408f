"""Delta tables as the sink keeps them: where they are, what they hold, where they stand.

:func:`table_path` places one Delta table per source table; :func:`read_table` reads any
of them (the ``deltalake`` package reads every table, deletion vectors included) in the
plain types the sink stores (:mod:`pgwire_cdc.lakehouse.shape`); :func:`position`
reads the stream position a table's log records (see :mod:`pgwire_cdc.delta`, *Exactly
once*).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pyarrow as pa

from ..errors import DeltaError
from ..lakehouse.points import POINTS, AsOf, NoPoint, choose
from ..lakehouse.positions import APP_ID, NO_PROGRESS, Source, progress_of, source_of
from ..lakehouse.shape import plain_schema
from ..tables import table_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..lakehouse.digests import LakeDigests


def table_path(path: str | os.PathLike[str], name: str) -> str:
    """The Delta table of the source table ``name`` ("schema.table") under ``path`` (a
    directory, made absolute, or an object-store URI)."""
    return f"{base_path(path)}/{quote(name, safe='._-')}"


#: The directory under a Delta sink's path holding its history tables.
HISTORY_DIR = "_pgwire_cdc.history"


def history_path(path: str | os.PathLike[str], name: str) -> str:
    """The history table (``history="scd2"``) of the source table ``name`` under ``path``:
    beside the current-state tables, in a directory of its own (so no source table's
    name can be it)."""
    return f"{base_path(path)}/{HISTORY_DIR}/{quote(name, safe='._-')}"


def base_path(path: str | os.PathLike[str]) -> str:
    # Spark takes `delta.`<path>`` for a table only when the path is absolute.
    base = os.fspath(path)
    if "://" not in base:
        base = os.path.abspath(base)
    return base.rstrip("/") or "/"


#: delta-rs storage options (object-store credentials and endpoint), None: the
#: environment's.
StorageOptions = Mapping[str, str] | None


def open_table(path: str, storage_options: StorageOptions = None) -> Any:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(path, storage_options=_options(storage_options))
    except TableNotFoundError:
        return None


def _options(storage_options: StorageOptions) -> dict[str, str] | None:
    return dict(storage_options) if storage_options is not None else None


def read_table(
    path: str, where: str | None = None, storage_options: StorageOptions = None
) -> pa.Table:
    """The rows of the Delta table at ``path`` (``where``: an SQL filter;
    ``storage_options``: delta-rs's, for a table on an object store)."""
    table = open_table(path, storage_options)
    if table is None:
        raise DeltaError(f"no Delta table at {path}")
    return read_version(table, where)


def read_version(table: Any, where: str | None = None) -> pa.Table:
    """The rows of the version of a Delta table a ``deltalake.DeltaTable`` stands at."""
    from deltalake import QueryBuilder

    query = "SELECT * FROM t" + (f" WHERE {where}" if where else "")
    rows = table_of(QueryBuilder().register("t", table).execute(query))
    # DataFusion reads strings as views; the sink works in the plain types.
    return rows.cast(plain_schema(rows.schema))


def reduce_version(table: Any, reduce: LakeDigests) -> pa.Table:
    """The rows of the version a ``deltalake.DeltaTable`` stands at, reduced batch by
    batch as they are read (verify's digests: the rows are never all in memory)."""
    from deltalake import QueryBuilder

    reader = pa.RecordBatchReader.from_stream(
        QueryBuilder().register("t", table).execute("SELECT * FROM t")
    )
    plain = plain_schema(reader.schema)
    batches = (b.cast(plain) for b in reader)
    return pa.Table.from_batches(reduce.reduce(batches), reduce.output_schema(plain))


def read(
    path: str | os.PathLike[str],
    tables: Iterable[str] | None = None,
    *,
    as_of_lsn: int | None = None,
    spark: SparkSession | None = None,
    storage_options: StorageOptions = None,
) -> AsOf:
    """The Delta tables of the source tables ``tables`` (None: every table the point
    holds) under ``path``, all as of one source LSN: each at the version the sink's newest
    as-of point at or before ``as_of_lsn`` names (None: its newest point), so that they
    hold exactly the source transactions committed before that point's LSN
    (:mod:`pgwire_cdc.lakehouse.points`). Returns a dict of source table → rows
    (``pyarrow.Table``; Spark DataFrames with ``spark``) with ``.lsn``, the point's LSN.
    Raises :class:`~pgwire_cdc.errors.DeltaError` when no point fits; a version removed
    by ``VACUUM`` cannot be read (its files are gone)."""
    from deltalake import DeltaTable

    points_path = table_path(path, POINTS)
    where = None if as_of_lsn is None else f"lsn <= {int(as_of_lsn)}"
    if spark is not None:
        frame = spark.read.format("delta").load(points_path)
        points = frame.where(where).toArrow() if where else frame.toArrow()
    else:
        found = open_table(points_path, storage_options)
        if found is None:
            raise DeltaError(
                f"no as-of points under {base_path(path)}: the sink (delta.run) records them "
                "as it runs"
            )
        points = read_version(found, where)
    try:
        lsn, versions = choose(points, tables, as_of_lsn)
    except NoPoint as e:
        raise DeltaError(f"{base_path(path)}: {e}") from None
    out: dict[str, Any] = {}
    for name, version in versions.items():
        location = table_path(path, name)
        if spark is not None:
            out[name] = spark.read.format("delta").option("versionAsOf", version).load(location)
        else:
            table = DeltaTable(location, version=version, storage_options=_options(storage_options))
            out[name] = read_version(table)
    return AsOf(lsn, out)


@dataclass
class Position:
    """Where a table stands in the stream (see *Exactly once*)."""

    #: Commit LSN of the last transaction applied in full (None: nothing yet).
    lsn: int | None
    #: Incremental-snapshot progress recorded with the table's last commit (a key list,
    #: or None once complete), or absent.
    progress: Any = NO_PROGRESS


def position(path: str, storage_options: StorageOptions = None) -> Position | None:
    """The stream position recorded in the Delta table at ``path``, None without table."""
    table = open_table(path, storage_options)
    if table is None:
        return None
    return Position(table.transaction_version(APP_ID), _recorded_progress(table))


#: Commits read by the first look for a table's progress; each further look reads four
#: times as many.
_HISTORY_PAGE = 32

#: The table property that gives a new table the ``deletionVectors`` feature.
DELETION_VECTORS = {"delta.enableDeletionVectors": "true"}

#: The table property that keeps a table's change data feed (``table_changes``).
CHANGE_DATA_FEED = "delta.enableChangeDataFeed"


def _recorded_progress(table: Any) -> Any:
    """The progress recorded by the newest commit that records one, however many commits
    of other writers (OPTIMIZE, VACUUM, a user's own writes) came after it. The sink's
    commits record it whenever the sink knows it, so the look usually ends at the sink's
    last commit."""
    return _newest_recorded(table, progress_of, NO_PROGRESS)


def recorded_source(table: Any) -> Source | None:
    """The source (:mod:`pgwire_cdc.lakehouse.identity`) recorded by the newest commit
    that records one; the sink's commits all do."""
    found: Source | None = _newest_recorded(table, source_of, None)
    return found


def _newest_recorded(table: Any, parse: Callable[[str | None], Any], absent: Any) -> Any:
    """What ``parse`` finds in the ``userMetadata`` of the newest commit where it finds
    anything but ``absent``."""
    limit = _HISTORY_PAGE
    while True:
        commits = table.history(limit)
        for commit in commits:  # newest first
            found = parse(commit.get("userMetadata"))
            if found is not absent:
                return found
        if len(commits) < limit:
            return absent
        limit *= 4
