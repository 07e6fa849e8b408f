"""The replication side of a ``stream()`` run: a new slot's initial copy, then the live
session on the slot.

* :class:`InitialCopy`: a temporary slot (``<slot>_snapshot``) created with an exported
  snapshot, and the snapshot's rows read by the extension's snapshot workers, table by
  table. Its consistent point hands over to the live session.
* :class:`LiveSession`: the streaming session (``_native.LiveStream``) on the permanent
  slot, or on the temporary one until the consumer has acked the snapshot; moved over to
  the permanent slot at the next transaction boundary after that; re-established after a
  lost connection (:class:`~pgwire_cdc.pacing.Reconnects`), resuming right after the last
  batch handed out.

What the consumer acked lives in the run's :class:`~pgwire_cdc.acks.AckLedger`, which
both share with the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
import pyarrow as pa

from . import _native, acks, catalog
from .connection import SESSION_SETTINGS
from .errors import ConnectionError, SlotError
from .lsn import int_to_lsn
from .pacing import Reconnects
from .tables import table_of

if TYPE_CHECKING:
    from .metrics import SlotMetrics

log = logging.getLogger("pgwire_cdc")


def temporary_slot_name(slot: str) -> str:
    """The temporary slot a new slot's initial snapshot is taken on."""
    return f"{slot[:54]}_snapshot"


def replication_connection(dsn: str) -> _native.ReplicationConnection:
    """A replication connection. Text-format values are printed by the walsender, and
    snapshot values cast to text by the snapshot workers, with the session settings
    (startup parameters of each)."""
    return _native.ReplicationConnection(dsn, list(SESSION_SETTINGS.items()))


class InitialCopy:
    """A new slot's initial snapshot, on a temporary slot of the replication connection
    ``repl``: :meth:`begin` creates the slot and exports its snapshot, :meth:`segments`
    copies every table's rows under it."""

    def __init__(self, repl: _native.ReplicationConnection, slot: str) -> None:
        self.repl = repl
        self.temporary_slot = temporary_slot_name(slot)
        self.reader: _native.SnapshotReader | None = None

    def begin(self) -> tuple[int, str]:
        """Creates the temporary slot: its consistent point and exported snapshot."""
        _, consistent_point, snapshot_name = self.repl.create_slot(
            self.temporary_slot, temporary=True, export_snapshot=True
        )
        assert snapshot_name is not None
        return consistent_point, snapshot_name

    def segments(
        self,
        conn: psycopg.Connection[Any],
        snapshot_name: str,
        consistent_point: int,
        tables: Sequence[catalog.TableInfo],
        *,
        workers: int,
        split_blocks: int,
        batch_rows: int,
    ) -> Iterator[tuple[str, pa.Table, bool]]:
        """The rows of ``tables`` under the snapshot, as ``(table, rows, last)``: up to
        ``batch_rows`` rows of one table each, read by ``workers`` connections at once
        (tables of at least ``split_blocks`` 8 KiB blocks split into that many CTID
        ranges); ``last`` marks the final one. ``conn`` is the run's setup connection
        (table sizes)."""
        tasks = []
        for t in tables:
            blocks = catalog.table_blocks(conn, t.oid)
            ranges = workers if blocks >= split_blocks else 1
            columns = t.descriptions()
            for query in catalog.snapshot_queries(t, ranges, blocks):
                tasks.append((t.oid, t.schema, t.name, t.replica_identity, columns, query))
        log.info(
            "initial snapshot of %d table(s) at %s on %d connection(s)",
            len(tables),
            int_to_lsn(consistent_point),
            workers,
        )
        self.reader = self.repl.start_snapshot(
            snapshot_name, consistent_point, tasks, workers=workers, batch_rows=batch_rows
        )
        pending = self._next_segment()
        while pending is not None:
            following = self._next_segment()
            name, table = pending
            yield name, table, following is None
            pending = following
        self.reader = None

    def _next_segment(self) -> tuple[str, pa.Table] | None:
        assert self.reader is not None
        while True:
            try:
                got = self.reader.next_batch(200)
            except StopIteration:
                return None
            if got is not None:
                name, stream = got
                return name, table_of(stream)

    def close(self) -> None:
        if self.reader is not None:
            try:
                self.reader.close()
            except Exception as e:
                log.debug("closing %s failed: %s", type(self.reader).__name__, e)
            self.reader = None


class LiveSession:
    """The streaming session of a run on its slot (see the module documentation).

    ``repl`` is the replication connection a session starts on: opened by
    :meth:`connect` (or taken over from the initial copy), and consumed by :meth:`start`,
    which turns it into :attr:`live`."""

    def __init__(
        self,
        dsn: str,
        slot: str,
        options: _native.SessionOptions,
        ledger: acks.AckLedger,
        reconnects: Reconnects,
        *,
        failover: bool,
        metrics: SlotMetrics | None,
    ) -> None:
        self.dsn = dsn
        self.slot = slot
        self.options = options
        self.acks = ledger
        self.reconnects = reconnects
        self.failover = failover
        self.metrics = metrics
        self.repl: _native.ReplicationConnection | None = None
        self.live: _native.LiveStream | None = None
        #: Which slot the live stream reads: the permanent one, or the temporary
        #: snapshot slot until the snapshot is committed.
        self.stream_slot = slot
        #: The timeline of the server the last connection reached (``IDENTIFY_SYSTEM``).
        self.timeline: int | None = None

    @property
    def on_permanent_slot(self) -> bool:
        return self.live is not None and self.stream_slot == self.slot

    def connect(self) -> _native.ReplicationConnection:
        """Opens the replication connection the next session starts on, and learns the
        server's timeline (after a failover, the new primary's)."""
        self.repl = replication_connection(self.dsn)
        self.timeline = self.repl.identify_system()[1]
        return self.repl

    def start(self, slot: str, start: int, skip_through: tuple[int, int] | None = None) -> None:
        """Starts streaming ``slot`` from ``start`` on the open replication connection
        (``skip_through``: the part of a transaction already delivered, skipped)."""
        assert self.repl is not None
        self.stream_slot = slot
        self.acks.streaming_on(temporary=slot != self.slot)
        log.info("streaming slot %s from %s", slot, int_to_lsn(start))
        self.live = self.repl.start_streaming(
            slot,
            start,
            self.options,
            acked_lsn=self.acks.acked_lsn,
            skip_through=skip_through,
        )
        self.repl = None

    def switch_to_permanent_slot(self) -> None:
        """Streaming moves from the temporary snapshot slot to the permanent copy: the
        temporary slot goes with its connection; the new stream starts where the last
        batch ended."""
        assert self.live is not None
        resume = self.live.delivered_lsn
        skip = self.live.partial_transaction
        self.acks.acked(self.live.acked_lsn)
        self.live.close()
        self.live = None
        self.connect()
        self.start(self.slot, resume, skip)

    def rewind(self, lsn: int) -> None:
        """Streams again from ``lsn``, on a new replication connection: what the stream
        read past it was not handed out (a pause, :mod:`pgwire_cdc.signals`), and the
        server sends it again from the slot."""
        assert self.live is not None
        acked = self.live.acked_lsn
        self.live.close()
        self.live = None
        self.acks.acked(acked)
        self.connect()
        self.start(self.stream_slot, lsn)

    def reconnect(self, error: ConnectionError) -> None:
        """Re-establishes a lost replication connection, waiting as :attr:`reconnects`
        says before each attempt; streaming resumes after the last batch handed out."""
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
        # (start() on the permanent slot).
        attempts = self.reconnects.attempts
        log.warning("replication connection lost: %s", error)
        last: Exception = error
        for attempt, delay in self.reconnects.delays():
            log.warning(
                "reconnect attempt %d of %d in %.2f s, resuming after %s",
                attempt,
                attempts,
                delay,
                int_to_lsn(resume),
            )
            time.sleep(delay)
            try:
                self.connect()
                self.start(self.slot, resume, skip)
            except (ConnectionError, SlotError) as e:
                self._close_repl()
                if isinstance(e, SlotError) and e.sqlstate == "42704":
                    raise self._slot_gone(e) from e
                if not transient(e):
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
            if self.failover
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

    def close(self) -> None:
        for closer in (self.live, self.repl):
            if closer is not None:
                try:
                    closer.close()
                except Exception as e:
                    log.debug("closing %s failed: %s", type(closer).__name__, e)
        self.live = self.repl = None


def transient(error: Exception) -> bool:
    """Whether a failed reconnect is worth retrying: a lost or refused connection, or the
    slot still held by the walsender of the lost connection; not a refused login, a
    dropped or invalidated slot."""
    sqlstate = getattr(error, "sqlstate", None) or ""
    if isinstance(error, SlotError):
        return sqlstate == "55006"
    return not sqlstate.startswith("28")
