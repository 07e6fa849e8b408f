"""Proof that a lake equals its source: each table compared with the source table **at the
LSN the lake table stands at**, while the pipeline keeps running and the source keeps
writing; and the repair of what differs.

How one LSN is had on both sides, with no false report on a busy source:

1. A temporary slot of verify's own exports a snapshot at its consistent point ``C``; the
   source tables are read under it (the stream's own initial snapshot,
   :func:`pgwire_cdc.stream`, under a throw-away slot name: nothing is acked, so no
   permanent slot is ever made and the temporary one goes with the connection).
2. Verify waits until the pipeline's slot is confirmed at or past ``C`` (the pipeline acks
   a batch only once every table holds it), reads that confirmed position ``F``, then reads
   each lake table at one version with the position it records (``p``: the commit LSN of
   the last transaction it holds in full, and how far into a transaction a batch cut). A
   lake table then holds exactly the source table's changes committed before ``F`` and up
   to ``p``: no change of that table lies between ``p`` and ``F``, or the pipeline would
   have applied it and recorded a later ``p``.
3. The temporary slot streams on from ``C`` past a logical message verify writes after
   step 2; of its changes, those each lake table holds by that rule are applied to the
   snapshot's rows of the keys they touch (``_native.apply_changes``: the pipeline's own
   MERGE walk). The result is the source table as of the lake table's position, exactly.
4. Both sides are compared by key (a keyless table as a multiset of rows) through 64-bit
   digests of each row's key and values (``_native.row_digests``): rows *missing* from
   the lake, *extra* in it, and *different* under one key.

Neither side's rows are held in memory (:mod:`~pgwire_cdc.lakehouse.digests`): the
snapshot's rows go to an Arrow IPC file in a temporary directory as they come and are
read back for the keys step 3 touches and those a repair writes; the lake table is reduced
to keys and digests batch by batch where it is read (delta-rs's reader; Spark tasks for
Iceberg). With a :data:`SourceReader` (:mod:`pgwire_cdc.spark.source_digests`) the source
tables are read under step 1's snapshot by it instead, a big one by Spark tasks that spill
its rows to files of their own and hand back only the digests. What stays is each row's
key and 16 bytes, per side. A keyless table, or one a truncate after ``C`` cleared, is read
back whole.

Repair upserts the source rows of the missing and different keys and deletes the extra
ones, in one MERGE per table that records the position the table already has, so the
pipeline's exactly-once bookkeeping is unchanged; a keyless table is overwritten with the
source's rows. A table the pipeline committed to since it was read is left alone: verify
again.
"""

from __future__ import annotations

import logging
import os
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc

from .. import _native, catalog
from ..errors import ConfigError
from ..lsn import int_to_lsn, lsn_to_int
from ..replication import temporary_slot_name
from ..tables import key_columns, parse_segment_key, table_of, unsliced
from .digests import KEY_DIGEST, ROW_DIGEST, LakeDigests, Spill, digest, digests, lake_only
from .format import TableFormat, TablePosition
from .identity import identify
from .positions import Mark, snapshot_position, txn_id
from .shape import CHANGE_FEED_COLUMN, data_columns, lake_shape, plain_schema
from .vanished import made_changes

if TYPE_CHECKING:
    from ..streaming import Batch

log = logging.getLogger("pgwire_cdc")

#: The prefix of the message verify writes to know when its stream has passed the lake.
MESSAGE_PREFIX = "pgwire_cdc.verify"
#: Keys of each kind a report keeps as examples.
EXAMPLES = 5

#: A reader of source tables under verify's exported snapshot, instead of its stream's:
#: ``read(name, snapshot, consistent_point, spill)`` fills ``spill`` with the table's rows
#: (and, read by Spark tasks, their digests: :mod:`pgwire_cdc.spark.source_digests`).
SourceReader = Callable[[str, str, int, Spill], None]


@dataclass
class TableReport:
    """One table compared: ``lsn`` the source LSN the lake table was compared at (its
    position, or the pipeline's confirmed position when later), row counts on each side,
    and the keys (rows, for a keyless table) that differ."""

    name: str
    lsn: int | None = None
    source_rows: int = 0
    lake_rows: int = 0
    #: Source rows the lake lacks.
    missing: int = 0
    #: Lake rows the source lacks (a key held twice counts once per extra copy).
    extra: int = 0
    #: Keys both hold with different values.
    different: int = 0
    #: Columns of the source table the lake table lacks, and the other way round.
    columns_missing: list[str] = field(default_factory=list)
    columns_extra: list[str] = field(default_factory=list)
    #: Up to :data:`EXAMPLES` keys (or rows) of each kind: "missing", "extra", "different".
    examples: dict[str, list[Any]] = field(default_factory=dict)
    #: What ``repair=True`` did: rows upserted and deleted (a keyless table: rewritten).
    upserted: int = 0
    deleted: int = 0
    #: Why a repair was not made (the table moved on while verify ran).
    not_repaired: str | None = None

    @property
    def equal(self) -> bool:
        return not (
            self.missing
            or self.extra
            or self.different
            or self.columns_missing
            or self.columns_extra
        )


@dataclass
class VerifyReport:
    """:attr:`tables` by source table; :attr:`lsn` the consistent point of the source
    snapshot the comparison started from."""

    lsn: int
    tables: dict[str, TableReport]
    #: The pipeline's slot ``recover=True`` made, at :attr:`lsn`.
    slot_made: str | None = None

    @property
    def equal(self) -> bool:
        return all(t.equal for t in self.tables.values())

    def summary(self) -> str:
        """One line per table, for people."""
        lines = []
        for name, t in sorted(self.tables.items()):
            at = int_to_lsn(t.lsn) if t.lsn is not None else "-"
            state = "equal" if t.equal else "DIFFERS"
            line = (
                f"{name}: {state} at {at}: {t.source_rows} source rows, {t.lake_rows} lake rows,"
                f" {t.missing} missing, {t.extra} extra, {t.different} different"
            )
            if t.columns_missing or t.columns_extra:
                line += (
                    f"; columns missing {t.columns_missing or '[]'},"
                    f" extra {t.columns_extra or '[]'}"
                )
            if t.upserted or t.deleted:
                line += f"; repaired: {t.upserted} upserted, {t.deleted} deleted"
            if t.not_repaired:
                line += f"; not repaired: {t.not_repaired}"
            lines.append(line)
        return "\n".join(lines)


def verify(
    dsn: str,
    format: TableFormat,
    *,
    publication: str | Sequence[str],
    slot: str,
    tables: Sequence[str] | None = None,
    repair: bool = False,
    recover: bool = False,
    wait: float = 300.0,
    catch_up: Callable[[int], None] | None = None,
    on_progress: Callable[[str], None] | None = None,
    source_reader: SourceReader | None = None,
    spill_dir: str | None = None,
) -> VerifyReport:
    """Compares the lake tables ``format`` keeps for the pipeline of ``publication`` and
    ``slot`` with their source (see the module documentation): every published table, or
    ``tables``; read by ``source_reader`` when given, else by verify's stream, and spilled
    to a temporary directory in ``spill_dir`` (default: the system's).
    ``wait``: seconds to wait for the pipeline to reach the source snapshot;
    ``catch_up(lsn)``, when given, is called instead when no consumer streams the slot (a
    run of the pipeline up to ``lsn``). ``repair``: fix the differences found.
    ``recover``: the pipeline's slot is gone or invalidated: compare with the source as
    of a new snapshot, repair, and make the slot there (:func:`_recover`)."""
    from ..streaming import StreamOptions, stream

    progress = on_progress or (lambda _msg: None)
    name = f"pgwire_cdc_verify_{os.getpid()}_{secrets.token_hex(3)}"
    wanted = set(tables) if tables is not None else None
    with tempfile.TemporaryDirectory(prefix="pgwire_cdc-verify-", dir=spill_dir) as directory:
        spills: dict[str, Spill] = {}

        def read_source(snapshot_name: str, consistent_point: int, names: list[str]) -> None:
            assert source_reader is not None
            for table in names:
                if wanted is None or table in wanted:
                    spill = spills[table] = Spill(directory, len(spills))
                    source_reader(table, snapshot_name, consistent_point, spill)
                    progress(f"source read: {table}, {spill.rows} rows")

        options = StreamOptions(
            publication=publication,
            slot=name,
            max_batch_rows=100_000,
            snapshot_reader=read_source if source_reader is not None else None,
        )
        batches = iter(stream(dsn, options=options))
        try:
            snapshot, cp = _read_snapshot(batches, wanted, progress, directory, spills)
            with psycopg.connect(dsn, autocommit=True) as conn:
                first = publication if isinstance(publication, str) else publication[0]
                for table, spill in snapshot.items():
                    if spill.schema is None:  # no rows at the source: the catalog's columns
                        schema = catalog.change_table_schema(conn, first, table)
                        spill.template(lake_shape(schema.empty_table()).schema)
                if recover:
                    # The temporary slot is still at ``cp``: nothing was streamed on it yet.
                    return _recover(
                        conn, format, snapshot, cp, slot, temporary_slot_name(name), dsn
                    )
                flushed = _wait_for_pipeline(conn, slot, cp, wait, catch_up, progress)
                lake = {table: _read_lake(format, table, snapshot[table]) for table in snapshot}
                row = conn.execute(
                    "SELECT pg_logical_emit_message(true, %s, '')::text", (MESSAGE_PREFIX,)
                ).fetchone()
                assert row is not None
                marker = lsn_to_int(row[0])
            progress(
                f"source snapshot at {int_to_lsn(cp)}; pipeline confirmed {int_to_lsn(flushed)}"
            )
            changes = _read_changes(batches, snapshot, marker)
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()
        report = VerifyReport(cp, {})
        for table in sorted(snapshot):
            side = lake[table]
            source = _source_at(snapshot[table], changes.get(table, []), side, flushed)
            found = side.compare(table, source)
            found.lsn = max(flushed, side.position.lsn or 0) if side.position is not None else None
            if repair and not found.equal and side.rows is not None:
                _repair(format, table, found, source, side)
            report.tables[table] = found
            progress(_line(found))
        return report


def _recover(
    conn: psycopg.Connection[Any],
    format: TableFormat,
    snapshot: dict[str, Spill],
    cp: int,
    slot: str,
    snapshot_slot: str,
    dsn: str,
) -> VerifyReport:
    """A lake whose slot is gone (dropped, invalidated) brought back to streaming without
    a new copy: each table compared with the source snapshot at ``cp`` (none of the
    pipeline's changes can be told apart any more), repaired to it in one commit that
    records the snapshot's position (:func:`~pgwire_cdc.lakehouse.positions.
    snapshot_position`) and the server's source, a table already equal in an empty commit
    recording the same; then the pipeline's slot is made as a copy of verify's temporary
    one (``snapshot_slot``, still at ``cp``), so the pipeline streams on from exactly
    there. A table that cannot be brought there leaves the slot unmade."""
    from .. import admin

    existing = admin.get_slot(conn, slot)
    if existing is not None and not existing.invalidated:
        raise ConfigError(
            f"the pipeline's slot {slot!r} exists and is usable: verify (repair=True) "
            "compares the lake as the pipeline keeps it; recover is for a lake whose slot "
            "is gone or invalidated"
        )
    position = snapshot_position(cp)
    server = identify(dsn).source
    report = VerifyReport(cp, {})
    for table in sorted(snapshot):
        ref = format.ref(table)
        side = _read_lake(format, table, snapshot[table])
        source = _source_at(snapshot[table], [], side, 0)
        found = side.compare(table, source)
        found.lsn = cp
        report.tables[table] = found
        if side.rows is None or side.position is None:
            found.not_repaired = "no lake table: copy it (pgwire-cdc resnapshot)"
            continue
        reached = side.position.reached
        if reached is not None and reached >= position:
            found.not_repaired = (
                f"it holds changes up to {int_to_lsn(reached)}, past the new slot's start:"
                " copy it again"
            )
            continue
        mark = Mark(position, None, None, source=server)
        repaired = not found.equal and _repair(format, table, found, source, side, mark)
        if not repaired and found.not_repaired is None:
            # Equal already: an empty commit records the new position.
            empty = plain_schema(format.schema(ref)).empty_table()
            format.write(ref, empty, "append", mark)
    stuck = [t for t in report.tables.values() if t.not_repaired]
    if stuck:
        raise ConfigError(
            "the slot was not made, since these tables cannot take its changes: "
            + "; ".join(f"{t.name}: {t.not_repaired}" for t in stuck)
        )
    if existing is not None:
        admin.drop_slot(conn, slot)
    admin.copy_slot(conn, snapshot_slot, slot)
    report.slot_made = slot
    log.info("slot %s made at %s for the recovered lake", slot, int_to_lsn(cp))
    return report


@dataclass
class LakeSide:
    """A lake table as verify read it: its position and, per live row, the key and the
    digests of the columns both sides have (:mod:`~pgwire_cdc.lakehouse.digests`); None
    without a table."""

    position: TablePosition | None
    rows: pa.Table | None
    keys: list[str] | None
    #: The columns compared (both sides have them), in the source's types.
    schema: pa.Schema
    columns_missing: list[str]
    columns_extra: list[str]

    def compare(self, name: str, source: SourceSide) -> TableReport:
        report = TableReport(name, source_rows=source.digests.num_rows)
        if self.rows is None:
            report.missing = source.digests.num_rows
            if self.keys is not None:
                first = np.arange(min(EXAMPLES, source.digests.num_rows))
                report.examples["missing"] = _examples(source.key_rows(first), self.keys)
            return report
        report.lake_rows = self.rows.num_rows
        report.columns_missing = list(self.columns_missing)
        report.columns_extra = list(self.columns_extra)
        if self.keys is None:
            _compare_multisets(report, source.digests, self.rows)
        else:
            _compare_keyed(report, source, self.rows, self.keys)
        return report


def _read_lake(format: TableFormat, name: str, spill: Spill) -> LakeSide:
    """The lake table of source table ``name`` read at one version, reduced to digests of
    the columns it shares with the source (``spill.schema``)."""
    assert spill.schema is not None
    template = spill.schema.empty_table()
    keys = key_columns(template)
    source_columns = data_columns(template)
    ref = format.ref(name)
    held = [c for c in format.schema(ref).names] if format.exists(ref) else source_columns
    lake_columns = [c for c in held if c not in lake_only(format.deleted_column)]
    columns = [c for c in source_columns if c in lake_columns]
    missing = [c for c in source_columns if c not in lake_columns]
    if keys is not None and any(k not in columns for k in keys):
        keys = None  # the lake lacks a key column: compare whole rows
    schema = pa.schema([template.schema.field(c) for c in columns])
    reduce = LakeDigests(schema, tuple(keys) if keys is not None else None, format.deleted_column)
    position, rows = format.pinned(ref, reduce)
    extra = [c for c in lake_columns if c not in source_columns]
    return LakeSide(position, rows, keys, schema, missing, extra)


@dataclass
class SourceSide:
    """A source table as of a lake table's position: per row the key and the digests of
    the compared columns, and where its rows are: the snapshot's in the spill, those of the
    keys changes after the snapshot touched as the changes left them (``changed``, of the
    key digests ``touched``); a keyless table's, or one a truncate cleared, all in
    ``whole``."""

    digests: pa.Table
    spill: Spill | None
    keys: list[str] | None
    changed: pa.Table | None = None
    touched: pa.Array | None = None
    whole: pa.Table | None = None

    def key_rows(self, at: np.ndarray) -> pa.Table:
        """The keys of the rows at indices ``at`` of :attr:`digests` (which hold no key
        columns where Spark tasks made them: those rows are read back)."""
        assert self.keys is not None
        picked = self.digests.take(pa.array(at, pa.int64()))
        if all(k in picked.column_names for k in self.keys):
            return picked
        return self.rows(picked[KEY_DIGEST].combine_chunks())

    def rows(self, wanted: pa.Array) -> pa.Table:
        """The rows of the key digests ``wanted``."""
        assert self.keys is not None
        if self.whole is not None:
            return self.whole.filter(pc.is_in(digest(self.whole, self.keys), value_set=wanted))
        parts = []
        if self.touched is not None and self.changed is not None:
            parts.append(
                self.changed.filter(pc.is_in(digest(self.changed, self.keys), value_set=wanted))
            )
            wanted = pc.filter(wanted, pc.invert(pc.is_in(wanted, value_set=self.touched)))
        assert self.spill is not None and self.spill.schema is not None
        columns = data_columns(self.spill.schema.empty_table())
        parts.append(self.spill.select(self.keys, wanted).select(columns))
        return pa.concat_tables(parts)


def _line(t: TableReport) -> str:
    return VerifyReport(0, {t.name: t}).summary()


def _read_snapshot(
    batches: Iterator[Batch],
    wanted: set[str] | None,
    progress: Callable[[str], None],
    directory: str,
    rows: dict[str, Spill],
) -> tuple[dict[str, Spill], int]:
    """The source tables' rows at the temporary slot's consistent point, as change tables
    (``read`` rows) spilled to ``directory``, and that point; ``rows``: the tables a
    snapshot reader read (the stream's batches then carry none)."""

    def spill(name: str) -> Spill:
        if name not in rows:
            rows[name] = Spill(directory, len(rows))
        return rows[name]

    count = 0
    for batch in batches:
        if not batch.snapshot:
            raise ConfigError("verify's stream began without a snapshot")
        for key, table in batch.tables.items():
            name, _ = parse_segment_key(key)
            if wanted is None or name in wanted:
                spill(name).write(lake_shape(table))
                count += table.num_rows
        for name in batch.snapshot_progress:
            if wanted is None or name in wanted:
                spill(name)
        if batch.snapshot_progress:
            progress(f"source read: {count} rows")
            if wanted is not None and wanted - set(rows):
                missing = ", ".join(sorted(wanted - set(rows)))
                raise ConfigError(f"not published by this publication: {missing}")
            for found in rows.values():
                found.close()
            return rows, batch.lsn
        if count:
            progress(f"source read: {count} rows")
    raise ConfigError("verify's stream ended before its snapshot did")


def _wait_for_pipeline(
    conn: psycopg.Connection[Any],
    slot: str,
    lsn: int,
    wait: float,
    catch_up: Callable[[int], None] | None,
    progress: Callable[[str], None],
) -> int:
    """The pipeline slot's confirmed position once it is at or past ``lsn``."""
    deadline = time.monotonic() + wait
    while True:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text, active FROM pg_replication_slots"
            " WHERE slot_name = %s",
            (slot,),
        ).fetchone()
        if row is None:
            raise ConfigError(
                f"no replication slot {slot!r}: name the pipeline's slot (slot=...); a lake"
                " whose slot is gone is recovered with a new slot and verify --repair"
            )
        flushed = lsn_to_int(row[0]) if row[0] else 0
        if flushed >= lsn:
            return flushed
        if not row[1] and catch_up is not None:
            progress(
                f"slot {slot} is idle at {int_to_lsn(flushed)}: catching up to {int_to_lsn(lsn)}"
            )
            catch_up(lsn)
            # A run up to ``lsn`` returns once everything committed before it is in the
            # lake and acked, though the slot may stay confirmed at the last transaction
            # before it.
            return max(flushed, lsn)
        if time.monotonic() >= deadline:
            state = "streamed by a consumer" if row[1] else "not streamed by any consumer"
            raise ConfigError(
                f"the pipeline's slot {slot!r} is confirmed at {int_to_lsn(flushed)}, before the"
                f" source snapshot at {int_to_lsn(lsn)}, after {wait:.0f} s, and is {state}:"
                " run the pipeline (or verify with catch-up) and verify again"
            )
        time.sleep(0.5)


def _read_changes(
    batches: Iterator[Batch], snapshot: dict[str, Spill], marker: int
) -> dict[str, list[pa.Table]]:
    """The changes of the snapshot's tables after its consistent point, up to the
    transaction of verify's own message at ``marker``."""
    out: dict[str, list[pa.Table]] = {}
    for batch in batches:
        for key, table in batch.tables.items():
            name, _ = parse_segment_key(key)
            if name in snapshot and table.num_rows:
                out.setdefault(name, []).append(lake_shape(table))
        if batch.lsn > marker:
            return out
    raise ConfigError("verify's stream ended before it passed its own message")


def held_rows(changes: pa.Table, position: TablePosition | None, flushed: int) -> pa.Table:
    """The rows of ``changes`` (in commit order) a lake table at ``position`` holds, the
    pipeline's slot confirmed at ``flushed``: those committed before ``flushed``, those of
    transactions up to the position's LSN, and those of the transaction a batch cut up to
    the ordinal it reached."""
    if changes.num_rows == 0:
        return changes
    commit = changes["_commit_lsn"]
    keep = pc.less(commit, flushed)
    lsn = position.lsn if position is not None else None
    if lsn is not None:
        keep = pc.or_(keep, pc.less_equal(commit, lsn))
    if position is not None:
        past = changes.filter(pc.greater(commit, lsn)) if lsn is not None else changes
        if past.num_rows:
            first = int(past["_commit_lsn"][0].as_py())
            ordinal = position.ordinal_of(txn_id(first))
            if ordinal is not None:
                cut = pc.and_(
                    pc.equal(commit, first), pc.less_equal(changes["_tx_ordinal"], ordinal)
                )
                keep = pc.or_(keep, cut)
    return changes.filter(keep)


def _source_at(spill: Spill, changes: list[pa.Table], lake: LakeSide, flushed: int) -> SourceSide:
    """The source table as of the lake table's position: the snapshot's rows with the
    changes the lake table holds applied, as digests of the columns compared. Only the
    rows of the keys those changes touch are read back and changed; a keyless table, or
    one a held truncate cleared, is read back whole."""
    assert spill.schema is not None
    template = spill.schema.empty_table()
    keys = key_columns(template)
    columns = data_columns(template)
    held = None
    if changes:
        if any(t.schema.remove_metadata() != changes[0].schema.remove_metadata() for t in changes):
            raise ConfigError(
                "a table's columns changed while verify ran: verify again once the DDL is done"
            )
        held = held_rows(pa.concat_tables(changes), lake.position, flushed)
        if not held.num_rows:
            held = None
        elif data_columns(held) != columns:
            raise ConfigError(
                "a table's columns changed while verify ran: verify again once the DDL is done"
            )
    compared = lake.schema.names
    if keys is None or lake.keys is None or (held is not None and _truncates(held)):
        whole = spill.table().select(columns)
        if held is not None:
            stream, _ = _native.apply_changes(unsliced(whole), unsliced(held), keys)
            whole = table_of(stream)
        return SourceSide(digests(whole, lake.keys, compared), spill, lake.keys, whole=whole)
    if spill.digests is not None and compared == columns and lake.keys == keys:
        base = spill.digests  # made by the tasks that read the rows
    else:
        parts = [digests(pa.Table.from_batches([b]), keys, compared) for b in spill.batches()]
        empty = digests(template.select(columns), keys, compared)
        base = pa.concat_tables(parts) if parts else empty
    if held is None:
        return SourceSide(base, spill, keys)
    touched = _touched(held, keys, template.schema)
    before = spill.select(keys, touched).select(columns)
    stream, _ = _native.apply_changes(unsliced(before), unsliced(held), keys)
    changed = table_of(stream)
    kept = base.filter(pc.invert(pc.is_in(base[KEY_DIGEST], value_set=touched)))
    now = digests(changed, keys, compared).select(kept.column_names).cast(kept.schema)
    merged = pa.concat_tables([kept, now])
    return SourceSide(merged, spill, keys, changed=changed, touched=touched)


def _truncates(held: pa.Table) -> bool:
    return bool(pc.any(pc.equal(held["_change_type"].cast(pa.string()), "truncate")).as_py())


def _touched(held: pa.Table, keys: list[str], schema: pa.Schema) -> pa.Array:
    """The key digests of the rows ``held`` changes: their new keys, and the old keys of
    the updates that moved a row to a new key."""
    types = pa.schema([schema.field(k) for k in keys])
    found = [digest(held.select(keys).cast(types), keys)]
    if "_before" in held.column_names:
        moved = held.filter(pc.is_valid(held["_before"]))
        if moved.num_rows:
            old = pa.table({k: pc.struct_field(moved["_before"], k) for k in keys})
            found.append(digest(old.cast(types), keys))
    return pc.unique(pa.chunked_array(found, pa.int64()).combine_chunks())


def compare(
    name: str, source: pa.Table, lake: pa.Table | None, keys: list[str] | None
) -> TableReport:
    """``source`` and ``lake`` rows compared by ``keys`` (None: as multisets of rows)."""
    lake_columns = lake.column_names if lake is not None else source.column_names
    columns = [c for c in source.column_names if c in lake_columns]
    if keys is not None and any(k not in columns for k in keys):
        keys = None
    schema = pa.schema([source.schema.field(c) for c in columns])
    rows = None
    if lake is not None:
        reduce = LakeDigests(schema, tuple(keys) if keys is not None else None, "_deleted")
        rows = pa.Table.from_batches(
            reduce.reduce(lake.to_batches()), reduce.output_schema(lake.schema)
        )
    side = LakeSide(
        TablePosition(None),
        rows,
        keys,
        schema,
        [c for c in source.column_names if c not in lake_columns],
        [c for c in lake_columns if c not in source.column_names],
    )
    return side.compare(name, SourceSide(digests(source, keys, columns), None, keys))


@dataclass
class KeyMatch:
    """Rows of the source and of the lake matched by key digest (sorted, then searched:
    arrays of a few machine words per row, no hash table): indices into either side."""

    #: Source rows whose key the lake lacks, and those whose values differ from the lake
    #: row of their key (its first, in the lake's order).
    missing: np.ndarray
    different: np.ndarray
    #: The first lake row of each key the source lacks; of each key held more than once.
    extra: np.ndarray
    duplicated: np.ndarray
    #: Lake rows past the first of their key.
    copies: int


def _match(source: pa.Table, lake: pa.Table) -> KeyMatch:
    ks, ds = _numbers(source[KEY_DIGEST]), _numbers(source[ROW_DIGEST])
    kl, dl = _numbers(lake[KEY_DIGEST]), _numbers(lake[ROW_DIGEST])
    order = np.argsort(kl, kind="stable")
    sorted_keys = kl[order]
    starts = np.ones(len(order), dtype=bool)
    starts[1:] = sorted_keys[1:] != sorted_keys[:-1]
    keys, firsts = sorted_keys[starts], order[starts]  # each key once, its first row
    counts = np.diff(np.append(np.flatnonzero(starts), len(order)))
    del order, sorted_keys, starts
    # Both sides sorted: each search walks forward through memory, not at random.
    by_key = np.argsort(ks, kind="stable")
    held = ks[by_key]
    at = np.empty(len(ks), dtype=np.intp)
    at[by_key] = np.searchsorted(keys, held)
    del by_key
    at = np.minimum(at, max(len(keys) - 1, 0))
    found = keys[at] == ks if len(keys) else np.zeros(len(ks), dtype=bool)
    missing = np.flatnonzero(~found)
    different = np.flatnonzero(found & (dl[firsts[at]] != ds)) if len(keys) else missing[:0]
    back = np.minimum(np.searchsorted(held, keys), max(len(held) - 1, 0))
    in_source = held[back] == keys if len(held) else np.zeros(len(keys), dtype=bool)
    return KeyMatch(
        missing=missing,
        different=different,
        extra=firsts[~in_source],
        duplicated=firsts[counts > 1],
        copies=int((counts - 1).sum()),
    )


def _numbers(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    numbers: np.ndarray = array.to_numpy(zero_copy_only=False)
    return numbers


def _compare_keyed(
    report: TableReport, source: SourceSide, lake: pa.Table, keys: list[str]
) -> None:
    found = _match(source.digests, lake)
    report.missing = len(found.missing)
    report.different = len(found.different)
    # A key the lake holds more than once: each copy past the first is extra.
    report.extra = len(found.extra) + found.copies
    kinds = [
        ("missing", None, found.missing),
        ("extra", lake, found.extra),
        ("different", None, found.different),
        ("extra", lake, found.duplicated),
    ]
    for kind, table, rows in kinds:
        if len(rows):
            at = np.sort(rows)[:EXAMPLES]
            picked = source.key_rows(at) if table is None else table.take(pa.array(at))
            report.examples.setdefault(kind, [])
            report.examples[kind] += _examples(picked, keys)
    report.examples = {k: v[:EXAMPLES] for k, v in report.examples.items()}


def _compare_multisets(report: TableReport, source: pa.Table, lake: pa.Table) -> None:
    s = pa.table({"_d": source[ROW_DIGEST]}).group_by("_d").aggregate([("_d", "count")])
    lk = pa.table({"_d": lake[ROW_DIGEST]}).group_by("_d").aggregate([("_d", "count")])
    joined = s.join(lk, "_d", join_type="full outer", left_suffix="_s", right_suffix="_l")
    ns = pc.fill_null(joined["_d_count_s"], 0)
    nl = pc.fill_null(joined["_d_count_l"], 0)
    report.missing = int(pc.sum(pc.max_element_wise(pc.subtract(ns, nl), 0)).as_py() or 0)
    report.extra = int(pc.sum(pc.max_element_wise(pc.subtract(nl, ns), 0)).as_py() or 0)


def _examples(table: pa.Table, keys: list[str] | None) -> list[Any]:
    """Up to :data:`EXAMPLES` keys of ``table`` (a keyless table's: none, its rows are
    not kept)."""
    if not keys:
        return []
    return [
        dict(r) if len(r) > 1 else next(iter(r.values()))
        for r in table.select(keys).slice(0, EXAMPLES).to_pylist()
    ]


def _repair(
    format: TableFormat,
    name: str,
    found: TableReport,
    source: SourceSide,
    lake: LakeSide,
    mark: Mark | None = None,
) -> bool:
    """One commit that makes the lake table equal ``source``, recording the position it
    had (see the module documentation), or ``mark``; whether it committed."""
    ref = format.ref(name)
    now = format.position(ref)
    position = lake.position
    if position is None or now is None or now.lsn != position.lsn:
        found.not_repaired = "the table took a commit while verify ran: verify again"
        return False
    if mark is None:
        # The repair's rows come from the source the table records (verify read them
        # from the pipeline's server): the commit records that source too.
        mark = Mark(position.lsn, position.partial, repair=True, source=format.source(ref))
    if found.columns_missing or found.columns_extra:
        found.not_repaired = "its columns differ from the source's: copy it again (resnapshot)"
        return False
    if mark.lsn is None:
        found.not_repaired = "the table records no position yet"
        return False
    assert lake.rows is not None and source.spill is not None
    assert source.spill.schema is not None
    keys = source.keys
    if keys is None or lake.keys is None:
        whole = source.whole if source.whole is not None else source.spill.table()
        format.write(ref, whole.select(lake.schema.names), "overwrite", mark)
        found.upserted, found.deleted = found.missing, found.extra
        return True
    at_source = source.digests
    matched = _match(at_source, lake.rows)
    wrong = np.concatenate([matched.missing, matched.different])
    upsert = pa.array(_numbers(at_source[KEY_DIGEST])[wrong], pa.int64())
    gone = lake.rows.filter(
        pc.invert(pc.is_in(lake.rows[KEY_DIGEST], value_set=at_source[KEY_DIGEST]))
    )
    if not len(upsert) and not gone.num_rows:
        return False
    assert source.spill.change_schema is not None
    columns = lake.schema.names
    rows = source.rows(upsert).select(columns)
    deleted = _key_rows(gone, keys, rows.schema)
    kinds = ["insert"] * len(rows) + ["delete"] * len(deleted)
    made = pa.concat_tables([rows, deleted])
    changes = made_changes(source.spill.change_schema, made, kinds, mark.lsn)
    if CHANGE_FEED_COLUMN in format.schema(ref).names:
        # A repaired row is the source's row as of the LSN the table was compared at.
        columns = [*columns, CHANGE_FEED_COLUMN]
    stream, _ = _native.reduce_changes(unsliced(changes), columns, keys)
    format.merge(ref, table_of(stream), keys, False, mark, adds=True)
    found.upserted, found.deleted = len(rows), len(deleted)
    return True


def _key_rows(lake_keys: pa.Table, keys: list[str], schema: pa.Schema) -> pa.Table:
    """Rows of ``schema`` holding only the keys of ``lake_keys`` (a delete's image)."""
    n = lake_keys.num_rows
    return pa.table(
        {
            f.name: lake_keys[f.name].cast(f.type) if f.name in keys else pa.nulls(n, f.type)
            for f in schema
        },
        schema=schema,
    )
