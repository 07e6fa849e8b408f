"""Which tables a ``stream()`` run copies while it streams, and the record it keeps of
them in the WAL.

A published table whose existing rows the consumer does not hold is read in chunks
while streaming goes on (:mod:`pgwire_cdc.incremental`). :class:`TableCopies` finds such
tables at start (:meth:`~TableCopies.plan`: those not in ``held_tables``, or those this
run's ``tables=`` added and those that may have joined after the slot's position),
while streaming (:meth:`~TableCopies.watch`: tables added to a publication, and
``resnapshot()`` requests) and in the slot's own record (:meth:`~TableCopies.take_notes`:
copies an earlier run left unfinished). It keeps that record as notes written into the
WAL ahead of the slot (:mod:`pgwire_cdc.copies`), through the run's setup connection.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import psycopg
import pyarrow as pa

from . import catalog, copies, incremental
from . import signals as signals_mod
from ._native import Stop
from .connection import SetupConnection
from .errors import ConfigError
from .lsn import int_to_lsn, lsn_to_int
from .schema_changes import SchemaChange

log = logging.getLogger("pgwire_cdc")

#: Seconds between looks for tables added to the publication while streaming.
RECHECK_S = 5.0


class TableCopies:
    """The tables one run copies while it streams (see the module documentation).

    ``snapshot`` is the run's ``snapshot`` option: without it the run streams changes
    only and keeps no record of copies. ``held_given``: the consumer named the tables it
    holds (``held_tables``), so the slot's record does not decide what is copied.
    ``caught_up``: the slot is new, so there are no earlier runs' notes to read."""

    def __init__(
        self,
        setup: SetupConnection,
        slot: str,
        publications: Sequence[str],
        *,
        snapshot: bool,
        held_given: bool,
        in_recovery: bool,
        run_start: int,
        caught_up: bool,
        chunk_rows: int,
        published: Iterable[str],
    ) -> None:
        assert setup.conn is not None
        self.setup = setup
        self.slot = slot
        self.publications = list(publications)
        self.snapshot = snapshot
        self.held_given = held_given
        self.in_recovery = in_recovery
        #: The WAL position when this run started: copy-state notes before it are
        #: earlier runs' (:mod:`pgwire_cdc.copies`).
        self.run_start = run_start
        self.copy_state = copies.CopyLedger(slot, caught_up=caught_up)
        self.snapshots = incremental.Snapshots(setup.conn, chunk_rows)
        #: The published tables whose rows the consumer holds or is being sent.
        self.known: set[str] = set(published)
        #: Tables that may have joined the publication after the slot's position: copied
        #: once every earlier run's note is read, unless the last one lists them.
        self.candidates: dict[str, catalog.TableInfo] = {}
        self.next_recheck = 0.0

    def connection_opened(self, conn: psycopg.Connection[Any]) -> None:
        """The setup connection was opened again: chunks are read on the new one."""
        self.snapshots.conn = conn

    # -- which tables ------------------------------------------------------------------

    def plan(
        self,
        held: Collection[str] | Mapping[str, Sequence[Any] | None] | None,
        tables: Sequence[catalog.TableInfo],
        added: Collection[str],
    ) -> None:
        """For an existing slot: copies the published ``tables`` the consumer does not
        hold: those not in ``held`` when given; else those this run's ``tables=`` added
        (``added``), and the candidates: those that may have joined the publication after
        the slot's position, decided once the stream has passed every earlier run's notes
        (copies an earlier run left unfinished come back with them)."""
        if held is None:
            if not self.snapshot:
                return  # changes only
            conn = self.setup.conn
            assert conn is not None
            joined = joined_since_slot(conn, self.slot, self.publications)
            for t in tables:
                if t.qualified in added:
                    # Added by this run's tables=: its rows are not in the slot's stream.
                    self.start(t)
                elif t.oid in joined:
                    self.candidates[t.qualified] = t
            return
        holding: dict[str, Any] = dict(held) if isinstance(held, Mapping) else dict.fromkeys(held)
        for t in tables:
            if t.qualified not in holding:
                self.start(t)
            elif holding[t.qualified] is not None:
                after = list(holding[t.qualified])
                self.start(t, after or None, whole=True)

    def start(
        self,
        table: catalog.TableInfo,
        after: Sequence[Any] | None = None,
        where: str | None = None,
        *,
        whole: bool = False,
    ) -> None:
        """Starts (or starts again) the incremental copy of ``table`` after key ``after``
        (of the rows the SQL condition ``where`` holds for); the slot's copy state records
        it at once. A table without a key is read whole under a lock with ``whole`` (a
        table read again: a rewrite, a resnapshot, a copy resumed), and refused with
        ConfigError without it (a table to copy first); on a standby, every table is."""
        if self.in_recovery:
            raise ConfigError(
                f"{table.qualified} would be read while streaming (an incremental snapshot),"
                " which writes watermarks into the WAL: a standby cannot. Stream from the"
                " primary to read it, or pass held_tables naming it if the consumer holds"
                " its rows"
            )
        self.snapshots.add(table, after, where, whole=whole)
        self.known.add(table.qualified)
        if self.snapshot:
            # snapshot=False streams changes only: no copy state kept in the WAL.
            self.copy_state.started(table.qualified, after)
            if self.copy_state.note_due():
                self.setup.run(self.write_note)

    def watch(self, conn: psycopg.Connection[Any], tables: Mapping[str, pa.Table]) -> None:
        """Tables added to the publication while streaming (a batch names a table not
        seen before, or every RECHECK_S), and resnapshot() requests."""
        # Taken first: the connection is busy while notifies() runs.
        for payload in [note.payload for note in conn.notifies(timeout=0)]:
            self._resnapshot_request(conn, payload)
        now = time.monotonic()
        if not (set(tables) - self.known) and now < self.next_recheck:
            return
        self.next_recheck = now + RECHECK_S
        for t in catalog.tables_of_publications(conn, self.publications):
            if t.qualified in self.known:
                continue
            # Known once handled: a lost connection on the way means another look later.
            if not self._listed(conn, t):
                # Published through FOR ALL TABLES or a schema, and new here: created while
                # the stream ran, so all its rows come through the stream.
                log.info("%s was created under the publication: streamed", t.qualified)
            else:
                try:
                    self.start(t)
                    log.info("%s was added to the publication: its rows follow", t.qualified)
                except ConfigError as e:
                    # A keyless table: streamed, not copied.
                    log.warning("%s; its changes are streamed, earlier rows are not", e)
            self.known.add(t.qualified)

    def _listed(self, conn: psycopg.Connection[Any], table: catalog.TableInfo) -> bool:
        """Whether one of the publications lists ``table`` (or a partitioned ancestor of
        it) by name: added by ALTER PUBLICATION ... ADD TABLE, rows from before included."""
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_publication_rel pr"
            " JOIN pg_publication p ON p.oid = pr.prpubid WHERE p.pubname = ANY(%(pubs)s)"
            " AND pr.prrelid IN (SELECT %(rel)s::oid"
            "   UNION SELECT relid FROM pg_partition_ancestors(%(rel)s)))",
            {"pubs": self.publications, "rel": table.oid},
        ).fetchone()
        return bool(row and row[0])

    def _resnapshot_request(self, conn: psycopg.Connection[Any], payload: str) -> None:
        try:
            wanted = set(json.loads(payload)["tables"])
        except (ValueError, KeyError, TypeError):
            log.warning("ignored a malformed resnapshot request")
            return
        for t in catalog.tables_of_publications(conn, self.publications):
            if t.qualified in wanted:
                self.start(t, whole=True)

    def signalled(
        self, conn: psycopg.Connection[Any], signals: Sequence[signals_mod.Signal]
    ) -> None:
        """Durable signals read from the WAL (:mod:`pgwire_cdc.signals`): a
        ``resnapshot`` reads its published tables again while the stream goes on."""
        wanted = {t: s.where for s in signals if s.kind == "resnapshot" for t in s.tables}
        found = set()
        for t in catalog.tables_of_publications(conn, self.publications):
            if t.qualified in wanted:
                where = wanted[t.qualified]
                log.info(
                    "%s is read again (a resnapshot signal%s)",
                    t.qualified,
                    ", the rows of a condition" if where else "",
                )
                self.start(t, where=where, whole=True)
                found.add(t.qualified)
        for name in sorted(set(wanted) - found):
            log.warning("a resnapshot signal names %s, which the publication lacks", name)

    def schema_changed(
        self, conn: psycopg.Connection[Any], changes: Sequence[SchemaChange]
    ) -> None:
        """A published table whose rows a DDL rewrote (``rewrite``: a volatile default, a
        type change with a conversion): their new values are not in the stream, so the
        table is read again while the stream goes on, its rows coming as ``read`` rows
        after the DDL (a table without a key: whole, under a lock)."""
        rewritten = {c.table for c in changes if c.kind == "rewrite"}
        if not rewritten:
            return
        for t in catalog.tables_of_publications(conn, self.publications):
            if t.qualified not in rewritten:
                continue
            log.info("%s was rewritten by a DDL: its rows are read again", t.qualified)
            self.start(t, whole=True)

    # -- the slot's record -------------------------------------------------------------

    def take_notes(self, conn: psycopg.Connection[Any], notes: list[tuple[int, bytes]]) -> None:
        """Copy-state notes from the stream: an earlier run's copies that did not finish
        are taken up again (:mod:`pgwire_cdc.copies`)."""
        if self.held_given or not self.snapshot:
            return  # the consumer says what it holds, or takes changes only
        wanted: dict[str, list[Any]] = {}
        for lsn, content in notes:
            wanted.update(self.copy_state.received(lsn, content, self.run_start))
        if not wanted:
            return
        published = {
            t.qualified: t for t in catalog.tables_of_publications(conn, self.publications)
        }
        for name, after in wanted.items():
            table = published.get(name)
            if table is None:
                log.info("%s, whose copy an earlier run began, is no longer published", name)
                continue
            log.info("resuming the copy of %s an earlier run began", name)
            try:
                self.start(table, after or None, whole=True)
            except ConfigError as e:
                log.warning("%s; its changes are streamed, earlier rows are not", e)

    def read_next(
        self, conn: psycopg.Connection[Any], tables: dict[str, pa.Table], handed_out: bool
    ) -> None:
        """Reads the next chunk when one is wanted, on ``conn``: the setup connection,
        which :meth:`connection_opened` keeps the chunks' own."""
        del conn  # the chunks' own, the same
        self.snapshots.read_next(tables, handed_out)

    def catch_up_due(self, stop: Stop, lsn: int) -> bool:
        """Whether the stream has passed every earlier run's note: a poll that returned
        something at or past the WAL position this run started at."""
        return not self.copy_state.caught_up and stop != Stop.PENDING and lsn >= self.run_start

    def catch_up(self, conn: psycopg.Connection[Any]) -> None:
        """Every earlier run's note is read: the candidates no earlier run knew of are
        copied."""
        wanted = self.copy_state.candidates_to_copy(self.candidates)
        for name in sorted(wanted):
            table = self.candidates[name]
            try:
                self.start(table)
                log.info(
                    "%s joined the publication after slot %s's position: copied",
                    name,
                    self.slot,
                )
            except ConfigError as e:
                log.warning("%s; its changes are streamed, earlier rows are not", e)
            del self.candidates[name]
        self.candidates = {}
        self.copy_state.caught_up = True

    def write_note(self, conn: psycopg.Connection[Any]) -> None:
        """Writes the copy state into the WAL ahead of the slot (:mod:`pgwire_cdc.copies`)."""
        row = conn.execute(
            "SELECT pg_logical_emit_message(false, %s, %s)::text",
            (copies.NOTE_PREFIX, self.copy_state.note()),
        ).fetchone()
        assert row is not None
        self.copy_state.noted(lsn_to_int(row[0]))

    def before_ack(self, seq: int, lsn: int, acked_lsn: int) -> int:
        """How far the slot may go when batch ``seq`` is acked at ``lsn``: the copy state
        is written ahead of it first when it changed; when that fails, the slot stays
        before the last note written, and the batches after it come again after a
        restart."""
        self.copy_state.acking(seq)
        if self.copy_state.note_due(lsn):
            self.setup.run(self.write_note)
            if self.copy_state.note_due(lsn):
                lsn = min(lsn, max(acked_lsn, self.copy_state.written_start or 0))
                log.warning(
                    "the slot's copy state could not be written; acked up to %s",
                    int_to_lsn(lsn),
                )
        return lsn

    def last_note(self) -> None:
        """A run that ends leaves the copy state and the tables the consumer holds in the
        WAL after its last ack, for the next run to read first."""
        if not self.snapshot or not self.setup.usable:
            return
        if self.in_recovery:
            return  # a standby's WAL takes no notes
        conn = self.setup.conn
        assert conn is not None
        # Candidates not decided yet are not known: the next run decides them.
        known = self.known - set(self.candidates)
        row = conn.execute(
            "SELECT pg_logical_emit_message(false, %s, %s)::text",
            (copies.NOTE_PREFIX, self.copy_state.note(known=known)),
        ).fetchone()
        assert row is not None


def joined_since_slot(
    conn: psycopg.Connection[Any], slot: str, publications: Sequence[str]
) -> set[int]:
    """The tables (OIDs, partitions included) that may have joined the publications
    after the slot's position: listed by a transaction (``pg_publication_rel``, or a
    schema's ``pg_publication_namespace``) not older than the slot's ``catalog_xmin``.
    Every transaction older than it ended before the slot's restart point, so a table
    listed by one was published while an earlier run streamed (and copied it then)."""
    listed = [
        "SELECT pr.prrelid AS oid FROM pg_publication_rel pr"
        " JOIN pg_publication p ON p.oid = pr.prpubid, s"
        " WHERE p.pubname = ANY(%(pubs)s) AND age(pr.xmin) <= age(s.catalog_xmin)"
    ]
    if conn.info.server_version >= 150000:
        listed.append(
            "SELECT c.oid FROM pg_publication_namespace pn"
            " JOIN pg_publication p ON p.oid = pn.pnpubid"
            " JOIN pg_class c ON c.relnamespace = pn.pnnspid AND c.relkind IN ('r', 'p'), s"
            " WHERE p.pubname = ANY(%(pubs)s) AND age(pn.xmin) <= age(s.catalog_xmin)"
        )
    query = (
        "WITH s AS (SELECT catalog_xmin FROM pg_replication_slots WHERE slot_name = %(slot)s),"
        f" joined AS ({' UNION '.join(listed)})"
        # pg_partition_tree() gives nothing for a table that is not partitioned.
        " SELECT oid FROM joined UNION SELECT t.relid FROM joined, pg_partition_tree(joined.oid) t"
    )
    rows = conn.execute(query, {"slot": slot, "pubs": list(publications)}).fetchall()
    return {int(r[0]) for r in rows}
