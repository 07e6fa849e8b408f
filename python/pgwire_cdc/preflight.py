"""What ``stream()`` checks before it changes anything on the server, and what
``pgwire-cdc check`` reports: one function, so both judge alike.

In this order:

1. the server: ``wal_level``, the role's REPLICATION attribute, a free WAL sender, and as
   many free replication slots as the run will hold at once (two for a new slot with an
   initial snapshot: the temporary snapshot slot and its permanent copy; one for a new
   slot without; none to resume);
2. the pgoutput protocol version asked for;
3. an existing slot: usable (not invalidated, logical, ``pgoutput``, this database) and not
   streamed from by another process;
4. inside one transaction: the publication DDL the run needs (``CREATE PUBLICATION`` or
   ``ALTER PUBLICATION ... ADD TABLE``), the replica identity of every table the
   publications then publish, and SELECT on them when an initial snapshot will read them.

The transaction commits only for ``stream()`` and only when nothing at all is in the way;
otherwise it rolls back. So a run that fails its checks leaves publications and slots as
they were: a table without a replica identity is never added to a publication (which would
make PostgreSQL reject the application's UPDATE and DELETE on it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from . import admin, catalog
from .admin import Problem

#: The oldest server (server_version_num) that speaks each pgoutput protocol version.
PROTO_MIN_SERVER = {1: 100000, 2: 140000, 3: 150000, 4: 160000}


@dataclass
class Preflight:
    """What the checks found."""

    info: admin.ServerInfo
    problems: list[Problem] = field(default_factory=list)
    #: The existing slot (None: the run creates it).
    slot: admin.SlotInfo | None = None
    #: Publications the run creates (none exist yet under these names).
    created: list[str] = field(default_factory=list)
    #: The tables each publication publishes after the run's DDL.
    published: dict[str, list[str]] = field(default_factory=dict)
    identities: list[admin.ReplicaIdentity] = field(default_factory=list)
    tables: list[catalog.TableInfo] = field(default_factory=list)

    def raise_if_blocked(self) -> None:
        """Raise the first problem's error with every problem's message."""
        admin.raise_problems(self.problems, f"{len(self.problems)} problems stop streaming")


def proto_problems(proto_version: int | None, info: admin.ServerInfo) -> list[Problem]:
    """A pgoutput protocol version the server does not speak yet."""
    if proto_version is None or info.version_num >= PROTO_MIN_SERVER[proto_version]:
        return []
    needed = PROTO_MIN_SERVER[proto_version]
    best = max(v for v, floor in PROTO_MIN_SERVER.items() if info.version_num >= floor)
    fix = f"pass proto_version={best} or leave it unset"
    return [
        Problem(
            "server",
            "proto_version",
            f"proto_version={proto_version} needs PostgreSQL {needed // 10000} or later, but"
            f" the server is {info.version}; {fix} (the highest version the server speaks is"
            " used), or upgrade the server",
            fix,
        )
    ]


def _missing_publication(conn: psycopg.Connection[Any], publication: str) -> Problem:
    name = admin.quote_ident(conn, publication)
    fix = f"CREATE PUBLICATION {name} FOR TABLE schema.table, ..."
    return Problem(
        "publication",
        publication,
        f"publication {name} does not exist; pass tables=[...] (--table) to create it for"
        f" those tables, or create it yourself ({fix})",
        fix,
    )


def run(
    conn: psycopg.Connection[Any],
    publications: Sequence[str],
    tables: Sequence[admin.TableSpec] | None = None,
    slot: str | None = None,
    *,
    snapshot: bool = True,
    proto_version: int | None = None,
    apply: bool = False,
) -> Preflight:
    """Every check of the module docs on an autocommit connection; with ``apply`` the
    publication DDL stays when nothing is in the way. ``slot=None``: a new slot."""
    existing = admin.get_slot(conn, slot) if slot is not None else None
    slots_needed = 0 if existing is not None else (2 if snapshot else 1)
    info, problems = admin.server_problems(conn, slots_needed=slots_needed)
    found = Preflight(info=info, problems=problems, slot=existing)
    found.problems += proto_problems(proto_version, info)
    if existing is not None:
        found.problems += admin.slot_problems(
            existing, database=conn.info.dbname, in_use=True, own_pid=conn.info.backend_pid
        )
    if not publications:
        return found
    with conn.transaction():
        _publications(
            conn, found, publications, tables, snapshot and existing is None, existing is None
        )
        if found.problems or not apply:
            raise psycopg.Rollback()
    return found


def _publications(
    conn: psycopg.Connection[Any],
    found: Preflight,
    publications: Sequence[str],
    tables: Sequence[admin.TableSpec] | None,
    snapshot: bool,
    new_slot: bool,
) -> None:
    """Step 4 of the module docs, inside the caller's transaction. A publication that
    publishes nothing stops a new slot (it would stream nothing); an existing slot still
    streams what it holds from before."""
    ready = []
    for publication in publications:
        exists = admin.publication_exists(conn, publication)
        if not exists and not tables:
            found.problems.append(_missing_publication(conn, publication))
            continue
        published, problems = admin.ensure_publication_problems(conn, publication, tables)
        if problems:
            found.problems += problems
            if exists:  # what it publishes as it is is still worth judging
                found.problems += admin.replica_identity_problems(conn, publication)[1]
            continue
        found.published[publication] = published
        if not exists:
            found.created.append(publication)
        if not found.published[publication] and new_slot:
            name = admin.quote_ident(conn, publication)
            fix = f"ALTER PUBLICATION {name} ADD TABLE schema.table"
            found.problems.append(
                Problem(
                    "publication",
                    publication,
                    f"publication {name} publishes no tables; {fix}",
                    fix,
                )
            )
            continue
        identities, problems = admin.replica_identity_problems(conn, publication)
        found.identities += identities
        found.problems += problems
        ready.append(publication)
    if not ready:
        return
    found.tables = catalog.tables_of_publications(conn, ready)
    if snapshot:
        role = catalog.current_role(conn)
        for name in catalog.unreadable_tables(conn, found.tables):
            fix = f"GRANT SELECT ON {name} TO {role}"
            found.problems.append(
                Problem(
                    "privilege",
                    name,
                    f"role {role} may not read {name}, which the initial snapshot copies; as"
                    f" the table's owner run {fix}, or pass snapshot=False (--no-snapshot) to"
                    " stream changes only",
                    fix,
                )
            )
