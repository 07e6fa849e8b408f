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
   snapshot's rows (``_native.apply_changes``: the pipeline's own MERGE walk). The result
   is the source table as of the lake table's position, exactly.
4. Both sides are compared by key (a keyless table as a multiset of rows) through 64-bit
   row digests (``_native.row_digests``): rows *missing* from the lake, *extra* in it, and
   *different* under one key.

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
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc

from .. import _native, catalog
from ..errors import ConfigError
from ..lsn import int_to_lsn, lsn_to_int
from ..replication import temporary_slot_name
from ..tables import key_columns, parse_segment_key, table_of, unsliced
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
) -> VerifyReport:
    """Compares the lake tables ``format`` keeps for the pipeline of ``publication`` and
    ``slot`` with their source (see the module documentation): every published table, or
    ``tables``. ``wait``: seconds to wait for the pipeline to reach the source snapshot;
    ``catch_up(lsn)``, when given, is called instead when no consumer streams the slot (a
    run of the pipeline up to ``lsn``). ``repair``: fix the differences found.
    ``recover``: the pipeline's slot is gone or invalidated: compare with the source as
    of a new snapshot, repair, and make the slot there (:func:`_recover`)."""
    from ..streaming import StreamOptions, stream

    progress = on_progress or (lambda _msg: None)
    name = f"pgwire_cdc_verify_{os.getpid()}_{secrets.token_hex(3)}"
    options = StreamOptions(publication=publication, slot=name, max_batch_rows=100_000)
    wanted = set(tables) if tables is not None else None
    batches = iter(stream(dsn, options=options))
    try:
        snapshot, cp = _read_snapshot(batches, wanted, progress)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for table, parts in snapshot.items():
                if not parts:  # no rows at the source: the columns come from the catalog
                    first = publication if isinstance(publication, str) else publication[0]
                    schema = catalog.change_table_schema(conn, first, table)
                    parts.append(lake_shape(schema.empty_table()))
            if recover:
                # The temporary slot is still at ``cp``: nothing was streamed on it yet.
                return _recover(conn, format, snapshot, cp, slot, temporary_slot_name(name), dsn)
            flushed = _wait_for_pipeline(conn, slot, cp, wait, catch_up, progress)
            lake: dict[str, tuple[TablePosition | None, pa.Table | None]] = {}
            for table in sorted(snapshot):
                pinned = format.pinned(format.ref(table))
                lake[table] = _source_columns(*_live_rows(*pinned, format.deleted_column))
            row = conn.execute(
                "SELECT pg_logical_emit_message(true, %s, '')::text", (MESSAGE_PREFIX,)
            ).fetchone()
            assert row is not None
            marker = lsn_to_int(row[0])
        progress(f"source snapshot at {int_to_lsn(cp)}; pipeline confirmed {int_to_lsn(flushed)}")
        changes = _read_changes(batches, snapshot, marker)
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
    report = VerifyReport(cp, {})
    for table in sorted(snapshot):
        position, rows = lake[table]
        source, keys = _source_at(snapshot[table], changes.get(table, []), position, flushed)
        found = compare(table, source, rows, keys)
        found.lsn = max(flushed, position.lsn or 0) if position is not None else None
        if repair and not found.equal and rows is not None:
            _repair(format, table, found, source, rows, keys, position, snapshot[table][0])
        report.tables[table] = found
        progress(_line(found))
    return report


def _recover(
    conn: psycopg.Connection[Any],
    format: TableFormat,
    snapshot: dict[str, list[pa.Table]],
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
        held, rows = _source_columns(*_live_rows(*format.pinned(ref), format.deleted_column))
        source, keys = _source_at(snapshot[table], [], None, 0)
        found = compare(table, source, rows, keys)
        found.lsn = cp
        report.tables[table] = found
        if rows is None or held is None:
            found.not_repaired = "no lake table: copy it (pgwire-cdc resnapshot)"
            continue
        reached = held.reached
        if reached is not None and reached >= position:
            found.not_repaired = (
                f"it holds changes up to {int_to_lsn(reached)}, past the new slot's start:"
                " copy it again"
            )
            continue
        mark = Mark(position, None, None, source=server)
        template = snapshot[table][0]
        repaired = not found.equal and _repair(
            format, table, found, source, rows, keys, held, template, mark
        )
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


def _live_rows(
    position: TablePosition | None, rows: pa.Table | None, deleted: str
) -> tuple[TablePosition | None, pa.Table | None]:
    """A table's rows as the source has them: without the rows ``deletes="soft"`` keeps
    for deleted ones (``deleted``, as the format calls ``_deleted``, true), and its two
    columns."""
    if rows is None or deleted not in rows.column_names:
        return position, rows
    live = rows.filter(pc.invert(pc.fill_null(rows[deleted], False)))
    marks = [c for c in (deleted, "_deleted_lsn") if c in live.column_names]
    return position, live.drop_columns(marks)


def _source_columns(
    position: TablePosition | None, rows: pa.Table | None
) -> tuple[TablePosition | None, pa.Table | None]:
    """A table's rows without the column a change data feed adds
    (:data:`~pgwire_cdc.lakehouse.sink.CHANGE_FEED_COLUMN`): the source has no such
    column."""
    if rows is None or CHANGE_FEED_COLUMN not in rows.column_names:
        return position, rows
    return position, rows.drop_columns([CHANGE_FEED_COLUMN])


def _line(t: TableReport) -> str:
    return VerifyReport(0, {t.name: t}).summary()


def _read_snapshot(
    batches: Iterator[Batch], wanted: set[str] | None, progress: Callable[[str], None]
) -> tuple[dict[str, list[pa.Table]], int]:
    """The source tables' rows at the temporary slot's consistent point, as change tables
    (``read`` rows), and that point."""
    rows: dict[str, list[pa.Table]] = {}
    for batch in batches:
        if not batch.snapshot:
            raise ConfigError("verify's stream began without a snapshot")
        for key, table in batch.tables.items():
            name, _ = parse_segment_key(key)
            if wanted is None or name in wanted:
                rows.setdefault(name, []).append(lake_shape(table))
        for name in batch.snapshot_progress:
            if wanted is None or name in wanted:
                rows.setdefault(name, [])
        if batch.snapshot_progress:
            progress(f"source read: {sum(t.num_rows for ts in rows.values() for t in ts)} rows")
            if wanted is not None and wanted - set(rows):
                missing = ", ".join(sorted(wanted - set(rows)))
                raise ConfigError(f"not published by this publication: {missing}")
            return rows, batch.lsn
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
    batches: Iterator[Batch], snapshot: dict[str, list[pa.Table]], marker: int
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


def _source_at(
    snapshot: list[pa.Table],
    changes: list[pa.Table],
    position: TablePosition | None,
    flushed: int,
) -> tuple[pa.Table, list[str] | None]:
    """The source table as of the lake table's position: the snapshot's rows with the
    changes the lake table holds applied; and its key columns (None: keyless)."""
    template = snapshot[0] if snapshot else (changes[0] if changes else None)
    if template is None:
        return pa.table({}), None
    keys = key_columns(template)
    columns = data_columns(template)
    base = pa.concat_tables([t.select(columns) for t in snapshot]) if snapshot else None
    if base is None:
        base = template.select(columns).slice(0, 0)
    if changes:
        if any(t.schema.remove_metadata() != changes[0].schema.remove_metadata() for t in changes):
            raise ConfigError(
                "a table's columns changed while verify ran: verify again once the DDL is done"
            )
        held = held_rows(pa.concat_tables(changes), position, flushed)
        if held.num_rows:
            if data_columns(held) != columns:
                raise ConfigError(
                    "a table's columns changed while verify ran: verify again once the DDL is done"
                )
            stream, _ = _native.apply_changes(unsliced(base), unsliced(held), keys)
            base = table_of(stream)
    return base, keys


def compare(
    name: str, source: pa.Table, lake: pa.Table | None, keys: list[str] | None
) -> TableReport:
    """``source`` and ``lake`` rows compared by ``keys`` (None: as multisets of rows)."""
    report = TableReport(name, source_rows=source.num_rows)
    if lake is None:
        report.missing = source.num_rows
        report.examples["missing"] = _examples(source, keys)
        return report
    report.lake_rows = lake.num_rows
    columns = [c for c in source.column_names if c in lake.column_names]
    report.columns_missing = [c for c in source.column_names if c not in lake.column_names]
    report.columns_extra = [c for c in lake.column_names if c not in source.column_names]
    source = source.select(columns)
    lake = _as_types(lake.select(columns), source.schema)
    if keys is None or any(k not in columns for k in keys):
        _compare_multisets(report, source, lake, columns)
    else:
        _compare_keyed(report, source, lake, keys, columns)
    return report


def _as_types(lake: pa.Table, schema: pa.Schema) -> pa.Table:
    arrays = []
    for f in schema:
        column = lake[f.name]
        if column.type != f.type:
            try:
                column = column.cast(f.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise ConfigError(
                    f"column {f.name!r} is {column.type} in the lake but {f.type} at the source"
                    f" and cannot be compared: {e}"
                ) from e
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=schema)


def _digests(table: pa.Table, columns: list[str]) -> pa.Array:
    if table.num_rows == 0:
        return pa.array([], pa.uint64())
    return pa.table(_native.row_digests(unsliced(table), columns))["_digest"].combine_chunks()


def _compare_keyed(
    report: TableReport, source: pa.Table, lake: pa.Table, keys: list[str], columns: list[str]
) -> None:
    s = pa.table(
        {
            "_k": _digests(source, keys),
            "_d": _digests(source, columns),
            "_i": pa.array(range(source.num_rows), pa.int64()),
        }
    )
    l_all = pa.table(
        {
            "_k": _digests(lake, keys),
            "_d": _digests(lake, columns),
            "_i": pa.array(range(lake.num_rows), pa.int64()),
        }
    )
    # A key the lake holds more than once: each copy past the first is extra.
    counts = l_all.group_by("_k").aggregate([("_i", "min"), ("_i", "count")])
    report.extra += int(pc.sum(pc.subtract(counts["_i_count"], 1)).as_py() or 0)
    dupes = counts.filter(pc.greater(counts["_i_count"], 1))
    first = pc.is_in(l_all["_i"], value_set=counts["_i_min"])
    l_one = l_all.filter(first)
    joined = s.join(l_one, "_k", join_type="full outer", left_suffix="_s", right_suffix="_l")
    missing = joined.filter(pc.is_null(joined["_d_l"]))
    extra = joined.filter(pc.is_null(joined["_d_s"]))
    both = joined.filter(pc.and_(pc.is_valid(joined["_d_s"]), pc.is_valid(joined["_d_l"])))
    different = both.filter(pc.not_equal(both["_d_s"], both["_d_l"]))
    report.missing = missing.num_rows
    report.extra += extra.num_rows
    report.different = different.num_rows
    keyed = [
        ("missing", source, missing["_i_s"]),
        ("extra", lake, extra["_i_l"]),
        ("different", source, different["_i_s"]),
    ]
    if dupes.num_rows:
        keyed.append(("extra", lake, dupes["_i_min"]))
    for kind, table, rows in keyed:
        if len(rows):
            picked = table.take(sorted(rows.to_pylist())[:EXAMPLES])
            report.examples.setdefault(kind, [])
            report.examples[kind] += _examples(picked, keys)
    report.examples = {k: v[:EXAMPLES] for k, v in report.examples.items()}


def _compare_multisets(
    report: TableReport, source: pa.Table, lake: pa.Table, columns: list[str]
) -> None:
    s = pa.table({"_d": _digests(source, columns)}).group_by("_d").aggregate([("_d", "count")])
    lk = pa.table({"_d": _digests(lake, columns)}).group_by("_d").aggregate([("_d", "count")])
    joined = s.join(lk, "_d", join_type="full outer", left_suffix="_s", right_suffix="_l")
    ns = pc.fill_null(joined["_d_count_s"], 0)
    nl = pc.fill_null(joined["_d_count_l"], 0)
    report.missing = int(pc.sum(pc.max_element_wise(pc.subtract(ns, nl), 0)).as_py() or 0)
    report.extra = int(pc.sum(pc.max_element_wise(pc.subtract(nl, ns), 0)).as_py() or 0)


def _examples(table: pa.Table, keys: list[str] | None) -> list[Any]:
    rows = table.select(keys) if keys else table
    return [
        dict(r) if len(r) > 1 else next(iter(r.values()))
        for r in rows.slice(0, EXAMPLES).to_pylist()
    ]


def _repair(
    format: TableFormat,
    name: str,
    found: TableReport,
    source: pa.Table,
    lake: pa.Table,
    keys: list[str] | None,
    position: TablePosition | None,
    template: pa.Table,
    mark: Mark | None = None,
) -> bool:
    """One commit that makes the lake table equal ``source``, recording the position it
    had (see the module documentation), or ``mark``; whether it committed."""
    ref = format.ref(name)
    now = format.position(ref)
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
    columns = source.column_names
    if keys is None:
        if mark.lsn is None:
            found.not_repaired = "the table records no position yet"
            return False
        format.write(ref, source, "overwrite", mark)
        found.upserted, found.deleted = found.missing, found.extra
        return True
    s_k, l_k = _digests(source, keys), _digests(lake, keys)
    s_d, l_d = (
        _digests(source, columns),
        _digests(_as_types(lake.select(columns), source.schema), columns),
    )
    lake_digest = dict(zip(l_k.to_pylist(), l_d.to_pylist(), strict=True))
    source_keys = set(s_k.to_pylist())
    upsert = [
        i
        for i, (k, d) in enumerate(zip(s_k.to_pylist(), s_d.to_pylist(), strict=True))
        if lake_digest.get(k) != d
    ]
    delete = sorted({i for i, k in enumerate(l_k.to_pylist()) if k not in source_keys})
    if not upsert and not delete:
        return False
    if mark.lsn is None:
        found.not_repaired = "the table records no position yet"
        return False
    rows = source.take(pa.array(upsert, pa.int64()))
    gone = _as_types(lake.select(columns), source.schema).take(pa.array(delete, pa.int64()))
    kinds = ["insert"] * len(rows) + ["delete"] * len(gone)
    changes = made_changes(template.schema, pa.concat_tables([rows, gone]), kinds, mark.lsn)
    if CHANGE_FEED_COLUMN in format.schema(ref).names:
        # A repaired row is the source's row as of the LSN the table was compared at.
        columns = [*columns, CHANGE_FEED_COLUMN]
    stream, _ = _native.reduce_changes(unsliced(changes), columns, keys)
    format.merge(ref, table_of(stream), keys, False, mark, adds=True)
    found.upserted, found.deleted = len(rows), len(gone)
    return True
