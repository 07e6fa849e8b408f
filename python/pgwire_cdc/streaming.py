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

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg
import pyarrow as pa

from . import _native, admin, catalog, session
from .errors import ConfigError, ConnectionError, SlotError
from .lsn import int_to_lsn, lsn_to_int
from .tables import merge_segments

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("pgwire_cdc")

#: Default batch limits: rows, payload bytes, milliseconds.
DEFAULT_MAX_BATCH_ROWS = 100_000
DEFAULT_MAX_BATCH_BYTES = 64 << 20
DEFAULT_MAX_BATCH_MS = 1_000

#: Reconnection attempts after a lost replication connection, and the first back-off.
RECONNECT_ATTEMPTS = 8
RECONNECT_BACKOFF_S = 0.2


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
    _ack: Callable[[], None] | None = field(default=None, repr=False)

    @property
    def rows(self) -> int:
        return sum(t.num_rows for t in self.tables.values())

    def ack(self) -> None:
        """The caller has made this batch (and every earlier one) durable: the slot may
        advance to ``lsn``."""
        if self._ack is not None:
            self._ack()

    def to_spark(self, spark: SparkSession) -> dict[str, DataFrame]:
        """One Spark DataFrame per change table, built from Arrow (no pandas, no per-row
        Python)."""
        from . import spark as spark_support

        return spark_support.to_spark(spark, self.tables)


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


class _Stream:
    """The state behind one ``stream()`` generator."""

    def __init__(self, dsn: str, publication: str, slot: str, **options: Any) -> None:
        self.dsn = dsn
        self.publication = publication
        self.slot = slot
        self.o = options
        self.conn: psycopg.Connection[Any] | None = None
        self.repl: _native.ReplicationConnection | None = None
        self.live: _native.LiveStream | None = None
        self.reader: _native.SnapshotReader | None = None
        # Which slot the live stream reads: the permanent one, or the temporary
        # snapshot slot until the snapshot is committed.
        self.stream_slot = slot
        self.acked_seq = -1
        self.seq = 0
        self.snapshot_last_seq: int | None = None  # set when the last snapshot batch is known
        self.snapshot_committed = True
        self.consistent_point = 0
        self.switch_pending = False
        #: The highest position the consumer acked (or the slot held) so far.
        self.acked_lsn = 0
        self.server_version = 0
        self.table_infos: list[catalog.TableInfo] = []
        self.type_map: dict[int, tuple[int, int]] = {}
        self.proto_version = 1
        self.binary = False
        self.status_interval_ms = 10_000

    # -- setup ---------------------------------------------------------------------

    def prepare(self) -> None:
        conn = psycopg.connect(self.dsn, autocommit=True)
        self.conn = conn
        session.apply(conn)
        info = admin.check_server(conn, new_slot=admin.get_slot(conn, self.slot) is None)
        self.server_version = info.version_num
        admin.ensure_publication(conn, self.publication, self.o["tables"])
        admin.check_replica_identity(conn, self.publication)
        self.table_infos = catalog.published_tables(conn, self.publication)
        user_types = {
            c.type_oid for t in self.table_infos for c in t.columns if c.type_oid >= 16384
        }
        self.type_map = catalog.type_map(conn, user_types)
        self.proto_version = self.o["proto_version"] or _proto_version(self.server_version)
        # Status updates well inside wal_sender_timeout (0 = no timeout): a third of it,
        # at most every 10 s.
        row = conn.execute(
            "SELECT setting::int * CASE unit WHEN 's' THEN 1000 ELSE 1 END "
            "FROM pg_settings WHERE name = 'wal_sender_timeout'"
        ).fetchone()
        timeout_ms = int(row[0]) if row and row[0] else 0
        self.status_interval_ms = min(10_000, max(100, timeout_ms // 3)) if timeout_ms else 10_000
        self.binary = bool(self.o["binary"])
        if self.binary:
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
                self.binary = False

    def _replication_connection(self) -> _native.ReplicationConnection:
        repl = _native.ReplicationConnection(self.dsn)
        # Text-format values are printed by the walsender with these settings.
        for name, value in session.SESSION_SETTINGS.items():
            repl.query("SELECT set_config(" + _literal(name) + ", " + _literal(value) + ", false)")
        return repl

    # -- acknowledgement -----------------------------------------------------------

    def ack(self, seq: int, lsn: int, snapshot_batch: bool) -> None:
        if seq <= self.acked_seq:
            return
        self.acked_seq = seq
        if not self.snapshot_committed:
            if self.snapshot_last_seq is not None and seq >= self.snapshot_last_seq:
                self._commit_snapshot()
        if self.live is not None and not snapshot_batch:
            self.live.ack(lsn)
        self.acked_lsn = max(self.acked_lsn, lsn)

    def _commit_snapshot(self) -> None:
        """Makes the slot permanent: a copy of the temporary snapshot slot, at the
        position acked so far."""
        assert self.conn is not None
        admin.copy_slot(self.conn, _temporary_slot_name(self.slot), self.slot)
        self.snapshot_committed = True
        if self.stream_slot != self.slot:
            # Already streaming on the temporary slot: move over at the next boundary.
            self.switch_pending = True
        log.info("initial snapshot committed; slot %s created", self.slot)

    # -- the generator -------------------------------------------------------------

    def run(self) -> Iterator[Batch]:
        try:
            self.prepare()
            assert self.conn is not None
            existing = admin.get_slot(self.conn, self.slot)
            if existing is not None:
                admin.check_slot_usable(existing)
                start = existing.confirmed_flush_lsn or 0
                self.acked_lsn = start
                self.repl = self._replication_connection()
                self._start_streaming(self.slot, start)
            elif self.o["snapshot"]:
                yield from self._snapshot()
                if self.snapshot_committed:
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
                self.acked_lsn = cp
                self._start_streaming(self.slot, cp)
            yield from self._changes()
        finally:
            self.close()

    def _start_streaming(
        self, slot: str, start: int, skip_through: tuple[int, int] | None = None
    ) -> None:
        assert self.repl is not None
        self.stream_slot = slot
        self.live = self.repl.start_streaming(
            slot,
            start,
            [self.publication],
            proto_version=self.proto_version,
            binary=self.binary,
            type_map=self.type_map,
            status_interval_ms=self.status_interval_ms,
            acked_lsn=self.acked_lsn,
            skip_through=skip_through,
        )
        self.repl = None

    def _snapshot(self) -> Iterator[Batch]:
        self.repl = self._replication_connection()
        temp = _temporary_slot_name(self.slot)
        _, cp, snapshot_name = self.repl.create_slot(temp, temporary=True, export_snapshot=True)
        assert snapshot_name is not None
        self.consistent_point = cp
        self.acked_lsn = cp
        self.snapshot_committed = False
        assert self.conn is not None
        tasks = []
        workers = max(1, int(self.o["snapshot_workers"]))
        for t in self.table_infos:
            blocks = catalog.table_blocks(self.conn, t.oid)
            ranges = workers if blocks >= self.o["snapshot_split_blocks"] else 1
            columns = [
                (
                    c.name,
                    c.type_oid,
                    c.base_type_oid,
                    c.type_modifier,
                    c.base_type_modifier,
                    c.is_key,
                )
                for c in t.columns
            ]
            for sql in catalog.snapshot_queries(t, ranges, blocks):
                tasks.append((t.oid, t.schema, t.name, t.replica_identity, columns, sql))
        log.info(
            "initial snapshot of %d table(s) at %s on %d connection(s)",
            len(self.table_infos),
            int_to_lsn(cp),
            workers,
        )
        self.reader = self.repl.start_snapshot(
            snapshot_name, cp, tasks, workers=workers, batch_rows=self.o["max_batch_rows"]
        )
        pending = self._next_snapshot_segment()
        first = True
        while pending is not None:
            following = self._next_snapshot_segment()
            seq = self._next_seq()
            if following is None:
                self.snapshot_last_seq = seq
            name, table = pending
            yield Batch(
                tables={name: table},
                lsn=cp,
                snapshot=True,
                snapshot_start=first,
                _ack=self._acker(seq, cp, snapshot_batch=True),
            )
            first = False
            pending = following
        if first:
            # Nothing to copy: one empty snapshot batch all the same, so that a consumer
            # keeping a copy learns that a new snapshot started (its copy is now empty).
            seq = self._next_seq()
            self.snapshot_last_seq = seq
            yield Batch(
                tables={},
                lsn=cp,
                snapshot=True,
                snapshot_start=True,
                _ack=self._acker(seq, cp, snapshot_batch=True),
            )
        self.reader = None

    def _next_snapshot_segment(self) -> tuple[str, pa.Table] | None:
        assert self.reader is not None
        while True:
            try:
                got = self.reader.next_batch(200)
            except StopIteration:
                return None
            if got is not None:
                name, stream = got
                return name, pa.table(stream)

    def _next_seq(self) -> int:
        seq = self.seq
        self.seq += 1
        return seq

    def _acker(self, seq: int, lsn: int, snapshot_batch: bool) -> Callable[[], None]:
        return lambda: self.ack(seq, lsn, snapshot_batch)

    def _changes(self) -> Iterator[Batch]:
        until = _parse_lsn(self.o["until_lsn"])
        idle = self.o["idle_timeout"]
        failures = 0
        assert self.live is not None
        last_lsn = self.live.delivered_lsn
        while True:
            assert self.live is not None
            try:
                segments, lsn, stop = self.live.poll(
                    max_rows=self.o["max_batch_rows"],
                    max_bytes=self.o["max_batch_bytes"],
                    max_ms=self.o["max_batch_ms"],
                    until_lsn=until,
                    idle_timeout_ms=None if idle is None else int(idle * 1000),
                )
                failures = 0
            except ConnectionError as e:
                failures += 1
                self._reconnect(e, failures)
                continue
            if segments or (stop != "pending" and lsn > last_lsn):
                # A batch without rows still moves the LSN (the end of a transaction whose
                # rows went out earlier): the consumer acks it like any other.
                seq = self._next_seq()
                tables = merge_segments((name, pa.table(s)) for name, s in segments)
                yield Batch(tables=tables, lsn=lsn, _ack=self._acker(seq, lsn, False))
                last_lsn = max(last_lsn, lsn)
            if stop in ("until_lsn", "idle"):
                return
            if self.switch_pending:
                self._switch_to_permanent_slot()

    def _reconnect(self, error: Exception, failures: int) -> None:
        assert self.live is not None
        if self.stream_slot != self.slot:
            raise ConnectionError(
                "the replication connection was lost before the initial snapshot was "
                "acked; its temporary slot is gone with it. Run stream() again to take "
                "a new snapshot."
            ) from error
        if failures > self.o["reconnect_attempts"]:
            raise error
        resume = self.live.delivered_lsn
        acked = self.live.acked_lsn
        skip = self.live.partial_transaction
        try:
            self.live.close()
        except Exception:
            pass
        self.live = None
        delay = RECONNECT_BACKOFF_S * (2 ** (failures - 1))
        log.warning(
            "replication connection lost (%s); reconnecting in %.1f s from %s",
            type(error).__name__,
            delay,
            int_to_lsn(resume),
        )
        time.sleep(delay)
        while True:
            try:
                self.repl = self._replication_connection()
                self.acked_lsn = max(self.acked_lsn, acked)
                self._start_streaming(self.slot, resume, skip)
                return
            except SlotError as e:
                # The old walsender may still hold the slot for a moment.
                failures += 1
                if failures > self.o["reconnect_attempts"]:
                    raise
                log.warning("slot still in use (%s); retrying", e)
                time.sleep(RECONNECT_BACKOFF_S * (2 ** min(failures, 5)))
            except ConnectionError:
                failures += 1
                if failures > self.o["reconnect_attempts"]:
                    raise
                time.sleep(RECONNECT_BACKOFF_S * (2 ** min(failures, 5)))

    def _switch_to_permanent_slot(self) -> None:
        """Streaming moves from the temporary snapshot slot to the permanent copy: the
        temporary slot goes with its connection; the new stream starts where the last
        batch ended."""
        assert self.live is not None
        resume = self.live.delivered_lsn
        skip = self.live.partial_transaction
        self.acked_lsn = max(self.acked_lsn, self.live.acked_lsn)
        self.live.close()
        self.live = None
        self.switch_pending = False
        self.repl = self._replication_connection()
        self._start_streaming(self.slot, resume, skip)

    def close(self) -> None:
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


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def stream(
    dsn: str,
    publication: str = "pub",
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
) -> Iterator[Batch]:
    """Streams a publication's changes (after an initial snapshot for a new slot) as
    :class:`Batch` objects; see the module documentation and CONTRACT section 2.

    ``snapshot_workers`` connections copy the snapshot at once (tables of at least
    ``snapshot_split_blocks`` 8 KiB blocks are split into that many CTID ranges);
    ``proto_version`` defaults to the highest the server supports.
    """
    if max_batch_rows < 1 or max_batch_bytes < 1 or max_batch_ms < 0:
        raise ConfigError("max_batch_rows and max_batch_bytes must be positive")
    if idle_timeout is not None and idle_timeout < 0:
        raise ConfigError("idle_timeout must not be negative")
    state = _Stream(
        dsn,
        publication,
        slot,
        tables=tables,
        snapshot=snapshot,
        binary=binary,
        until_lsn=until_lsn,
        idle_timeout=idle_timeout,
        max_batch_rows=max_batch_rows,
        max_batch_bytes=max_batch_bytes,
        max_batch_ms=max_batch_ms,
        snapshot_workers=snapshot_workers,
        snapshot_split_blocks=snapshot_split_blocks,
        proto_version=proto_version,
        reconnect_attempts=reconnect_attempts,
    )
    return state.run()
