"""Durable signals: requests to a pipeline written into the WAL.

``pgwire-cdc signal resnapshot TABLE`` (:func:`send`) writes a transactional logical
message, prefix :data:`PREFIX`, holding JSON ``{"signal": "resnapshot", "tables": [...],
"slot": ...}``. The stream reads it in WAL order like any change, so a signal sent while no
consumer runs is not lost: the next run of any slot that has not yet confirmed past it
carries it out (``slot`` given: that slot's only). A ``resnapshot`` reads the tables again
while the stream goes on (:mod:`pgwire_cdc.incremental`), as a ``rewrite`` does; the copy
is announced in the batch that holds the signal, so a consumer keeping tables records it
before that batch is acked, and a run stopped in between copies them again.

``pause`` and ``resume`` (no tables) stop and restart the delivery of changes, durably
(:class:`Pauses`): a stream that reads a pause hands out every change committed before it
and then nothing more, and acks nothing past it, so a run started while paused reads the
pause again and stays paused; it goes on reading the WAL for a resume, and once one
committed after the pause comes, it streams again from the pause, the changes it read
meanwhile delivered then.

(``pgwire_cdc.streaming.resnapshot`` asks a running stream the same by ``NOTIFY``, which a
stopped one misses.)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import admin
from .connection import connect
from .errors import ConfigError
from .incremental import check_where

log = logging.getLogger("pgwire_cdc")

PREFIX = "pgwire_cdc.signal"
KINDS = ("resnapshot", "pause", "resume")
#: The signals that name tables.
TABLE_KINDS = ("resnapshot",)


@dataclass(frozen=True)
class Signal:
    kind: str
    tables: tuple[str, ...]
    slot: str | None = None
    #: A resnapshot's SQL condition: only the rows it holds for are read again.
    where: str | None = None

    def for_slot(self, slot: str) -> bool:
        return self.slot is None or self.slot == slot


def parse(content: bytes) -> Signal | None:
    """A signal message's content; None (logged) when it is not one this version knows."""
    try:
        data = json.loads(content)
        kind = data["signal"]
        tables = tuple(str(t) for t in data.get("tables", ()))
        slot = data.get("slot")
        where = data.get("where")
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warning("ignored a malformed signal message")
        return None
    if kind not in KINDS:
        log.warning("ignored a %r signal: this version knows %s", kind, ", ".join(KINDS))
        return None
    return Signal(
        kind,
        tables,
        slot if isinstance(slot, str) else None,
        where if isinstance(where, str) and where.strip() else None,
    )


def send(
    dsn: str,
    kind: str,
    tables: Sequence[admin.TableSpec],
    slot: str | None = None,
    where: str | None = None,
) -> list[str]:
    """Writes the signal ``kind`` for ``tables`` into the WAL (see the module
    documentation); the tables it names. ``where``: a resnapshot reads only the rows
    this SQL condition holds for (checked against each table first)."""
    if kind not in KINDS:
        raise ConfigError(f"no signal {kind!r}; one of {', '.join(KINDS)}")
    if (kind in TABLE_KINDS) != bool(tables):
        needs = "names the tables to read again" if kind in TABLE_KINDS else "names no tables"
        raise ConfigError(f"the {kind} signal {needs}")
    if where and kind not in TABLE_KINDS:
        raise ConfigError(f"the {kind} signal takes no --where")
    conn = connect(dsn)
    try:
        found = admin.resolve_tables(conn, tables)
        names = [r.qualified for r in found]
        if where:
            for relation in found:
                check_where(conn, relation.schema, relation.name, where)
        message: dict[str, Any] = {"signal": kind, "tables": names, "slot": slot}
        if where:
            message["where"] = where
        content = json.dumps(message)
        conn.execute("SELECT pg_logical_emit_message(true, %s, %s)", (PREFIX, content))
        log.info("signal %s for %s written to the WAL", kind, ", ".join(names))
        return names
    finally:
        conn.close()


def in_order(
    notes: Sequence[tuple[int, bytes, str, tuple[int, int] | None]], slot: str
) -> list[tuple[int, Signal]]:
    """The signals for ``slot`` among a poll's notes (``(lsn, content, prefix, place)``),
    each with the commit LSN of its transaction (a message outside one: its own LSN)."""
    found = []
    for lsn, content, prefix, place in notes:
        if prefix != PREFIX:
            continue
        signal = parse(content)
        if signal is not None and signal.for_slot(slot):
            found.append((place[0] if place is not None else lsn, signal))
    return found


@dataclass
class Pauses:
    """Whether one stream is paused (see the module documentation): the pause it keeps
    (its commit LSN), and how far pauses were resumed already — a pause read again after
    the stream went back to it is no new one."""

    paused_at: int | None = None
    resumed_through: int = 0

    def pause_in(self, signals: Sequence[tuple[int, Signal]]) -> int | None:
        """The commit LSN of the pause the stream stops at among a poll's ``signals``
        (:func:`in_order`), None when none: a pause resumed later in the same poll is
        none."""
        pause = None
        for commit, signal in signals:
            if signal.kind == "pause" and commit > self.resumed_through and pause is None:
                pause = commit
            elif signal.kind == "resume" and pause is not None and commit > pause:
                self.resumed_through = commit
                pause = None
        return pause

    def resume_in(self, signals: Sequence[tuple[int, Signal]]) -> bool:
        """Paused: whether a resume committed after the pause is among ``signals``."""
        assert self.paused_at is not None
        return any(s.kind == "resume" and c > self.paused_at for c, s in signals)

    def resumed(self) -> int:
        """The pause ends; the LSN the stream goes back to (just before it)."""
        assert self.paused_at is not None
        at, self.paused_at = self.paused_at, None
        self.resumed_through = at
        return at - 1
