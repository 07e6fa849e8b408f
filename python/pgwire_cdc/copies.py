"""The slot's own record of the incremental copies in progress (:mod:`pgwire_cdc.incremental`),
kept in the WAL ahead of the slot, so that a copy interrupted by a stop or a crash resumes
on the next run even when the consumer keeps nothing but the slot.

The record is a logical decoding message (``pg_logical_emit_message``, not transactional,
prefix :data:`NOTE_PREFIX`) that names the slot and, per table still being copied, the key
up to which the consumer has acked its rows (``[]``: none yet)::

    {"slot": "app", "copies": {"public.b": [1000]}, "full": true}

It rests in the WAL after the slot's confirmed position, so the next stream on the slot
receives it again, as the watermark algorithm (Netflix's DBLog) receives its own watermarks.
A run that ends writes one more, after its last ack, that also lists the published tables
the consumer holds (``"known"``): the next run reads it first of all and copies a table
that may have joined the publication since (a *candidate*, see ``streaming``) only when no
earlier run knew it. Three rules keep a note ahead of the slot while copies run:

* a new note is written before an ack that would pass the last one (the ack of a batch
  whose LSN is at or past the note's end), holding the copies as of that ack;
* a new note is written as soon as the copies change in a way acks alone would not record
  (a copy starts, or one learnt from an earlier run's note is taken up);
* the slot is not confirmed past the last note on the consumer's behalf while it is idle
  (``LiveStream.poll(idle_confirm_limit=...)``): only acks move it there, and an ack first
  writes a newer note.

A run reads the notes of earlier runs as they come through its stream (they lie between
the slot's confirmed position and the WAL position where the run started). A note written
by a run before it has read all of them (before its stream passed its own start) holds only
what that run knew: it is marked ``"full": false`` and merged into what earlier notes said,
table by table (``null`` for a copy that run finished); a note written after replaces
everything before it.

Everything here is pure bookkeeping (no I/O); ``streaming`` writes and reads the notes.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: The prefix of the copy-state notes (``pg_logical_emit_message``).
NOTE_PREFIX = "pgwire_cdc.copies"

#: Per table being copied: the key up to which its rows are acked (a list; empty: none).
Copies = dict[str, list[Any]]


def encode(
    slot: str,
    copies: Mapping[str, list[Any] | None],
    full: bool,
    known: Collection[str] | None = None,
) -> str:
    """The content of a note (``known``: the tables the consumer holds, in a run's last)."""
    doc: dict[str, Any] = {"slot": slot, "copies": dict(copies), "full": full}
    if known is not None:
        doc["known"] = sorted(known)
    return json.dumps(doc, default=str)


def decode(
    slot: str, content: bytes
) -> tuple[dict[str, list[Any] | None], bool, set[str] | None] | None:
    """``(copies, full, known)`` of a note for ``slot``; None for another slot's note or one
    that does not parse (a note is never trusted beyond its shape)."""
    try:
        doc = json.loads(content)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("slot") != slot:
        return None
    copies = doc.get("copies")
    if not isinstance(copies, dict):
        return None
    out: dict[str, list[Any] | None] = {}
    for name, after in copies.items():
        if isinstance(name, str) and (after is None or isinstance(after, list)):
            out[name] = after
    listed = doc.get("known")
    known = {n for n in listed if isinstance(n, str)} if isinstance(listed, list) else None
    return out, bool(doc.get("full", True)), known


@dataclass
class CopyLedger:
    """Which copies the consumer has acked how far, and when the slot needs a new note.

    ``caught_up``: whether every note of an earlier run has been read (true for a new
    slot: there are none)."""

    slot: str
    caught_up: bool
    #: The copies as of the last ack (what a note must hold).
    acked: Copies = field(default_factory=dict)
    #: Copies finished in this run before it caught up (``null`` in partial notes).
    finished: set[str] = field(default_factory=set)
    #: The copies after each batch handed out and not acked yet, by batch sequence number.
    pending: dict[int, Copies] = field(default_factory=dict)
    #: The copies after the last batch handed out.
    current: Copies = field(default_factory=dict)
    #: What the last note written holds, and where it ends (None: no note yet).
    written: Copies | None = None
    written_end: int | None = None
    #: Where the last note written starts, once it came back through the stream.
    written_start: int | None = None
    #: Whether the last note written was full.
    written_full: bool = True
    #: What earlier runs' notes said, merged (see the module docs).
    learnt: dict[str, list[Any] | None] = field(default_factory=dict)
    #: The tables earlier runs' last notes say the consumer holds (None: no such note).
    known_before: set[str] | None = None

    # -- what the stream does -------------------------------------------------------------

    def started(self, table: str, after: Sequence[Any] | None) -> None:
        """A copy of ``table`` starts after key ``after`` (None: from the start)."""
        key = list(after or ())
        self.current[table] = key
        for copies in self.pending.values():
            copies[table] = key
        self.acked[table] = key
        self.finished.discard(table)

    def dropped(self, table: str) -> None:
        """A copy is given up (the table left the publication)."""
        for copies in (self.current, self.acked, *self.pending.values()):
            copies.pop(table, None)

    def handed_out(self, seq: int, progress: Mapping[str, Sequence[Any] | None]) -> None:
        """Batch ``seq`` is handed out with ``progress`` (``Batch.snapshot_progress``)."""
        for table, after in progress.items():
            if after is None:
                self.current.pop(table, None)
            elif table in self.current:
                self.current[table] = list(after)
        if self.current or self.acked or self.written:
            self.pending[seq] = dict(self.current)

    def acking(self, seq: int) -> None:
        """The consumer acks batch ``seq`` (and every earlier one)."""
        done = [s for s in self.pending if s <= seq]
        if not done:
            return
        state = self.pending[max(done)]
        for s in done:
            del self.pending[s]
        self.finished |= set(self.acked) - set(state)
        self.acked = dict(state)

    def note_due(self, ack_lsn: int | None = None) -> bool:
        """Whether a note must be written now (before acking ``ack_lsn``, if given)."""
        if self.written is None:
            return bool(self.acked)
        if self.acked != self.written:
            return True
        passes = (
            ack_lsn is not None and self.written_end is not None and ack_lsn >= self.written_end
        )
        return bool(self.acked) and passes

    def note(self, known: Collection[str] | None = None) -> str:
        """The content of the note to write now (``known``: for the run's last note)."""
        copies: dict[str, list[Any] | None] = dict(self.acked)
        if not self.caught_up:
            copies.update(dict.fromkeys(self.finished - set(self.acked)))
        if known is not None and not self.caught_up and self.known_before is not None:
            # Notes not read yet may name more: what earlier runs knew still holds.
            known = set(known) | self.known_before
        return encode(self.slot, copies, self.caught_up, known)

    def candidates_to_copy(self, candidates: Collection[str]) -> set[str]:
        """Of the tables that may have joined the publication after the slot's position,
        those to copy once every earlier note is read: all when no earlier run's last note
        was found, else those it did not list (nor a copy this run already runs)."""
        unknown = set(candidates) - set(self.current)
        if self.known_before is None:
            return unknown
        return unknown - self.known_before

    def noted(self, end: int) -> None:
        """The note from :meth:`note` was written; its WAL record ends at ``end``."""
        self.written = dict(self.acked)
        self.written_end = end
        self.written_start = None
        self.written_full = self.caught_up

    def idle_confirm_limit(self) -> int | None:
        """How far the slot may be confirmed on the consumer's behalf while it is idle
        (None: as far as the server got)."""
        if not self.written and not self.acked:
            return None
        # Until the last note came back through the stream its start is unknown: confirm
        # nothing beyond what the consumer acked.
        return self.written_start if self.written_start is not None else 0

    # -- notes coming through the stream --------------------------------------------------

    def received(self, lsn: int, content: bytes, run_start: int) -> dict[str, list[Any]]:
        """A note came through the stream at ``lsn``. Returns the copies an earlier run's
        note asks for that this run does not know of: to be started by the caller with
        :meth:`started` after the key given."""
        decoded = decode(self.slot, content)
        if decoded is None:
            return {}
        copies, full, known = decoded
        if lsn >= run_start:
            # One of this run's own notes: now its start is known.
            if self.written_end is not None and lsn < self.written_end:
                self.written_start = lsn
            return {}
        if full:
            self.learnt = dict(copies)
        else:
            self.learnt.update(copies)
        if known is not None:
            self.known_before = (self.known_before or set()) | known
        return {
            name: after
            for name, after in self.learnt.items()
            if after is not None and name not in self.current
        }
