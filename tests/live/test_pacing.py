"""The decisions of a ``stream()`` run that need no server (``pgwire_cdc.pacing``): session
timing from ``wal_sender_timeout``, the reconnect waits, what each poll asks for, which
poll results are batches, when the run ends, and its heartbeats. The live suites
(test_stream.py, test_incremental.py, test_faults.py, test_idle_slots.py) run the same
decisions against a server."""

from __future__ import annotations

import pytest
from pgwire_cdc._native import Stop
from pgwire_cdc.pacing import ChangeLoop, IdleClock, PollLimits, Reconnects
from pgwire_cdc.pacing import stall_timeout_s as stall
from pgwire_cdc.pacing import status_interval_ms as status

FINAL = (Stop.UNTIL_LSN, Stop.IDLE)
NOT_FINAL = (Stop.PENDING, Stop.FULL, Stop.WAITED)


@pytest.mark.parametrize(
    ("wal_sender_timeout_ms", "interval_ms"),
    [(0, 10_000), (60_000, 10_000), (30_000, 10_000), (15_000, 5_000), (600, 200), (30, 100)],
)
def test_status_updates_well_inside_wal_sender_timeout(
    wal_sender_timeout_ms: int, interval_ms: int
) -> None:
    assert status(wal_sender_timeout_ms) == interval_ms


@pytest.mark.parametrize(
    ("given", "wal_sender_timeout_ms", "seconds"),
    [
        (None, 0, 60.0),
        (None, 60_000, 60.0),
        (None, 120_000, 120.0),
        (5.0, 120_000, 5.0),
        (0.0, 0, 0.0),
    ],
)
def test_stall_timeout(given: float | None, wal_sender_timeout_ms: int, seconds: float) -> None:
    assert stall(given, wal_sender_timeout_ms, 60.0) == seconds


def test_reconnect_waits_double_up_to_the_cap() -> None:
    assert list(Reconnects(5, 0.2, 0.5).delays()) == [
        (1, 0.2),
        (2, 0.4),
        (3, 0.5),
        (4, 0.5),
        (5, 0.5),
    ]
    assert list(Reconnects(0, 0.2, 30.0).delays()) == []


def test_a_poll_waits_for_a_copy_instead_of_until_lsn() -> None:
    loop = ChangeLoop(until_lsn=500, idle_timeout=2.5, delivered=100)
    assert loop.limits(busy=False, waiting=None) == PollLimits(500, 2500)
    # A chunk waits for its high watermark; the run does not idle out meanwhile.
    assert loop.limits(busy=True, waiting=300) == PollLimits(300, None)
    assert loop.limits(busy=True, waiting=None) == PollLimits(None, None)
    assert ChangeLoop(None, None, 0).limits(busy=False, waiting=None) == PollLimits(None, None)


def test_until_lsn_while_a_chunk_waits_means_its_watermark_is_passed() -> None:
    assert ChangeLoop.passed(200, Stop.UNTIL_LSN, 300) == 300
    assert ChangeLoop.passed(400, Stop.UNTIL_LSN, 300) == 400
    assert ChangeLoop.passed(200, Stop.WAITED, 300) == 200
    assert ChangeLoop.passed(200, Stop.UNTIL_LSN, None) == 200


def test_which_poll_results_are_batches() -> None:
    loop = ChangeLoop(None, None, delivered=100)
    assert loop.is_batch(True, Stop.PENDING, 100)  # rows or snapshot progress
    assert not loop.is_batch(False, Stop.PENDING, 150)  # mid-transaction: no boundary
    assert loop.is_batch(False, Stop.WAITED, 150)  # a boundary past the last batch
    assert not loop.is_batch(False, Stop.WAITED, 100)
    loop.handed_out(150)
    assert not loop.is_batch(False, Stop.IDLE, 150)
    loop.handed_out(120)  # never backwards
    assert loop.last_lsn == 150


@pytest.mark.parametrize("stop", FINAL + NOT_FINAL)
def test_when_the_run_is_over(stop: Stop) -> None:
    loop = ChangeLoop(until_lsn=500, idle_timeout=None, delivered=0)
    # No copy during the poll: the stream's own stop.
    assert loop.over(busy=False, copying=False, stop=stop, lsn=100) == (stop in FINAL)
    # A copy still running keeps the run going, whatever the poll said.
    assert not loop.over(busy=False, copying=True, stop=stop, lsn=900)
    assert not loop.over(busy=True, copying=True, stop=stop, lsn=900)
    # A copy that just finished: the poll waited for its watermark, so until_lsn decides.
    assert not loop.over(busy=True, copying=False, stop=stop, lsn=499)
    assert loop.over(busy=True, copying=False, stop=stop, lsn=500)
    assert not ChangeLoop(None, 1.0, 0).over(busy=True, copying=False, stop=stop, lsn=900)


def test_heartbeats_while_idle() -> None:
    clock = IdleClock(heartbeat_interval=10.0, idle_timeout=None, now=1000.0)
    assert not clock.heartbeat_due(1009.0, busy=False)
    assert clock.heartbeat_due(1010.0, busy=False)
    assert not clock.heartbeat_due(1010.0, busy=True)  # a copy's watermarks move the slot
    clock.heartbeat_written(1010.0)
    assert not clock.heartbeat_due(1019.0, busy=False)
    clock.changed(1015.0)
    assert not clock.heartbeat_due(1024.0, busy=False)
    assert clock.heartbeat_due(1025.0, busy=False)
    clock.heartbeats_refused()
    assert not clock.heartbeat_due(1e9, busy=False)
    assert not IdleClock(None, None, 0.0).heartbeat_due(1e9, busy=False)


def test_idle_timeout_of_a_run_that_writes_heartbeats() -> None:
    clock = IdleClock(heartbeat_interval=1.0, idle_timeout=5.0, now=0.0)
    clock.heartbeat_written(3.0)  # heartbeats do not count as changes
    assert not clock.idle_past_timeout(4.9, busy=False)
    assert clock.idle_past_timeout(5.0, busy=False)
    assert not clock.idle_past_timeout(5.0, busy=True)
    clock.changed(4.0)
    assert not clock.idle_past_timeout(8.9, busy=False)
    # Without heartbeats the poll's own idle time-out ends the run.
    assert not IdleClock(None, 5.0, 0.0).idle_past_timeout(100.0, busy=False)
    assert not IdleClock(1.0, None, 0.0).idle_past_timeout(100.0, busy=False)
