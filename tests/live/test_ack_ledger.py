"""The ack ledger and the temporary -> permanent slot hand-off (``pgwire_cdc.acks``),
without a server: table-driven sequences of batches handed out and acked."""

from __future__ import annotations

import pytest
from pgwire_cdc.acks import Ack, AckLedger


def snapshot_run(batches: int, cp: int = 100) -> tuple[AckLedger, list[int]]:
    """A new slot's snapshot of ``batches`` batches handed out, then streaming on the
    temporary slot (the consumer took change batches before acking the snapshot)."""
    led = AckLedger()
    led.snapshot_started(cp)
    seqs = [led.handed_out() for _ in range(batches)]
    led.last_snapshot_batch(seqs[-1])
    led.streaming_on(temporary=True)
    return led, seqs


@pytest.mark.parametrize(
    ("acked", "permanent"),
    [([0], False), ([0, 1], False), ([2], True), ([1, 2], True), ([0, 2, 1], True)],
    ids=["first", "two of three", "the last", "up to the last", "out of order"],
)
def test_the_permanent_slot_is_made_by_the_ack_covering_the_last_snapshot_batch(
    acked: list[int], permanent: bool
) -> None:
    led, seqs = snapshot_run(3)
    made = []
    for i in acked:
        decision = led.ack(seqs[i], 100, snapshot_batch=True)
        if decision is not None and decision.make_permanent_slot:
            led.permanent_slot_made()
            made.append(i)
    assert bool(made) is permanent
    assert len(made) <= 1, "made once"
    assert led.snapshot_committed is permanent


def test_a_change_batch_ack_past_the_snapshot_makes_the_slot_and_moves_it() -> None:
    led, _ = snapshot_run(2)
    change = led.handed_out()
    decision = led.ack(change, 500, snapshot_batch=False)
    assert decision == Ack(make_permanent_slot=True, slot_lsn=500)


def test_a_snapshot_batch_ack_never_moves_a_slot() -> None:
    led, seqs = snapshot_run(1)
    decision = led.ack(seqs[0], 100, snapshot_batch=True)
    assert decision is not None and decision.slot_lsn is None


def test_an_ack_of_an_acked_batch_does_nothing() -> None:
    led = AckLedger()
    a, b = led.handed_out(), led.handed_out()
    assert led.ack(b, 300, False) == Ack(False, 300)
    assert led.ack(a, 200, False) is None
    assert led.ack(b, 300, False) is None


def test_the_stream_moves_over_only_when_it_was_on_the_temporary_slot() -> None:
    led, seqs = snapshot_run(1)
    assert led.snapshot_lost_with_connection
    led.ack(seqs[0], 100, True)
    led.permanent_slot_made()
    assert led.switch_pending
    assert not led.snapshot_lost_with_connection
    led.streaming_on(temporary=False)
    assert not led.switch_pending

    # A snapshot acked before streaming began: streaming starts on the permanent slot.
    led = AckLedger()
    led.snapshot_started(100)
    seq = led.handed_out()
    led.last_snapshot_batch(seq)
    assert led.ack(seq, 100, True) == Ack(True, None)
    led.permanent_slot_made()
    assert not led.switch_pending


def test_the_acked_lsn_only_grows() -> None:
    led = AckLedger()
    led.snapshot_started(100)
    assert led.acked_lsn == 100
    for lsn, expected in [(300, 300), (200, 300), (400, 400)]:
        led.acked(lsn)
        assert led.acked_lsn == expected
