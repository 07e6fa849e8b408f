"""What each ``batch.ack()`` of a ``stream()`` run must do: the ack ledger and the hand-off
from the temporary snapshot slot to the permanent one. Pure bookkeeping (no I/O, no
server): ``streaming`` asks it and then does what it says.

A new slot's initial snapshot is read under a **temporary** slot that dies with its
connection. The permanent slot is made (a copy of the temporary one, same consistent
point) only when the consumer acks the last snapshot batch: a crash before that leaves no
slot, so the next run takes a new snapshot. If streaming has begun on the temporary slot
by then (the consumer took change batches before acking the snapshot), the stream moves
to the permanent slot at the next batch boundary.

Batches are numbered in the order they are handed out; an ack is cumulative (acking batch
*n* acks every batch before it) and acking an earlier one again does nothing. A snapshot
batch's ack never moves a slot: its LSN is the consistent point, where the slot already is.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ack:
    """What one ack must do, in this order."""

    #: Copy the temporary snapshot slot to the permanent one first.
    make_permanent_slot: bool
    #: Then tell the server the slot may advance to this LSN (None: no slot to move).
    slot_lsn: int | None


@dataclass
class AckLedger:
    """The acks of one ``stream()`` run (see the module docs)."""

    #: The number of the next batch handed out.
    next_seq: int = 0
    #: The highest batch acked so far (-1: none).
    acked_seq: int = -1
    #: The highest position the consumer acked (or the slot held) so far.
    acked_lsn: int = 0
    #: The number of the last snapshot batch, once known.
    snapshot_last_seq: int | None = None
    #: False while a snapshot is out and not acked in full: no permanent slot yet.
    snapshot_committed: bool = True
    #: Whether the live stream reads the temporary snapshot slot.
    on_temporary_slot: bool = False
    #: The stream must move to the permanent slot at the next batch boundary.
    switch_pending: bool = False

    def handed_out(self) -> int:
        """A batch is handed out: its number."""
        seq = self.next_seq
        self.next_seq += 1
        return seq

    def snapshot_started(self, consistent_point: int) -> None:
        """A new slot's snapshot is being read under the temporary slot."""
        self.snapshot_committed = False
        self.acked_lsn = consistent_point

    def last_snapshot_batch(self, seq: int) -> None:
        """Batch ``seq`` is the snapshot's last."""
        self.snapshot_last_seq = seq

    def streaming_on(self, temporary: bool) -> None:
        """The live stream (re)starts, on the temporary slot or the permanent one."""
        self.on_temporary_slot = temporary
        if not temporary:
            self.switch_pending = False

    def ack(self, seq: int, lsn: int, snapshot_batch: bool) -> Ack | None:
        """The consumer acks batch ``seq`` (LSN ``lsn``); None when it already had."""
        if seq <= self.acked_seq:
            return None
        self.acked_seq = seq
        make_permanent = (
            not self.snapshot_committed
            and self.snapshot_last_seq is not None
            and seq >= self.snapshot_last_seq
        )
        return Ack(make_permanent, None if snapshot_batch else lsn)

    def permanent_slot_made(self) -> None:
        """The permanent slot exists now; a stream on the temporary one moves over."""
        self.snapshot_committed = True
        if self.on_temporary_slot:
            self.switch_pending = True

    def acked(self, lsn: int) -> None:
        """The slot was told it may advance to ``lsn`` (or the session acked that much)."""
        self.acked_lsn = max(self.acked_lsn, lsn)

    @property
    def snapshot_lost_with_connection(self) -> bool:
        """Whether losing the replication connection now loses the snapshot: it streams on
        the temporary slot and the permanent one does not exist yet."""
        return self.on_temporary_slot and not self.snapshot_committed
