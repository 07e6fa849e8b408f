"""Setting up and inspecting a PostgreSQL server for logical replication (psycopg 3).

What PostgreSQL needs before a client can stream changes with ``pgoutput``:

- **wal_level = logical.** Only then does the WAL carry what logical decoding needs. It is
  a server start setting: ``postgresql.conf`` (or ``ALTER SYSTEM``) and a restart.
- **A replication slot.** A logical slot remembers how far its consumer has confirmed
  (``confirmed_flush_lsn``) and keeps the WAL from there (``restart_lsn``) and the catalog
  rows decoding needs. There are at most ``max_replication_slots`` slots (physical and
  logical together). A slot belongs to one database and one output plugin.
- **A WAL sender.** Every replication connection occupies one of ``max_wal_senders``.
- **A role with REPLICATION** (or a superuser) to open a replication connection.
- **A publication**: the set of tables (and of actions: insert, update, delete, truncate)
  whose changes ``pgoutput`` sends. ``FOR TABLE`` lists tables (PostgreSQL 15+: each with
  an optional column list and ``WHERE`` row filter), ``FOR ALL TABLES`` and ``FOR TABLES IN
  SCHEMA`` cover whole databases or schemas. With ``publish_via_partition_root`` the
  changes of partitions are reported as changes of their partitioned root.
- **A replica identity on every table whose updates and deletes are published.** It
  decides which old values an UPDATE or DELETE carries: ``DEFAULT`` the primary key,
  ``USING INDEX`` the columns of a unique index, ``FULL`` the whole old row, ``NOTHING``
  none. Without one (``NOTHING``, or ``DEFAULT`` on a table without a primary key)
  PostgreSQL *rejects* the UPDATE or DELETE on the source table while a publication
  publishes that action; the same happens when a publication's column list or row filter
  uses columns outside the identity.

Table names. A table is given as ``"schema.table"``, as a ``(schema, table)`` tuple, or as a
bare ``"table"``. Names are exact, the way pgoutput and the change tables spell them: an
unquoted part is *not* folded to lower case (``"public.Orders"`` is the table ``Orders``).
A part may be double-quoted to hold dots or quotes (``'"my.schema"."a""b"'``; ``""`` is a
quote inside quotes). A bare ``"table"`` is looked up like PostgreSQL looks up a quoted
name: the first schema of the session's ``search_path`` (``current_schemas(false)``) that
holds a relation of that name.

Every identifier reaches SQL through :class:`psycopg.sql.Identifier`; values are query
parameters. Error messages name objects and settings, never row values. Pass an autocommit
connection: on one that is not, the reads and the DDL join its open transaction and take
effect when the caller commits.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.rows import tuple_row

from .errors import ConfigError, Error, SlotError
from .lsn import lsn_to_int

if TYPE_CHECKING:
    from .ddl_capture import DdlCaptureStatus

__all__ = [
    "Problem",
    "Relation",
    "ReplicaIdentity",
    "ServerInfo",
    "SlotInfo",
    "TableSpec",
    "check_replica_identity",
    "check_server",
    "check_slot_usable",
    "copy_slot",
    "ddl_capture_status",
    "drop_slot",
    "ensure_publication",
    "ensure_publication_problems",
    "get_slot",
    "install_ddl_capture",
    "list_slots",
    "parse_table_name",
    "publication_exists",
    "publication_tables",
    "quote_ident",
    "raise_problems",
    "remove_ddl_capture",
    "replica_identities",
    "replica_identity_problems",
    "resolve_tables",
    "server_problems",
    "slot_problems",
]

#: A table: ``"schema.table"``, ``"table"`` or ``(schema, table)`` (see the module docs).
TableSpec = str | tuple[str, str]

Connection = psycopg.Connection[Any]


@dataclass(frozen=True)
class Problem:
    """One thing in the way of streaming, as the checks find it: ``stream()`` raises
    ``error`` with the messages of all problems found, ``pgwire-cdc check`` lists them.

    The ``*_problems`` functions return lists of these; the ``check_*`` functions and
    :func:`ensure_publication` raise them. ``message`` says what is wrong and how to fix
    it; ``fix`` is the fix alone (the SQL to run or the setting to change), for programs
    that act on it; ``cause`` is the database error behind it, if any."""

    topic: str  # "server", "role", "publication", "table", "privilege", "slot"
    subject: str  # what it is about: the server, "schema.table", a publication or slot name
    message: str
    fix: str
    error: type[Error] = ConfigError
    cause: BaseException | None = field(default=None, compare=False, repr=False)


def raise_problems(problems: Sequence[Problem], header: str) -> None:
    """Raise the error of the first problem with every problem's message (one line each
    under ``header`` when there are several)."""
    if not problems:
        return
    if len(problems) == 1:
        raise problems[0].error(problems[0].message)
    raise problems[0].error(f"{header}:\n- " + "\n- ".join(p.message for p in problems))


def _rows(conn: Connection, query: Any, params: Any = None) -> list[tuple[Any, ...]]:
    """Run a query and return its rows as tuples, whatever the connection's row factory."""
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query, params)
        return cur.fetchall() if cur.description is not None else []


def quote_ident(conn: Connection | None, *parts: str) -> str:
    """``"schema"."table"`` as PostgreSQL would quote it (for messages and advice)."""
    return sql.Identifier(*parts).as_string(conn)


_ident = quote_ident


def _columns_of(conn: Connection, relation: str) -> set[str]:
    """The column names of a system view or catalog (they differ between versions)."""
    return {
        name
        for (name,) in _rows(
            conn,
            "SELECT attname FROM pg_attribute"
            " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
            (relation,),
        )
    }


# -- server ---------------------------------------------------------------------------------


@dataclass
class ServerInfo:
    """What :func:`check_server` read from the server."""

    version_num: int  # server_version_num, e.g. 150018
    version: str  # server_version, e.g. "15.18 (Debian 15.18-0+deb12u1)"
    wal_level: str
    max_replication_slots: int
    slots_used: int  # rows of pg_replication_slots (physical and logical)
    max_wal_senders: int
    senders_used: int  # WAL sender processes running (pg_stat_replication)
    user: str  # session_user: the role a replication connection would log in as
    database: str
    is_superuser: bool
    has_replication: bool  # the role's REPLICATION attribute
    in_recovery: bool  # a standby

    @property
    def free_slots(self) -> int:
        return max(self.max_replication_slots - self.slots_used, 0)

    @property
    def free_senders(self) -> int:
        return max(self.max_wal_senders - self.senders_used, 0)


def check_server(
    conn: Connection,
    *,
    new_slot: bool = True,
    need_wal_sender: bool = True,
    slots_needed: int | None = None,
) -> ServerInfo:
    """Read the server's logical-replication readiness; raise :class:`ConfigError` if it
    cannot stream (the problems of :func:`server_problems`, all at once, one per line).

    ``slots_needed`` is how many replication slots the run creates (default: one when
    ``new_slot``); a new slot with an initial snapshot needs two at once, the temporary
    snapshot slot and its permanent copy.
    """
    info, problems = server_problems(
        conn,
        slots_needed=(1 if new_slot else 0) if slots_needed is None else slots_needed,
        need_wal_sender=need_wal_sender,
    )
    raise_problems(problems, "PostgreSQL is not ready for logical replication")
    return info


def server_info(conn: Connection) -> ServerInfo:
    """What :func:`server_problems` judges: settings, slots and senders in use, the role."""
    row = _rows(
        conn,
        "SELECT current_setting('server_version_num')::int,"
        " current_setting('server_version'),"
        " current_setting('wal_level'),"
        " current_setting('max_replication_slots')::int,"
        " (SELECT count(*) FROM pg_replication_slots)::int,"
        " current_setting('max_wal_senders')::int,"
        " (SELECT count(*) FROM pg_stat_replication)::int,"
        " r.rolname, current_database(), r.rolsuper, r.rolreplication, pg_is_in_recovery()"
        " FROM pg_roles r WHERE r.rolname = session_user",
    )[0]
    return ServerInfo(*row)


def server_problems(
    conn: Connection, *, slots_needed: int = 1, need_wal_sender: bool = True
) -> tuple[ServerInfo, list[Problem]]:
    """The server's readiness and what is in its way: ``wal_level`` is not ``logical``;
    fewer free replication slots than ``slots_needed``; no free WAL sender (when
    ``need_wal_sender``); a login role with neither REPLICATION nor SUPERUSER."""
    info = server_info(conn)
    problems: list[Problem] = []
    if info.wal_level != "logical":
        fix = (
            "set wal_level = logical in postgresql.conf (or run ALTER SYSTEM SET wal_level ="
            " logical) and restart the server"
        )
        problems.append(
            Problem("server", "wal_level", f"wal_level is '{info.wal_level}'; {fix}", fix)
        )
    if slots_needed and info.free_slots < slots_needed:
        fix = (
            "drop a slot that is no longer needed (pg_replication_slots lists them; SELECT"
            " pg_drop_replication_slot('name')) or raise max_replication_slots in"
            " postgresql.conf and restart the server"
        )
        need = (
            "a new slot with an initial snapshot needs 2 at once (the temporary snapshot slot"
            " and its permanent copy)"
            if slots_needed == 2
            else f"{slots_needed} needed"
        )
        free = (
            "no free replication slot"
            if info.free_slots == 0
            else (f"{info.free_slots} free replication slot(s)")
        )
        problems.append(
            Problem(
                "server",
                "max_replication_slots",
                f"{free}: {info.slots_used} of max_replication_slots ="
                f" {info.max_replication_slots} are in use and {need}; {fix}",
                fix,
            )
        )
    if need_wal_sender and info.senders_used >= info.max_wal_senders:
        fix = (
            "stop another replication client (pg_stat_replication lists them) or raise"
            " max_wal_senders in postgresql.conf and restart the server"
        )
        problems.append(
            Problem(
                "server",
                "max_wal_senders",
                f"no free WAL sender: {info.senders_used} of max_wal_senders ="
                f" {info.max_wal_senders} are in use; {fix}",
                fix,
            )
        )
    if not (info.is_superuser or info.has_replication):
        role = _ident(conn, info.user)
        fix = f"ALTER ROLE {role} REPLICATION"
        problems.append(
            Problem(
                "role",
                info.user,
                f"role {role} has neither the REPLICATION attribute nor superuser, so it"
                f" cannot open a replication connection; as a superuser run {fix}",
                fix,
            )
        )
    return info, problems


# -- table names ----------------------------------------------------------------------------


def parse_table_name(spec: TableSpec) -> tuple[str | None, str]:
    """``(schema or None, table)`` from a table spec (rules in the module docs).

    >>> parse_table_name('"my.schema"."a""b"')
    ('my.schema', 'a"b')
    >>> parse_table_name("Orders")
    (None, 'Orders')
    """
    if isinstance(spec, tuple):
        if len(spec) != 2 or not all(isinstance(p, str) and p for p in spec):
            raise ValueError(f"a table tuple is (schema, table), two non-empty strings: {spec!r}")
        return spec[0], spec[1]
    if not isinstance(spec, str):
        raise TypeError(f'a table is "schema.table" or (schema, table), not {type(spec).__name__}')
    parts: list[str] = []
    i, n = 0, len(spec)
    while True:
        if i < n and spec[i] == '"':
            pieces: list[str] = []
            j = i + 1
            while True:
                k = spec.find('"', j)
                if k < 0:
                    raise ValueError(f"unterminated quoted name in table {spec!r}")
                pieces.append(spec[j:k])
                if spec.startswith('""', k):
                    pieces.append('"')
                    j = k + 2
                    continue
                i = k + 1
                break
            part = "".join(pieces)
        else:
            dot = spec.find(".", i)
            end = n if dot < 0 else dot
            part = spec[i:end]
            if '"' in part:
                raise ValueError(f"stray quote in table {spec!r} (quote a whole part)")
            i = end
        if not part:
            raise ValueError(f"empty name in table {spec!r}")
        parts.append(part)
        if i == n:
            break
        if spec[i] != ".":
            raise ValueError(f"unexpected {spec[i]!r} after a quoted name in table {spec!r}")
        i += 1
    if len(parts) == 1:
        return None, parts[0]
    if len(parts) == 2:
        return parts[0], parts[1]
    raise ValueError(
        f"table {spec!r} has {len(parts)} dot-separated parts; a name containing a dot must"
        ' be double-quoted ("my.schema".table) or given as a (schema, table) tuple'
    )


@dataclass(frozen=True)
class Relation:
    """A table a spec resolved to (:func:`resolve_tables`)."""

    oid: int
    schema: str
    name: str
    relkind: str

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"


_RELKIND_NAMES = {
    "r": "table",
    "p": "partitioned table",
    "v": "view",
    "m": "materialized view",
    "f": "foreign table",
    "S": "sequence",
    "i": "index",
    "I": "partitioned index",
    "c": "composite type",
    "t": "TOAST table",
}


def _lookup(conn: Connection, specs: Sequence[TableSpec]) -> list[Relation | None]:
    """Each spec's relation (any kind), or None when there is none."""
    names = [parse_table_name(spec) for spec in specs]
    if not names:
        return []
    rows = _rows(
        conn,
        "SELECT s.ord, r.oid, r.nspname, r.relname, r.relkind"
        " FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS s(nsp, rel, ord)"
        " LEFT JOIN LATERAL ("
        "   SELECT c.oid, n.nspname, c.relname, c.relkind"
        "   FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        "   WHERE c.relname = s.rel AND CASE WHEN s.nsp IS NULL"
        "     THEN n.nspname = ANY (current_schemas(false)) ELSE n.nspname = s.nsp END"
        "   ORDER BY array_position(current_schemas(false), n.nspname::text) LIMIT 1"
        " ) r ON true ORDER BY s.ord",
        ([schema for schema, _ in names], [name for _, name in names]),
    )
    return [
        None if oid is None else Relation(oid, nsp, rel, kind) for _, oid, nsp, rel, kind in rows
    ]


def _describe_spec(conn: Connection | None, spec: TableSpec) -> str:
    schema, name = parse_table_name(spec)
    return _ident(conn, name) if schema is None else _ident(conn, schema, name)


def resolve_tables(conn: Connection, tables: Iterable[TableSpec]) -> list[Relation]:
    """The tables (plain or partitioned) the specs name, in order, without duplicates.

    Raises :class:`ConfigError` naming every spec that matches no relation, or a relation
    that is not a table (a view, a sequence, ...).
    """
    relations, problem = _resolve(conn, list(tables))
    if problem is not None:
        raise ConfigError(problem)
    return relations


def _resolve(conn: Connection, specs: Sequence[TableSpec]) -> tuple[list[Relation], str | None]:
    """:func:`resolve_tables` without raising: (the tables, None), or ([], what is wrong)."""
    found = _lookup(conn, specs)
    missing = [_describe_spec(conn, s) for s, rel in zip(specs, found, strict=True) if rel is None]
    if missing:
        return [], (
            "tables not found: "
            + ", ".join(missing)
            + '; name existing tables as "schema.table" (names are exact: an unquoted part'
            " is not folded to lower case; double-quote a part holding a dot) or as"
            " (schema, table) tuples; a bare name is looked up in the search_path"
        )
    relations = [rel for rel in found if rel is not None]
    wrong = [
        f"{_ident(conn, r.schema, r.name)} ({_RELKIND_NAMES.get(r.relkind, r.relkind)})"
        for r in relations
        if r.relkind not in ("r", "p")
    ]
    if wrong:
        return [], (
            "only tables and partitioned tables can be published; not tables: " + ", ".join(wrong)
        )
    unique: dict[int, Relation] = {}
    for rel in relations:
        unique.setdefault(rel.oid, rel)
    return list(unique.values()), None


# -- publications ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Publication:
    oid: int
    name: str
    all_tables: bool
    pubupdate: bool
    pubdelete: bool
    via_root: bool
    gencols: str | None  # 'n' none, 's' stored; None before PostgreSQL 18 (never published)


def _publication(conn: Connection, name: str) -> _Publication | None:
    gencols = "pubgencols" in _columns_of(conn, "pg_catalog.pg_publication")
    rows = _rows(
        conn,
        sql.SQL(
            "SELECT oid, pubname, puballtables, pubupdate, pubdelete, pubviaroot, {}"
            " FROM pg_publication WHERE pubname = %s"
        ).format(sql.SQL("pubgencols::text") if gencols else sql.SQL("NULL")),
        (name,),
    )
    return _Publication(*rows[0]) if rows else None


def publication_exists(conn: Connection, publication: str) -> bool:
    """Whether a publication of that name exists in the connection's database."""
    return _publication(conn, publication) is not None


def publication_tables(conn: Connection, publication: str) -> list[str]:
    """The tables a publication publishes, as ``"schema.table"`` exactly as pgoutput names
    them in its Relation messages (``pg_publication_tables``: expands ``FOR ALL TABLES`` and
    ``FOR TABLES IN SCHEMA``; with ``publish_via_partition_root`` a partitioned table appears
    itself, without it its leaf partitions do). Sorted. ConfigError if it does not exist."""
    if _publication(conn, publication) is None:
        raise ConfigError(f"publication {_ident(conn, publication)} does not exist")
    return [
        f"{schema}.{table}"
        for schema, table in _rows(
            conn,
            "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s"
            " ORDER BY schemaname, tablename",
            (publication,),
        )
    ]


def _uncovered(conn: Connection, pub: _Publication, relations: list[Relation]) -> list[Relation]:
    """The relations whose changes the publication does not publish yet: not listed
    themselves, no ancestor listed, and (PostgreSQL 15+) not in a published schema."""
    if pub.all_tables or not relations:
        return []
    schema_clause = (
        sql.SQL(
            " OR EXISTS (SELECT 1 FROM pg_publication_namespace pn"
            " WHERE pn.pnpubid = %(pub)s AND pn.pnnspid = ac.relnamespace)"
        )
        if conn.info.server_version >= 150000
        else sql.SQL("")
    )
    rows = _rows(
        conn,
        sql.SQL(
            "SELECT t.oid FROM unnest(%(oids)s::oid[]) WITH ORDINALITY AS t(oid, ord)"
            " WHERE NOT EXISTS ("
            "   SELECT 1 FROM (SELECT t.oid AS relid"
            "                  UNION SELECT relid::oid FROM pg_partition_ancestors(t.oid)) a"
            "   JOIN pg_class ac ON ac.oid = a.relid"
            "   WHERE EXISTS (SELECT 1 FROM pg_publication_rel pr"
            "                 WHERE pr.prpubid = %(pub)s AND pr.prrelid = a.relid){}"
            " ) ORDER BY t.ord"
        ).format(schema_clause),
        {"oids": [r.oid for r in relations], "pub": pub.oid},
    )
    wanted = {oid for (oid,) in rows}
    return [r for r in relations if r.oid in wanted]


def _run_ddl(
    conn: Connection, publication: str, statement: sql.Composed, action: str, advice: str
) -> Problem | None:
    """Run publication DDL in a transaction of its own; what stopped it, if anything."""
    try:
        with conn.transaction():
            conn.execute(statement)
    except pg_errors.InsufficientPrivilege as exc:
        ddl = statement.as_string(conn)
        return Problem(
            "publication",
            publication,
            f"permission denied to {action}: {exc.diag.message_primary}. {advice};"
            f" or have an owner or a superuser run: {ddl}",
            ddl,
            cause=exc,
        )
    except psycopg.DatabaseError as exc:
        detail = f" ({exc.diag.message_detail})" if exc.diag.message_detail else ""
        message = (
            f"could not {action}: {exc.diag.message_primary}{detail};"
            f" statement: {statement.as_string(conn)}"
        )
        return Problem("publication", publication, message, message, cause=exc)
    return None


def ensure_publication(
    conn: Connection, publication: str, tables: Iterable[TableSpec] | None = None
) -> list[str]:
    """Make sure ``publication`` exists and publishes ``tables``; return its tables.

    - missing publication, tables given: ``CREATE PUBLICATION "p" FOR TABLE ...``;
    - existing publication, tables given: ``ALTER PUBLICATION "p" ADD TABLE ...`` for the
      tables it does not publish yet (a table counts as published when it is listed, when a
      partitioned ancestor of it is listed, when its schema is published, or when the
      publication is ``FOR ALL TABLES``). Nothing is ever removed from a publication;
    - missing publication, no tables: :class:`ConfigError` (pass tables or create it);
    - a table that does not exist, or is not a table: :class:`ConfigError` naming them
      (before anything is changed);
    - missing privileges (CREATE on the database, ownership of the tables or the
      publication): :class:`ConfigError` with the statement to have an owner run.

    The DDL runs in its own transaction (``conn.transaction()``). Returns
    :func:`publication_tables` after the change.
    """
    published, problems = ensure_publication_problems(conn, publication, tables)
    if problems:  # one: what stopped it
        error = problems[0].error(problems[0].message)
        if problems[0].cause is None:
            raise error
        raise error from problems[0].cause
    return published


def ensure_publication_problems(
    conn: Connection, publication: str, tables: Iterable[TableSpec] | None = None
) -> tuple[list[str], list[Problem]]:
    """:func:`ensure_publication` reporting what is in its way instead of raising: (the
    publication's tables after the change, []), or ([], the problem that stopped it, with
    nothing changed)."""
    table_list = list(tables) if tables is not None else None
    relations: list[Relation] = []
    if table_list:
        relations, wrong = _resolve(conn, table_list)
        if wrong is not None:
            return [], [Problem("publication", publication, wrong, wrong)]
    pub = _publication(conn, publication)
    pub_ident = sql.Identifier(publication)
    targets = sql.SQL(", ").join(sql.Identifier(r.schema, r.name) for r in relations)
    problem = None
    if pub is None:
        if not relations:
            name = _ident(conn, publication)
            fix = f"CREATE PUBLICATION {name} FOR TABLE schema.table, ..."
            message = (
                f"publication {name} does not exist; pass tables=[...] to create it for those"
                f" tables, or create it yourself ({fix})"
            )
            return [], [Problem("publication", publication, message, fix)]
        role = _ident(conn, _rows(conn, "SELECT current_user")[0][0])
        database = _ident(conn, _rows(conn, "SELECT current_database()")[0][0])
        problem = _run_ddl(
            conn,
            publication,
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(pub_ident, targets),
            f"create publication {_ident(conn, publication)}",
            "creating a publication needs the CREATE privilege on the database"
            f" (GRANT CREATE ON DATABASE {database} TO {role}) and ownership of every"
            " table it lists",
        )
    else:
        todo = _uncovered(conn, pub, relations)
        if todo:
            problem = _run_ddl(
                conn,
                publication,
                sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
                    pub_ident,
                    sql.SQL(", ").join(sql.Identifier(r.schema, r.name) for r in todo),
                ),
                f"add tables to publication {_ident(conn, publication)}",
                "adding tables to a publication needs ownership of the publication and of"
                " every table added",
            )
    if problem is not None:
        return [], [problem]
    return publication_tables(conn, publication), []


# -- replica identity -----------------------------------------------------------------------

_IDENTITY_NAMES = {"d": "default", "i": "index", "f": "full", "n": "nothing"}


@dataclass
class ReplicaIdentity:
    """A table's replica identity and what it means for its UPDATE and DELETE events."""

    table: str  # "schema.table"
    schema: str
    name: str
    oid: int
    identity: str  # 'default' | 'index' | 'full' | 'nothing'
    key_columns: list[str]  # the old-image columns, in column order ('full': every column)
    has_primary_key: bool
    index_name: str | None  # the primary key ('default') or the identity index ('index')
    meaning: str  # what an UPDATE or DELETE on the table carries

    @property
    def supports_update_delete(self) -> bool:
        """False when PostgreSQL rejects UPDATE/DELETE while a publication publishes them
        (NOTHING, DEFAULT without a primary key, USING INDEX whose index was dropped)."""
        return self.identity == "full" or (
            self.identity in ("default", "index") and bool(self.key_columns)
        )


def _meaning(identity: str, key_columns: list[str], index_name: str | None) -> str:
    keys = ", ".join(key_columns)
    if identity == "full":
        return (
            "REPLICA IDENTITY FULL: every UPDATE and DELETE carries the full old row (all"
            " columns), so before-images are complete and unchanged TOAST values can be filled"
            " in from them"
        )
    if identity in ("default", "index") and key_columns:
        what = "primary key" if identity == "default" else f"replica identity index {index_name}"
        return (
            f"old image = the {what} ({keys}): a DELETE carries the old key values; an UPDATE"
            " carries them only when it changes a key column (otherwise no old image at all);"
            " other old values are never sent"
        )
    if identity == "default":
        why = "REPLICA IDENTITY DEFAULT without a primary key"
    elif identity == "index":
        why = "REPLICA IDENTITY USING INDEX whose index no longer exists"
    else:
        why = "REPLICA IDENTITY NOTHING"
    return (
        f"{why}: no old values are ever sent, and PostgreSQL rejects UPDATE and DELETE on the"
        " table while a publication publishes them"
    )


def _identities_by_oid(conn: Connection, oids: list[int]) -> list[ReplicaIdentity]:
    rows = _rows(
        conn,
        "SELECT c.oid, n.nspname, c.relname, c.relreplident,"
        "  EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),"
        "  k.indexname, ARRAY(SELECT a.attname::text FROM pg_attribute a"
        "   WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped"
        "   AND (c.relreplident = 'f' OR a.attnum = ANY (k.indkey)) ORDER BY a.attnum)"
        " FROM unnest(%s::oid[]) WITH ORDINALITY AS u(oid, ord)"
        " JOIN pg_class c ON c.oid = u.oid JOIN pg_namespace n ON n.oid = c.relnamespace"
        " LEFT JOIN LATERAL (SELECT ic.relname::text AS indexname, i.indkey::int2[] AS indkey"
        "   FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid WHERE i.indrelid = c.oid"
        "   AND ((c.relreplident = 'd' AND i.indisprimary)"
        "     OR (c.relreplident = 'i' AND i.indisreplident)) LIMIT 1) k ON true"
        " ORDER BY u.ord",
        (oids,),
    )
    out = []
    for oid, schema, name, ident, has_pk, index_name, keys in rows:
        identity = _IDENTITY_NAMES[ident]
        out.append(
            ReplicaIdentity(
                table=f"{schema}.{name}",
                schema=schema,
                name=name,
                oid=oid,
                identity=identity,
                key_columns=list(keys),
                has_primary_key=has_pk,
                index_name=index_name,
                meaning=_meaning(identity, list(keys), index_name),
            )
        )
    return out


def replica_identities(conn: Connection, tables: Iterable[TableSpec]) -> list[ReplicaIdentity]:
    """The replica identity of each table (see :class:`ReplicaIdentity`), in order."""
    return _identities_by_oid(conn, [r.oid for r in resolve_tables(conn, tables)])


_VARATTNO = re.compile(r":varattno (\d+)")


def check_replica_identity(conn: Connection, publication: str) -> list[ReplicaIdentity]:
    """Check that PostgreSQL will let UPDATE and DELETE run on the publication's tables,
    and return their replica identities: :class:`ConfigError` listing every problem of
    :func:`replica_identity_problems`."""
    identities, problems = replica_identity_problems(conn, publication)
    if problems:
        raise ConfigError(
            f"updates and deletes of publication {_ident(conn, publication)} cannot be"
            " replicated:\n- " + "\n- ".join(p.message for p in problems)
        )
    return identities


def replica_identity_problems(
    conn: Connection, publication: str
) -> tuple[list[ReplicaIdentity], list[Problem]]:
    """The replica identities of the publication's tables, and what would make PostgreSQL
    reject UPDATE or DELETE on them.

    Checked only when the publication publishes update or delete, on every table whose rows
    change (for a partitioned table: each leaf partition), the same rules PostgreSQL
    applies when the statement runs:

    - a replica identity exists (not NOTHING, not DEFAULT without a primary key, not USING
      INDEX of a dropped index);
    - a column list of the publication (PostgreSQL 15+) covers the identity columns, and is
      absent for REPLICA IDENTITY FULL;
    - a row filter (PostgreSQL 15+) uses identity columns only (any column under FULL);
    - PostgreSQL 18: generated columns in the identity are published
      (``publish_generated_columns = stored``, or named in the column list); virtual
      generated columns never are.

    With ``publish_via_partition_root`` the column list and row filter are the topmost
    published ancestor's. One problem per offending table and rule, with its fix.
    :class:`ConfigError` if the publication does not exist.
    """
    pub = _publication(conn, publication)
    if pub is None:
        raise ConfigError(f"publication {_ident(conn, publication)} does not exist")
    pub_q = _ident(conn, publication)
    leaves = [
        oid
        for (oid,) in _rows(
            conn,
            "SELECT DISTINCT l.oid FROM pg_publication_tables pt"
            " JOIN pg_namespace n ON n.nspname = pt.schemaname"
            " JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename"
            " CROSS JOIN LATERAL (SELECT c.oid WHERE c.relkind <> 'p'"
            "   UNION SELECT relid::oid FROM pg_partition_tree(c.oid)"
            "   WHERE isleaf AND c.relkind = 'p') l(oid)"
            " WHERE pt.pubname = %s ORDER BY l.oid",
            (publication,),
        )
    ]
    identities = _identities_by_oid(conn, leaves)
    if not (pub.pubupdate or pub.pubdelete):
        return identities, []
    actions = " and ".join(
        a for a, on in (("UPDATE", pub.pubupdate), ("DELETE", pub.pubdelete)) if on
    )
    has_lists = conn.info.server_version >= 150000
    problems: list[Problem] = []
    for ri in sorted(identities, key=lambda r: r.table):
        table_q = _ident(conn, ri.schema, ri.name)
        if not ri.supports_update_delete:
            if ri.identity == "nothing":
                state = "has REPLICA IDENTITY NOTHING"
                fix = (
                    f"ALTER TABLE {table_q} REPLICA IDENTITY FULL, or give it a primary key"
                    f" and ALTER TABLE {table_q} REPLICA IDENTITY DEFAULT"
                )
            elif ri.identity == "index":
                state = "has REPLICA IDENTITY USING INDEX but that index no longer exists"
                fix = (
                    f"ALTER TABLE {table_q} REPLICA IDENTITY FULL, or ALTER TABLE {table_q}"
                    " REPLICA IDENTITY USING INDEX with an existing unique index"
                )
            else:
                state = "has no primary key (REPLICA IDENTITY DEFAULT)"
                fix = (
                    f"ALTER TABLE {table_q} ADD PRIMARY KEY (...), or ALTER TABLE {table_q}"
                    " REPLICA IDENTITY FULL"
                )
            problems.append(
                Problem(
                    "table",
                    ri.table,
                    f"{table_q} {state}, so PostgreSQL rejects {actions} on it while"
                    f" publication {pub_q} publishes {actions}; fix: {fix}",
                    fix,
                )
            )
            continue
        if has_lists:
            found = _list_filter_problems(conn, pub, ri, table_q, pub_q, actions)
            problems += [Problem("table", ri.table, f"{m}; fix: {f}", f) for m, f in found]
    return identities, problems


def _list_filter_problems(
    conn: Connection,
    pub: _Publication,
    ri: ReplicaIdentity,
    table_q: str,
    pub_q: str,
    actions: str,
) -> list[tuple[str, str]]:
    """Column-list, row-filter and generated-column problems of one leaf table (PG15+):
    (what is wrong, the fix)."""
    # The relation whose column list / row filter applies: with publish_via_partition_root
    # the topmost ancestor in the publication, else the table itself.
    source = ri.oid
    if pub.via_root:
        rows = _rows(
            conn,
            sql.SQL(
                "SELECT a.relid::oid FROM pg_partition_ancestors(%(rel)s)"
                " WITH ORDINALITY AS a(relid, o)"
                " JOIN pg_class ac ON ac.oid = a.relid WHERE a.relid <> %(rel)s AND ("
                "  EXISTS (SELECT 1 FROM pg_publication_rel pr"
                "          WHERE pr.prpubid = %(pub)s AND pr.prrelid = a.relid)"
                "  OR EXISTS (SELECT 1 FROM pg_publication_namespace pn"
                "          WHERE pn.pnpubid = %(pub)s AND pn.pnnspid = ac.relnamespace))"
                " ORDER BY a.o DESC LIMIT 1"
            ),
            {"rel": ri.oid, "pub": pub.oid},
        )
        if rows:
            source = rows[0][0]
    rel_rows = _rows(
        conn,
        "SELECT CASE WHEN pr.prattrs IS NULL THEN NULL ELSE ARRAY("
        "   SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = pr.prrelid"
        "   AND a.attnum = ANY (pr.prattrs) ORDER BY a.attnum) END,"
        " pr.prqual::text FROM pg_publication_rel pr"
        " WHERE pr.prpubid = %s AND pr.prrelid = %s",
        (pub.oid, source),
    )
    column_list: list[str] | None = None
    filter_columns: list[str] = []
    if rel_rows and not pub.all_tables:
        column_list, qual = rel_rows[0]
        if qual:
            attnums = sorted({int(n) for n in _VARATTNO.findall(qual)})
            filter_columns = [
                name
                for (name,) in _rows(
                    conn,
                    "SELECT attname::text FROM pg_attribute WHERE attrelid = %s"
                    " AND attnum = ANY (%s::int2[]) ORDER BY attnum",
                    (source, attnums),
                )
            ]
    columns = _rows(
        conn,
        "SELECT attname::text, attgenerated::text FROM pg_attribute WHERE attrelid = %s"
        " AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (ri.oid,),
    )
    generated = {name: kind for name, kind in columns if kind}
    full = ri.identity == "full"
    problems: list[tuple[str, str]] = []
    where = "" if source == ri.oid else f" (set on {_describe_oid(conn, source)})"
    if column_list is not None:
        if full:
            problems.append(
                (
                    f"{table_q} has REPLICA IDENTITY FULL, which PostgreSQL does not allow"
                    f" together with the column list of publication {pub_q}{where}, so it"
                    f" rejects {actions} on it",
                    f"drop the column list (ALTER PUBLICATION {pub_q} SET TABLE {table_q}) or"
                    " give the table a key identity covered by the list",
                )
            )
        else:
            uncovered = [c for c in ri.key_columns if c not in column_list]
            if uncovered:
                problems.append(
                    (
                        f"the column list of publication {pub_q} for {table_q}{where} leaves"
                        f" out replica identity column(s) {', '.join(uncovered)}, so"
                        f" PostgreSQL rejects {actions} on it",
                        f"add them to the column list (ALTER PUBLICATION {pub_q} SET TABLE"
                        " ...) or drop the column list",
                    )
                )
    if filter_columns and not full:
        outside = [c for c in filter_columns if c not in ri.key_columns]
        if outside:
            problems.append(
                (
                    f"the row filter of publication {pub_q} for {table_q}{where} uses"
                    f" column(s) {', '.join(outside)} outside the replica identity, so"
                    f" PostgreSQL rejects {actions} on it",
                    f"ALTER TABLE {table_q} REPLICA IDENTITY FULL, or filter on identity"
                    " columns only",
                )
            )
    if pub.gencols is not None:
        identity_columns = [c for c, _ in columns] if full else ri.key_columns
        if column_list is not None:
            identity_columns = []  # covered by the column-list rule above
        virtual = [c for c in identity_columns if generated.get(c) == "v"]
        stored = [c for c in identity_columns if generated.get(c) == "s"]
        if stored and pub.gencols != "s":
            problems.append(
                (
                    f"the replica identity of {table_q} includes stored generated column(s)"
                    f" {', '.join(stored)} that publication {pub_q} does not publish, so"
                    f" PostgreSQL rejects {actions} on it",
                    f"ALTER PUBLICATION {pub_q} SET (publish_generated_columns = stored), or"
                    " change the replica identity",
                )
            )
        if virtual:
            problems.append(
                (
                    f"the replica identity of {table_q} includes virtual generated column(s)"
                    f" {', '.join(virtual)}, which logical replication cannot publish, so"
                    f" PostgreSQL rejects {actions} on it",
                    "change the replica identity",
                )
            )
    return problems


def _describe_oid(conn: Connection, oid: int) -> str:
    schema, name = _rows(
        conn,
        "SELECT n.nspname, c.relname FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = %s",
        (oid,),
    )[0]
    return _ident(conn, schema, name)


# -- replication slots ----------------------------------------------------------------------


@dataclass
class SlotInfo:
    """One row of ``pg_replication_slots``, LSNs as integers.

    ``lag_bytes`` is the WAL written since the consumer's last confirmed position
    (``pg_current_wal_lsn() - confirmed_flush_lsn``; on a standby the last replayed
    position), None for physical slots. Fields a server version lacks are None
    (``wal_status``/``safe_wal_size`` PG13+, ``two_phase`` PG14+, ``conflicting`` PG16+,
    ``invalidation_reason``/``failover``/``synced`` PG17+). ``connection_database`` is the
    database of the connection that read the row (a logical slot can only be used from its
    own). ``synced``: on a standby, a slot kept in step with the primary's failover slot of
    that name (it survives a promotion only once it is no longer ``temporary``).
    """

    slot_name: str
    plugin: str | None
    slot_type: str  # 'logical' | 'physical'
    database: str | None
    temporary: bool
    active: bool
    active_pid: int | None
    restart_lsn: int | None
    confirmed_flush_lsn: int | None
    lag_bytes: int | None
    wal_status: str | None  # reserved | extended | unreserved | lost
    safe_wal_size: int | None
    two_phase: bool | None
    conflicting: bool | None
    invalidation_reason: str | None
    failover: bool | None
    connection_database: str = field(default="", repr=False)
    synced: bool | None = None

    @property
    def invalidated(self) -> bool:
        """The slot can no longer be used: its WAL was removed (``wal_status = 'lost'``),
        or PostgreSQL invalidated it (``conflicting`` PG16+, ``invalidation_reason``
        PG17+)."""
        return (
            self.wal_status == "lost"
            or bool(self.conflicting)
            or self.invalidation_reason is not None
        )


_OPTIONAL_SLOT_COLUMNS = (
    "wal_status",
    "safe_wal_size",
    "two_phase",
    "conflicting",
    "invalidation_reason",
    "failover",
    "synced",
)


def _slot_query(conn: Connection, where: sql.Composable) -> sql.Composed:
    available = _columns_of(conn, "pg_catalog.pg_replication_slots")
    optional = [
        sql.SQL("s.{}").format(sql.Identifier(c)) if c in available else sql.SQL("NULL")
        for c in _OPTIONAL_SLOT_COLUMNS
    ]
    return sql.SQL(
        "SELECT s.slot_name::text, s.plugin::text, s.slot_type, s.database::text, s.temporary,"
        " s.active, s.active_pid, s.restart_lsn::text, s.confirmed_flush_lsn::text,"
        " pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()"
        "   ELSE pg_current_wal_lsn() END, s.confirmed_flush_lsn)::bigint,"
        " {}, current_database()::text"
        " FROM pg_replication_slots s {} ORDER BY s.slot_name"
    ).format(sql.SQL(", ").join(optional), where)


def _slot_from_row(row: tuple[Any, ...]) -> SlotInfo:
    (name, plugin, kind, database, temporary, active, pid, restart, confirmed, lag) = row[:10]
    wal_status, safe_wal_size, two_phase, conflicting, reason, failover, synced = row[10:17]
    current = row[17]
    return SlotInfo(
        slot_name=name,
        plugin=plugin,
        slot_type=kind,
        database=database,
        temporary=temporary,
        active=active,
        active_pid=pid,
        restart_lsn=None if restart is None else lsn_to_int(restart),
        confirmed_flush_lsn=None if confirmed is None else lsn_to_int(confirmed),
        lag_bytes=lag,
        wal_status=wal_status,
        safe_wal_size=safe_wal_size,
        two_phase=two_phase,
        conflicting=conflicting,
        invalidation_reason=reason,
        failover=failover,
        connection_database=current,
        synced=synced,
    )


def list_slots(conn: Connection) -> list[SlotInfo]:
    """Every replication slot of the server (all databases, physical too), by name."""
    return [_slot_from_row(r) for r in _rows(conn, _slot_query(conn, sql.SQL("")))]


def get_slot(conn: Connection, name: str) -> SlotInfo | None:
    """The slot called ``name``, or None."""
    rows = _rows(conn, _slot_query(conn, sql.SQL("WHERE s.slot_name = %s")), (name,))
    return _slot_from_row(rows[0]) if rows else None


def _missing_slot(name: str) -> SlotError:
    return SlotError(
        f"replication slot {name!r} does not exist (pg_replication_slots lists the slots)"
    )


def slot_in_use_error(name: str, pid: int | None) -> SlotError:
    who = f"the process with PID {pid}" if pid is not None else "another process"
    stop = (
        f", or end its connection with SELECT pg_terminate_backend({pid})"
        if pid is not None
        else ""
    )
    return SlotError(
        f"replication slot {name!r} is in use by {who} (a consumer is streaming from it, or"
        f" the session owning a temporary slot); stop that consumer first{stop}, then retry"
    )


def _privilege_error(exc: pg_errors.InsufficientPrivilege, action: str) -> ConfigError:
    return ConfigError(
        f"permission denied to {action}: {exc.diag.message_primary}; managing replication"
        " slots needs the REPLICATION attribute or superuser (ALTER ROLE ... REPLICATION)"
    )


def drop_slot(conn: Connection, name: str) -> None:
    """Drop a replication slot. :class:`SlotError` when it does not exist or another
    process is using it (the message says which and how to stop it). A temporary slot
    held by ``conn``'s own session can be dropped."""
    info = get_slot(conn, name)
    if info is None:
        raise _missing_slot(name)
    if info.active and info.active_pid != conn.info.backend_pid:
        raise slot_in_use_error(name, info.active_pid)
    try:
        _rows(conn, "SELECT pg_drop_replication_slot(%s)", (name,))
    except pg_errors.UndefinedObject as exc:
        raise _missing_slot(name) from exc
    except pg_errors.ObjectInUse as exc:
        now = get_slot(conn, name)
        raise slot_in_use_error(name, now.active_pid if now else None) from exc
    except pg_errors.InsufficientPrivilege as exc:
        raise _privilege_error(exc, f"drop replication slot {name!r}") from exc


def copy_slot(conn: Connection, src: str, dst: str, temporary: bool = False) -> SlotInfo:
    """Copy a logical slot (``pg_copy_logical_replication_slot``): the new slot starts at
    the source's position and plugin, so it sees the same changes from there on. A
    temporary copy lives as long as ``conn``'s session. Returns the new slot."""
    info = get_slot(conn, src)
    if info is None:
        raise _missing_slot(src)
    if info.slot_type != "logical":
        raise SlotError(f"replication slot {src!r} is a physical slot; only logical slots copy")
    if info.invalidated:
        raise SlotError(
            f"replication slot {src!r} is invalidated ({_invalid_reason(info)}); an"
            " invalidated slot cannot be copied"
        )
    if info.database != info.connection_database:
        raise SlotError(
            f"replication slot {src!r} belongs to database {info.database!r}; connect to"
            " that database to copy it (the copy is created in the connection's database)"
        )
    if get_slot(conn, dst) is not None:
        raise SlotError(f"replication slot {dst!r} already exists; choose another name")
    try:
        _rows(conn, "SELECT pg_copy_logical_replication_slot(%s, %s, %s)", (src, dst, temporary))
    except pg_errors.UndefinedObject as exc:
        raise _missing_slot(src) from exc
    except pg_errors.DuplicateObject as exc:
        raise SlotError(f"replication slot {dst!r} already exists; choose another name") from exc
    except pg_errors.InsufficientPrivilege as exc:
        raise _privilege_error(exc, f"copy replication slot {src!r}") from exc
    except pg_errors.ConfigurationLimitExceeded as exc:
        raise ConfigError(
            f"could not copy replication slot {src!r} to {dst!r}: {exc.diag.message_primary};"
            " the copy needs a free replication slot while the source still exists, so a new"
            " slot with an initial snapshot needs two: drop a slot that is no longer needed"
            " (SELECT pg_drop_replication_slot('name')) or raise max_replication_slots in"
            " postgresql.conf and restart the server, then run again",
            sqlstate=exc.sqlstate,
        ) from exc
    except psycopg.DatabaseError as exc:
        raise SlotError(
            f"could not copy replication slot {src!r} to {dst!r}: {exc.diag.message_primary}"
        ) from exc
    copied = get_slot(conn, dst)
    if copied is None:  # pragma: no cover - the server just created it
        raise _missing_slot(dst)
    return copied


#: The first PostgreSQL with failover slots (server_version_num).
FAILOVER_MIN_SERVER = 170000


def failover_problems(info: ServerInfo, slot: SlotInfo | None) -> list[Problem]:
    """Why ``stream(failover=True)`` cannot make or keep a failover slot here: a server
    before PostgreSQL 17, or a standby (only a primary's slots are synchronized)."""
    name = slot.slot_name if slot is not None else "failover"
    if info.version_num < FAILOVER_MIN_SERVER:
        return [
            Problem(
                "server",
                name,
                f"failover slots need PostgreSQL 17 or later (pg_replication_slots.failover,"
                f" synchronized to standbys); the server is {info.version}: upgrade it, or"
                " stream without failover (a promoted standby then has no slot, and the"
                " consumer starts over with a new slot and snapshot)",
                "stream without failover, or upgrade to PostgreSQL 17+",
                ConfigError,
            )
        ]
    if info.in_recovery:
        return [
            Problem(
                "server",
                name,
                "failover=True on a standby: PostgreSQL makes failover slots only on a primary"
                " (a standby's own slots are not synchronized onward); stream from the"
                " primary with failover, or from the standby without it",
                "stream from the primary, or without failover",
                ConfigError,
            )
        ]
    return []


def set_failover(dsn: str, name: str) -> None:
    """Makes slot ``name`` a failover slot: ``ALTER_REPLICATION_SLOT name (FAILOVER
    true)`` (PostgreSQL 17+) on a replication connection of its own. The slot must not be
    in use. A slot copied from a temporary one never has the flag, so ``stream()`` sets
    it after making the permanent slot."""
    from . import _native

    conn = _native.ReplicationConnection(dsn)
    try:
        conn.query(f'ALTER_REPLICATION_SLOT "{name}" (FAILOVER true)')
    except Error as exc:
        raise SlotError(
            f"could not make replication slot {name!r} a failover slot: {exc}",
            sqlstate=exc.sqlstate,
        ) from exc
    finally:
        conn.close()


def install_ddl_capture(dsn: str) -> DdlCaptureStatus:
    """Installs DDL capture (event triggers writing each table DDL into the WAL as a
    logical decoding message, prefix ``pgwire_cdc.ddl``) in the database of ``dsn``, or
    upgrades an older installation; idempotent. Needs a role that may create event
    triggers. See :mod:`pgwire_cdc.ddl_capture`."""
    from .ddl_capture import install_ddl_capture as install

    return install(dsn)


def remove_ddl_capture(dsn: str) -> None:
    """Removes DDL capture from the database of ``dsn``; nothing installed is fine. See
    :mod:`pgwire_cdc.ddl_capture`."""
    from .ddl_capture import remove_ddl_capture as remove

    remove(dsn)


def ddl_capture_status(dsn: str) -> DdlCaptureStatus:
    """Whether DDL capture is installed in the database of ``dsn`` and current. See
    :mod:`pgwire_cdc.ddl_capture`."""
    from .ddl_capture import ddl_capture_status as status

    return status(dsn)


def _invalid_reason(info: SlotInfo) -> str:
    if info.invalidation_reason == "idle_timeout":
        return (
            "invalidation_reason = idle_timeout: no consumer streamed from it for longer than"
            " the server's idle_replication_slot_timeout; keep the consumer's pauses shorter"
            " or raise that setting (0: off) before the new slot is made"
        )
    if info.invalidation_reason is not None:
        return f"invalidation_reason = {info.invalidation_reason}"
    if info.wal_status == "lost":
        return "wal_status = lost: WAL it still needed was removed"
    return "conflicting = true: it conflicted with recovery"


def check_slot_usable(
    info: SlotInfo | None, *, database: str | None = None, plugin: str = "pgoutput"
) -> None:
    """Raise :class:`SlotError` when ``info`` (:func:`get_slot`'s answer) cannot be
    streamed from: missing (None), invalidated (``wal_status = 'lost'``, ``conflicting``,
    ``invalidation_reason``), physical, another output plugin than ``plugin``, or another
    database than ``database`` (default: the database of the connection that read
    ``info``). A slot another consumer is using is usable once it stops: see
    :func:`slot_problems` for that check."""
    if info is None:
        raise SlotError(
            "replication slot does not exist (get_slot() found none; pg_replication_slots"
            " lists the slots): stream() creates it with an initial snapshot"
        )
    raise_problems(slot_problems(info, database=database, plugin=plugin), "slot unusable")


def slot_problems(
    info: SlotInfo,
    *,
    database: str | None = None,
    plugin: str = "pgoutput",
    in_use: bool = False,
    own_pid: int | None = None,
) -> list[Problem]:
    """Why ``info`` cannot be streamed from (see :func:`check_slot_usable`); with
    ``in_use``, also a slot another process (not ``own_pid``) is streaming from."""
    name = info.slot_name
    expected_db = database if database is not None else info.connection_database

    def problem(message: str, fix: str) -> list[Problem]:
        return [Problem("slot", name, message, fix, SlotError)]

    if info.invalidated:
        fix = f"SELECT pg_drop_replication_slot('{name}')"
        return problem(
            f"replication slot {name!r} is invalidated ({_invalid_reason(info)}): changes it"
            " has not delivered are gone from it; drop it (pgwire_cdc.admin.drop_slot, or"
            f" {fix}) and start again with a new slot and a fresh initial snapshot",
            fix,
        )
    if info.slot_type != "logical":
        return problem(
            f"replication slot {name!r} is a physical slot; logical decoding needs a logical"
            f" slot with the {plugin} plugin: use another slot name",
            "use another slot name",
        )
    if info.plugin != plugin:
        return problem(
            f"replication slot {name!r} uses the output plugin {info.plugin!r}, not {plugin!r};"
            " use another slot name, or drop this slot if nothing else consumes it",
            "use another slot name",
        )
    if info.database != expected_db:
        return problem(
            f"replication slot {name!r} belongs to database {info.database!r}, not"
            f" {expected_db!r}; a logical slot decodes only its own database: connect to"
            f" {info.database!r} or use another slot name",
            f"connect to database {info.database!r} or use another slot name",
        )
    if in_use and info.active and info.active_pid != own_pid:
        error = slot_in_use_error(name, info.active_pid)
        fix = (
            f"stop that consumer, or SELECT pg_terminate_backend({info.active_pid})"
            if info.active_pid is not None
            else "stop that consumer"
        )
        return problem(str(error), fix)
    return []
