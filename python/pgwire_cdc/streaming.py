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

import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Collection, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import partial
from typing import TYPE_CHECKING, Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from . import (
    _native,
    acks,
    admin,
    catalog,
    copies,
    copying,
    ddl_capture,
    metrics,
    pacing,
    policies,
    preflight,
    replication,
    schema_changes,
    schema_watch,
    signals,
)
from .connection import SetupConnection, connect
from .errors import ConfigError, ConnectionError, SlotError
from .incremental import CopyRange
from .lsn import int_to_lsn, lsn_to_int
from .schema_changes import SchemaChange
from .tables import merge_segments, table_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("pgwire_cdc")

#: The publication and the replication slot of ``stream()`` and of the sinks' ``run()``
#: when none is named.
DEFAULT_PUBLICATION = "pub"
DEFAULT_SLOT = "pgwire_cdc_slot"
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
    #: Per table whose incremental snapshot handed out a chunk in this batch, the key
    #: range the chunk read whole (:class:`pgwire_cdc.incremental.CopyRange`): a
    #: consumer's rows of that range whose key the range does not keep are rows the
    #: source no longer has (a resnapshot of a copy that drifted deletes them).
    snapshot_ranges: dict[str, list[CopyRange]] = field(default_factory=dict)
    #: The DDL captured in the WAL (:mod:`pgwire_cdc.ddl_capture`) among this batch's
    #: changes, in WAL order, each at its place among the rows (``commit_lsn``,
    #: ``tx_ordinal``): see :mod:`pgwire_cdc.schema_changes`.
    schema_changes: list[SchemaChange] = field(default_factory=list)
    #: The timeline of the server that delivered this batch (``IDENTIFY_SYSTEM``): its
    #: LSNs are positions in that timeline's history (a failover moves to a new one).
    timeline: int | None = None
    #: With ``schema_watch``: the tables whose catalog description the run learnt in this
    #: batch (all at the start, then those a DDL changed): a consumer that keeps a copy
    #: records it once the batch is applied and gives it back as ``held_shapes``
    #: (:mod:`pgwire_cdc.schema_watch`).
    table_shapes: dict[str, dict[str, Any]] = field(default_factory=dict)
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


@dataclass(frozen=True, kw_only=True)
class StreamOptions:
    """Everything ``stream()`` takes but the DSN (which may hold a password), under the same
    names and with the same defaults, checked once when built (:class:`ConfigError` for
    the first that is wrong). Build one, keep it, and pass it as ``stream(dsn,
    options=...)``; :func:`dataclasses.replace` gives a changed copy. ``stream()``'s
    docstring and docs/streaming.md explain each field."""

    #: A publication name, or a list of them (pgoutput's ``publication_names``).
    publication: str | Sequence[str] = DEFAULT_PUBLICATION
    #: The replication slot: created when missing, resumed from when present.
    slot: str = DEFAULT_SLOT
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
    #: Without the DDL capture, check a change table whose columns changed against the
    #: catalog (:mod:`pgwire_cdc.schema_watch`); the lakehouse sinks turn it on.
    schema_watch: bool = False
    #: With ``schema_watch``: per table, the description the consumer's copy holds
    #: (``Batch.table_shapes`` as it last recorded them).
    held_shapes: Mapping[str, dict[str, Any]] | None = None
    #: Per table (``"schema.table"``), per column, what the stream keeps of its values
    #: (:mod:`pgwire_cdc.policies`: drop, null, redact, hash, hmac, truncate, mask).
    column_policies: Mapping[str, Mapping[str, Any]] | None = None
    #: Tables whose every column needs a rule in ``column_policies`` (``"keep"`` lets one
    #: through): a column without one stops the stream before its values are handed out.
    strict_tables: Sequence[str] | None = None

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


@dataclass
class _Prepared:
    """What the setup phase hands to the rest of the run."""

    #: The setup connection, open.
    conn: psycopg.Connection[Any]
    #: The published tables now.
    tables: list[catalog.TableInfo]
    #: Tables this run's ``tables=`` added to the publication.
    added: set[str]
    existing_slot: admin.SlotInfo | None
    #: The server is a standby: nothing can be written into its WAL (no copy-state
    #: notes, no incremental snapshots' watermarks).
    in_recovery: bool
    #: The WAL position when this run started (:mod:`pgwire_cdc.copies`).
    run_start: int
    #: How every streaming session of this run runs.
    session_options: _native.SessionOptions


def _prepare(dsn: str, o: StreamOptions) -> _Prepared:
    """The setup phase: every check before any DDL, the publication DDL once nothing is in
    the way (:mod:`pgwire_cdc.preflight`), and the options of the run's replication
    sessions. The connection it opens is the run's setup connection."""
    conn = connect(dsn)
    try:
        return _prepare_on(conn, o)
    except BaseException:
        conn.close()
        raise


def _prepare_on(conn: psycopg.Connection[Any], o: StreamOptions) -> _Prepared:
    publications = o.publications
    before = _published_names(conn, publications)
    found = preflight.run(
        conn,
        publications,
        list(o.tables) if o.tables is not None else None,
        o.slot,
        snapshot=o.snapshot,
        proto_version=o.proto_version,
        apply=True,
    )
    found.raise_if_blocked()
    if o.failover:
        admin.raise_problems(
            admin.failover_problems(found.info, found.slot), "failover=True not possible"
        )
    tables = found.tables
    if not tables:
        log.info(
            "publication(s) %s publish no tables now: streaming what slot %s still holds",
            ", ".join(publications),
            o.slot,
        )
    run_start = _wal_position(conn)
    user_types = {c.type_oid for t in tables for c in t.columns if c.type_oid >= 16384}
    type_map = catalog.type_map(conn, user_types)
    proto_version = o.proto_version or _proto_version(found.info.version_num)
    row = conn.execute(
        "SELECT setting::int * CASE unit WHEN 's' THEN 1000 ELSE 1 END "
        "FROM pg_settings WHERE name = 'wal_sender_timeout'"
    ).fetchone()
    timeout_ms = int(row[0]) if row and row[0] else 0
    stall = pacing.stall_timeout_s(o.stall_timeout, timeout_ms, STALL_TIMEOUT_S)
    binary = bool(o.binary)
    if binary:
        opaque = sorted(
            {
                f"{t.qualified}.{c.name} ({c.type_name})"
                for t in tables
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
    return _Prepared(
        conn=conn,
        tables=tables,
        added={t.qualified for t in tables} - before,
        existing_slot=found.slot,
        in_recovery=found.info.in_recovery,
        run_start=run_start,
        session_options=_native.SessionOptions(
            publication_names=publications,
            proto_version=proto_version,
            binary=binary,
            streaming=o.streaming,
            status_interval_ms=pacing.status_interval_ms(timeout_ms),
            stall_timeout_ms=int(stall * 1000),
            type_map=type_map,
            spill_threshold=o.spill_threshold,
            spill_dir=o.spill_path,
            note_prefixes=[copies.NOTE_PREFIX, schema_changes.PREFIX, signals.PREFIX],
        ),
    )


class _Stream:
    """One ``stream()`` run, phase by phase, each phase an object of its own:

    1. setup (:func:`_prepare`): the checks and the publication DDL on the setup
       connection (:class:`~pgwire_cdc.connection.SetupConnection` from then on), and
       the options of every replication session of the run;
    2. a new slot's initial copy (:class:`~pgwire_cdc.replication.InitialCopy`), handed
       out as snapshot batches; the ack of the last one makes the slot permanent;
    3. the changes (:class:`~pgwire_cdc.replication.LiveSession`, one poll at a time as
       :class:`~pgwire_cdc.pacing.ChangeLoop` decides), with the rows of tables copied
       meanwhile (:class:`~pgwire_cdc.copying.TableCopies`) placed among them, and
       heartbeats while idle (:class:`~pgwire_cdc.pacing.IdleClock`).

    The phases share the run's :class:`~pgwire_cdc.acks.AckLedger`: :meth:`ack` is where
    every batch's ack lands."""

    def __init__(self, dsn: str, options: StreamOptions) -> None:
        self.dsn = dsn
        self.o = options
        self.slot = options.slot
        #: Acks and the temporary -> permanent slot hand-off (:mod:`pgwire_cdc.acks`).
        self.acks = acks.AckLedger()
        #: What this run records once metrics are on (:mod:`pgwire_cdc.metrics`).
        recorder = metrics.active()
        self.metrics = recorder.for_slot(options.slot) if recorder is not None else None
        self.clock = pacing.IdleClock(
            options.heartbeat_interval, options.idle_timeout, time.monotonic()
        )
        self.in_recovery = False
        self.tables: list[catalog.TableInfo] = []
        # Set as the phases begin.
        self.setup: SetupConnection | None = None
        self.session: replication.LiveSession | None = None
        self.copies: copying.TableCopies | None = None
        self.initial: replication.InitialCopy | None = None
        #: Schema changes told by the catalog, where the DDL capture is not installed.
        self.watch: schema_watch.SchemaWatch | None = None

    def run(self) -> Iterator[Batch]:
        try:
            with _lost_connections():
                yield from self._run()
        finally:
            self.close()

    def _run(self) -> Iterator[Batch]:
        """Sets up (catalog, slot, copies), then the initial snapshot or the slot's
        stream, then the changes."""
        prepared = _prepare(self.dsn, self.o)
        self.in_recovery = prepared.in_recovery
        self.tables = prepared.tables
        self.setup = SetupConnection(self.dsn, prepared.conn, self._connection_opened)
        if self.o.schema_watch:
            self.watch = _schema_watch(prepared.conn, prepared.tables, self.o.held_shapes)
        self.session = session = replication.LiveSession(
            self.dsn,
            self.slot,
            prepared.session_options,
            self.acks,
            pacing.Reconnects(
                self.o.reconnect_attempts, self.o.reconnect_delay, self.o.reconnect_max_delay
            ),
            failover=self.o.failover,
            metrics=self.metrics,
        )
        if self.metrics is not None:
            self.metrics.watch(self.dsn)
        existing = prepared.existing_slot
        self.copies = copying.TableCopies(
            self.setup,
            self.slot,
            self.o.publications,
            snapshot=self.o.snapshot,
            held_given=self.o.held_tables is not None,
            in_recovery=prepared.in_recovery,
            run_start=prepared.run_start,
            caught_up=existing is None,
            chunk_rows=self.o.chunk_rows,
            published=(t.qualified for t in prepared.tables),
        )
        if existing is not None:
            self.copies.plan(self.o.held_tables, prepared.tables, prepared.added)
        self._listen(prepared.conn)
        if existing is not None:
            if self.o.failover and not existing.failover:
                admin.set_failover(self.dsn, self.slot)
                log.info("slot %s is now a failover slot", self.slot)
            start = existing.confirmed_flush_lsn or 0
            self.acks.acked(start)
            session.connect()
            session.start(self.slot, start)
        elif self.o.snapshot:
            consistent_point = yield from self._interrupted_copy_named()
            if self.acks.snapshot_committed:
                assert session.repl is not None
                session.repl.drop_slot(replication.temporary_slot_name(self.slot))
                session.start(self.slot, consistent_point)
            else:
                # The consumer has not acked the snapshot yet: stream on the
                # temporary slot; an ack that covers the snapshot makes it permanent.
                session.start(replication.temporary_slot_name(self.slot), consistent_point)
        else:
            _, consistent_point, _ = session.connect().create_slot(self.slot)
            if self.o.failover:
                admin.set_failover(self.dsn, self.slot)
            self.acks.acked(consistent_point)
            session.start(self.slot, consistent_point)
        yield from self._changes()

    # -- the setup connection ----------------------------------------------------------

    def _connection_opened(self, conn: psycopg.Connection[Any]) -> None:
        """The setup connection was lost and is open again."""
        self._listen(conn)
        if self.copies is not None:
            self.copies.connection_opened(conn)

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        """Takes resnapshot() requests; a standby has no LISTEN (nor could it record the
        copies a request starts)."""
        if not self.in_recovery:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(resnapshot_channel(self.slot))))

    # -- acknowledgement ---------------------------------------------------------------

    def ack(self, seq: int, lsn: int, snapshot_batch: bool) -> None:
        with _lost_connections():
            self._ack(seq, lsn, snapshot_batch)

    def _ack(self, seq: int, lsn: int, snapshot_batch: bool) -> None:
        decision = self.acks.ack(seq, lsn, snapshot_batch)
        if decision is None:
            return
        if decision.make_permanent_slot:
            self._commit_snapshot()
        live = self.session.live if self.session is not None else None
        if live is not None and decision.slot_lsn is not None:
            assert self.copies is not None
            lsn = self.copies.before_ack(seq, lsn, self.acks.acked_lsn)
            live.ack(lsn)
        self.acks.acked(lsn)
        if self.metrics is not None:
            self.metrics.acked(seq)

    def _acker(self, seq: int, lsn: int, snapshot_batch: bool) -> Callable[[], None]:
        return lambda: self.ack(seq, lsn, snapshot_batch)

    def _commit_snapshot(self) -> None:
        """Makes the slot permanent: a copy of the temporary snapshot slot, at the
        position acked so far."""
        assert self.setup is not None and self.setup.conn is not None
        temporary = replication.temporary_slot_name(self.slot)
        if admin.get_slot(self.setup.conn, temporary) is None:
            # A temporary slot lives as long as its replication connection: the walsender
            # was ended, or the server restarted, after the snapshot was read.
            raise ConnectionError(
                f"the initial snapshot's temporary slot {temporary!r} went with its"
                f" replication connection before the snapshot was acked, so slot {self.slot!r}"
                " cannot be made where the snapshot stands: run again and a new snapshot is"
                " taken (the copy starts over)"
            )
        admin.copy_slot(self.setup.conn, temporary, self.slot)
        if self.o.failover:
            # The copy does not carry the flag (a temporary slot cannot have it); the new
            # slot is not in use yet, so it can be changed now.
            admin.set_failover(self.dsn, self.slot)
        # Already streaming on the temporary slot: it moves over at the next boundary.
        self.acks.permanent_slot_made()
        log.info("initial snapshot committed; slot %s created", self.slot)

    # -- the initial copy --------------------------------------------------------------

    def _interrupted_copy_named(self) -> Generator[Batch, None, int]:
        """:meth:`_initial_copy`, whose lost connection says what it means: an exported
        snapshot lives only as long as the replication connection that made it, so a
        snapshot cannot go on over a new connection."""
        try:
            return (yield from self._initial_copy())
        except ConnectionError as e:
            raise ConnectionError(
                f"the connection was lost during the initial snapshot of slot {self.slot!r}"
                f" ({e}); a snapshot cannot go on over a new connection (its exported"
                " snapshot went with the old one): run again and a new snapshot is taken"
                " (the copy starts over)"
            ) from e

    def _initial_copy(self) -> Generator[Batch, None, int]:
        """A new slot's snapshot as batches; returns its consistent point, where the
        changes start. The replication connection it opened stays for the live session."""
        assert self.session is not None and self.setup is not None
        assert self.setup.conn is not None
        self.initial = initial = replication.InitialCopy(self.session.connect(), self.slot)
        cp, snapshot_name = initial.begin()
        log.info("slot %s: a new snapshot at consistent point %s", self.slot, int_to_lsn(cp))
        self.acks.snapshot_started(cp)
        reader = self.o.snapshot_reader
        if reader is not None:
            names = [t.qualified for t in self.tables]
            log.info(
                "initial snapshot of %d table(s) at %s by the snapshot reader",
                len(names),
                int_to_lsn(cp),
            )
            reader(snapshot_name, cp, names)
            yield self._rowless_snapshot_batch(cp)
            return cp
        first = True
        segments = initial.segments(
            self.setup.conn,
            snapshot_name,
            cp,
            self.tables,
            workers=max(1, int(self.o.snapshot_workers)),
            split_blocks=self.o.snapshot_split_blocks,
            batch_rows=self.o.max_batch_rows,
        )
        for name, table, last in segments:
            seq = self.acks.handed_out()
            if last:
                self.acks.last_snapshot_batch(seq)
            batch = Batch(
                tables={name: table},
                lsn=cp,
                snapshot=True,
                snapshot_start=first,
                # The last one: every table of the snapshot is complete, empty ones too.
                snapshot_progress=self._snapshotted() if last else {},
                timeline=self._timeline(),
                table_shapes=self._table_shapes() if last else {},
                _ack=self._acker(seq, cp, snapshot_batch=True),
            )
            if self.metrics is not None:
                if first:
                    self.metrics.copy_started([t.qualified for t in self.tables])
                copied = {name: table.num_rows}
                self.metrics.batch(seq, batch.tables, copied, batch.snapshot_progress)
            yield batch
            first = False
        if first:
            # Nothing to copy: one empty snapshot batch all the same, so that a consumer
            # keeping a copy learns that a new snapshot started (its copy is now empty).
            yield self._rowless_snapshot_batch(cp)
        return cp

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
            timeline=self._timeline(),
            table_shapes=self._table_shapes(),
            _ack=self._acker(seq, cp, snapshot_batch=True),
        )

    def _table_shapes(self) -> dict[str, dict[str, Any]]:
        """``Batch.table_shapes``: what the schema watch learnt since the last batch."""
        return self.watch.take_shapes() if self.watch is not None else {}

    def _timeline(self) -> int | None:
        """The timeline of the server the session streams from."""
        return self.session.timeline if self.session is not None else None

    def _snapshotted(self) -> dict[str, list[Any] | None]:
        """``Batch.snapshot_progress`` of a complete initial snapshot."""
        return dict.fromkeys((t.qualified for t in self.tables), None)

    # -- the changes -------------------------------------------------------------------

    def _changes(self) -> Iterator[Batch]:
        if self.metrics is not None:
            self.metrics.changes_started()
        session, table_copies, setup = self.session, self.copies, self.setup
        assert session is not None and table_copies is not None and setup is not None
        assert session.live is not None
        snapshots = table_copies.snapshots
        loop = pacing.ChangeLoop(
            _parse_lsn(self.o.until_lsn), self.o.idle_timeout, session.live.delivered_lsn
        )
        pauses = signals.Pauses()
        lsn_max = 2**64 - 1
        refusal_met = False
        while True:
            if setup.refused and not refusal_met:
                # New connections are refused while this one lives: the server is shutting
                # down, most likely, and a shutdown waits until this walsender's consumer
                # confirms everything (which may need the setup connection: a copy note
                # before an ack). Let the walsender go; streaming resumes once the server
                # takes connections again.
                refusal_met = True
                session.reconnect(
                    ConnectionError(
                        "the server refuses new connections (shutting down?): the"
                        " replication connection is closed too, and opened again"
                    )
                )
            elif not setup.refused:
                refusal_met = False
            live = session.live
            assert live is not None
            busy = snapshots.active and pauses.paused_at is None
            waiting = snapshots.waiting_for if busy else None
            limits = loop.limits(busy, waiting)
            confirm = table_copies.copy_state.idle_confirm_limit()
            if pauses.paused_at is not None:
                # Nothing past the pause is confirmed, on the consumer's behalf neither.
                confirm = min(confirm if confirm is not None else lsn_max, pauses.paused_at - 1)
            try:
                segments, lsn, stop, notes = live.poll(
                    max_rows=self.o.max_batch_rows,
                    max_bytes=self.o.max_batch_bytes,
                    max_ms=self.o.max_batch_ms,
                    until_lsn=limits.until_lsn,
                    idle_timeout_ms=limits.idle_timeout_ms,
                    idle_confirm_limit=confirm,
                )
            except ConnectionError as e:
                session.reconnect(e)
                continue
            signalled = signals.in_order(notes, self.slot)
            if pauses.paused_at is not None:
                # Paused: what the stream reads is not handed out, only looked at for a
                # resume; the slot stays before the pause.
                if pauses.resume_in(signalled):
                    back = pauses.resumed()
                    log.info("resumed (a resume signal): streaming again from %s", int_to_lsn(back))
                    session.rewind(back)
                    loop.last_lsn = min(loop.last_lsn, back)
                    continue
                ended = stop == _native.Stop.UNTIL_LSN
                if ended or self.clock.idle_past_timeout(time.monotonic(), False):
                    return
                continue
            paused = pauses.pause_in(signalled)
            if paused is not None:
                # Every change committed before the pause goes out; the rest comes again
                # once it is resumed (the stream goes back to the pause).
                kept = ((name, _committed_before(table_of(s), paused)) for name, s in segments)
                segments = [(name, t) for name, t in kept if t.num_rows]
                notes = [n for n in notes if (n[3][0] if n[3] is not None else n[0]) < paused]
                signalled = [(c, s) for c, s in signalled if c < paused]
                lsn = min(lsn, paused - 1)
                pauses.paused_at = paused
                log.info(
                    "paused (a pause signal at %s): changes after it wait for a resume signal",
                    int_to_lsn(paused),
                )
            parts = [(name, table_of(s)) for name, s in segments]
            tables = merge_segments(parts)
            ddl = [
                change
                for lsn_, content, prefix, place in notes
                if prefix == schema_changes.PREFIX
                for change in schema_changes.changes_of(lsn_, content, place)
            ]
            if self.watch is not None and (parts or self.watch.pending):
                setup.run(partial(self._watch, parts=parts, found=ddl))
            copy_notes = [(n[0], n[1]) for n in notes if n[2] == copies.NOTE_PREFIX]
            if copy_notes:
                setup.run(partial(table_copies.take_notes, notes=copy_notes))
            if ddl:
                setup.run(partial(table_copies.schema_changed, changes=ddl))
            resnapshots = [s for _, s in signalled if s.kind == "resnapshot"]
            if resnapshots:
                setup.run(partial(table_copies.signalled, signals=resnapshots))
            if table_copies.catch_up_due(stop, lsn):
                setup.run(table_copies.catch_up)
            setup.run(partial(table_copies.watch, tables=tables))
            rows, progress, ranges = snapshots.step(tables, loop.passed(lsn, stop, waiting))
            for name, table in rows.items():
                tables[name] = _in_commit_order(tables.get(name), table)
            if loop.is_batch(bool(tables or progress or ddl), stop, lsn):
                seq = self.acks.handed_out()
                table_copies.copy_state.handed_out(seq, progress)
                if self.metrics is not None:
                    copied = {name: t.num_rows for name, t in rows.items()}
                    self.metrics.batch(seq, tables, copied, progress)
                if tables:
                    self.clock.changed(time.monotonic())
                yield Batch(
                    tables=tables,
                    lsn=lsn,
                    snapshot_progress=progress,
                    snapshot_ranges=ranges,
                    schema_changes=ddl,
                    timeline=self._timeline(),
                    table_shapes=self._table_shapes(),
                    _ack=self._acker(seq, lsn, False),
                )
                loop.handed_out(lsn)
            if snapshots.wants_chunk:
                setup.run(partial(table_copies.read_next, tables=tables, handed_out=bool(rows)))
            if loop.over(busy, snapshots.active, stop, lsn):
                return
            if self.acks.switch_pending:
                session.switch_to_permanent_slot()
            if self.clock.heartbeat_due(time.monotonic(), busy):
                setup.run(self._heartbeat)
            if self.clock.idle_past_timeout(time.monotonic(), busy):
                return

    def _heartbeat(self, conn: psycopg.Connection[Any]) -> None:
        """Writes a heartbeat into the WAL: a non-transactional logical decoding message
        that the server decodes and sends at once. No change table holds it, and the
        stream confirms the position past it while idle, so the slot moves even when the
        database writes no WAL of its own. A server that refuses it (a standby) gets a
        warning and no more heartbeats."""
        self.clock.heartbeat_written(time.monotonic())
        try:
            conn.execute(
                "SELECT pg_logical_emit_message(false, %s, %s)", (HEARTBEAT_PREFIX, self.slot)
            )
        except psycopg.Error as e:
            if conn.broken:
                raise  # a lost connection: opened again for the next heartbeat
            log.warning("heartbeat refused, heartbeats stop for this run: %s", e)
            self.clock.heartbeats_refused()
            return
        if self.metrics is not None:
            self.metrics.heartbeat()

    def _watch(
        self,
        conn: psycopg.Connection[Any],
        parts: list[tuple[str, pa.Table]],
        found: list[SchemaChange],
    ) -> None:
        """Schema changes the catalog tells of the poll's segments (:mod:`pgwire_cdc.
        schema_watch`), in ``found``; a rewrite's table is read again."""
        assert self.watch is not None and self.copies is not None
        changes = self.watch.check(conn, parts)
        if changes:
            self.copies.schema_changed(conn, changes)
            found += changes

    def close(self) -> None:
        if self.session is not None and self.session.on_permanent_slot:
            assert self.copies is not None
            try:
                self.copies.last_note()
            except (psycopg.Error, ConnectionError) as e:
                log.debug("the run's last copy-state note could not be written: %s", e)
        if self.initial is not None:
            self.initial.close()
        if self.session is not None:
            self.session.close()
        if self.setup is not None:
            self.setup.close()
        if self.metrics is not None:
            self.metrics.close()


def _schema_watch(
    conn: psycopg.Connection[Any],
    tables: Sequence[catalog.TableInfo],
    held: Mapping[str, dict[str, Any]] | None,
) -> schema_watch.SchemaWatch | None:
    """A watch of the tables' columns against the catalog (or what the consumer's copy
    holds, ``held``), unless the DDL capture is installed (its messages tell every DDL
    where it happened)."""
    if ddl_capture.status_on(conn).installed:
        return None
    watch = schema_watch.SchemaWatch(
        {t.qualified: (t.oid, [c.name for c in t.columns]) for t in tables}, held
    )
    watch.start(conn)
    return watch


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


def _committed_before(changes: pa.Table, lsn: int) -> pa.Table:
    """The rows of ``changes`` committed before ``lsn``."""
    return changes.filter(pc.less(changes["_commit_lsn"], pa.scalar(lsn, pa.int64())))


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


def stream(
    dsn: str,
    publication: str | Sequence[str] = DEFAULT_PUBLICATION,
    slot: str = DEFAULT_SLOT,
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
    schema_watch: bool = False,
    held_shapes: Mapping[str, dict[str, Any]] | None = None,
    column_policies: Mapping[str, Mapping[str, Any]] | None = None,
    strict_tables: Sequence[str] | None = None,
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

    ``schema_watch=True``: where the DDL capture is not installed, a change table whose
    columns changed is checked against the catalog, and the DDL it tells comes in
    ``Batch.schema_changes``, or the table is read again when the catalog has moved on
    (docs/streaming.md, "Schema changes"); the lakehouse sinks' runs turn it on.
    ``held_shapes``: what ``Batch.table_shapes`` said last of each table the consumer's
    copy holds, so DDL made between two runs is measured against it.
    ``column_policies``: per table, per column, what the batches keep of its values
    (:mod:`pgwire_cdc.policies`), applied in Rust before a batch is handed out;
    ``strict_tables``: tables each column of which needs a rule.
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
        "schema_watch": schema_watch,
        "held_shapes": held_shapes,
        "column_policies": column_policies,
        "strict_tables": strict_tables,
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
    governed = policies.Policies(options.column_policies or {}, options.strict_tables or ())
    state = _Stream(dsn, options)
    if not governed:
        return state.run()
    return _governed(state.run(), governed)


@contextlib.contextmanager
def _lost_connections() -> Iterator[None]:
    """Raises a lost connection as :class:`ConnectionError` where no reconnect applies
    (while the stream starts, or on the setup connection during an ack): a
    ``psycopg.OperationalError`` with no SQLSTATE (the client saw the socket close) or of
    class 57P (the server shut down or ended the backend); other errors pass as they are."""
    try:
        yield
    except psycopg.OperationalError as e:
        if e.sqlstate is not None and not e.sqlstate.startswith("57P"):
            raise
        raise ConnectionError(
            f"the connection to PostgreSQL was lost ({str(e).splitlines()[0]}): run again once"
            " the server is back (nothing acked is delivered again, nothing unacked is lost)"
        ) from e


def _governed(batches: Iterator[Batch], governed: policies.Policies) -> Iterator[Batch]:
    """``batches`` with the column policies applied to their change tables."""
    for batch in batches:
        batch.tables = {key: governed.apply(key, table) for key, table in batch.tables.items()}
        yield batch
