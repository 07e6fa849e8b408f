"""The baseline the Delta sink is measured against: a Parquet "mirror" that keeps each
table whole and rewrites a touched table in full per batch (``v<N>/part-0.parquet``), with
one JSON state file. It was the project's Spark end before the Delta Lake sink
(``pgwire_cdc.delta``); benches/spark.py runs both in the same process.

Layout of a mirror directory::

    <path>/_pgwire_cdc_mirror.json        the committed state (see below)
    <path>/<schema.table>/v<N>/part-0.parquet   the table as of state version N

Apply, and why a crash at any point is harmless
-----------------------------------------------
Each batch is applied to the tables it touches (``_native.apply_changes``: rows matched on
the replica-identity key, or as a multiset of whole rows for REPLICA IDENTITY FULL tables
without one; unchanged-TOAST columns keep the value the mirror holds). Every touched table
is written as a *new* version directory, and only then is the state file replaced in one
``rename``: it names the current version of every table, the last applied ``batch.lsn`` and
the *watermark* — the highest ``(_commit_lsn, _tx_ordinal)`` applied. The slot is acked
after that. So a crash

* before the rename leaves the previous state in force (the new version directories are
  removed as leftovers on the next start) and the slot has not moved past it: the batch
  comes again;
* after the rename but before the ack: the batch (or more) comes again, and every row at
  or below the watermark is skipped, so nothing is applied twice — not even part of a
  transaction that spanned batches.

A new initial snapshot (``batch.snapshot_start``) replaces every table of the mirror.

Schema changes: a batch whose change table has other columns (ADD COLUMN, a type change,
a publication's column list changed) re-shapes the mirror table: new columns are null for
the rows the mirror already holds (PostgreSQL may have filled them with a default: the
mirror cannot know), and a changed type is cast where Arrow can cast it. A column the
change table does not have (DROP COLUMN, or a column list that no longer names it) was not
carried by those changes, so it is not set to NULL: it stays, and the rows those changes
update keep the value the mirror holds for it, as PostgreSQL's own subscriber keeps its
columns; rows they insert have it null. A REPLICA IDENTITY FULL table without a key, whose
rows are matched whole, cannot match on a column the changes do not carry: there the
column goes.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pgwire_cdc import _native
from pgwire_cdc.errors import Error
from pgwire_cdc.tables import METADATA_COLUMNS, mark_unchanged, parse_segment_key, table_of

if TYPE_CHECKING:
    from pgwire_cdc.streaming import Batch
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("pgwire_cdc")


class MirrorError(Error):
    """The mirror cannot apply a change table."""


STATE_FILE = "_pgwire_cdc_mirror.json"
STATE_FORMAT = 1


@dataclass
class ApplyStats:
    """What applying batches did, summed over tables."""

    batches: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    truncated: int = 0
    #: Rows at or below the watermark, delivered again after a restart and skipped.
    skipped: int = 0
    #: Updates or deletes of rows the mirror did not hold.
    missing_rows: int = 0
    #: Unchanged-TOAST values neither the stream nor the mirror knew (left null).
    unknown_values: int = 0

    def add(self, other: dict[str, int] | ApplyStats) -> None:
        counts = other if isinstance(other, dict) else other.__dict__
        for name, value in counts.items():
            setattr(self, name, getattr(self, name) + value)

    @property
    def changes(self) -> int:
        return self.inserted + self.updated + self.deleted + self.truncated


@dataclass
class _TableState:
    version: int
    #: Replica-identity key columns; None: whole rows, as a multiset.
    key: list[str] | None
    rows: int = 0


@dataclass
class _State:
    version: int = 0
    lsn: int | None = None
    watermark: tuple[int, int] | None = None
    tables: dict[str, _TableState] = field(default_factory=dict)
    #: Incremental snapshots (``Batch.snapshot_progress``): per table, the key up to
    #: which its existing rows are held, or None once all are.
    progress: dict[str, list[Any] | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "version": self.version,
            "lsn": self.lsn,
            "watermark": list(self.watermark) if self.watermark else None,
            "tables": {
                name: {"version": t.version, "key": t.key, "rows": t.rows}
                for name, t in self.tables.items()
            },
            "progress": self.progress,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> _State:
        if doc.get("format") != STATE_FORMAT:
            raise MirrorError(f"unknown mirror state format {doc.get('format')!r}")
        watermark = doc.get("watermark")
        return cls(
            version=int(doc["version"]),
            lsn=doc.get("lsn"),
            watermark=(int(watermark[0]), int(watermark[1])) if watermark else None,
            tables={
                name: _TableState(int(t["version"]), t.get("key"), int(t.get("rows", 0)))
                for name, t in doc["tables"].items()
            },
            progress=dict(doc.get("progress") or {}),
        )


def key_columns(table: pa.Table) -> list[str] | None:
    """The columns a change table's rows are matched on: the replica-identity key, or
    None (whole rows, a multiset) for REPLICA IDENTITY FULL and tables without a key."""
    metadata = table.schema.metadata or {}
    if metadata.get(b"pg_replica_identity") == b"f":
        return None
    keys = [
        f.name
        for f in table.schema
        if f.name not in METADATA_COLUMNS
        and (f.metadata or {}).get(b"pg_replica_identity") == b"true"
    ]
    return keys or None


def data_schema(table: pa.Table) -> pa.Schema:
    """The source table's columns of a change table (field metadata kept, table metadata
    too: it names the relation)."""
    fields = [f for f in table.schema if f.name not in METADATA_COLUMNS]
    return pa.schema(fields, metadata=table.schema.metadata)


class Mirror:
    """Parquet copies of source tables in ``path``, kept equal to them by :meth:`apply`.

    ``on_step`` (for tests and instrumentation) is called with ``"table-written"`` after
    each table's new version is on disk and ``"committed"`` after the state file is
    replaced.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, on_step: Callable[[str], None] | None = None
    ):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._on_step = on_step or (lambda _step: None)
        self._tables: dict[str, pa.Table] = {}
        self.state = self._load_state()
        self._remove_leftovers()

    # -- state ---------------------------------------------------------------------

    def _load_state(self) -> _State:
        file = self.path / STATE_FILE
        if not file.exists():
            return _State()
        try:
            return _State.from_json(json.loads(file.read_text()))
        except (ValueError, KeyError, TypeError) as e:
            raise MirrorError(
                f"the mirror state {file} is damaged ({e}); remove the directory {self.path} "
                "and drop the replication slot to start over with a new snapshot"
            ) from e

    def _table_dir(self, name: str) -> Path:
        return self.path / quote(name, safe="")

    def _version_dir(self, name: str, version: int) -> Path:
        return self._table_dir(name) / f"v{version:08d}"

    def _remove_leftovers(self) -> None:
        """Version directories the committed state does not name: written by an apply
        that crashed before its commit, or superseded."""
        for table_dir in self.path.iterdir():
            if not table_dir.is_dir():
                continue
            current = None
            for name, t in self.state.tables.items():
                if self._table_dir(name) == table_dir:
                    current = self._version_dir(name, t.version)
            for version_dir in table_dir.iterdir():
                if version_dir != current:
                    shutil.rmtree(version_dir, ignore_errors=True)

    def _commit(self, state: _State) -> None:
        file = self.path / STATE_FILE
        tmp = file.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(state.to_json(), f, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, file)
        _fsync_dir(self.path)
        self.state = state

    # -- reading -------------------------------------------------------------------

    @property
    def lsn(self) -> int | None:
        """The last applied ``batch.lsn`` (None: nothing applied yet)."""
        return self.state.lsn

    @property
    def watermark(self) -> tuple[int, int] | None:
        """The highest ``(_commit_lsn, _tx_ordinal)`` applied."""
        return self.state.watermark

    @property
    def table_names(self) -> list[str]:
        return sorted(self.state.tables)

    def table_path(self, name: str) -> Path:
        """The directory holding the current version of ``name`` (Parquet)."""
        t = self.state.tables.get(name)
        if t is None:
            raise MirrorError(f"the mirror has no table {name!r}")
        return self._version_dir(name, t.version)

    def table(self, name: str) -> pa.Table:
        """The current rows of ``name`` (data columns only)."""
        cached = self._tables.get(name)
        if cached is None:
            cached = pq.read_table(self.table_path(name) / "part-0.parquet")
            self._tables[name] = cached
        return cached

    def dataframe(self, spark: SparkSession, name: str) -> DataFrame:
        """The current version of ``name`` as a Spark DataFrame, read from Parquet by Spark;
        a table with ``time`` columns (which Spark reads only with its TIME type turned on)
        through Arrow, typed as ``to_spark`` types it."""
        from pgwire_cdc.spark.types import has_time, to_spark

        table = self.table(name)
        if any(has_time(f.type) for f in table.schema):
            return to_spark(spark, {name: table})[name]
        return spark.read.parquet(str(self.table_path(name)))

    def register(self, spark: SparkSession) -> dict[str, str]:
        """Temporary views for every mirror table in ``spark``, named ``schema__table``
        (re-register after applying more batches). Returns view name by table name."""
        views = {}
        for name in self.table_names:
            view = _view_name(name)
            self.dataframe(spark, name).createOrReplaceTempView(view)
            views[name] = view
        return views

    # -- applying ------------------------------------------------------------------

    def apply(self, batch: Batch) -> ApplyStats:
        """Applies one batch and commits it (atomically, with ``batch.lsn`` and the
        watermark). Ack the batch only after this returns."""
        return self.apply_tables(
            batch.tables,
            batch.lsn,
            snapshot_start=batch.snapshot_start,
            progress=batch.snapshot_progress,
        )

    def held_tables(self) -> dict[str, list[Any] | None]:
        """What the mirror holds, as ``stream(held_tables=...)`` takes it: every table it
        has, None when complete, or the key its incremental snapshot reached."""
        held: dict[str, list[Any] | None] = dict.fromkeys(self.state.tables)
        held.update(self.state.progress)
        return held

    def apply_tables(
        self,
        tables: dict[str, pa.Table],
        lsn: int,
        *,
        snapshot_start: bool = False,
        progress: dict[str, list[Any] | None] | None = None,
    ) -> ApplyStats:
        stats = ApplyStats(batches=1)
        state = _State(
            version=self.state.version + 1,
            lsn=self.state.lsn,
            watermark=self.state.watermark,
            tables=dict(self.state.tables),
            progress=dict(self.state.progress),
        )
        if snapshot_start:
            # A new initial snapshot replaces whatever the mirror held.
            state.tables = {}
            state.watermark = None
            state.progress = {}
            self._tables = {}
        # Committed with the rows, so a restart resumes an incremental snapshot where the
        # mirror's rows end.
        state.progress.update(progress or {})
        prior = state.watermark
        touched: dict[str, pa.Table] = {}
        for key, changes in tables.items():
            name = parse_segment_key(key)[0]
            # Every table against the watermark from before this batch: the rows of
            # different tables interleave in commit order.
            changes, skipped = _after_watermark(changes, prior)
            stats.skipped += skipped
            if changes.num_rows == 0:
                continue
            state.watermark = _max_position(state.watermark, changes)
            shape = data_schema(changes)
            base = touched.get(name)
            if base is None and name in state.tables:
                base = self.table(name)
            keys = key_columns(changes)
            # Rows matched whole (no key) cannot be matched on a column the changes do not
            # carry: such a table takes the changes' shape.
            base = _reshape(name, base, shape, keep_uncarried=keys is not None)
            changes = _widen(changes, base.schema)
            stream, counts = _native.apply_changes(base, changes, keys)
            touched[name] = table_of(stream)
            stats.add(counts)
            state.tables[name] = _TableState(state.version, keys, touched[name].num_rows)
        for name, table in touched.items():
            target = self._version_dir(name, state.version)
            if target.exists():
                shutil.rmtree(target)
            target.mkdir(parents=True)
            # Arrow's own list field names ("item"), so a table read back has exactly the
            # types of the change tables.
            pq.write_table(table, target / "part-0.parquet", use_compliant_nested_type=False)
            _fsync_dir(target)
            self._on_step("table-written")
        state.lsn = lsn if state.lsn is None else max(state.lsn, lsn)
        self._commit(state)
        self._tables.update(touched)
        self._on_step("committed")
        for name in touched:
            for old in self._table_dir(name).iterdir():
                if old != self._version_dir(name, state.version):
                    shutil.rmtree(old, ignore_errors=True)
        return stats


def _view_name(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name.replace(".", "__", 1))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _after_watermark(changes: pa.Table, watermark: tuple[int, int] | None) -> tuple[pa.Table, int]:
    """The rows past ``watermark`` (a restart delivers what the mirror may already hold)."""
    if watermark is None or changes.num_rows == 0:
        return changes, 0
    lsn, ordinal = watermark
    commit = changes["_commit_lsn"]
    keep = pc.or_(
        pc.greater(commit, lsn),
        pc.and_(pc.equal(commit, lsn), pc.greater(changes["_tx_ordinal"], ordinal)),
    )
    kept = changes.filter(keep)
    return kept, changes.num_rows - kept.num_rows


def _max_position(current: tuple[int, int] | None, changes: pa.Table) -> tuple[int, int]:
    # Rows are in commit order, then _tx_ordinal order: the last row is the highest.
    last = (
        int(changes["_commit_lsn"][-1].as_py()),
        int(changes["_tx_ordinal"][-1].as_py()),
    )
    return last if current is None else max(current, last)


def _reshape(
    name: str, base: pa.Table | None, shape: pa.Schema, *, keep_uncarried: bool
) -> pa.Table:
    """The mirror table in the change table's shape, plus (``keep_uncarried``) the columns
    the mirror holds that the changes do not carry (see the module documentation)."""
    if base is None:
        return shape.empty_table()
    if base.schema.equals(shape, check_metadata=False):
        return base.replace_schema_metadata(shape.metadata)
    columns = []
    for f in shape:
        if f.name not in base.column_names:
            columns.append(pa.nulls(base.num_rows, f.type))
            continue
        column = base[f.name]
        if column.type != f.type:
            try:
                column = column.cast(f.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise MirrorError(
                    f"{name}: column {f.name!r} changed type to {f.type} and the rows the "
                    f"mirror holds cannot be converted ({e}); re-snapshot the table (drop the "
                    "slot and the mirror directory)"
                ) from e
        columns.append(column)
    # Columns the changes do not carry stay (see the module documentation).
    kept = [f for f in base.schema if keep_uncarried and f.name not in shape.names]
    columns.extend(base[f.name] for f in kept)
    return pa.Table.from_arrays(columns, schema=pa.schema([*shape, *kept], shape.metadata))


def _widen(changes: pa.Table, schema: pa.Schema) -> pa.Table:
    """The change table with the mirror's columns it does not carry, null and named in
    ``_unchanged``, so the rows it updates keep the mirror's values for them."""
    missing = [f for f in schema if f.name not in changes.column_names]
    for f in missing:
        changes = changes.append_column(f, pa.nulls(changes.num_rows, f.type))
    return mark_unchanged(changes, [f.name for f in missing])


def run(
    dsn: str,
    path: str | os.PathLike[str],
    *,
    publication: str = "pgwire_cdc",
    slot: str = "pgwire_cdc_slot",
    tables: Iterable[str] | None = None,
    on_batch: Callable[[Mirror, Batch, ApplyStats], None] | None = None,
    on_step: Callable[[str], None] | None = None,
    **stream_options: Any,
) -> ApplyStats:
    """Mirrors the publication's tables into ``path`` until the stream ends (give
    ``until_lsn`` or ``idle_timeout`` for a run that ends by itself). Each batch is applied
    and committed before it is acked; ``on_batch`` is called after each one."""
    from pgwire_cdc.streaming import stream

    mirror = Mirror(path, on_step=on_step)
    _check_slot_matches(dsn, slot, mirror)
    total = ApplyStats()
    started = time.monotonic()
    stream_options.setdefault("held_tables", mirror.held_tables())
    batches = stream(
        dsn,
        publication=publication,
        slot=slot,
        tables=list(tables) if tables is not None else None,
        **stream_options,
    )
    for batch in batches:
        stats = mirror.apply(batch)
        batch.ack()
        total.add(stats)
        if on_batch is not None:
            on_batch(mirror, batch, stats)
    log.info(
        "mirror: %d changes in %d batches in %.1f s, applied up to LSN %s",
        total.changes,
        total.batches,
        time.monotonic() - started,
        mirror.lsn,
    )
    return total


def _check_slot_matches(dsn: str, slot: str, mirror: Mirror) -> None:
    """An existing slot with an empty mirror would stream changes on top of nothing: the
    rows from before the slot was made would be missing."""
    import psycopg
    from pgwire_cdc import admin

    if mirror.lsn is not None:
        return
    with psycopg.connect(dsn, autocommit=True) as conn:
        if admin.get_slot(conn, slot) is not None:
            raise MirrorError(
                f"the replication slot {slot!r} exists but the mirror at {mirror.path} is "
                "empty, so the rows from before the slot was created would be missing; drop "
                "the slot (pg_drop_replication_slot) to start with a new snapshot, or point "
                "the mirror at the directory that used it"
            )
