"""The lakehouse sink: one table per source table, kept exactly once, in any table format.

:class:`LakehouseSink` is a :class:`pgwire_cdc.pipeline.Sink` that owns the state machine
of applying batches; a :class:`~pgwire_cdc.lakehouse.format.TableFormat` carries out each
step on its tables (Delta Lake, Iceberg, the in-memory tables of the offline tests).

Per batch:

* **Initial snapshot** (``batch.snapshot``): a table's first part of a new snapshot
  replaces the table, recording the snapshot's LSN as its position; later parts append.
  A table the snapshot copied by Spark tasks (:meth:`LakehouseSink.snapshot_reader`)
  before its batch only appends. A table a snapshot reported complete without rows is
  cleared, or made from the catalog when it has no table (:meth:`missing_tables`). A
  table holding changes past the snapshot's LSN is refused: it was written from another
  server or slot.
* **Changes**: per table (each schema segment ``"t@N"`` in turn), the rows at or below
  the table's position are dropped (:func:`~pgwire_cdc.lakehouse.positions.unapplied`: a
  batch delivered again after a crash); the rest are cut into commits
  (:func:`~pgwire_cdc.lakehouse.positions.marks`): one, or two where the batch ends
  inside a transaction. Each commit first evolves the table to the changes' columns;
  a table with a key takes one MERGE of the reduced changes (one final change per key),
  a keyless table (REPLICA IDENTITY FULL, rows as a multiset) is rewritten with the
  changes applied. Columns the table holds that the changes lack stay: they are
  unchanged in every row (a keyless table drops them, since whole rows are matched).
* **Incremental copies** (``batch.snapshot_progress``): the progress travels in the
  table's last commit of the batch; progress without rows of the table gets a commit of
  its own unless the table is past the batch already.

* **The source** (:meth:`LakehouseSink.check_source`, :mod:`~pgwire_cdc.lakehouse.
  identity`): every commit records the PostgreSQL cluster, timeline and database its rows
  come from; a table written from another source, or holding changes the server's WAL
  does not (a server restored to an earlier point), is refused before anything streams.
* **As-of points** (:mod:`~pgwire_cdc.lakehouse.points`): after a batch, at most every
  ``as_of_every`` seconds and when a run ends (:meth:`LakehouseSink.finish`), the version
  of every complete table that holds the source exactly up to the batch's LSN: the
  table's newest version, or for a table with rows of the transaction the batch cut in
  two, its version from before that transaction's first rows.

The positions read from the tables are kept between batches, as committed; a new
snapshot forgets them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import _native
from ..errors import ConfigError, Error
from ..lsn import int_to_lsn
from ..tables import (
    METADATA_COLUMNS,
    key_columns,
    key_runs,
    mark_unchanged,
    parse_segment_key,
    table_of,
    unsliced,
    without_columns,
)
from . import history as history_mod
from . import vanished
from .format import TableFormat, TablePosition
from .identity import Server, refusal
from .points import POINTS, POINTS_SCHEMA, is_points, point_rows
from .positions import NO_PROGRESS, Mark, Source, marks, snapshot_position, txn_id, unapplied
from .reshape import DROPPED_PROPERTY, column_ops
from .shape import CHANGE_FEED_COLUMN, data_columns, lake_shape, plain_schema
from .stats import ApplyStats

if TYPE_CHECKING:
    from ..incremental import CopyRange
    from ..schema_changes import SchemaChange
    from ..streaming import Batch, StreamOptions

log = logging.getLogger("pgwire_cdc")

#: The table property holding the catalog description of the source table that the
#: table's columns follow (``Batch.table_shapes``, without the DDL capture: see
#: :mod:`pgwire_cdc.schema_watch`), given back to the next run as ``held_shapes``.
SHAPE_PROPERTY = "pgwire_cdc.source_shape"


def segments(tables: Mapping[str, pa.Table]) -> dict[str, list[pa.Table]]:
    """A batch's change tables by source table, each table's schema segments in order:
    ``"s.t"``, then ``"s.t@2"``, ``"s.t@3"`` (see :mod:`pgwire_cdc.tables`)."""
    groups: dict[str, list[tuple[int, pa.Table]]] = {}
    for key, changes in tables.items():
        name, version = parse_segment_key(key)
        groups.setdefault(name, []).append((version, changes))
    # A change table whose rows are matched on different keys is cut where the key changes.
    ordered = {
        name: [c for _, c in sorted(parts, key=lambda p: p[0])] for name, parts in groups.items()
    }
    return {
        name: [piece for c in parts for piece in key_runs(c)] for name, parts in ordered.items()
    }


def adds_keys(changes: pa.Table, keys: list[str], *, copying: bool = False) -> bool:
    """Whether applying the change table ``changes`` may upsert a key its table lacks: it
    holds an insert or a snapshot row (``read``), or an update that moved a row to a new
    key (its old image's key differs), or ``copying``: the table is still being copied
    (an update may then name a key no chunk has brought yet). When False, every key the
    batch upserts is in the table already (a format's MERGE may then leave out its INSERT
    clause)."""
    if copying:
        return True
    kinds = changes["_change_type"]
    if pc.any(pc.is_in(kinds, value_set=pa.array(["insert", "read"]))).as_py():
        return True
    if "_before" not in changes.column_names:
        return False
    updates = changes.filter(pc.equal(kinds, "update"))
    if updates.num_rows == 0:
        return False
    before = updates["_before"].combine_chunks()
    with_image = before.is_valid()
    moved = pa.array([False] * updates.num_rows)
    for k in keys:
        old = pc.struct_field(before, k)
        new = updates[k].combine_chunks()
        differs = pc.fill_null(pc.not_equal(old, new), False)
        moved = pc.or_(moved, pc.and_(differs, with_image))
    return bool(pc.any(moved).as_py())


def ddl_steps(changes: Iterable[SchemaChange]) -> dict[str, list[list[SchemaChange]]]:
    """A batch's schema changes by source table, each DDL's changes (one message: one
    LSN) as one step, in WAL order."""
    steps: dict[str, dict[int, list[SchemaChange]]] = {}
    for change in changes:
        steps.setdefault(change.table, {}).setdefault(change.lsn, []).append(change)
    return {name: list(by_lsn.values()) for name, by_lsn in steps.items()}


def interleave(
    parts: list[pa.Table], steps: list[list[SchemaChange]]
) -> list[pa.Table | list[SchemaChange]]:
    """A table's change tables (its schema segments, in commit order) cut at the places
    of its DDL ``steps``: rows and steps in the order they happened at the source. A
    step without a place (not in a transaction) goes first."""
    pending = list(steps)
    items: list[pa.Table | list[SchemaChange]] = []
    for part in parts:
        if part.num_rows == 0:
            items.append(part)  # rows none, progress perhaps: it goes to the sink as it is
            continue
        rest = part
        while pending and rest.num_rows:
            place = pending[0][0].place
            if place is None:
                items.append(pending.pop(0))
                continue
            commit, ordinal = rest["_commit_lsn"], rest["_tx_ordinal"]
            earlier = pc.or_(
                pc.less(commit, place[0]),
                pc.and_(pc.equal(commit, place[0]), pc.less_equal(ordinal, place[1])),
            )
            before = int(pc.sum(earlier).as_py() or 0)
            if before == rest.num_rows:
                break
            if before:
                items.append(rest.slice(0, before))
            items.append(pending.pop(0))
            rest = rest.slice(before)
        if rest.num_rows:
            items.append(rest)
    return [*items, *pending]


P = ParamSpec("P")
R = TypeVar("R")


def _reported(
    method: Callable[Concatenate[LakehouseSink, P], R],
) -> Callable[Concatenate[LakehouseSink, P], R]:
    """``method`` raising an error of the format's libraries or store
    (:attr:`~pgwire_cdc.lakehouse.format.TableFormat.foreign_errors`) as the format's own
    error, naming the table it met it on."""

    @functools.wraps(method)
    def reported(self: LakehouseSink, /, *args: P.args, **kwargs: P.kwargs) -> R:
        self._at = ""
        try:
            return method(self, *args, **kwargs)
        except Error:
            raise
        except self.format.foreign_errors as e:
            raise self.format.error(_failed(self.format.kind, self._at, e)) from e

    return reported


class LakehouseSink:
    """The tables of one stream in one table ``format`` (see the module documentation).
    ``on_step("committed")`` is called after each commit. ``as_of_every``: seconds between
    two as-of points at least (None: none are written). ``keep_dropped_columns``: a column
    dropped at the source stays in a table with a key, renamed
    (:func:`~pgwire_cdc.lakehouse.reshape.dropped_name`), instead of being dropped."""

    def __init__(
        self,
        format: TableFormat,
        on_step: Callable[[str], None] | None = None,
        *,
        as_of_every: float | None = 30.0,
        keep_dropped_columns: bool = False,
        history: str | None = None,
        history_tables: Iterable[str] | None = None,
        deletes: str = "hard",
        change_data_feed: bool = False,
    ) -> None:
        history_mod.check_mode(history)
        if deletes not in ("hard", "soft"):
            raise ConfigError(f"deletes={deletes!r}: 'hard' or 'soft'")
        #: ``"soft"``: a deleted row stays, ``_deleted`` true and ``_deleted_lsn`` its
        #: delete's commit LSN (:data:`SOFT_DELETE_COLUMNS`); a table without a key
        #: deletes its rows all the same (they have no identity to keep).
        self.deletes = deletes
        self.format = format
        #: Tables written with a change data feed (:data:`CHANGE_FEED_COLUMN` among the
        #: columns of tables with a key; the format turns the feed on for the tables it
        #: creates: :attr:`~pgwire_cdc.lakehouse.format.TableFormat.change_data_feed`).
        self.change_data_feed = change_data_feed
        format.change_data_feed = change_data_feed
        self.as_of_every = as_of_every
        self.keep_dropped_columns = keep_dropped_columns
        #: ``"scd2"``: history tables too (:mod:`~pgwire_cdc.lakehouse.history`), for the
        #: tables ``history_tables`` names (None: every table).
        self.history = history
        self.history_tables = None if history_tables is None else set(history_tables)
        self._on_step = on_step or (lambda _step: None)
        # Tables the initial snapshot in progress has written (their first part replaced
        # the table; later parts append).
        self._snapshot_written: set[str] = set()
        # Tables whose initial snapshot Spark tasks wrote before the snapshot's batch.
        self._prewritten: set[str] = set()
        #: Tables an initial snapshot reported complete that have no table yet (the
        #: source table was empty): :func:`~pgwire_cdc.pipeline.run` has them made.
        self.missing: list[str] = []
        # Per table reference: its position, read from the table once, then kept as
        # committed.
        self._positions: dict[str, TablePosition | None] = {}
        # The table a batch is being applied to, for the errors of the format's libraries.
        self._at = ""
        # Per source table: the incremental-copy progress of a copy under way, recorded
        # by every commit of the table.
        self._progress: dict[str, Any] = {}
        # The source the stream reads (check_source), recorded by every commit.
        self._source: Source | None = None
        # As-of points: every source table met (its reference), the version of each table
        # as last looked up (dropped at each commit to it), when the last point was
        # written, and the LSN of the last batch when a point may stand there.
        self._refs: dict[str, str] = {}
        self._versions: dict[str, int | None] = {}
        self._point_written: float | None = None
        self._point_lsn: int | None = None
        # Per table reference holding rows of a transaction a batch cut in two: that
        # transaction's commit LSN, and the table's version from before its first rows
        # (None: not known, as when they were committed before this process started).
        self._cut: dict[str, tuple[int, int | None]] = {}
        # Per source table: the description its table's SHAPE_PROPERTY holds (JSON).
        self._shapes: dict[str, str | None] = {}
        # Per table reference under a copy that reports key ranges: the keys it held when
        # the copy's first range came, sorted (:meth:`_with_vanished`).
        self._held_keys: dict[str, pa.Table] = {}

    # -- the pipeline's Sink protocol ------------------------------------------------

    @_reported
    def held_tables(
        self, published: Iterable[str] | None = None, slot_exists: bool = False
    ) -> dict[str, Any]:
        """``stream(held_tables=...)``: of the tables ``published`` and those the format
        finds by itself, the ones with a table: None when complete, or the key their
        incremental copy reached. With ``slot_exists`` (the stream resumes a slot), the
        format's error when there is no table at all: the changes would land on top of
        nothing, the rows from before the slot was made missing."""
        held: dict[str, Any] = {}
        for name in sorted(set(published or ()) | set(self.format.found_tables())):
            ref = self._ref(name)
            pos = self._position(ref)
            if pos is None:
                continue
            progress = self.format.progress(ref)
            held[name] = None if progress is NO_PROGRESS else progress
            # Kept, and recorded again with the table's next commit.
            self._progress[name] = held[name]
        if slot_exists and not held:
            raise self.format.error(
                f"the replication slot exists but there is no {self.format.kind} "
                f"{self.format.where()}, so the rows from before the slot was created would "
                "be missing; drop the slot (pg_drop_replication_slot) to start with a new "
                "snapshot, or point the sink at the tables that used it"
            )
        return held

    @_reported
    def held_shapes(self, published: Iterable[str] = ()) -> dict[str, dict[str, Any]]:
        """``stream(held_shapes=...)``: of the tables ``published`` and those the format
        finds, the source-table description each table's columns follow, where recorded."""
        held: dict[str, dict[str, Any]] = {}
        for name in sorted(set(published) | set(self.format.found_tables())):
            ref = self._ref(name)
            if not self.format.exists(ref):
                continue
            text = self._shapes[name] = self.format.property(ref, SHAPE_PROPERTY)
            if text:
                try:
                    held[name] = json.loads(text)
                except ValueError:
                    log.warning("%s: its recorded source description is not JSON", name)
        return held

    @_reported
    def check_source(self, server: Server, published: Iterable[str] = ()) -> None:
        """The server the stream reads (:mod:`~pgwire_cdc.lakehouse.identity`): raises the
        format's error when a table ``published`` or found was written from another
        source or holds changes the server's WAL does not; from now on every commit
        records the server's source."""
        for name in sorted(set(published) | set(self.format.found_tables())):
            ref = self._ref(name)
            pos = self._position(ref)
            if pos is None:
                continue
            where = f"the {self.format.kind} {ref}"
            reason = refusal(name, where, self.format.source(ref), pos.reached, server)
            if reason is not None:
                raise self.format.error(reason)
        self._source = server.source

    def _sourced(self, mark: Mark) -> Mark:
        """``mark`` recording the stream's source too."""
        return mark if self._source is None else dataclasses.replace(mark, source=self._source)

    def snapshot_reader(
        self, dsn: str, options: StreamOptions
    ) -> Callable[[str, int, list[str]], None] | None:
        """``stream(snapshot_reader=...)``: a new slot's initial snapshot read by Spark
        tasks under the slot's exported snapshot and written over each table, the
        consistent point as its position (rows go from the tasks to the table's files,
        never through the driver); None where the format leaves it to the stream."""
        if (
            not options.snapshot
            or self.history is not None
            or self.deletes == "soft"
            or self.change_data_feed
            or options.column_policies
        ):
            # The history tables, the soft-delete columns, the change feed's commit LSN
            # and the column policies take the snapshot's rows from its batches.
            return None
        copy = self.format.copier(dsn, options)
        if copy is None:
            return None

        def read(snapshot: str, consistent_point: int, names: list[str]) -> None:
            lsn = snapshot_position(consistent_point)
            for name in names:
                ref = self._ref(name)
                current = self._position(ref)
                self._check_not_ahead(name, ref, current, lsn)
                newer = current is None or current.lsn is None or lsn > current.lsn
                copy(name, snapshot, self._sourced(Mark(lsn, None, None)) if newer else None)
                self._prewritten.add(name)
                log.info("%s: initial snapshot written by Spark", name)

        return read

    def missing_tables(self) -> list[str]:
        """Tables a snapshot reported complete that have no table yet (their source
        table had no rows): :meth:`create_tables` makes them."""
        return list(self.missing)

    @_reported
    def create_tables(self, schemas: Mapping[str, pa.Schema]) -> None:
        """Makes the tables of ``schemas`` (change-table schemas, by source table) that
        do not exist yet, with the change tables' data columns."""
        for name, schema in schemas.items():
            ref = self._ref(name)
            if not self.format.exists(ref):
                data = pa.schema([f for f in schema if f.name not in METADATA_COLUMNS])
                self.format.create(ref, lake_shape(data.empty_table()).schema)
                self._positions[ref] = TablePosition(None)
        self.missing = [name for name in self.missing if name not in schemas]

    @_reported
    def apply(self, batch: Batch) -> ApplyStats:
        """Commits one batch to the tables it touches. Ack it only after this returns.
        An error of the format's libraries or store is raised as the format's error,
        naming the table (nothing of the batch is acked: a run again delivers it)."""
        stats = ApplyStats(batches=1)
        source = self._source
        if source is not None and batch.timeline not in (None, source.timeline):
            # A failover moved the stream to a new primary: its LSNs are that timeline's.
            self._source = dataclasses.replace(source, timeline=batch.timeline)
        if batch.snapshot_start:
            self._snapshot_written, self._prewritten = self._prewritten, set()
            self.missing = []
            self._positions = {}
            self._versions = {}
            self._progress = {name: None for name in self._snapshot_written}
            self._held_keys = {}
        tables = batch.tables
        if batch.snapshot_ranges and not batch.snapshot:
            tables = self._with_vanished(batch.tables, batch.snapshot_ranges)
        groups = segments(tables)
        ddl = ddl_steps(batch.schema_changes)
        for name in [*groups, *(n for n in ddl if n not in groups)]:
            self._at = name
            parts = groups.get(name, [])
            progress = batch.snapshot_progress.get(name, NO_PROGRESS)
            if batch.snapshot:
                for changes in parts:
                    self._snapshot_part(name, changes, stats)
                continue
            ref = self._ref(name)
            self._note_cut(ref, parts, batch.lsn)
            items = interleave(parts, ddl.get(name, []))
            for i, item in enumerate(items):
                if isinstance(item, pa.Table):
                    item = _as_then(item, items[:i], items[i + 1 :])
                    last = i == len(items) - 1
                    upto = _next_place(items[i + 1 :]) or batch.lsn
                    self._changes(name, ref, item, upto, progress if last else NO_PROGRESS, stats)
                else:
                    self._schema_step(name, ref, item, stats)
            if items and not isinstance(items[-1], pa.Table) and parts:
                # The batch's progress goes with a commit of the rows' own.
                self._changes(name, ref, parts[-1].slice(0, 0), batch.lsn, progress, stats)
        for name in batch.snapshot_progress:
            if groups.get(name):
                continue
            self._at = name
            ref = self._ref(name)
            if batch.snapshot:
                if name not in self._snapshot_written:
                    self._empty_for_snapshot(name, ref)
            elif not self.format.exists(ref):
                self.missing.append(name)
            else:
                progress = batch.snapshot_progress[name]
                if self._progress.get(name, NO_PROGRESS) != progress:
                    self._record_progress(name, ref, progress, batch.lsn, stats)
        for name, shape in batch.table_shapes.items():
            self._at = name
            self._record_shape(name, shape)
        for name, progress in batch.snapshot_progress.items():
            if progress is None or progress == []:
                # A copy ended, or one started (again): its ranges read the table afresh.
                self._held_keys.pop(self._ref(name), None)
        self._at = POINTS
        self._after_batch(batch)
        return stats

    @_reported
    def finish(self) -> None:
        """The stream ended: an as-of point at the last batch when one may stand there
        and none does yet."""
        if self.as_of_every is not None:
            self._write_point()

    def apply_table(self, ref: str, changes: pa.Table, lsn: int) -> ApplyStats:
        """Commits one change table to the table ``ref``, skipping the rows at or below
        its recorded position; ``lsn``: everything committed before it is in ``changes``
        or earlier (a batch's LSN)."""
        stats = ApplyStats(batches=1)
        self._changes(ref, ref, changes, lsn, NO_PROGRESS, stats)
        return stats

    # -- positions ---------------------------------------------------------------------

    def _position(self, ref: str) -> TablePosition | None:
        if ref not in self._positions:
            self._positions[ref] = self.format.position(ref)
        return self._positions[ref]

    def _ref(self, name: str) -> str:
        """The reference of the source table ``name``'s table, the table remembered for
        the as-of points."""
        ref = self.format.ref(name)
        self._refs[name] = ref
        self._at = name
        return ref

    def _committed(self, ref: str, mark: Mark | None) -> None:
        """The table ``ref`` took a commit recording ``mark`` (None: recording nothing,
        which a format may still have recorded as the table's latest: read it again)."""
        self._versions.pop(ref, None)
        if mark is None:
            self._positions.pop(ref, None)
        else:
            self._positions[ref] = TablePosition.of(mark, self._positions.get(ref))
        self._on_step("committed")

    def _check_not_ahead(
        self, name: str, ref: str, current: TablePosition | None, lsn: int
    ) -> None:
        if current is not None and current.lsn is not None and current.lsn > lsn:
            raise self.format.error(
                f"{name}: the {self.format.kind} {ref} holds changes up to a later LSN than "
                "this stream's initial snapshot (was it written from another server or "
                "slot?); remove it or point the sink elsewhere"
            )

    # -- the initial snapshot ----------------------------------------------------------

    def _snapshot_part(self, name: str, changes: pa.Table, stats: ApplyStats) -> None:
        ref = self._ref(name)
        if self._keeps_history(name) and changes.num_rows:
            self._snapshot_history(name, changes, first=name not in self._snapshot_written)
        if self.deletes == "soft" and key_columns(changes) is not None:
            changes = _live(changes, self.format.deleted_column)
        rows = lake_shape(changes).select(self._lake_columns(changes))
        stats.inserted += rows.num_rows
        if name in self._snapshot_written:
            self.format.write(ref, rows, "append", None)
            self._committed(ref, None)
        else:
            # The snapshot's rows carry its consistent point as their commit LSN.
            lsn = (
                snapshot_position(int(changes["_commit_lsn"][0].as_py()))
                if changes.num_rows
                else None
            )
            current = self._position(ref)
            mark = None
            if lsn is not None:
                self._check_not_ahead(name, ref, current, lsn)
                if current is None or current.lsn is None or lsn > current.lsn:
                    mark = self._sourced(Mark(lsn, None, None))
            self.format.write(ref, rows, "overwrite", mark)
            self._snapshot_written.add(name)
            self._progress[name] = None
            self._committed(ref, mark)
        stats.commits += 1

    def _empty_for_snapshot(self, name: str, ref: str) -> None:
        """A table the new snapshot found empty at the source: its rows go."""
        self._snapshot_written.add(name)
        if not self.format.exists(ref):
            self.missing.append(name)
            return
        empty = plain_schema(self.format.schema(ref)).empty_table()
        self.format.write(ref, empty, "overwrite", None)
        self._progress[name] = None
        self._committed(ref, None)

    # -- schema changes ----------------------------------------------------------------

    def _schema_step(
        self, name: str, ref: str, changes: list[SchemaChange], stats: ApplyStats
    ) -> None:
        """One DDL (its changes, from one message) applied to the table at its place:
        after the rows before it, before those after (:mod:`pgwire_cdc.lakehouse.reshape`),
        in a commit recording that place, so a batch delivered again skips it."""
        self._held_keys.pop(ref, None)  # its key columns may change
        kinds = {c.kind for c in changes}
        first = changes[0]
        if "drop_table" in kinds:
            if self.format.exists(ref):
                self.format.set_property(ref, DROPPED_PROPERTY, int_to_lsn(first.lsn))
                self._versions.pop(ref, None)
                self._on_step("committed")
            log.warning(
                "%s was dropped at the source (%s at LSN %s): its %s is kept as it was, marked %s",
                name,
                first.command_tag,
                first.lsn,
                self.format.kind,
                DROPPED_PROPERTY,
            )
            return
        if "rename_table" in kinds:
            old = first.renamed.get("table", "?")
            if self.format.exists(self.format.ref(old)):
                raise self.format.error(
                    f"{old} was renamed to {name} at the source (LSN {first.lsn}); the sink "
                    f"does not rename its {self.format.kind} {self.format.ref(old)}: rename "
                    f"or remove it, then copy {name} again (pgwire-cdc resnapshot)"
                )
        if not self.format.exists(ref):
            return
        place = first.place
        current = self._position(ref) or TablePosition(None)
        if place is None or _covers(current, place):
            return
        held = plain_schema(self.format.schema(ref))
        ops = column_ops(changes, held, keep_dropped=self.keep_dropped_columns)
        # A rewrite's new values are not in the stream: the table is read again (its
        # copy's progress comes with later batches). Until that copy completes the table
        # is not the source's (no as-of point names it), and the commit below records a
        # copy from the start, so a run that stops first copies it again. (The stream
        # stops before handing out a rewrite of a table it cannot read again.)
        rewritten = "rewrite" in kinds
        if rewritten:
            self._progress[name] = []
        if not ops:
            return
        # At (commit, -1): before the first row of its transaction, so after every
        # transaction committed earlier.
        mark = Mark(current.lsn, place) if place[1] >= 0 else Mark(place[0] - 1)
        if rewritten:
            mark = dataclasses.replace(mark, progress=[])
        mark = self._sourced(mark)
        self._before_partial(ref, mark, current)
        self.format.reshape(ref, name, ops, mark)
        stats.commits += 1
        self._committed(ref, mark)
        log.info(
            "%s: %s at LSN %s applied to its %s (%s)",
            name,
            first.command_tag or "DDL",
            first.lsn,
            self.format.kind,
            ", ".join(f"{op.kind} {op.column}" for op in ops),
        )

    # -- changes -----------------------------------------------------------------------

    def _record_progress(
        self, name: str, ref: str, progress: Any, lsn: int, stats: ApplyStats
    ) -> None:
        """Records a copy's progress that came without rows of the table to commit (its
        last chunk was empty, or the copy completed after it) in a commit of its own,
        unless the table already holds the commits of this batch (delivered again)."""
        current = self.format.position(ref)
        if current is None:
            self.missing.append(name)
            return
        if current.past(lsn):
            return
        self.format.record_progress(ref, lsn, progress)
        self._positions.pop(ref, None)
        self._versions.pop(ref, None)
        self._progress[name] = progress
        stats.commits += 1
        self._on_step("committed")

    def _changes(
        self,
        name: str,
        ref: str,
        changes: pa.Table,
        lsn: int,
        progress: Any,
        stats: ApplyStats,
    ) -> None:
        if self._keeps_history(name) and changes.num_rows:
            self._history(name, changes, lsn, stats)
        given, known = progress, self._progress.get(name, NO_PROGRESS)
        if progress is NO_PROGRESS:
            progress = known
        else:
            self._progress[name] = progress
        current = self._position(ref) or TablePosition(None)
        if changes.num_rows:
            kept = unapplied(changes, current.lsn, current.ordinal_of)
            stats.skipped += changes.num_rows - kept.num_rows
            changes = kept
        if changes.num_rows == 0:
            if progress is not NO_PROGRESS and not self.format.exists(ref):
                self.missing.append(name)
            elif given is not NO_PROGRESS and given != known:
                self._record_progress(name, ref, given, lsn, stats)
            return
        for part, mark in marks(changes, lsn, current.lsn, progress):
            self._commit(name, ref, part, self._sourced(mark), stats)

    def _commit(
        self, name: str, ref: str, changes: pa.Table, mark: Mark, stats: ApplyStats
    ) -> None:
        """One commit of ``changes`` (past the table's position) recording ``mark``."""
        self._before_partial(ref, mark, self._position(ref))
        changes = lake_shape(changes)
        keys = key_columns(changes)
        soft = self.deletes == "soft" and keys is not None
        if soft:
            changes = _live(changes, self.format.deleted_column)
        if not self.format.exists(ref):
            self.format.create(ref, changes.select(self._lake_columns(changes)).schema)
        changes, columns = self._fit(name, ref, changes, keyed=keys is not None)
        before = self._position(ref)
        try:
            if keys is None:
                base = self.format.read(ref, columns)
                wanted = pa.schema([changes.schema.field(c) for c in columns])
                stream, counts = _native.apply_changes(
                    unsliced(base.select(columns).cast(wanted)), unsliced(changes), None
                )
                self.format.write(ref, table_of(stream), "overwrite", mark)
            else:
                copying = isinstance(self._progress.get(name), list)
                adds = adds_keys(changes, keys, copying=copying)
                stream, counts = _native.reduce_changes(unsliced(changes), columns, keys)
                reduced, truncate = table_of(stream), counts["truncated"] > 0
                if soft:
                    reduced = self._soft_deletes(ref, changes, reduced, keys, truncate)
                    truncate = False
                self.format.merge(ref, reduced, keys, truncate, mark, adds=adds)
        except Exception as e:
            if not self._landed(ref, mark, before):
                raise
            log.warning(
                "%s: the %s reported its commit failed (%s), yet holds it: going on",
                name,
                self.format.kind,
                type(e).__name__,
            )
        stats.add({k: v for k, v in counts.items() if k in vars(stats)})
        stats.commits += 1
        self._committed(ref, mark)

    def _landed(self, ref: str, mark: Mark, before: TablePosition | None) -> bool:
        """Whether a commit recording ``mark`` that raised is in the table all the same. An
        object store may do a write and lose its answer on the way; the client, trying
        again, finds the commit done and takes it for a concurrent writer's (delta-rs:
        "a concurrent transaction added new data"). The table read again tells: it now
        stands at ``mark``, where it did not stand before (a mark that does not move the
        position, a repair's, cannot tell, and the error stands)."""
        if mark.repair:
            return False

        def at(position: TablePosition | None) -> bool:
            if position is None:
                return False
            if mark.partial is not None:
                txn, ordinal = txn_id(mark.partial[0]), mark.partial[1]
                return position.partial == mark.partial or position.ordinal_of(txn) == ordinal
            return position.lsn == mark.lsn and position.partial is None

        if at(before):
            return False
        try:
            now = self.format.position(ref)
        except Exception:  # the store still failing: the first error is the one to tell
            return False
        self._positions.pop(ref, None)
        return at(now)

    def _soft_deletes(
        self, ref: str, changes: pa.Table, reduced: pa.Table, keys: list[str], truncate: bool
    ) -> pa.Table:
        """The MERGE source ``reduced`` with its deletes made updates that keep the row,
        ``_deleted`` true and ``_deleted_lsn`` the LSN of the change that removed its key
        (a delete, a key change, a truncate); a key the table does not hold (inserted and
        deleted between two batches) is left out."""
        gone = reduced["_delete"]
        removals = reduced.filter(gone)
        live = reduced.filter(pc.invert(gone))
        flag = self.format.deleted_column
        extra: list[pa.Table] = []
        if truncate:
            # Every live row the batch does not name goes, at the last truncate.
            held = self.format.read(ref, [*keys, flag])
            held = held.filter(pc.invert(pc.fill_null(held[flag], False))).select(keys)
            named = reduced.select(keys).cast(held.schema)
            held = held.join(named, keys, join_type="left anti")
            extra.append(_truncated_at(changes, held, keys))
        if removals.num_rows:
            keys_now = removals.select(keys)
            held = self.format.read(ref, keys, keys_now).select(keys).cast(keys_now.schema)
            keys_now = keys_now.join(held, keys, join_type="left semi")
            extra.append(keys_now.join(_removed_at(changes, keys), keys, join_type="inner"))
        if not extra:
            return live
        removed = pa.concat_tables(extra, promote_options="permissive")
        return pa.concat_tables([live, _as_removed(removed, changes, reduced, keys, flag)])

    def _fit(
        self, name: str, ref: str, changes: pa.Table, *, keyed: bool
    ) -> tuple[pa.Table, list[str]]:
        """Evolves the table to the changes' columns, and the changes to the table's: a
        column the table holds that the changes lack is added to them null and named in
        every row's ``_unchanged``, so the table keeps its values (as for an unchanged
        TOAST value). A keyless table drops such columns instead: its rows are matched
        whole. The changes, and the columns of them the table takes (with the commit LSN
        where the table holds a change feed's: :data:`CHANGE_FEED_COLUMN`, kept current
        by a run without ``change_data_feed`` too)."""
        columns = self._lake_columns(changes)
        held = self.format.evolve(ref, name, changes.select(columns).schema, drop=not keyed)
        if keyed and CHANGE_FEED_COLUMN in held.names and CHANGE_FEED_COLUMN not in columns:
            columns.append(CHANGE_FEED_COLUMN)
        missing = [f for f in plain_schema(held) if f.name not in columns]
        for f in missing:
            changes = changes.append_column(f, pa.nulls(changes.num_rows, f.type))
        changes = mark_unchanged(changes, [f.name for f in missing])
        columns += [f.name for f in missing]
        # In the table's column order: a writer may take the changes' columns by position.
        order = held.names if set(held.names) == set(columns) else columns
        rest = [c for c in METADATA_COLUMNS if c not in order]
        return changes.select([*order, *rest]), order

    def _lake_columns(self, changes: pa.Table) -> list[str]:
        """The columns of a change table the table holds: its data columns, and with a
        change data feed and a key the commit LSN (:data:`CHANGE_FEED_COLUMN`)."""
        columns = data_columns(changes)
        if self.change_data_feed and key_columns(changes) is not None:
            columns.append(CHANGE_FEED_COLUMN)
        return columns

    def _with_vanished(
        self, tables: Mapping[str, pa.Table], ranges: Mapping[str, list[CopyRange]]
    ) -> dict[str, pa.Table]:
        """The batch's change tables with a ``delete`` for each row of a table that a
        chunk of its re-copy shows the source no longer has (:mod:`~pgwire_cdc.
        lakehouse.vanished`), at the chunk's place; a range the table holds already (the
        batch delivered again) is left alone."""
        out = dict(tables)
        for name, found in ranges.items():
            changes = tables.get(name)
            ref = self._ref(name)
            if changes is None or not self.format.exists(ref):
                continue
            at = (self._position(ref) or TablePosition(None)).lsn
            todo = [r for r in found if at is None or r.lsn > at]
            for whole in (r for r in todo if r.whole):
                # The copy's rows are the table then: what it held before goes.
                row = vanished.truncate_row(changes, whole.lsn - 1)
                changes = out[name] = vanished.with_deletes(changes, row, whole.lsn - 1)
                log.info("%s: replaced by a copy of the whole table", name)
            todo = [r for r in todo if not r.whole]
            keys = key_columns(changes)
            if not todo or keys is None:
                continue
            if not vanished.rangeable(changes.schema, keys):
                log.info(
                    "%s: its key does not order alike in PostgreSQL and here: rows the source "
                    "no longer has stay (verify --repair finds them)",
                    name,
                )
                continue
            held = self._held_keys.get(ref)
            if held is None:
                # Read once per copy (one chunk after another, each range once): keys the
                # table lost since only make deletes that find nothing, and keys it gained
                # came through the stream, from the source.
                flag = self.format.deleted_column
                soft = self.deletes == "soft" and flag in self.format.schema(ref).names
                held = self.format.read(ref, [*keys, flag] if soft else keys)
                if soft:
                    held = held.filter(pc.invert(pc.fill_null(held[flag], False)))
                held = held.select(keys).cast(changes.select(keys).schema)
                held = self._held_keys[ref] = held.sort_by([(k, "ascending") for k in keys])
            gone_rows = 0
            for r in todo:
                inside = vanished.within(held, keys, r.after, r.upto)
                gone = inside.join(r.keep.cast(inside.schema), keys, join_type="left anti")
                if gone.num_rows:
                    deletes = vanished.delete_rows(changes, gone, r.lsn)
                    changes = vanished.with_deletes(changes, deletes, r.lsn)
                    gone_rows += gone.num_rows
            if gone_rows:
                out[name] = changes
                log.info("%s: %d rows the source no longer has are deleted", name, gone_rows)
        return out

    def _record_shape(self, name: str, shape: dict[str, Any]) -> None:
        """Records the description the table's columns follow now, when it is another
        than the one recorded (one commit, no rows)."""
        text = json.dumps(shape, sort_keys=True, separators=(",", ":"), default=str)
        ref = self._ref(name)
        if name in self._shapes and self._shapes[name] == text:
            return
        if not self.format.exists(ref):
            return  # made later: the next run's start hands the description out again
        if name not in self._shapes:
            self._shapes[name] = self.format.property(ref, SHAPE_PROPERTY)
        if self._shapes[name] != text:
            self.format.set_property(ref, SHAPE_PROPERTY, text)
            self._shapes[name] = text
            self._versions.pop(ref, None)
            self._on_step("committed")

    # -- history tables ------------------------------------------------------------------

    def _keeps_history(self, name: str) -> bool:
        return self.history is not None and (
            self.history_tables is None or name in self.history_tables
        )

    @staticmethod
    def _history_keys(name: str, changes: pa.Table) -> list[str]:
        keys = key_columns(changes)
        if keys is None:
            raise ConfigError(
                f"{name} has no key (REPLICA IDENTITY FULL or none), so its rows have no "
                "versions to keep: give it a primary key or a replica identity index, or "
                "leave it out of history_tables"
            )
        return keys

    def _history_table(self, name: str, changes: pa.Table) -> tuple[str, pa.Schema]:
        """The history table of ``name``, made or evolved to the columns of ``changes``
        (a change table in the lake's types); its reference and columns (``_deleted`` so
        named, whatever the format calls it: :meth:`_history_read`)."""
        ref = self.format.history_ref(name)
        columns = data_columns(changes)
        ts_type = changes.schema.field("_commit_ts").type
        wanted = pa.schema([*changes.select(columns).schema, *history_mod.history_fields(ts_type)])
        if not self.format.exists(ref):
            self.format.create(ref, self._as_stored(wanted))
            self._positions[ref] = TablePosition(None)
        held = self.format.evolve(ref, f"{name} (history)", self._as_stored(wanted), drop=False)
        return ref, self._as_named(plain_schema(held))

    def _as_stored(self, what: Any) -> Any:
        """A history table's rows or schema with ``_deleted`` as the format calls it."""
        return _renamed(what, "_deleted", self.format.deleted_column)

    def _as_named(self, what: Any) -> Any:
        """The reverse of :meth:`_as_stored`."""
        return _renamed(what, self.format.deleted_column, "_deleted")

    def _history_read(self, ref: str, held: pa.Schema, keys: pa.Table | None = None) -> pa.Table:
        """The history table's current versions (of ``keys``' rows when given)."""
        rows = self.format.read(ref, self._as_stored(held).names, keys)
        return self._as_named(rows.filter(pc.is_null(rows["_valid_to_lsn"])))

    def _history_merge(self, ref: str, rows: pa.Table, keys: list[str], mark: Mark) -> None:
        source = self._as_stored(history_mod.merge_source(rows, keys))
        self.format.merge(ref, source, history_mod.merge_keys(keys), False, mark)
        self._committed(ref, mark)

    def _history(self, name: str, changes: pa.Table, lsn: int, stats: ApplyStats) -> None:
        """The versions ``changes`` make, into the history table of ``name``, past its
        own position (it may lag the table's: written in commits of its own)."""
        keys = self._history_keys(name, changes)
        href = self.format.history_ref(name)
        current = self._position(href) if self.format.exists(href) else None
        current = current or TablePosition(None)
        kept = unapplied(changes, current.lsn, current.ordinal_of)
        if kept.num_rows == 0:
            return
        for part, mark in marks(kept, lsn, current.lsn):
            part = lake_shape(part)
            href, held = self._history_table(name, part)
            columns = [n for n in held.names if n not in history_mod.HISTORY_COLUMNS]
            # Columns the changes lack (dropped or renamed at the source before them):
            # null in their versions, as the source row has no such column any more.
            for f in held:
                if f.name in columns and f.name not in part.column_names:
                    part = part.append_column(f, pa.nulls(part.num_rows, f.type))
            found = history_mod.versions(part, data_columns(part), keys)
            if pc.any(found["_truncate"]).as_py():
                now = self._history_read(href, held)
            else:
                touched = history_mod.touched_keys(found, keys)
                now = self._history_read(href, held, touched)
                now = now.filter(history_mod.matching(now, touched, keys))
            rows = history_mod.scd2_rows(found, now, columns, keys)
            gone = rows["_gone"] if "_gone" in rows.column_names else None
            rows = rows.select(held.names).cast(held)
            if gone is not None:
                rows = rows.append_column("_gone", gone)
            self._history_merge(href, rows, keys, self._sourced(mark))
            stats.commits += 1

    def _snapshot_history(self, name: str, changes: pa.Table, *, first: bool) -> None:
        """An initial snapshot's rows as versions from its consistent point; its first
        part ends the versions the history table holds as current (a new snapshot over
        an existing history: its rows start versions of their own)."""
        keys = self._history_keys(name, changes)
        shaped = lake_shape(changes)
        href, held = self._history_table(name, shaped)
        lsn = int(changes["_commit_lsn"][0].as_py())
        columns = [n for n in held.names if n not in history_mod.HISTORY_COLUMNS]
        ts_type = held.field("_valid_from").type
        rows = shaped.select([c for c in columns if c in shaped.column_names])
        for f in held:
            if f.name in columns and f.name not in rows.column_names:
                rows = rows.append_column(f, pa.nulls(rows.num_rows, f.type))
        rows = history_mod.snapshot_rows(rows.select(columns), lsn, ts_type)
        if first:
            now = self._history_read(href, held)
            if now.num_rows:
                ended = history_mod.ended_at(now, lsn).select(held.names).cast(held)
                rows = pa.concat_tables([rows.select(held.names).cast(held), ended])
        rows = rows.select(held.names).cast(held)
        if not first:
            self.format.write(href, self._as_stored(rows), "append", None)
            self._committed(href, None)
            return
        self._history_merge(href, rows, keys, self._sourced(Mark(snapshot_position(lsn))))

    # -- as-of points --------------------------------------------------------------------

    def _point_due(self) -> bool:
        written = self._point_written
        return written is None or time.monotonic() - written >= (self.as_of_every or 0.0)

    def _note_cut(self, ref: str, parts: list[pa.Table], lsn: int) -> None:
        """Notes the transaction a batch at ``lsn`` cut in two when the table has rows of
        it (its commit LSN at or past ``lsn``; only the batch's last transaction can be)."""
        if self.as_of_every is None:
            return
        # Not a copy's rows, nor the deletes and truncates a copy made (no transaction:
        # no xid): they stand at their chunk's high watermark, which the stream has passed
        # (every transaction before it is in the batch), even where that is past the
        # batch's LSN, the last commit before it.
        changed = [
            p.filter(pc.and_(pc.not_equal(p["_change_type"], "read"), pc.is_valid(p["_xid"])))
            for p in parts
        ]
        last = max(
            (int(pc.max(p["_commit_lsn"]).as_py()) for p in changed if p.num_rows), default=None
        )
        if last is not None and last >= lsn and self._cut.get(ref, (None,))[0] != last:
            self._cut[ref] = (last, None)

    def _before_partial(self, ref: str, mark: Mark, current: TablePosition | None) -> None:
        """Before the table's first commit of rows of a transaction the batch cut in two:
        its version, which holds the source up to the batch's LSN, when a point is due."""
        cut = self._cut.get(ref)
        if mark.partial is None or cut is None or cut[1] is not None or not self._point_due():
            return
        commit = mark.partial[0]
        if commit != cut[0] or current is None:
            return
        if current.ordinal_of(txn_id(commit)) is not None:
            return  # rows of it committed before: no version without them is known
        version = self._versions.get(ref) if ref in self._versions else self.format.version(ref)
        self._cut[ref] = (commit, version)

    def _after_batch(self, batch: Batch) -> None:
        """After a batch's commits: a point may stand at its LSN; one is written when the
        last is ``as_of_every`` seconds old. The initial snapshot's tables are complete
        only once its last batch is in: the point at its LSN is written when the run ends
        (every batch of a snapshot comes before the stream can end), unless the next
        batch's point replaces it."""
        if self.as_of_every is None:
            return
        self._cut = {ref: cut for ref, cut in self._cut.items() if cut[0] >= batch.lsn}
        self._point_lsn = batch.lsn
        if not batch.snapshot and self._point_due():
            self._write_point()

    def _write_point(self) -> None:
        """Appends the point at :attr:`_point_lsn` to the points table: the version of
        every table met whose copy is complete, as it stood at that LSN. No point when a
        table's version there is not known (rows of a cut transaction committed before
        this process started)."""
        lsn, self._point_lsn = self._point_lsn, None
        if lsn is None:
            return
        versions: dict[str, int] = {}
        for name, ref in sorted(self._refs.items()):
            if is_points(name) or isinstance(self._progress.get(name), list):
                continue  # a copy under way: the table is not yet the source's
            cut = self._cut.get(ref)
            if cut is not None:
                if cut[1] is None:
                    return
                versions[name] = cut[1]
                continue
            if ref not in self._versions:
                self._versions[ref] = self.format.version(ref)
            version = self._versions[ref]
            if version is not None:
                versions[name] = version
        if not versions:
            return
        ref = self.format.ref(POINTS)
        if not self.format.exists(ref):
            self.format.create(ref, POINTS_SCHEMA)
        rows = point_rows(lsn, versions, dt.datetime.now(dt.timezone.utc))
        self.format.write(ref, rows, "append", None)
        self._point_written = time.monotonic()
        self._on_step("committed")


def _renamed(what: Any, old: str, new: str) -> Any:
    """A table or schema with its column ``old`` named ``new`` (as it is without one)."""
    names = what.names if isinstance(what, pa.Schema) else what.column_names
    if old == new or old not in names:
        return what
    names = [new if n == old else n for n in names]
    if isinstance(what, pa.Schema):
        return pa.schema([f.with_name(n) for f, n in zip(what, names, strict=True)])
    return what.rename_columns(names)


#: The columns ``deletes="soft"`` adds to a table.
SOFT_DELETE_COLUMNS = ("_deleted", "_deleted_lsn")


def _live(changes: pa.Table, deleted: str) -> pa.Table:
    """A change table with :data:`SOFT_DELETE_COLUMNS` as data columns (``_deleted``
    named ``deleted``): every row it writes is live (a key inserted again after its
    delete lives again)."""
    n = changes.num_rows
    at = len(data_columns(changes))
    out = changes.add_column(at, pa.field(deleted, pa.bool_()), pa.array([False] * n))
    return out.add_column(at + 1, pa.field("_deleted_lsn", pa.int64()), pa.nulls(n, pa.int64()))


def _truncated_at(changes: pa.Table, held: pa.Table, keys: list[str]) -> pa.Table:
    """The keys ``held`` (rows a truncate of the batch removed) with ``_at``: the commit
    LSN of the first truncate after the batch's last change of the key."""
    kinds = changes["_change_type"].to_numpy(zero_copy_only=False)
    commits = changes["_commit_lsn"].to_numpy(zero_copy_only=False)
    truncates = np.flatnonzero(kinds == "truncate")
    positions = pa.array(np.arange(changes.num_rows))
    last = _old_keys(changes, keys).append_column("_pos", positions)
    last = last.group_by(keys, use_threads=False).aggregate([("_pos", "max")])
    key_schema = held.select(keys).schema
    last = last.cast(pa.schema([*key_schema, last.schema.field("_pos_max")]))
    joined = held.select(keys).join(last, keys, join_type="left outer", use_threads=False)
    after = pc.fill_null(joined["_pos_max"], -1).to_numpy(zero_copy_only=False)
    at = np.minimum(np.searchsorted(truncates, after, side="right"), len(truncates) - 1)
    return joined.select(keys).append_column("_at", pa.array(commits[truncates[at]], pa.int64()))


def _old_keys(changes: pa.Table, keys: list[str]) -> pa.Table:
    """Per change, the key it found its row under (the old image's, where it has one)."""
    before = changes["_before"].combine_chunks()
    return pa.table(
        {
            k: pc.if_else(before.is_valid(), before.field(k), changes[k].combine_chunks()).cast(
                changes.schema.field(k).type
            )
            for k in keys
        }
    )


def _removed_at(changes: pa.Table, keys: list[str]) -> pa.Table:
    """Per key a change found its row under (the old image's key where it has one), the
    commit LSN of the last such change: for a key the batch removed, its removal's."""
    table = _old_keys(changes, keys).append_column("_commit_lsn", changes["_commit_lsn"])
    found = table.group_by(keys, use_threads=False).aggregate([("_commit_lsn", "max")])
    return found.rename_columns([*keys, "_at"])


def _as_removed(
    removed: pa.Table, changes: pa.Table, reduced: pa.Table, keys: list[str], deleted: str
) -> pa.Table:
    """The rows of the keys ``removed`` (with ``_at``, the LSN that removed each) as
    upserts of the MERGE source ``reduced``: the values the batch last gave the row
    before it went (unchanged TOAST and values the batch did not touch kept from the
    table), ``_deleted`` true, ``_deleted_lsn`` ``_at``."""
    marks_ = {deleted, *SOFT_DELETE_COLUMNS}
    columns = [c for c in data_columns(changes) if c not in marks_]
    found = history_mod.versions(changes, columns, keys)
    found = found.append_column("_pos", pa.array(range(found.num_rows), pa.int64()))
    rows = found.filter(pc.invert(pc.or_(found["_delete"], found["_truncate"])))
    last = rows.group_by(keys, use_threads=False).aggregate([("_pos", "max")])
    last = rows.filter(pc.is_in(rows["_pos"], value_set=last["_pos_max"]))
    # Joined on the keys and positions alone (a join carries no list or struct column).
    joined = removed.select([*keys, "_at"]).join(
        last.select([*keys, "_pos"]), keys, join_type="left outer", use_threads=False
    )
    n = joined.num_rows
    known = pc.is_valid(joined["_pos"])
    from_last = found.take(pc.fill_null(joined["_pos"], 0))
    picked = {**{c: from_last[c] for c in from_last.column_names}}
    picked.update({k: joined[k] for k in [*keys, "_at"]})
    out: dict[str, Any] = {}
    kept = [c for c in columns if c not in keys]
    for name in reduced.column_names:
        field = reduced.schema.field(name)
        if name in keys:
            out[name] = picked[name].cast(field.type)
        elif name == deleted:
            out[name] = pa.array([True] * n, field.type)
        elif name in ("_deleted_lsn", CHANGE_FEED_COLUMN):
            # The removal wrote the row as it now stands.
            out[name] = picked["_at"].cast(field.type)
        elif name == "_delete":
            out[name] = pa.array([False] * n)
        elif name == "_unchanged":
            everything = pa.scalar(kept, field.type)
            out[name] = pc.if_else(known, picked["_unchanged"].cast(field.type), everything)
        elif name in picked:
            value = picked[name].cast(field.type)
            out[name] = pc.if_else(known, value, pa.scalar(None, field.type))
        else:
            out[name] = pa.nulls(n, field.type)
    return pa.table(out, schema=reduced.schema)


def _next_place(later: list[pa.Table | list[SchemaChange]]) -> int | None:
    """Where the rows before ``later`` (a table's items after them: a DDL step, or the
    rows of its next schema segment or key) end, as far as the commits that record them
    go: at the transaction of the next DDL or of the next rows. When that is the
    transaction of their own last row, the commit records it as cut there, so the rows of
    it that follow are still applied; None: at the batch's LSN."""
    for item in later:
        if isinstance(item, list):
            return item[0].commit_lsn
        if item.num_rows:
            return int(item["_commit_lsn"][0].as_py())
    return None


def _as_then(
    rows: pa.Table,
    earlier: list[pa.Table | list[SchemaChange]],
    later: list[pa.Table | list[SchemaChange]],
) -> pa.Table:
    """``rows`` in the columns their table had when they were written: a change table
    that spans a DDL holds every version's columns (those a row's version lacked null and
    in its ``_unchanged``), and a column added after the rows, or dropped or renamed
    before them, must not reach the table through them."""
    shape = next((s[0].before for s in later if isinstance(s, list)), None)
    if shape is None:
        shape = next((s[0].after for s in reversed(earlier) if isinstance(s, list)), None)
    if shape is None:
        return rows
    names = {c.name for c in shape.columns}
    return without_columns(rows, [c for c in data_columns(rows) if c not in names])


def _covers(position: TablePosition, place: tuple[int, int]) -> bool:
    """Whether a table at ``position`` holds what happened up to ``place`` (a commit LSN
    and ``tx_ordinal``)."""
    commit, ordinal = place
    if position.lsn is not None and position.lsn >= (commit if ordinal >= 0 else commit - 1):
        return True
    reached = position.ordinal_of(txn_id(commit))
    return reached is not None and reached >= ordinal


def _failed(kind: str, name: str, e: BaseException) -> str:
    """The message of a library's or store's error ``e`` met while applying a batch to the
    table of ``name``: its class and message (escape codes and spacing cut, at most 400
    characters: a store's error is nested lines), and what to do."""
    text = re.sub(r"\x1b\[[0-9;]*m|↳", " ", str(e))
    first = " ".join(text.split())[:400] or "(no message)"
    return (
        f"{name or 'a table'}: its {kind} could not be read or written ({type(e).__name__}:"
        f" {first}); nothing the lake lacks was acked: run again once the cause is fixed"
        " (a store away or refusing, a permission, a full disk)"
    )
