"""``pgwire-cdc check``: everything a server, role, publication and slot need, as findings.

Each :class:`Finding` says what was checked, whether it is fine (``ok``), worth knowing
(``info``) or in the way (``problem``), and for problems the change that fixes it. The
checks are the ones ``stream()`` makes before it starts (:mod:`pgwire_cdc.admin`), run all
at once instead of stopping at the first.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import psycopg

from . import admin, catalog
from .errors import ConfigError, SlotError


@dataclass
class Finding:
    level: str  # "ok" | "info" | "problem"
    topic: str  # "server", "role", "publication", "table", "privilege", "slot"
    subject: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def _problems(error: ConfigError | SlotError) -> list[str]:
    """The lines of a multi-problem error ("header:\\n- one\\n- two")."""
    text = str(error)
    if "\n- " in text:
        return text.split("\n- ")[1:]
    return [text]


def run_checks(
    conn: psycopg.Connection[Any],
    publication: str | None,
    tables: list[str] | None = None,
    slot: str | None = None,
) -> list[Finding]:
    """Every finding for this connection's server and database."""
    out: list[Finding] = []
    try:
        info = admin.check_server(conn, new_slot=slot is None or admin.get_slot(conn, slot) is None)
        out.append(
            Finding(
                "ok",
                "server",
                f"PostgreSQL {info.version}",
                f"wal_level=logical; {info.free_slots} free replication slot(s), "
                f"{info.free_senders} free WAL sender(s); role {info.user} may replicate",
            )
        )
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
    except ConfigError as e:
        for line in _problems(e):
            out.append(Finding("problem", "server", "logical replication", line))
    if publication is None:
        return out
    try:
        names = admin.publication_tables(conn, publication)
    except ConfigError as e:
        names = []
        out.append(Finding("problem", "publication", publication, str(e)))
    if tables:
        missing = [t for t in tables if t not in names]
        for t in missing:
            out.append(
                Finding(
                    "problem",
                    "publication",
                    publication,
                    f"{t} is not published; ALTER PUBLICATION {publication} ADD TABLE {t} "
                    "(stream(tables=...) does this for you)",
                )
            )
    elif not names and not any(f.topic == "publication" for f in out):
        out.append(
            Finding(
                "problem",
                "publication",
                publication,
                f"publication {publication} has no tables; ALTER PUBLICATION {publication} "
                "ADD TABLE schema.table",
            )
        )
    if names:
        out.append(Finding("ok", "publication", publication, f"{len(names)} table(s)"))
        try:
            identities = admin.check_replica_identity(conn, publication)
            bad = False
        except ConfigError as e:
            bad = True
            for line in _problems(e):
                out.append(Finding("problem", "table", "replica identity", line))
            identities = admin.replica_identities(conn, names)
        if not bad:
            for ri in identities:
                out.append(Finding("info", "table", ri.table, ri.meaning))
        role = catalog.current_role(conn)
        for name in catalog.unreadable_tables(conn, catalog.published_tables(conn, publication)):
            out.append(
                Finding(
                    "problem",
                    "privilege",
                    name,
                    f"role {role} cannot SELECT {name} (the initial snapshot reads it); "
                    f"GRANT SELECT ON {name} TO {role}",
                )
            )
    if slot is not None:
        info_slot = admin.get_slot(conn, slot)
        if info_slot is None:
            out.append(Finding("info", "slot", slot, "does not exist yet: stream() creates it"))
        else:
            try:
                admin.check_slot_usable(info_slot, database=conn.info.dbname, plugin="pgoutput")
                lag = info_slot.lag_bytes
                out.append(
                    Finding(
                        "ok",
                        "slot",
                        slot,
                        f"usable; {lag if lag is not None else '?'} bytes of WAL behind, "
                        f"wal_status={info_slot.wal_status}",
                    )
                )
            except SlotError as e:
                out.append(Finding("problem", "slot", slot, str(e)))
    return out
