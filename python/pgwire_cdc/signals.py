"""Durable signals: requests to a pipeline written into the WAL.

``pgwire-cdc signal resnapshot TABLE`` (:func:`send`) writes a transactional logical
message, prefix :data:`PREFIX`, holding JSON ``{"signal": "resnapshot", "tables": [...],
"slot": ...}``. The stream reads it in WAL order like any change, so a signal sent while no
consumer runs is not lost: the next run of any slot that has not yet confirmed past it
carries it out (``slot`` given: that slot's only). A ``resnapshot`` reads the tables again
while the stream goes on (:mod:`pgwire_cdc.incremental`), as a ``rewrite`` does; the copy
is announced in the batch that holds the signal, so a consumer keeping tables records it
before that batch is acked, and a run stopped in between copies them again.

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
KINDS = ("resnapshot",)


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
