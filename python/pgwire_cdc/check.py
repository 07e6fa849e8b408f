"""``pgwire-cdc check``: everything a server, role, publication and slot need, as findings.

Each :class:`Finding` says what was checked, whether it is fine (``ok``), worth knowing
(``info``), worth mending though nothing stops (``warning``) or in the way (``problem``),
and for problems and warnings the change that fixes it (also alone, in ``fix``). The
problems are exactly those ``stream()`` would stop at (:mod:`pgwire_cdc.preflight`, run
here without keeping any change), all at once instead of stopping at the first. Whether
DDL capture (:mod:`pgwire_cdc.ddl_capture`) is installed is advice, never a problem.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import psycopg

from . import admin, ddl_capture, preflight


@dataclass
class Finding:
    level: str  # "ok" | "info" | "warning" | "problem"
    topic: str  # "server", "role", "publication", "table", "privilege", "slot", "ddl_capture"
    subject: str  # the server, "schema.table", a publication or a slot
    message: str
    fix: str | None = None  # the SQL or setting that fixes a problem

    def to_dict(self) -> dict[str, str | None]:
        return asdict(self)


def run_checks(
    conn: psycopg.Connection[Any],
    publication: str | Sequence[str] | None,
    tables: list[str] | None = None,
    slot: str | None = None,
    *,
    snapshot: bool = True,
    failover: bool = False,
) -> list[Finding]:
    """Every finding for this connection's server and database: what ``stream()`` with
    these arguments would find (nothing on the server is changed). With ``failover``,
    what ``stream(failover=True)`` needs is a problem when missing."""
    publications = [publication] if isinstance(publication, str) else list(publication or [])
    found = preflight.run(conn, publications, tables, slot, snapshot=snapshot)
    info = found.info
    out = [
        Finding(
            "ok" if not any(p.topic in ("server", "role") for p in found.problems) else "info",
            "server",
            f"PostgreSQL {info.version}",
            f"wal_level={info.wal_level}; {info.free_slots} free replication slot(s),"
            f" {info.free_senders} free WAL sender(s); role {info.user}",
        )
    ]
    if info.version_num < 150000:
        out.append(
            Finding(
                "info",
                "server",
                f"PostgreSQL {info.version}",
                "protocol versions 3-4 (two-phase and parallel streaming) need "
                "PostgreSQL 15 / 16; older servers use protocol 1-2",
            )
        )
    out += _idle_slot_timeout(conn)
    for name in found.created:
        out.append(
            Finding(
                "info",
                "publication",
                name,
                "does not exist yet: stream() creates it for "
                + ", ".join(found.published.get(name, [])),
            )
        )
    for name, published in found.published.items():
        if published and name not in found.created:
            out.append(Finding("ok", "publication", name, f"{len(published)} table(s)"))
    blocked = {p.subject for p in found.problems if p.topic == "table"}
    for ri in found.identities:
        if ri.table not in blocked:
            out.append(Finding("info", "table", ri.table, ri.meaning))
    if slot is not None:
        if found.slot is None:
            out.append(Finding("info", "slot", slot, "does not exist yet: stream() creates it"))
        elif not any(p.topic == "slot" for p in found.problems):
            lag = found.slot.lag_bytes
            out.append(
                Finding(
                    "ok",
                    "slot",
                    slot,
                    f"usable; {lag if lag is not None else '?'} bytes of WAL behind,"
                    f" wal_status={found.slot.wal_status}",
                )
            )
    out += _failover_findings(conn, found, failover)
    out.append(_ddl_capture_finding(conn))
    out += [_finding(p) for p in found.problems]
    return out


def _ddl_capture_finding(conn: psycopg.Connection[Any]) -> Finding:
    """Whether DDL capture (:mod:`pgwire_cdc.ddl_capture`) is installed and current: it is
    optional, so its absence is advice, and an installation to mend a warning."""
    subject = "DDL capture"
    fix = "pgwire-cdc ddl-capture install --dsn ... (as a superuser)"
    try:
        status = ddl_capture.status_on(conn)
    except psycopg.Error as e:
        return Finding(
            "info",
            "ddl_capture",
            subject,
            f"could not be checked: {e.diag.message_primary or e}; ddl-capture status as a"
            " role that may read schema pgwire_cdc tells",
        )
    if not status.installed:
        return Finding(
            "info",
            "ddl_capture",
            subject,
            "not installed: without it, a schema change that rewrites a table (ALTER COLUMN"
            " ... TYPE, ADD COLUMN with a volatile default) or drops a column and adds one of"
            " the same name makes the sink copy the table again; with it, each table DDL is"
            " written into the WAL beside the rows it changes",
            fix,
        )
    if not status.current:
        return Finding(
            "warning",
            "ddl_capture",
            subject,
            f"version {status.version} is installed, this pgwire_cdc writes version"
            f" {ddl_capture.DDL_CAPTURE_VERSION}: install again to upgrade it in place",
            fix,
        )
    if status.missing:
        return Finding(
            "warning",
            "ddl_capture",
            subject,
            "installed but incomplete (" + ", ".join(status.missing) + "): DDL is not"
            " recorded until it is installed again",
            fix,
        )
    if status.tables_undescribed:
        return Finding(
            "warning",
            "ddl_capture",
            subject,
            f"{status.tables_undescribed} table(s) have no stored description (the table of"
            " descriptions is UNLOGGED: a crash restart or a promoted standby empties it), so"
            " their next DDL is recorded without the columns before it: install again to"
            " describe them",
            fix,
        )
    return Finding(
        "ok",
        "ddl_capture",
        subject,
        f"version {status.version} installed: each table DDL is written into the WAL"
        f" ({status.tables_described} table(s) described)",
    )


def _idle_slot_timeout(conn: psycopg.Connection[Any]) -> list[Finding]:
    """PostgreSQL 18's ``idle_replication_slot_timeout``, when set: a slot without a
    consumer for that long is invalidated at the next checkpoint."""
    row = conn.execute(
        "SELECT setting::bigint FROM pg_settings WHERE name = 'idle_replication_slot_timeout'"
    ).fetchone()
    seconds = int(row[0]) if row and row[0] else 0
    if seconds <= 0:
        return []
    return [
        Finding(
            "info",
            "server",
            "idle_replication_slot_timeout",
            f"is {seconds} s: a slot no consumer streams from for longer is invalidated at"
            " the next checkpoint, and its consumer must start over with a new slot and a new"
            " snapshot. A running stream keeps its slot active; keep every pause of the"
            " consumer (deploys, maintenance, outages) shorter, or raise the setting (0: off)",
        )
    ]


def _finding(problem: admin.Problem) -> Finding:
    return Finding("problem", problem.topic, problem.subject, problem.message, problem.fix)


def _failover_findings(
    conn: psycopg.Connection[Any], found: preflight.Preflight, failover: bool
) -> list[Finding]:
    """Failover slots (PostgreSQL 17+): this server's part of the setup, what to check on
    the standbys (their settings cannot be read from here), and the slot's flag."""
    info = found.info
    out: list[Finding] = []
    if failover:
        out += [_finding(p) for p in admin.failover_problems(info, found.slot)]
    if info.version_num < admin.FAILOVER_MIN_SERVER:
        return out
    slot = found.slot
    if slot is not None:
        if slot.failover:
            out.append(Finding("ok", "slot", slot.slot_name, "a failover slot (failover = true)"))
        else:
            out.append(
                Finding(
                    "info",
                    "slot",
                    slot.slot_name,
                    "not a failover slot: a promoted standby will not have it; stream"
                    " --failover (stream(failover=True)) sets the flag when it starts",
                )
            )
    if info.in_recovery:
        row = conn.execute("SELECT current_setting('sync_replication_slots', true)").fetchone()
        out.append(
            Finding(
                "info",
                "server",
                "standby",
                f"a standby (sync_replication_slots = {row[0] if row else '?'}): failover"
                " slots are made on the primary and synchronized here; a slot made here"
                " cannot be one",
            )
        )
        return out
    row = conn.execute("SELECT current_setting('synchronized_standby_slots', true)").fetchone()
    standby_slots = (row[0] if row else "") or ""
    if not standby_slots:
        out.append(
            Finding(
                "problem" if failover else "info",
                "server",
                "synchronized_standby_slots",
                "is empty: a failover slot may deliver changes a standby has not received, and"
                " after promoting that standby those changes are gone from the server while"
                " the consumer holds them. Name the physical slots of the standbys that may be"
                " promoted",
                "ALTER SYSTEM SET synchronized_standby_slots = 'standby_slot'; SELECT"
                " pg_reload_conf()",
            )
        )
    else:
        out.append(
            Finding(
                "ok",
                "server",
                "synchronized_standby_slots",
                f"= {standby_slots}: failover slots deliver only what these standbys have."
                " On each standby check what this server cannot see: sync_replication_slots ="
                " on, hot_standby_feedback = on, primary_slot_name set, and a dbname in"
                " primary_conninfo; before relying on a failover, its pg_replication_slots"
                " must show the slot with synced = true and temporary = false",
            )
        )
    return out
