"""The lake knows its source: which PostgreSQL database a table's rows come from, and
whether a server may go on writing into it.

Every commit of the sink records its :class:`~pgwire_cdc.lakehouse.positions.Source`
with its rows: the cluster's system identifier, the timeline and the database, as
``IDENTIFY_SYSTEM`` reports them. Before streaming, :func:`refusal` compares a table's
record with the server the pipeline reaches:

* another system identifier or database: another source altogether;
* the same source, but the table holds a transaction the server's WAL does not: the
  table's position lies at or past the server's WAL end (a server restored to an earlier
  point on the same timeline, as from a replaced volume), or past the point where the
  server's history left the recorded timeline (point-in-time recovery and promotion
  start a new timeline there; ``TIMELINE_HISTORY`` gives the point). Applying changes on
  top would mix two histories, and the LSNs after that point name other transactions.

A failover to a standby passes: its new timeline branches off after everything the lake
holds (the slot, synchronised to the standby, is never ahead of what the standby
replayed), and the next commits record the new timeline.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..lsn import int_to_lsn, lsn_to_int
from .positions import Source


@dataclass(frozen=True)
class Server:
    """The server a pipeline reaches."""

    source: Source
    #: Where its WAL ends (``IDENTIFY_SYSTEM``'s ``xlogpos``).
    wal_end: int
    #: Its timeline's history: (an earlier timeline, the LSN where the server left it),
    #: oldest first; empty on timeline 1.
    history: tuple[tuple[int, int], ...] = ()

    def left(self, timeline: int) -> int | None:
        """Where this server's history left ``timeline`` (its WAL end on the current one);
        None when its history never passed through it."""
        if timeline == self.source.timeline:
            return self.wal_end
        return next((lsn for tli, lsn in self.history if tli == timeline), None)


def parse_history(content: str) -> tuple[tuple[int, int], ...]:
    """A timeline history file's entries (``<timeline>\\t<switch LSN>\\t<reason>``)."""
    out = []
    for line in content.splitlines():
        fields = line.strip().split()
        if len(fields) >= 2 and fields[0].isdigit():
            out.append((int(fields[0]), lsn_to_int(fields[1])))
    return tuple(out)


def identify(dsn: str) -> Server:
    """The server at ``dsn``, asked over a replication connection."""
    from ..replication import replication_connection

    conn = replication_connection(dsn)
    system, timeline, wal_end, database = conn.identify_system()
    history: tuple[tuple[int, int], ...] = ()
    if timeline > 1:
        rows = conn.query(f"TIMELINE_HISTORY {int(timeline)}")
        if rows and len(rows[0]) > 1 and rows[0][1] is not None:
            content = rows[0][1]
            if content.startswith("\\x"):  # bytea (PostgreSQL 16+), in its hex text form
                content = bytes.fromhex(content[2:]).decode()
            history = parse_history(content)
    return Server(Source(system, timeline, database or ""), wal_end, history)


def refusal(
    name: str, where: str, recorded: Source | None, position: int | None, server: Server
) -> str | None:
    """Why the table ``name`` (kept in ``where``) must not take changes from ``server``:
    its recorded source and position against the server's (see the module
    documentation); None when it may."""
    if recorded is None:
        return None
    new_copy = (
        "to keep a copy of this server instead, remove the table (or choose another place) "
        "and drop the slot, so that the next run starts with a new snapshot"
    )
    now = server.source
    if recorded.system != now.system:
        return (
            f"{name}: {where} was written from another PostgreSQL cluster (system identifier "
            f"{recorded.system}; this server's is {now.system}). Point the pipeline at that "
            f"cluster; {new_copy}"
        )
    if recorded.database != now.database:
        return (
            f"{name}: {where} was written from database {recorded.database!r}, not "
            f"{now.database!r}. Point the pipeline at that database; {new_copy}"
        )
    if position is None:
        return None
    back = (
        "drop the slot and run pgwire-cdc verify --recover to bring the tables to this "
        f"server's rows and make the slot again without a new copy; or, {new_copy}"
    )
    horizon = server.left(recorded.timeline)
    if horizon is None:
        return (
            f"{name}: {where} was written on timeline {recorded.timeline}, which the history "
            f"of this server (timeline {now.timeline}) does not pass through: it was restored "
            f"onto another branch of its history, and the table may hold changes the server "
            f"never had. To follow this server, {back}"
        )
    if position >= horizon:
        edge = (
            f"where its WAL ends ({int_to_lsn(horizon)})"
            if recorded.timeline == now.timeline
            else f"where its history left timeline {recorded.timeline} ({int_to_lsn(horizon)})"
        )
        return (
            f"{name}: {where} holds changes up to LSN {int_to_lsn(position)}, past {edge} on "
            "this server: it was restored to an earlier point (point-in-time recovery, a "
            "replaced volume), and those changes are not in it: applying the server's "
            f"changes on top would mix two histories. To follow this server, {back}"
        )
    return None
