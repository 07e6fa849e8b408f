"""Schema changes without the DDL capture: a changed Relation checked against the catalog.

Where :mod:`pgwire_cdc.ddl_capture` is not installed, a ``stream()`` run learns of a DDL
only from the columns of the change tables that follow it (a pgoutput Relation message:
names and types, no attnums, no defaults, nothing of a rewrite). :class:`SchemaWatch`
keeps each table as the catalog described it (:func:`pgwire_cdc.ddl_capture.describe`:
columns by attnum, the value an added column's existing rows read, the relfilenode), and
when a segment of a change table shows other columns, reads the catalog again:

* the catalog has exactly the segment's columns: the two descriptions are compared by
  attnum (:func:`pgwire_cdc.schema_changes.changes_of`) and the changes are handed out
  as if captured, placed right before the segment's first row — an added column with its
  default, a rename, a drop and an add of the same name, a type change; a new relfilenode
  with changed columns is a rewrite (the table is read again; after a TRUNCATE that
  may read a table that needed no reading, never the other way round);
* the catalog has moved on (another DDL since, or the run resumed behind DDL made while
  it was stopped): what happened in between cannot be known, so the table is read again
  (a ``rewrite`` change carrying the catalog's description), and the lake drops the
  columns the catalog no longer has. The run logs why.

A DDL that no later change of the table follows is seen with that change.

A consumer that keeps a copy records the description its copy holds (the watch hands it
out, :meth:`SchemaWatch.take_shapes`: ``Batch.table_shapes``) and gives it back to the
next run (``held_shapes``), so DDL made while no run was streaming is measured against
what the copy holds, not against the catalog of the new run's start: the first change of
the table in the new run is checked as above; and where the two descriptions differ in
what no Relation message shows (a column dropped and added again with the same name and
type: the attnums differ), the table is read again at once (a table without a key whole,
under a lock: :func:`pgwire_cdc.incremental.read_whole`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import psycopg
import pyarrow as pa

from .ddl_capture import describe
from .schema_changes import VERSION, SchemaChange, changes_of
from .tables import METADATA_COLUMNS, parse_segment_key

log = logging.getLogger("pgwire_cdc")


def _columns(description: dict[str, Any]) -> list[tuple[str, int, int]]:
    """The columns pgoutput sends of a described table (not generated ones)."""
    return [
        (c["name"], int(c["type_oid"]), int(c["typmod"]))
        for c in description["columns"]
        if not c.get("generated")
    ]


def _told(
    name: str,
    oid: int,
    before: dict[str, Any],
    after: dict[str, Any],
    rewritten: bool,
    lsn: int,
    place: tuple[int, int] | None,
    unknown: str | None,
) -> list[SchemaChange]:
    """The schema changes the catalog tells, as the DDL capture's message would: from
    ``before`` to ``after``; ``unknown``: what happened cannot be known (why), so the
    table is read again (``rewritten``), which is logged as a warning."""
    doc = {"version": VERSION, "command_tag": "ALTER TABLE", "oid": oid}
    doc |= {"before": before, "after": after, "rewritten": rewritten}
    changes = changes_of(lsn, json.dumps(doc).encode(), place)
    if unknown is None:
        log.info(
            "%s: its columns changed without the DDL capture; from the catalog: %s",
            name,
            ", ".join(c.kind for c in changes) or "nothing to apply",
        )
    else:
        log.warning(
            "%s: its columns changed %s: the table is read again; install the DDL capture "
            "(pgwire-cdc ddl-capture install) to apply each DDL where it happened",
            name,
            unknown,
        )
    return changes


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two descriptions are of the same columns, by attnum, name and type. (A
    new relfilenode alone is no schema change: ``TRUNCATE``, whose effect the stream
    carries, ``VACUUM FULL`` and ``CLUSTER`` give one too.)"""

    def columns(d: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [(c["attnum"], c["name"], c["type_oid"], c["typmod"]) for c in d["columns"]]

    return columns(a) == columns(b)


def _segment_columns(segment: pa.Table) -> list[tuple[str, int, int]]:
    out = []
    for f in segment.schema:
        if f.name in METADATA_COLUMNS:
            continue
        meta = f.metadata or {}
        oid = int(meta.get(b"pg_type_oid", b"0"))
        typmod = int(meta.get(b"pg_type_modifier", b"-1"))
        out.append((f.name, oid, typmod))
    return out


class SchemaWatch:
    """The tables of one ``stream()`` run as the catalog last described them (see the
    module documentation). ``published``: each published table's OID and the names of
    its published columns, by ``"schema.table"``. A table published with a column list
    is not watched: its Relation messages leave columns out by design."""

    def __init__(
        self,
        published: dict[str, tuple[int, list[str]]],
        held: Mapping[str, dict[str, Any]] | None = None,
    ) -> None:
        self.published = dict(published)
        self.held = dict(held or {})
        self.known: dict[str, dict[str, Any]] = {}
        self.unwatched: set[str] = set()
        #: Changes to hand out before any segment's (a table read again at the start).
        self.pending: list[SchemaChange] = []
        # The descriptions learnt since the last take_shapes().
        self._shapes: dict[str, dict[str, Any]] = {}

    def start(self, conn: psycopg.Connection[Any]) -> None:
        """Describes every table now: the shape the first changes are compared with, or
        the one ``held`` records where they differ (see the module documentation)."""
        for name, (oid, columns) in self.published.items():
            found = describe(conn, oid)
            if found is None:
                continue
            if [c[0] for c in _columns(found)] != columns:
                self.unwatched.add(name)
                continue
            recorded = self.held.get(name)
            if recorded is None or _same(recorded, found):
                self.known[name] = self._shapes[name] = found
                continue
            self.known[name] = recorded
            if _columns(recorded) == _columns(found):
                why = (
                    "while no run was streaming, in a way its changes will not show (a "
                    "column dropped and added again)"
                )
                self.pending += _told(name, oid, recorded, found, True, 0, None, why)
                self.known[name] = self._shapes[name] = found

    def take_shapes(self) -> dict[str, dict[str, Any]]:
        """The descriptions learnt since the last call (all at the start): what a copy
        holds once the batch they come with is applied."""
        shapes, self._shapes = self._shapes, {}
        return shapes

    def check(
        self, conn: psycopg.Connection[Any], segments: Iterable[tuple[str, pa.Table]]
    ) -> list[SchemaChange]:
        """The schema changes before the segments (a poll's, in order) whose columns
        differ from what the table last had."""
        out, self.pending = self.pending, []
        for key, segment in segments:
            name, _ = parse_segment_key(key)
            if segment.num_rows == 0 or name in self.unwatched:
                continue
            columns = _segment_columns(segment)
            known = self.known.get(name)
            if known is not None and _columns(known) == columns:
                continue
            metadata = segment.schema.metadata or {}
            oid = int(metadata.get(b"pg_relation_oid", b"0"))
            current = describe(conn, oid) if oid else None
            if current is None:
                continue
            if known is None:
                # First seen (a table added later): the catalog's shape is the one to
                # compare with, unless the table is published with a column list.
                if _columns(current) == columns:
                    self.known[name] = self._shapes[name] = current
                else:
                    self.unwatched.add(name)
                continue
            self.known[name] = self._shapes[name] = current
            first = segment.slice(0, 1).to_pylist()[0]
            # Right before the segment's first row: after the ordinal before it (-1: before
            # the first of its transaction).
            place = (int(first["_commit_lsn"]), int(first["_tx_ordinal"]) - 1)
            lsn = int(first["_lsn"])
            if _columns(current) == columns:
                rewritten = current["relfilenode"] != known["relfilenode"]
                changes = _told(name, oid, known, current, rewritten, lsn, place, None)
            else:
                why = (
                    "and the catalog has changed again since (or the run resumed behind DDL "
                    "made while it was stopped)"
                )
                changes = _told(name, oid, current, current, True, lsn, place, why)
            out += changes
        return out
