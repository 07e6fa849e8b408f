"""``pgwire_cdc.stream()``: a consistent initial snapshot, then the committed changes of a
publication, as batches of Arrow change tables with exact acknowledgement.

How a new slot gets its snapshot, and why a crash during it is harmless
-----------------------------------------------------------------------
A logical slot created with an exported snapshot gives two halves that fit exactly: the
snapshot sees every transaction committed before the slot's *consistent point*, and the
slot streams every transaction committed after it. The snapshot is copied under a
**temporary** slot (``<slot>_snapshot``), which the server drops by itself when the
connection ends. Only once the consumer has acked the last snapshot batch is the permanent
slot created, as a copy of the temporary one (``pg_copy_logical_replication_slot``, same
consistent point). So:

* a crash (or a stop) before the snapshot is acked leaves no slot behind: the next
  ``stream()`` finds no slot and takes a fresh snapshot (consumers that keep a copy treat
  a new snapshot as replacing the old rows: the first batch of a snapshot has
  ``batch.snapshot`` true);
* a crash after it finds the slot at the consistent point and streams from there.

Acknowledgement
---------------
``batch.lsn`` is a transaction boundary: every change of a transaction that committed at
or before it is in this batch or an earlier one. ``batch.ack()`` is cumulative and tells
the server (standby status *flush* position) that the slot may advance to it; nothing
else ever moves the slot, except that a consumer idle with nothing un-acked lets it follow
the server's position (a slot on quiet tables must not hold WAL). Un-acked batches come
again after a restart; acked ones never do. The batch limits hold inside transactions too
(memory stays bounded): a transaction larger than ``max_batch_rows`` spans batches, and
only the batch holding its end carries an LSN past it. So if a consumer acks a batch that
ends inside a transaction and restarts, that transaction comes again in full; no row
with ``_commit_lsn`` at or below an acked ``batch.lsn`` ever comes again.

Snapshot rows have ``_change_type = 'read'``, ``_lsn = _commit_lsn`` = the consistent
point and ``_tx_ordinal`` numbering them 0, 1, … in delivery order.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import partial
from typing import TYPE_CHECKING, Any

import psycopg
import pyarrow as pa
from psycopg import sql

from . import _native, acks, admin, catalog, copies, incremental, metrics, preflight
from ._native import Stop
from .connection import SESSION_SETTINGS, connect
from .errors import ConfigError, ConnectionError, SlotError
from .lsn import int_to_lsn, lsn_to_int
from .tables import merge_segments, table_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("pgwire_cdc")

#: Default batch limits: rows, payload bytes, milliseconds.
DEFAULT_MAX_BATCH_ROWS = 100_000
DEFAULT_MAX_BATCH_BYTES = 64 << 20
DEFAULT_MAX_BATCH_MS = 1_000
#: Bytes of held (streamed, uncommitted) transaction changes kept in memory, all
#: transactions together; more goes to disk.
DEFAULT_SPILL_THRESHOLD = 64 << 20

#: Reconnecting after a lost replication connection: attempts per outage, the delay
#: before the first one, and the cap of the delay that doubles with every attempt (s).
RECONNECT_ATTEMPTS = 8
RECONNECT_DELAY_S = 0.2
RECONNECT_MAX_DELAY_S = 30.0
#: A replication connection silent this long (no data, no keepalive, no answer to a
#: request for one) counts as dead; at least the server's wal_sender_timeout (s).
STALL_TIMEOUT_S = 60.0
#: Seconds between looks for tables added to the publication while streaming.
RECHECK_S = 5.0
#: Rows per chunk of an incremental snapshot.
DEFAULT_CHUNK_ROWS = 10_000
#: The prefix of the heartbeat messages (``heartbeat_interval``), never handed out.
HEARTBEAT_PREFIX = "pgwire_cdc.heartbeat"

#: What PostgreSQL accepts as a replication slot name.
_SLOT_NAME = re.compile(r"[a-z0-9_]{1,63}")


@dataclass
class Batch:
    """Changes of one or more transactions (or initial-snapshot rows)."""

    tables: dict[str, pa.Table]
    #: Everything up to this LSN is contained in this or earlier batches.
    lsn: int
    #: Rows of the initial snapshot (``_change_type = 'read'``).
    snapshot: bool = False
    #: The first batch of a new initial snapshot (the consumer's copy starts over).
    snapshot_start: bool = False
    #: Incremental snapshots of tables added later (``pgwire_cdc.incremental``): per
    #: table whose snapshot started or advanced in this batch, the key up to which its
    #: existing rows have now been delivered (a list; empty: none yet), or None once all
    #: of them have. A consumer keeps it with the batch and passes what it holds back as
    #: ``held_tables`` when it starts again.
    snapshot_progress: dict[str, list[Any] | None] = field(default_factory=dict)
    _ack: Callable[[], None] | None = field(default=None, repr=False)

    @property
    def rows(self) -> int:
        return sum(t.num_rows for t in self.tables.values())

    def ack(self) -> None:
        """The caller has made this batch (and every earlier one) durable: the slot may
        advance to ``lsn``. A lost connection is no error here: the position is kept and
        reaches the server once the stream has reconnected."""
        if self._ack is not None:
            self._ack()

    def to_spark(self, spark: SparkSession) -> dict[str, DataFrame]:
        """One Spark DataFrame per change table, built from Arrow (no pandas, no per-row
        Python)."""
        from .spark.types import to_spark

        return to_spark(spark, self.tables)


def _proto_version(server_version: int) -> int:
    """The highest pgoutput protocol version the server speaks."""
    if server_version >= 160000:
        return 4
    if server_version >= 150000:
        return 3
    if server_version >= 140000:
        return 2
    return 1


def _parse_lsn(value: int | str | None) -> int | None:
    if value is None or isinstance(value, int):
        return value
    return lsn_to_int(value)


def _temporary_slot_name(slot: str) -> str:
    return f"{slot[:54]}_snapshot"


@dataclass(frozen=True, kw_only=True)
class StreamOptions:
    """Everything ``stream()`` takes but the DSN (which may hold a password), under the same
    names and with the same defaults, checked once when built (:class:`ConfigError` for
    the first that is wrong). Build one, keep it, and pass it as ``stream(dsn,
    options=...)``; :func:`dataclasses.replace` gives a changed copy. ``stream()``'s
    docstring and docs/streaming.md explain each field."""

    #: A publication name, or a list of them (pgoutput's ``publication_names``).
    publication: str | Sequence[str] = "pub"
    #: The replication slot: created when missing, resumed from when present.
    slot: str = "pgwire_cdc_slot"
    #: Tables ("schema.table") the publication must hold: created or added when missing.
    tables: Sequence[str] | None = None
    #: Copy a new slot's existing rows first, and the rows of tables that join later.
    #: False streams changes only (the slot keeps no record of copies either).
    snapshot: bool = True
    #: Binary tuple data where every column has a binary decoder.
    binary: bool = True
    #: Stop once everything committed up to this LSN is delivered.
    until_lsn: int | str | None = None
    #: Stop after this many seconds without a change.
    idle_timeout: float | None = None
    #: Batch limits: rows, payload bytes, milliseconds.
    max_batch_rows: int = DEFAULT_MAX_BATCH_ROWS
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    max_batch_ms: int = DEFAULT_MAX_BATCH_MS
    #: Connections copying the initial snapshot at once.
    snapshot_workers: int = 2
    #: Tables of at least this many 8 KiB blocks are copied in CTID ranges.
    snapshot_split_blocks: int = 1024
    #: The pgoutput protocol version (None: the highest the server speaks).
    proto_version: int | None = None
    #: Reconnects after a lost replication connection (attempts, first delay, cap).
    reconnect_attempts: int = RECONNECT_ATTEMPTS
    reconnect_delay: float = RECONNECT_DELAY_S
    reconnect_max_delay: float = RECONNECT_MAX_DELAY_S
    #: Seconds of silence after which a replication connection counts as lost.
    stall_timeout: float | None = None
    #: Ask the server to stream large transactions while they run (protocol 2+).
    streaming: bool = True
    #: Bytes of held streamed transactions kept in memory; more goes to ``spill_dir``.
    spill_threshold: int = DEFAULT_SPILL_THRESHOLD
    spill_dir: str | os.PathLike[str] | None = None
    #: The tables whose rows the consumer holds, and how far (see ``stream()``).
    held_tables: Collection[str] | Mapping[str, Sequence[Any] | None] | None = None
    #: Rows per chunk of an incremental snapshot.
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    #: Copies a new slot's initial snapshot elsewhere (Spark tasks), see ``stream()``.
    snapshot_reader: Callable[[str, int, list[str]], None] | None = None
    #: Seconds without a change after which the stream writes a heartbeat message into
    #: the WAL, and again every as many while idle (None: never).
    heartbeat_interval: float | None = None
    #: Make the slot a failover slot (PostgreSQL 17+), synchronized to standbys that
    #: have ``sync_replication_slots`` on, so streaming goes on after a promotion.
    failover: bool = False

    def __post_init__(self) -> None:
        if self.max_batch_rows < 1 or self.max_batch_bytes < 1 or self.max_batch_ms < 0:
            raise ConfigError("max_batch_rows and max_batch_bytes must be positive")
        if self.idle_timeout is not None and self.idle_timeout < 0:
            raise ConfigError("idle_timeout must not be negative")
        if self.reconnect_attempts < 0 or self.reconnect_delay < 0 or self.reconnect_max_delay < 0:
            raise ConfigError(
                "reconnect_attempts, reconnect_delay and reconnect_max_delay must not be negative"
            )
        if self.stall_timeout is not None and self.stall_timeout < 0:
            raise ConfigError("stall_timeout must not be negative (0 turns stall detection off)")
        if self.spill_threshold < 0:
            raise ConfigError("spill_threshold must not be negative (0 holds nothing in memory)")
        spill_dir = self.spill_path
        if spill_dir is not None:
            if not os.path.isdir(spill_dir) or not os.access(spill_dir, os.W_OK | os.X_OK):
                raise ConfigError(
                    f"spill_dir {spill_dir!r} is not a writable directory: give a directory"
                    " this process can create files in, with room for the largest transaction"
                )
        if self.chunk_rows < 1:
            raise ConfigError("chunk_rows must be positive")
        if self.heartbeat_interval is not None and self.heartbeat_interval <= 0:
            raise ConfigError("heartbeat_interval must be positive (None: no heartbeat)")
        if self.held_tables is not None and isinstance(self.held_tables, str):
            raise ConfigError("held_tables is a list of table names (or a mapping), not one name")
        if self.tables is not None and isinstance(self.tables, str):
            raise ConfigError("tables is a list of table names, not one name")
        if self.proto_version is not None and self.proto_version not in preflight.PROTO_MIN_SERVER:
            raise ConfigError(
                f"proto_version must be 1, 2, 3 or 4, not {self.proto_version!r} (or None: the"
                " highest the server speaks)"
            )
        if not isinstance(self.slot, str) or not _SLOT_NAME.fullmatch(self.slot):
            raise ConfigError(
                f"invalid replication slot name {self.slot!r}: PostgreSQL allows only"
                " lower-case letters, digits and underscores, at most 63 characters"
            )
        publications = self.publications
        if not publications or not all(isinstance(p, str) and p for p in publications):
            raise ConfigError("publication must be a publication name or a list of them")
        if self.tables and len(publications) > 1:
            raise ConfigError(
                "tables= adds tables to one publication: pass one publication name with it, or"
                " list only existing publications"
            )

    @property
    def publications(self) -> list[str]:
        """``publication`` as a list of names (pgoutput's ``publication_names``)."""
        p = self.publication
        return [p] if isinstance(p, str) else list(p)

    @property
    def spill_path(self) -> str | None:
        """``spill_dir`` as a string."""
        return None if self.spill_dir is None else os.fspath(self.spill_dir)


class _Stream:
    """The state behind one ``stream()`` generator."""

    def __init__(self, dsn: str, options: StreamOptions) -> None:
        self.dsn = dsn
        self.publications = options.publications
        self.slot = options.slot
        self.o = options
        self.conn: psycopg.Connection[Any] | None = None
        self.repl: _native.ReplicationConnection | None = None
        self.live: _native.LiveStream | None = None
        self.reader: _native.SnapshotReader | None = None
        # Which slot the live stream reads: the permanent one, or the temporary
        # snapshot slot until the snapshot is committed.
        self.stream_slot = options.slot
        #: Acks and the temporary -> permanent slot hand-off (:mod:`pgwire_cdc.acks`).
        self.acks = acks.AckLedger()
        self.consistent_point = 0
        self.server_version = 0
        self.table_infos: list[catalog.TableInfo] = []
        #: How every streaming session of this run runs (set by prepare()).
        self.session_options: _native.SessionOptions | None = None
        self.existing_slot: admin.SlotInfo | None = None
        self.snapshots: incremental.Snapshots | None = None
        #: The published tables whose rows the consumer holds or is being sent.
        self.known: set[str] = set()
        self.next_recheck = 0.0
        #: Tables this run's ``tables=`` added to the publication.
        self.added: set[str] = set()
        #: Tables that may have joined the publication after the slot's position: copied
        #: once every earlier run's note is read, unless the last one lists them.
        self.candidates: dict[str, catalog.TableInfo] = {}
        #: The WAL position when this run started: copy-state notes before it are earlier
        #: runs' (:mod:`pgwire_cdc.copies`).
        self.run_start = 0
        self.copy_state = copies.CopyLedger(options.slot, caught_up=True)
        #: What this run records once metrics are on (:mod:`pgwire_cdc.metrics`).
        recorder = metrics.active()
        self.metrics = recorder.for_slot(options.slot) if recorder is not None else None
        #: When a batch last carried rows, and when the last heartbeat was written.
        self.last_change = self.last_heartbeat = time.monotonic()
        #: The server is a standby: nothing can be written into its WAL (no copy-state
        #: notes, no incremental snapshots' watermarks).
        self.in_recovery = False

    # -- setup ---------------------------------------------------------------------

    def prepare(self) -> None:
        conn = connect(self.dsn)
        self.conn = conn
        before = _published_names(conn, self.publications)
        # Every check runs before any DDL; the publication DDL commits only when nothing is
        # in the way (preflight.py).
        found = preflight.run(
            conn,
            self.publications,
            list(self.o.tables) if self.o.tables is not None else None,
            self.slot,
            snapshot=self.o.snapshot,
            proto_version=self.o.proto_version,
            apply=True,
        )
        found.raise_if_blocked()
        self.in_recovery = found.info.in_recovery
        if self.o.failover:
            admin.raise_problems(
                admin.failover_problems(found.info, found.slot), "failover=True not possible"
            )
        self.existing_slot = found.slot
        self.server_version = found.info.version_num
        self.table_infos = found.tables
        self.added = {t.qualified for t in found.tables} - before
        if not found.tables:
            log.info(
                "publication(s) %s publish no tables now: streaming what slot %s still holds",
                ", ".join(self.publications),
                self.slot,
            )
        self.run_start = _wal_position(conn)
        self.copy_state = copies.CopyLedger(self.slot, caught_up=found.slot is None)
        user_types = {
            c.type_oid for t in self.table_infos for c in t.columns if c.type_oid >= 16384
        }
        type_map = catalog.type_map(conn, user_types)
        proto_version = self.o.proto_version or _proto_version(self.server_version)
        # Status updates well inside wal_sender_timeout (0 = no timeout): a third of it,
        # at most every 10 s.
        row = conn.execute(
            "SELECT setting::int * CASE unit WHEN 's' THEN 1000 ELSE 1 END "
            "FROM pg_settings WHERE name = 'wal_sender_timeout'"
        ).fetchone()
        timeout_ms = int(row[0]) if row and row[0] else 0
        status_interval_ms = min(10_000, max(100, timeout_ms // 3)) if timeout_ms else 10_000
        stall = self.o.stall_timeout
        if stall is None:
            # Like PostgreSQL's wal_receiver_timeout; a walsender busy decoding may take
            # up to half its wal_sender_timeout to read a request for a reply.
            stall = max(STALL_TIMEOUT_S, timeout_ms / 1000)
        binary = bool(self.o.binary)
        if binary:
            opaque = sorted(
                {
                    f"{t.qualified}.{c.name} ({c.type_name})"
                    for t in self.table_infos
                    for c in t.columns
                    if not _native.binary_decodable(c.base_type_oid)
                }
            )
            if opaque:
                # pgoutput's binary switch is per stream: one column whose send format is
                # unknown here means text for all.
                log.warning(
                    "binary tuple format unavailable, streaming in text format: "
                    "no binary decoder for %s",
                    ", ".join(opaque),
                )
                binary = False
        self.session_options = _native.SessionOptions(
            publication_names=self.publications,
            proto_version=proto_version,
            binary=binary,
            streaming=self.o.streaming,
            status_interval_ms=status_interval_ms,
            stall_timeout_ms=int(stall * 1000),
            type_map=type_map,
            spill_threshold=self.o.spill_threshold,
            spill_dir=self.o.spill_path,
            note_prefix=copies.NOTE_PREFIX,
        )

    def _replication_connection(self) -> _native.ReplicationConnection:
        # Text-format values are printed by the walsender, and snapshot values cast to text
        # by the snapshot workers, with these settings (startup parameters of each).
        return _native.ReplicationConnection(self.dsn, list(SESSION_SETTINGS.items()))

    # -- acknowledgement -----------------------------------------------------------

    def ack(self, seq: int, lsn: int, snapshot_batch: bool) -> None:
        decision = self.acks.ack(seq, lsn, snapshot_batch)
        if decision is None:
            return
        if decision.make_permanent_slot:
            self._commit_snapshot()
        if self.live is not None and decision.slot_lsn is not None:
            self.copy_state.acking(seq)
            if self.copy_state.note_due(lsn):
                self._on_setup_connection(self._write_note)
                if self.copy_state.note_due(lsn):
                    # The copy state could not be written ahead of this ack: the slot stays
                    # before the last note, and the batches after it come again after a
                    # restart.
                    lsn = min(lsn, max(self.acks.acked_lsn, self.copy_state.written_start or 0))
                    log.warning(
                        "the slot's copy state could not be written; acked up to %s",
                        int_to_lsn(lsn),
                    )
            self.live.ack(lsn)
        self.acks.acked(lsn)
        if self.metrics is not None:
            self.metrics.acked(seq)

    def _write_note(self) -> None:
        """Writes the copy state into the WAL ahead of the slot (:mod:`pgwire_cdc.copies`)."""
        assert self.conn is not None
        row = self.conn.execute(
            "SELECT pg_logical_emit_message(false, %s, %s)::text",
            (copies.NOTE_PREFIX, self.copy_state.note()),
        ).fetchone()
        assert row is not None
        self.copy_state.noted(lsn_to_int(row[0]))

    def _start_copy(self, table: catalog.TableInfo, after: Sequence[Any] | None = None) -> None:
        """Starts (or starts again) the incremental copy of ``table`` after key ``after``;
        the slot's copy state records it at once. ConfigError for a keyless table, and on
        a standby."""
        assert self.snapshots is not None
        if self.in_recovery:
            raise ConfigError(
                f"{table.qualified} would be read while streaming (an incremental snapshot),"
                " which writes watermarks into the WAL: a standby cannot. Stream from the"
                " primary to read it, or pass held_tables naming it if the consumer holds"
                " its rows"
            )
        self.snapshots.add(table, after)
        self.known.add(table.qualified)
        if self.o.snapshot:
            # snapshot=False streams changes only: no copy state kept in the WAL.
            self.copy_state.started(table.qualified, after)
            if self.copy_state.note_due():
                self._on_setup_connection(self._write_note)

    def _commit_snapshot(self) -> None:
        """Makes the slot permanent: a copy of the temporary snapshot slot, at the
        position acked so far."""
        assert self.conn is not None
        admin.copy_slot(self.conn, _temporary_slot_name(self.slot), self.slot)
        if self.o.failover:
            # The copy does not carry the flag (a temporary slot cannot have it); the new
            # slot is not in use yet, so it can be changed now.
            admin.set_failover(self.dsn, self.slot)
        # Already streaming on the temporary slot: it moves over at the next boundary.
        self.acks.permanent_slot_made()
        log.info("initial snapshot committed; slot %s created", self.slot)

    # -- the generator -------------------------------------------------------------

    def run(self) -> Iterator[Batch]:
        try:
            self.prepare()
            assert self.conn is not None
            if self.metrics is not None:
                self.metrics.watch(self.dsn)
            existing = self.existing_slot
            self.snapshots = incremental.Snapshots(self.conn, self.o.chunk_rows)
            self.known = {t.qualified for t in self.table_infos}
            if existing is not None:
                self._plan_incremental(self.o.held_tables)
            self._listen(self.conn)
            if existing is not None:
                if self.o.failover and not existing.failover:
                    admin.set_failover(self.dsn, self.slot)
                    log.info("slot %s is now a failover slot", self.slot)
                start = existing.confirmed_flush_lsn or 0
                self.acks.acked(start)
                self.repl = self._replication_connection()
                self._start_streaming(self.slot, start)
            elif self.o.snapshot:
                yield from self._snapshot()
                if self.acks.snapshot_committed:
                    assert self.repl is not None
                    self.repl.drop_slot(_temporary_slot_name(self.slot))
                    self._start_streaming(self.slot, self.consistent_point)
                else:
                    # The consumer has not acked the snapshot yet: stream on the
                    # temporary slot; an ack that covers the snapshot makes it permanent.
                    self._start_streaming(_temporary_slot_name(self.slot), self.consistent_point)
            else:
                self.repl = self._replication_connection()
                _, cp, _ = self.repl.create_slot(self.slot)
                if self.o.failover:
                    admin.set_failover(self.dsn, self.slot)
                self.acks.acked(cp)
                self._start_streaming(self.slot, cp)
            yield from self._changes()
        finally:
            self.close()

    def _start_streaming(
        self, slot: str, start: int, skip_through: tuple[int, int] | None = None
    ) -> None:
        assert self.repl is not None and self.session_options is not None
        self.stream_slot = slot
        self.acks.streaming_on(temporary=slot != self.slot)
        self.live = self.repl.start_streaming(
            slot,
            start,
            self.session_options,
            acked_lsn=self.acks.acked_lsn,
            skip_through=skip_through,
        )
        self.repl = None

    def _snapshot(self) -> Iterator[Batch]:
        self.repl = self._replication_connection()
        temp = _temporary_slot_name(self.slot)
        _, cp, snapshot_name = self.repl.create_slot(temp, temporary=True, export_snapshot=True)
        assert snapshot_name is not None
        self.consistent_point = cp
        self.acks.snapshot_started(cp)
        assert self.conn is not None
        reader = self.o.snapshot_reader
        if reader is not None:
            names = [t.qualified for t in self.table_infos]
            log.info(
                "initial snapshot of %d table(s) at %s by the snapshot reader",
                len(names),
                int_to_lsn(cp),
            )
            reader(snapshot_name, cp, names)
            yield self._rowless_snapshot_batch(cp)
            return
        tasks = []
        workers = max(1, int(self.o.snapshot_workers))
        for t in self.table_infos:
            blocks = catalog.table_blocks(self.conn, t.oid)
            ranges = workers if blocks >= self.o.snapshot_split_blocks else 1
            columns = t.descriptions()
            for query in catalog.snapshot_queries(t, ranges, blocks):
                tasks.append((t.oid, t.schema, t.name, t.replica_identity, columns, query))
        log.info(
            "initial snapshot of %d table(s) at %s on %d connection(s)",
            len(self.table_infos),
            int_to_lsn(cp),
            workers,
        )
        self.reader = self.repl.start_snapshot(
            snapshot_name, cp, tasks, workers=workers, batch_rows=self.o.max_batch_rows
        )
        pending = self._next_snapshot_segment()
        first = True
        while pending is not None:
            following = self._next_snapshot_segment()
            seq = self.acks.handed_out()
            if following is None:
                self.acks.last_snapshot_batch(seq)
            name, table = pending
            batch = Batch(
                tables={name: table},
                lsn=cp,
                snapshot=True,
                snapshot_start=first,
                # The last one: every table of the snapshot is complete, empty ones too.
                snapshot_progress=self._snapshotted() if following is None else {},
                _ack=self._acker(seq, cp, snapshot_batch=True),
            )
            if self.metrics is not None:
                if first:
                    self.metrics.copy_started([t.qualified for t in self.table_infos])
                copied = {name: table.num_rows}
                self.metrics.batch(seq, batch.tables, copied, batch.snapshot_progress)
            yield batch
            first = False
            pending = following
        if first:
            # Nothing to copy: one empty snapshot batch all the same, so that a consumer
            # keeping a copy learns that a new snapshot started (its copy is now empty).
            yield self._rowless_snapshot_batch(cp)
        self.reader = None

    def _rowless_snapshot_batch(self, cp: int) -> Batch:
        """The last (and only) batch of a snapshot whose rows did not come through the
        stream: it starts the consumer's copy over, names every table complete, and its
        ack creates the slot."""
        seq = self.acks.handed_out()
        self.acks.last_snapshot_batch(seq)
        return Batch(
            tables={},
            lsn=cp,
            snapshot=True,
            snapshot_start=True,
            snapshot_progress=self._snapshotted(),
            _ack=self._acker(seq, cp, snapshot_batch=True),
        )

    def _snapshotted(self) -> dict[str, list[Any] | None]:
        """``Batch.snapshot_progress`` of a complete initial snapshot."""
        return dict.fromkeys((t.qualified for t in self.table_infos), None)

    def _next_snapshot_segment(self) -> tuple[str, pa.Table] | None:
        assert self.reader is not None
        while True:
            try:
                got = self.reader.next_batch(200)
            except StopIteration:
                return None
            if got is not None:
                name, stream = got
                return name, table_of(stream)

    def _acker(self, seq: int, lsn: int, snapshot_batch: bool) -> Callable[[], None]:
        return lambda: self.ack(seq, lsn, snapshot_batch)

    def _changes(self) -> Iterator[Batch]:
        until = _parse_lsn(self.o.until_lsn)
        idle = self.o.idle_timeout
        assert self.live is not None and self.snapshots is not None
        last_lsn = self.live.delivered_lsn
        while True:
            assert self.live is not None
            # An incremental snapshot in progress keeps a run going that would end by
            # itself: its chunks need the stream to pass their high watermarks.
            busy = self.snapshots.active
            # A chunk waits for the stream to pass its high watermark.
            waiting = self.snapshots.waiting_for
            try:
                segments, lsn, stop, notes = self.live.poll(
                    max_rows=self.o.max_batch_rows,
                    max_bytes=self.o.max_batch_bytes,
                    max_ms=self.o.max_batch_ms,
                    until_lsn=waiting if busy else until,
                    idle_timeout_ms=None if idle is None or busy else int(idle * 1000),
                    idle_confirm_limit=self.copy_state.idle_confirm_limit(),
                )
            except ConnectionError as e:
                self._reconnect(e)
                continue
            tables = merge_segments((name, table_of(s)) for name, s in segments)
            if notes:
                self._on_setup_connection(partial(self._take_notes, notes))
            if not self.copy_state.caught_up and stop != Stop.PENDING and lsn >= self.run_start:
                self._on_setup_connection(self._caught_up)
            self._on_setup_connection(partial(self._watch_publications, tables))
            # Stop.UNTIL_LSN: every transaction committed before the watermark is in.
            passed = lsn if waiting is None or stop != Stop.UNTIL_LSN else max(lsn, waiting)
            rows, progress = self.snapshots.step(tables, passed)
            for name, table in rows.items():
                tables[name] = _in_commit_order(tables.get(name), table)
            if tables or progress or (stop != Stop.PENDING and lsn > last_lsn):
                # A batch without rows still moves the LSN (the end of a transaction whose
                # rows went out earlier): the consumer acks it like any other.
                seq = self.acks.handed_out()
                self.copy_state.handed_out(seq, progress)
                if self.metrics is not None:
                    copied = {name: t.num_rows for name, t in rows.items()}
                    self.metrics.batch(seq, tables, copied, progress)
                if tables:
                    self.last_change = time.monotonic()
                yield Batch(
                    tables=tables,
                    lsn=lsn,
                    snapshot_progress=progress,
                    _ack=self._acker(seq, lsn, False),
                )
                last_lsn = max(last_lsn, lsn)
            if self.snapshots.wants_chunk:
                self._on_setup_connection(partial(self.snapshots.read_next, tables, bool(rows)))
            if not self.snapshots.active:
                # While a chunk waited, "until_lsn" was its watermark, not the caller's.
                if not busy and stop in (Stop.UNTIL_LSN, Stop.IDLE):
                    return
                if busy and until is not None and lsn >= until:
                    return
            if self.acks.switch_pending:
                self._switch_to_permanent_slot()
            if self._heartbeat_due(busy):
                self._on_setup_connection(self._heartbeat)
            if self._idle_past_timeout(busy):
                return

    def _heartbeat_due(self, busy: bool) -> bool:
        """Whether the stream has been idle a whole ``heartbeat_interval`` since the last
        change or heartbeat (never while a table is copied: its watermarks move it)."""
        interval = self.o.heartbeat_interval
        if interval is None or busy:
            return False
        return time.monotonic() - max(self.last_change, self.last_heartbeat) >= interval

    def _heartbeat(self) -> None:
        """Writes a heartbeat into the WAL: a non-transactional logical decoding message
        that the server decodes and sends at once. No change table holds it, and the
        stream confirms the position past it while idle, so the slot moves even when the
        database writes no WAL of its own. A server that refuses it (a standby) gets a
        warning and no more heartbeats."""
        assert self.conn is not None
        self.last_heartbeat = time.monotonic()
        try:
            self.conn.execute(
                "SELECT pg_logical_emit_message(false, %s, %s)", (HEARTBEAT_PREFIX, self.slot)
            )
        except psycopg.Error as e:
            if self.conn.broken:
                raise  # a lost connection: opened again for the next heartbeat
            log.warning("heartbeat refused, heartbeats stop for this run: %s", e)
            self.last_heartbeat = float("inf")
            return
        if self.metrics is not None:
            self.metrics.heartbeat()

    def _idle_past_timeout(self, busy: bool) -> bool:
        """``idle_timeout`` counted from the last change: heartbeats come back through the
        stream as messages, which would otherwise keep it from ever being idle."""
        idle = self.o.idle_timeout
        if idle is None or busy or self.o.heartbeat_interval is None:
            return False
        return time.monotonic() - self.last_change >= idle

    # -- tables added later ----------------------------------------------------------

    def _plan_incremental(self, held: Any) -> None:
        """Copies the published tables the consumer does not hold: those not in
        ``held_tables`` when given; else those this run's ``tables=`` added, and the
        candidates: those that may have joined the publication after the slot's position,
        decided once the stream has passed every earlier run's notes (copies an earlier
        run left unfinished come back with them, :mod:`pgwire_cdc.copies`)."""
        if held is None:
            if not self.o.snapshot:
                return  # changes only
            assert self.conn is not None
            joined = _joined_since_slot(self.conn, self.slot, self.publications)
            for t in self.table_infos:
                if t.qualified in self.added:
                    # Added by this run's tables=: its rows are not in the slot's stream.
                    self._start_copy(t)
                elif t.oid in joined:
                    self.candidates[t.qualified] = t
            return
        holding: dict[str, Any] = dict(held) if isinstance(held, Mapping) else dict.fromkeys(held)
        for t in self.table_infos:
            if t.qualified not in holding:
                self._start_copy(t)
            elif holding[t.qualified] is not None:
                after = list(holding[t.qualified])
                self._start_copy(t, after or None)

    def _on_setup_connection(self, work: Callable[[], None]) -> None:
        """Runs ``work`` (publication look-ups, chunk reads) on the setup connection while
        streaming, opening it again when it was lost. A failure is logged and the work is
        tried again at the next batch: the replication connection has its own reconnects,
        and its failures end the stream if they last."""
        assert self.snapshots is not None
        try:
            if self.conn is None or self.conn.closed or self.conn.broken:
                self._close_setup_connection()
                conn = connect(self.dsn)
                self._listen(conn)
                self.conn = self.snapshots.conn = conn
            work()
        except (psycopg.OperationalError, ConnectionError) as e:
            log.warning("setup connection lost (%s); trying again at the next batch", e)

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        """Takes resnapshot() requests; a standby has no LISTEN (nor could it record the
        copies a request starts)."""
        if not self.in_recovery:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(resnapshot_channel(self.slot))))

    def _close_setup_connection(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except psycopg.Error as e:
                log.debug("closing the lost setup connection failed: %s", e)
            self.conn = None

    def _watch_publications(self, tables: dict[str, pa.Table]) -> None:
        """Tables added to the publication while streaming (a batch names a table not
        seen before, or every RECHECK_S), and resnapshot() requests."""
        assert self.conn is not None and self.snapshots is not None
        # Taken first: the connection is busy while notifies() runs.
        for payload in [note.payload for note in self.conn.notifies(timeout=0)]:
            self._resnapshot_request(payload)
        now = time.monotonic()
        if not (set(tables) - self.known) and now < self.next_recheck:
            return
        self.next_recheck = now + RECHECK_S
        for t in catalog.tables_of_publications(self.conn, self.publications):
            if t.qualified in self.known:
                continue
            # Known once handled: a lost connection on the way means another look later.
            if not self._listed(t):
                # Published through FOR ALL TABLES or a schema, and new here: created while
                # the stream ran, so all its rows come through the stream.
                log.info("%s was created under the publication: streamed", t.qualified)
            else:
                try:
                    self._start_copy(t)
                    log.info("%s was added to the publication: its rows follow", t.qualified)
                except ConfigError as e:
                    # A keyless table: streamed, not copied.
                    log.warning("%s; its changes are streamed, earlier rows are not", e)
            self.known.add(t.qualified)

    def _take_notes(self, notes: list[tuple[int, bytes]]) -> None:
        """Copy-state notes from the stream: an earlier run's copies that did not finish
        are taken up again (:mod:`pgwire_cdc.copies`)."""
        assert self.conn is not None
        if self.o.held_tables is not None or not self.o.snapshot:
            return  # the consumer says what it holds, or takes changes only
        wanted: dict[str, list[Any]] = {}
        for lsn, content in notes:
            wanted.update(self.copy_state.received(lsn, content, self.run_start))
        if not wanted:
            return
        published = {
            t.qualified: t for t in catalog.tables_of_publications(self.conn, self.publications)
        }
        for name, after in wanted.items():
            table = published.get(name)
            if table is None:
                log.info("%s, whose copy an earlier run began, is no longer published", name)
                continue
            log.info("resuming the copy of %s an earlier run began", name)
            try:
                self._start_copy(table, after or None)
            except ConfigError as e:
                log.warning("%s; its changes are streamed, earlier rows are not", e)

    def _caught_up(self) -> None:
        """Every earlier run's note is read: the candidates no earlier run knew of are
        copied."""
        wanted = self.copy_state.candidates_to_copy(self.candidates)
        for name in sorted(wanted):
            table = self.candidates[name]
            try:
                self._start_copy(table)
                log.info(
                    "%s joined the publication after slot %s's position: copied",
                    name,
                    self.slot,
                )
            except ConfigError as e:
                log.warning("%s; its changes are streamed, earlier rows are not", e)
            del self.candidates[name]
        self.candidates = {}
        self.copy_state.caught_up = True

    def _last_note(self) -> None:
        """A run that ends leaves the copy state and the tables the consumer holds in the
        WAL after its last ack, for the next run to read first."""
        if not self.o.snapshot or self.conn is None or self.conn.closed or self.conn.broken:
            return
        if self.in_recovery:
            return  # a standby's WAL takes no notes
        # Candidates not decided yet are not known: the next run decides them.
        known = self.known - set(self.candidates)
        row = self.conn.execute(
            "SELECT pg_logical_emit_message(false, %s, %s)::text",
            (copies.NOTE_PREFIX, self.copy_state.note(known=known)),
        ).fetchone()
        assert row is not None

    def _listed(self, table: catalog.TableInfo) -> bool:
        """Whether one of the publications lists ``table`` (or a partitioned ancestor of
        it) by name: added by ALTER PUBLICATION ... ADD TABLE, rows from before included."""
        assert self.conn is not None
        row = self.conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_publication_rel pr"
            " JOIN pg_publication p ON p.oid = pr.prpubid WHERE p.pubname = ANY(%(pubs)s)"
            " AND pr.prrelid IN (SELECT %(rel)s::oid"
            "   UNION SELECT relid FROM pg_partition_ancestors(%(rel)s)))",
            {"pubs": self.publications, "rel": table.oid},
        ).fetchone()
        return bool(row and row[0])

    def _resnapshot_request(self, payload: str) -> None:
        assert self.conn is not None and self.snapshots is not None
        try:
            wanted = set(json.loads(payload)["tables"])
        except (ValueError, KeyError, TypeError):
            log.warning("ignored a malformed resnapshot request")
            return
        for t in catalog.tables_of_publications(self.conn, self.publications):
            if t.qualified in wanted:
                self._start_copy(t)

    def _reconnect(self, error: ConnectionError) -> None:
        """Re-establishes a lost replication connection: up to ``reconnect_attempts``
        attempts, the delay before each doubling from ``reconnect_delay`` up to
        ``reconnect_max_delay``; streaming resumes after the last batch handed out."""
        assert self.live is not None
        if self.acks.snapshot_lost_with_connection:
            raise ConnectionError(
                "the replication connection was lost before the initial snapshot was "
                "acked; its temporary slot is gone with it. Run stream() again to take "
                "a new snapshot."
            ) from error
        resume = self.live.delivered_lsn
        acked = self.live.acked_lsn
        skip = self.live.partial_transaction
        try:
            self.live.close()
        except Exception as e:
            log.debug("closing the lost replication session failed: %s", e)
        self.live = None
        self.acks.acked(acked)
        # The snapshot is committed: a session still on the temporary slot moves over now
        # (_start_streaming on the permanent slot).
        attempts = self.o.reconnect_attempts
        log.warning("replication connection lost: %s", error)
        last: Exception = error
        for attempt in range(1, attempts + 1):
            delay = min(self.o.reconnect_max_delay, self.o.reconnect_delay * 2 ** (attempt - 1))
            log.warning(
                "reconnect attempt %d of %d in %.2f s, resuming after %s",
                attempt,
                attempts,
                delay,
                int_to_lsn(resume),
            )
            time.sleep(delay)
            try:
                self.repl = self._replication_connection()
                self._start_streaming(self.slot, resume, skip)
            except (ConnectionError, SlotError) as e:
                self._close_repl()
                if isinstance(e, SlotError) and e.sqlstate == "42704":
                    raise self._slot_gone(e) from e
                if not _transient(e):
                    raise
                log.warning("reconnect attempt %d of %d failed: %s", attempt, attempts, e)
                last = e
                continue
            log.info(
                "replication connection re-established (attempt %d); streaming from %s",
                attempt,
                int_to_lsn(resume),
            )
            if self.metrics is not None:
                self.metrics.reconnected()
            return
        # A slot still in use after every attempt is held by another consumer.
        give_up = SlotError if isinstance(last, SlotError) else ConnectionError
        raise give_up(
            f"the replication connection was lost and {attempts} reconnect attempt(s) failed"
            f" (reconnect_attempts={attempts}); last error: {last}. Nothing after"
            f" {int_to_lsn(self.acks.acked_lsn)} is acked: run stream() again to resume from the"
            " slot once the server is reachable",
            sqlstate=getattr(last, "sqlstate", None),
        ) from last

    def _slot_gone(self, error: SlotError) -> SlotError:
        """The slot is missing on the server reached on reconnect: after a failover, a
        promoted standby has it only as a synchronized failover slot."""
        how = (
            "this slot is a failover slot, but the server reached now did not have its"
            " synchronized copy (a standby keeps it only once it is no longer temporary:"
            " check synced and temporary in the standby's pg_replication_slots before"
            " promoting it)"
            if self.o.failover
            else "after a failover the promoted standby has the slot only if it was a"
            " failover slot (stream(failover=True), PostgreSQL 17+, with"
            " sync_replication_slots on the standby)"
        )
        return SlotError(
            f"replication slot {self.slot!r} does not exist on the server the stream"
            f" reconnected to: it was dropped, or the stream now reaches another server than"
            f" before (a failover); {how}. Changes after {int_to_lsn(self.acks.acked_lsn)}"
            " that the old server held are not on this one as a slot. Nothing was started"
            " over: to go on, drop what the consumer holds or keep it and run stream() again,"
            " which makes a new slot and takes a new initial snapshot",
            sqlstate=error.sqlstate,
        )

    def _close_repl(self) -> None:
        if self.repl is not None:
            try:
                self.repl.close()
            except Exception as e:
                log.debug("closing a replication connection failed: %s", e)
            self.repl = None

    def _switch_to_permanent_slot(self) -> None:
        """Streaming moves from the temporary snapshot slot to the permanent copy: the
        temporary slot goes with its connection; the new stream starts where the last
        batch ended."""
        assert self.live is not None
        resume = self.live.delivered_lsn
        skip = self.live.partial_transaction
        self.acks.acked(self.live.acked_lsn)
        self.live.close()
        self.live = None
        self.repl = self._replication_connection()
        self._start_streaming(self.slot, resume, skip)

    def close(self) -> None:
        if self.live is not None and self.stream_slot == self.slot:
            try:
                self._last_note()
            except (psycopg.Error, ConnectionError) as e:
                log.debug("the run's last copy-state note could not be written: %s", e)
        for closer in (self.reader, self.live, self.repl):
            if closer is not None:
                try:
                    closer.close()
                except Exception as e:
                    log.debug("closing %s failed: %s", type(closer).__name__, e)
        self.reader = self.live = self.repl = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self.metrics is not None:
            self.metrics.close()


def _published_names(conn: psycopg.Connection[Any], publications: Sequence[str]) -> set[str]:
    """The tables the publications publish now ("schema.table")."""
    rows = conn.execute(
        "SELECT DISTINCT schemaname || '.' || tablename FROM pg_publication_tables"
        " WHERE pubname = ANY(%s)",
        (list(publications),),
    ).fetchall()
    return {r[0] for r in rows}


def _wal_position(conn: psycopg.Connection[Any]) -> int:
    """Where the server's WAL ends now (on a standby: how far it has replayed)."""
    row = conn.execute(
        "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()"
        " ELSE pg_current_wal_insert_lsn() END::text"
    ).fetchone()
    return lsn_to_int(row[0]) if row and row[0] else 0


def _joined_since_slot(
    conn: psycopg.Connection[Any], slot: str, publications: Sequence[str]
) -> set[int]:
    """The tables (OIDs, partitions included) that may have joined the publications
    after the slot's position: listed by a transaction (``pg_publication_rel``, or a
    schema's ``pg_publication_namespace``) not older than the slot's ``catalog_xmin``.
    Every transaction older than it ended before the slot's restart point, so a table
    listed by one was published while an earlier run streamed (and copied it then)."""
    listed = [
        "SELECT pr.prrelid AS oid FROM pg_publication_rel pr"
        " JOIN pg_publication p ON p.oid = pr.prpubid, s"
        " WHERE p.pubname = ANY(%(pubs)s) AND age(pr.xmin) <= age(s.catalog_xmin)"
    ]
    if conn.info.server_version >= 150000:
        listed.append(
            "SELECT c.oid FROM pg_publication_namespace pn"
            " JOIN pg_publication p ON p.oid = pn.pnpubid"
            " JOIN pg_class c ON c.relnamespace = pn.pnnspid AND c.relkind IN ('r', 'p'), s"
            " WHERE p.pubname = ANY(%(pubs)s) AND age(pn.xmin) <= age(s.catalog_xmin)"
        )
    query = (
        "WITH s AS (SELECT catalog_xmin FROM pg_replication_slots WHERE slot_name = %(slot)s),"
        f" joined AS ({' UNION '.join(listed)})"
        # pg_partition_tree() gives nothing for a table that is not partitioned.
        " SELECT oid FROM joined UNION SELECT t.relid FROM joined, pg_partition_tree(joined.oid) t"
    )
    rows = conn.execute(query, {"slot": slot, "pubs": list(publications)}).fetchall()
    return {int(r[0]) for r in rows}


def _in_commit_order(changes: pa.Table | None, rows: pa.Table) -> pa.Table:
    """A batch's change table with snapshot-chunk rows placed by (_commit_lsn, _tx_ordinal)."""
    if changes is None or changes.num_rows == 0:
        return rows
    joined = pa.concat_tables([changes, rows], promote_options="permissive")
    return joined.sort_by([("_commit_lsn", "ascending"), ("_tx_ordinal", "ascending")])


def resnapshot_channel(slot: str) -> str:
    """The NOTIFY channel on which the stream of ``slot`` takes resnapshot requests."""
    return f"pgwire_cdc_resnapshot_{slot}"


def resnapshot(dsn: str, slot: str, tables: Sequence[admin.TableSpec]) -> list[str]:
    """Asks the ``stream()`` running on ``slot`` to read ``tables`` again, in chunks while
    it streams on (:mod:`pgwire_cdc.incremental`): for a table a user suspects or has
    repaired. The rows come as ``read`` rows, to be upserted; a row the consumer holds but
    the source no longer has is not removed by it. Returns the tables asked for.

    :class:`SlotError` when no stream is running on the slot: the request is a
    notification to that stream (``NOTIFY``), which a stopped one would miss; start it
    with ``held_tables`` leaving those tables out instead.
    """
    conn = connect(dsn)
    try:
        names = [r.qualified for r in admin.resolve_tables(conn, tables)]
        info = admin.get_slot(conn, slot)
        if info is None or not info.active:
            state = "does not exist" if info is None else "has no stream running on it"
            raise SlotError(
                f"replication slot {slot!r} {state}: resnapshot() asks a running stream; start"
                " the stream with held_tables leaving these tables out to read them instead"
            )
        conn.execute(
            "SELECT pg_notify(%s, %s)", (resnapshot_channel(slot), json.dumps({"tables": names}))
        )
        log.info("asked the stream of slot %s to read %s again", slot, ", ".join(names))
        return names
    finally:
        conn.close()


def _transient(error: Exception) -> bool:
    """Whether a failed reconnect is worth retrying: a lost or refused connection, or the
    slot still held by the walsender of the lost connection; not a refused login, a
    dropped or invalidated slot."""
    sqlstate = getattr(error, "sqlstate", None) or ""
    if isinstance(error, SlotError):
        return sqlstate == "55006"
    return not sqlstate.startswith("28")


def stream(
    dsn: str,
    publication: str | Sequence[str] = "pub",
    slot: str = "pgwire_cdc_slot",
    tables: list[str] | None = None,
    snapshot: bool = True,
    binary: bool = True,
    until_lsn: int | str | None = None,
    idle_timeout: float | None = None,
    max_batch_rows: int = DEFAULT_MAX_BATCH_ROWS,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    max_batch_ms: int = DEFAULT_MAX_BATCH_MS,
    *,
    snapshot_workers: int = 2,
    snapshot_split_blocks: int = 1024,
    proto_version: int | None = None,
    reconnect_attempts: int = RECONNECT_ATTEMPTS,
    reconnect_delay: float = RECONNECT_DELAY_S,
    reconnect_max_delay: float = RECONNECT_MAX_DELAY_S,
    stall_timeout: float | None = None,
    streaming: bool = True,
    spill_threshold: int = DEFAULT_SPILL_THRESHOLD,
    spill_dir: str | os.PathLike[str] | None = None,
    held_tables: Collection[str] | Mapping[str, Sequence[Any] | None] | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    snapshot_reader: Callable[[str, int, list[str]], None] | None = None,
    heartbeat_interval: float | None = None,
    failover: bool = False,
    options: StreamOptions | None = None,
) -> Iterator[Batch]:
    """Streams a publication's changes (after an initial snapshot for a new slot) as
    :class:`Batch` objects; see the module documentation and docs/streaming.md.

    ``options``: a :class:`StreamOptions` holding every argument but the DSN, given instead
    of the keywords (not both).

    ``publication`` is one name or a list of names (pgoutput's ``publication_names``): the
    tables of all of them, each once, a table's row filters joined by OR. ``tables``
    (created or added when missing) needs exactly one publication.

    ``snapshot_workers`` connections copy the snapshot at once (tables of at least
    ``snapshot_split_blocks`` 8 KiB blocks are split into that many CTID ranges).
    ``snapshot_reader(snapshot_name, consistent_point, tables)`` copies the initial
    snapshot elsewhere instead (Spark tasks, :mod:`pgwire_cdc.spark.snapshot`): it is
    called while the new slot's exported snapshot is held, must have made the rows of
    every table durable when it returns, and the snapshot then comes as one batch without
    rows (``snapshot_start``, every table complete) whose ack creates the slot;
    ``proto_version`` defaults to the highest the server supports (a higher one than the
    server speaks is a ``ConfigError``).

    Connection faults. A replication connection lost while streaming (walsender
    terminated, server restarted, network gone) is re-established: up to
    ``reconnect_attempts`` attempts per outage (0: none), the first after
    ``reconnect_delay`` seconds, each delay twice the one before, capped at
    ``reconnect_max_delay``. Streaming resumes right after the last batch handed out
    (nothing lost, nothing twice); each attempt is logged as a warning on the
    ``pgwire_cdc`` logger. Once every attempt failed, ``ConnectionError`` (``SlotError``
    if another consumer holds the slot) says so; the slot still holds everything after the
    last ack. A refused login, or a slot dropped or invalidated meanwhile, is raised at
    once. A connection on which the server has been silent for ``stall_timeout`` seconds
    (no data, no keepalive, no answer to the request for one sent halfway) counts as lost;
    default: 60 s or the server's ``wal_sender_timeout`` if longer; 0 never gives up.
    Failures of the first connection are raised at once.

    Large transactions. Batches respect ``max_batch_rows`` and ``max_batch_bytes`` inside
    a transaction too, so memory follows the batch, not the transaction. With
    ``streaming`` (protocol 2+, the default) the server sends a large transaction while it
    is still running; its changes are held until it commits (then delivered, batch by
    batch) or dropped when it aborts. Held changes beyond ``spill_threshold`` bytes (all
    open transactions together) go to an unnamed temporary file in ``spill_dir`` (default:
    the system's temporary directory), which vanishes with the transaction or the process.
    Without ``streaming`` the server holds the transaction itself until it commits (in
    ``pg_replslot``, decoded once more after every reconnect). A consumer that is slow to
    take batches makes the server wait: nothing is read ahead of it.

    Tables added later. A published table whose existing rows the consumer does not hold
    is snapshotted while streaming goes on, in chunks of ``chunk_rows`` rows
    (:mod:`pgwire_cdc.incremental`): its ``read`` rows arrive in ordinary batches, placed
    among the changes by ``(_commit_lsn, _tx_ordinal)``, and ``Batch.snapshot_progress``
    says how far it got. Such tables are: those added to a publication while the stream
    runs; for an existing slot, the published tables not in ``held_tables`` (the tables the
    consumer holds: names, or a mapping of name to None when complete or to the
    ``snapshot_progress`` key it last kept, to resume there) or, without ``held_tables``,
    those this run's ``tables`` adds, those whose copy an earlier run left unfinished (the
    slot's own record, :mod:`pgwire_cdc.copies`) and those that joined the publication
    after the slot's position; and those a :func:`pgwire_cdc.resnapshot` call names. Until
    a table's snapshot completes its changes arrive as usual, for rows the consumer may not
    hold yet (apply an update of a missing row as an insert). ``until_lsn`` and
    ``idle_timeout`` wait for snapshots in progress to finish. Tables without a
    replica-identity key cannot be read in chunks: ``ConfigError`` for one not held at start
    (or added by ``tables``); one that joins while streaming is only streamed (a warning
    says so).

    ``failover=True`` (PostgreSQL 17+, on a primary; ``ConfigError`` elsewhere) makes the
    slot a failover slot, which standbys with ``sync_replication_slots`` keep in step: a
    new slot, and an existing one that lacks the flag. After a failover, the stream
    reconnects to the promoted standby (a DSN listing both hosts with
    ``target_session_attrs=read-write``) and goes on from its copy of the slot; a slot
    missing there is a :class:`SlotError` (docs/server-setup.md, "Failover slots").
    ``heartbeat_interval``: see docs/operations.md, "Idle databases".
    """
    given: dict[str, Any] = {
        "publication": publication,
        "slot": slot,
        "tables": tables,
        "snapshot": snapshot,
        "binary": binary,
        "until_lsn": until_lsn,
        "idle_timeout": idle_timeout,
        "max_batch_rows": max_batch_rows,
        "max_batch_bytes": max_batch_bytes,
        "max_batch_ms": max_batch_ms,
        "snapshot_workers": snapshot_workers,
        "snapshot_split_blocks": snapshot_split_blocks,
        "proto_version": proto_version,
        "reconnect_attempts": reconnect_attempts,
        "reconnect_delay": reconnect_delay,
        "reconnect_max_delay": reconnect_max_delay,
        "stall_timeout": stall_timeout,
        "streaming": streaming,
        "spill_threshold": spill_threshold,
        "spill_dir": spill_dir,
        "held_tables": held_tables,
        "chunk_rows": chunk_rows,
        "snapshot_reader": snapshot_reader,
        "heartbeat_interval": heartbeat_interval,
        "failover": failover,
    }
    if options is None:
        options = StreamOptions(**given)
    elif not isinstance(options, StreamOptions):
        raise ConfigError("options must be a pgwire_cdc.StreamOptions")
    else:
        defaults = {f.name: f.default for f in fields(StreamOptions)}
        clash = sorted(k for k, v in given.items() if v != defaults[k])
        if clash:
            raise ConfigError(
                f"pass either options= or keyword arguments, not both ({', '.join(clash)}"
                " given too): dataclasses.replace(options, ...) changes a field"
            )
    state = _Stream(dsn, options)
    return state.run()
