"""The decisions of a ``stream()`` run that need no I/O: the timing of its replication
sessions (from the server's ``wal_sender_timeout``), the waits before each reconnect,
what one poll of the live stream asks for and whether its result is a batch, when the
run is over, and when it writes a heartbeat. Nothing here reads a socket or a clock: the
caller passes in what the stream returned and the time.

Two kinds of position meet in a poll. The caller's ``until_lsn`` ends the run once
every transaction committed up to it has been delivered; but while a table is copied in
chunks (:mod:`pgwire_cdc.incremental`), the poll waits for the chunk's high watermark
instead, and neither ``until_lsn`` nor ``idle_timeout`` ends the run until every copy is
done.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ._native import Stop

#: Status updates at least this often (ms), and never more often than every 100 ms.
MAX_STATUS_INTERVAL_MS = 10_000
MIN_STATUS_INTERVAL_MS = 100


def status_interval_ms(wal_sender_timeout_ms: int) -> int:
    """How often a session sends a standby status update: well inside the server's
    ``wal_sender_timeout`` (0: none), a third of it, at most every 10 s."""
    if not wal_sender_timeout_ms:
        return MAX_STATUS_INTERVAL_MS
    return min(MAX_STATUS_INTERVAL_MS, max(MIN_STATUS_INTERVAL_MS, wal_sender_timeout_ms // 3))


def stall_timeout_s(given: float | None, wal_sender_timeout_ms: int, default: float) -> float:
    """Seconds of silence after which a replication connection counts as lost: ``given``,
    else like PostgreSQL's ``wal_receiver_timeout``, ``default`` or the server's
    ``wal_sender_timeout`` if longer (a walsender busy decoding may take up to half of it
    to read a request for a reply)."""
    if given is not None:
        return given
    return max(default, wal_sender_timeout_ms / 1000)


@dataclass(frozen=True)
class Reconnects:
    """How a lost replication connection is re-established: ``attempts`` per outage, the
    first after ``delay`` seconds, each delay twice the one before, at most
    ``max_delay``."""

    attempts: int
    delay: float
    max_delay: float

    def delays(self) -> Iterator[tuple[int, float]]:
        """Each attempt (from 1) with the seconds to wait before it."""
        for attempt in range(1, self.attempts + 1):
            yield attempt, min(self.max_delay, self.delay * 2 ** (attempt - 1))


@dataclass(frozen=True)
class PollLimits:
    """What one poll of the live stream is told beyond the batch limits."""

    #: Return once everything committed up to here is in.
    until_lsn: int | None
    #: Return after this long without a message.
    idle_timeout_ms: int | None


class ChangeLoop:
    """The bookkeeping of the change phase, one poll at a time: what a poll asks for,
    which results are batches, when the run is over.

    ``busy`` (an incremental snapshot is in progress at the poll) and ``waiting`` (the
    high watermark its next chunk waits for, None when none does) are read before each
    poll; ``copying`` is whether a copy is still in progress after the poll's result was
    handled."""

    def __init__(self, until_lsn: int | None, idle_timeout: float | None, delivered: int) -> None:
        self.until_lsn = until_lsn
        self.idle_timeout = idle_timeout
        #: The highest LSN a batch of this phase carried (at first: where it started).
        self.last_lsn = delivered

    def limits(self, busy: bool, waiting: int | None) -> PollLimits:
        """A copy in progress keeps a run going that would end by itself: the poll
        waits for its chunk's watermark instead of ``until_lsn``, and never idles out."""
        idle = self.idle_timeout
        return PollLimits(
            until_lsn=waiting if busy else self.until_lsn,
            idle_timeout_ms=None if idle is None or busy else int(idle * 1000),
        )

    @staticmethod
    def passed(lsn: int, stop: Stop, waiting: int | None) -> int:
        """How far the stream has certainly got: ``Stop.UNTIL_LSN`` while a chunk waited
        means every transaction committed before its watermark is in."""
        if waiting is None or stop != Stop.UNTIL_LSN:
            return lsn
        return max(lsn, waiting)

    def is_batch(self, has_content: bool, stop: Stop, lsn: int) -> bool:
        """Whether the poll's result goes out as a batch: it holds rows or snapshot
        progress, or it moves the LSN at a transaction boundary (the end of a transaction
        whose rows went out earlier), which the consumer acks like any other."""
        return has_content or (stop != Stop.PENDING and lsn > self.last_lsn)

    def handed_out(self, lsn: int) -> None:
        self.last_lsn = max(self.last_lsn, lsn)

    def over(self, busy: bool, copying: bool, stop: Stop, lsn: int) -> bool:
        """Whether the run ends after this poll: nothing is being copied, and the poll
        reached ``until_lsn`` or idled out (when no copy was running during it), or the
        stream has passed ``until_lsn`` (when one was: the poll then waited for the
        copy's watermark, not for ``until_lsn``)."""
        if copying:
            return False
        if not busy:
            return stop in (Stop.UNTIL_LSN, Stop.IDLE)
        return self.until_lsn is not None and lsn >= self.until_lsn


class IdleClock:
    """When a run writes a heartbeat, and when ``idle_timeout`` ends a run that writes
    them (heartbeats come back through the stream as messages, so the stream alone would
    never idle out). Times are ``time.monotonic()`` seconds."""

    def __init__(
        self, heartbeat_interval: float | None, idle_timeout: float | None, now: float
    ) -> None:
        self.heartbeat_interval = heartbeat_interval
        self.idle_timeout = idle_timeout
        #: When a batch last carried rows, and when the last heartbeat was written.
        self.last_change = now
        self.last_heartbeat = now

    def changed(self, now: float) -> None:
        """A batch carried rows."""
        self.last_change = now

    def heartbeat_written(self, now: float) -> None:
        self.last_heartbeat = now

    def heartbeats_refused(self) -> None:
        """The server refused one (a standby): no more for this run."""
        self.last_heartbeat = float("inf")

    def heartbeat_due(self, now: float, busy: bool) -> bool:
        """Whether the stream has been idle a whole ``heartbeat_interval`` since the last
        change or heartbeat (never while a table is copied: its watermarks move it)."""
        interval = self.heartbeat_interval
        if interval is None or busy:
            return False
        return now - max(self.last_change, self.last_heartbeat) >= interval

    def idle_past_timeout(self, now: float, busy: bool) -> bool:
        """``idle_timeout`` counted from the last change, for a run that writes
        heartbeats (without them, the poll's own idle time-out ends the run)."""
        idle = self.idle_timeout
        if idle is None or busy or self.heartbeat_interval is None:
            return False
        return now - self.last_change >= idle
