"""``pgwire-cdc check``: everything a server, role, publication and slot need, as findings.

Each :class:`Finding` says what was checked, whether it is fine (``ok``), worth knowing
(``info``) or in the way (``problem``), and for problems the change that fixes it (also
alone, in ``fix``). The problems are exactly those ``stream()`` would stop at
(:mod:`pgwire_cdc.preflight`, run here without keeping any change), all at once instead
of stopping at the first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import psycopg

from . import admin, preflight


@dataclass
class Finding:
    level: str  # "ok" | "info" | "problem"
    topic: str  # "server", "role", "publication", "table", "privilege", "slot"
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
) -> list[Finding]:
    """Every finding for this connection's server and database: what ``stream()`` with
    these arguments would find (nothing on the server is changed)."""
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
    out += [_finding(p) for p in found.problems]
    return out


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
