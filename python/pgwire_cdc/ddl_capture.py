"""Opt-in DDL capture: event triggers that write each table DDL into the WAL.

pgoutput's ``Relation`` message says which columns a table has now, in attnum order, but
not what happened to get there: a renamed column looks like a dropped one plus an added
one, a column dropped and added again under the same name looks unchanged, the value
existing rows read for a column added with a constant default (``attmissingval``) is not
sent, and a table rewrite (``ALTER COLUMN ... TYPE``, a volatile default) produces no
decoded rows at all. Event triggers see these: installed with :func:`install_ddl_capture`
(``pgwire-cdc ddl-capture install``), each DDL on a table writes one transactional logical
decoding message (``pg_logical_emit_message(true, 'pgwire_cdc.ddl', ...)``) inside the
DDL's own transaction, so a consumer decodes it at its place among the transaction's rows,
in commit order, and never for a DDL that rolled back. Messages are written only when DDL
runs; nothing is added to the path of ordinary writes.

What the installation holds, all in schema ``pgwire_cdc``:

- ``ddl_tables (relid oid primary key, description jsonb)``: the last description of each
  ordinary or partitioned table (``relkind`` ``r``, ``p``; temporary tables and the system
  schemas left out), filled at install. The table is UNLOGGED, so logical decoding never
  sees its rows, not even through a ``FOR ALL TABLES`` publication; the price is that a
  crash restart or a promoted standby finds it empty. :func:`ddl_capture_status` counts the
  tables without a description and ``pgwire-cdc check`` warns; installing again fills it.
- ``describe_table(oid) returns jsonb``: ``schema``, ``name``, ``relfilenode``,
  ``replica_identity`` (``d``, ``f``, ``i``, ``n``), ``key`` (the replica identity's
  columns in attnum order: the primary key's for ``d``, the index's for ``i``, none
  otherwise) and ``columns``, each with ``attnum``, ``name``, ``type`` (``format_type``),
  ``type_oid``, ``typmod``, ``base_type_oid`` and ``base_typmod`` (a domain's base type,
  the column's own type otherwise), ``not_null``, ``has_missing``, ``missing``, ``default``
  (``pg_get_expr``) and ``generated`` (``attgenerated``, ``''`` when none), dropped columns
  left out. ``missing`` is the text of the value existing rows read for an added column,
  exactly as the type's output function prints it; the function runs under the session
  settings of :data:`pgwire_cdc.connection.SESSION_SETTINGS` (UTC, ISO dates), which it
  sets for itself, so the text is what pgoutput sends for the same value to a pgwire_cdc
  session. It also runs with ``search_path = pg_catalog``: types and functions outside it
  are named with their schema (``public.mood``, ``nextval('public.t_id_seq'::regclass)``)
  whatever the search_path of the session that ran the DDL.
- ``ddl_capture_version()``: :data:`DDL_CAPTURE_VERSION` of the installed objects.
- ``ddl_message_end``, a sequence the triggers ``setval`` right after each message: its
  WAL record keeps the message apart from the next row change (see ``_EMIT``).
- Event triggers ``pgwire_cdc_ddl_rewrite`` (``table_rewrite``: notes the table and
  ``pg_event_trigger_table_rewrite_reason()`` in a transaction-local setting),
  ``pgwire_cdc_ddl_end`` (``ddl_command_end``: one message per table the command created
  or altered, and per inheritance child or partition it changed along with its parent,
  then the new description stored) and ``pgwire_cdc_ddl_drop``
  (``sql_drop``: one message per dropped table, its description removed). Their functions
  run as the installer (SECURITY DEFINER, ``search_path`` pinned to ``pg_catalog``) and
  catch every error of their own as a WARNING: a failing trigger never fails the user's
  DDL, it only leaves that DDL unrecorded.

A message is JSON::

    {"version": 1, "event": "ddl_command_end" | "sql_drop", "command_tag": "ALTER TABLE",
     "command": <current_query()>, "oid": <the table's oid>,
     "before": <its stored description, or null>, "after": <describe_table(oid), or null
     for a drop>, "rewritten": <bool>, "rewrite_reason": <the rewrite reason bits or null>}

``rewrite_reason`` holds PostgreSQL's ``AT_REWRITE_*`` bits: 1 persistence, 2 a default
value, 4 a column's type or ``USING``, 8 the access method.

Event triggers need a superuser to create them (managed services grant it to their admin
role, e.g. ``rds_superuser``). They fire for the DDL of every role, but not for
``VACUUM FULL``, ``CLUSTER`` or ``TRUNCATE`` (which give a table a new ``relfilenode``
without DDL), not in single-user mode and not while ``event_triggers`` is off
(PostgreSQL 17+).

See https://www.postgresql.org/docs/current/event-triggers.html and
https://www.postgresql.org/docs/current/functions-admin.html#FUNCTIONS-REPLICATION.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import tuple_row

from .connection import SESSION_SETTINGS, connect
from .errors import ConfigError

__all__ = [
    "DDL_CAPTURE_VERSION",
    "DDL_PREFIX",
    "DdlCaptureStatus",
    "ddl_capture_status",
    "describe",
    "install_ddl_capture",
    "remove_ddl_capture",
    "status_on",
]

#: The version of the installed SQL objects and of the messages' shape; installing again
#: replaces an older version in place.
DDL_CAPTURE_VERSION = 1

#: The prefix of the DDL messages.
DDL_PREFIX = "pgwire_cdc.ddl"

SCHEMA = "pgwire_cdc"

#: The event triggers, by the event each fires on.
EVENT_TRIGGERS = {
    "pgwire_cdc_ddl_end": "ddl_command_end",
    "pgwire_cdc_ddl_drop": "sql_drop",
    "pgwire_cdc_ddl_rewrite": "table_rewrite",
}

#: Install and remove take this transaction-level advisory lock, so that two at once
#: run one after the other (the key is arbitrary but fixed).
_LOCK_KEY = 0x70677763_64646C00  # "pgwcddl\0"

Connection = psycopg.Connection[Any]


@dataclass(frozen=True)
class DdlCaptureStatus:
    """What :func:`ddl_capture_status` finds in a database.

    ``installed``: the objects of some version are there (``version`` is theirs);
    ``current``: that version is this package's :data:`DDL_CAPTURE_VERSION`;
    ``tables_described``: the rows of ``pgwire_cdc.ddl_tables``. ``missing`` names the
    parts of an installation that are gone or disabled (an event trigger dropped or
    disabled, the table dropped), ``tables_undescribed`` the tables DDL capture covers
    that have no stored description (after a crash restart or a promotion: the table is
    UNLOGGED). Installing again mends both."""

    installed: bool
    version: int | None
    current: bool
    tables_described: int
    missing: tuple[str, ...] = ()
    tables_undescribed: int = 0

    @property
    def healthy(self) -> bool:
        """Installed, current, complete, and every covered table described."""
        return self.current and not self.missing and self.tables_undescribed == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "installed": self.installed,
            "version": self.version,
            "current": self.current,
            "tables_described": self.tables_described,
            "missing": list(self.missing),
            "tables_undescribed": self.tables_undescribed,
        }


# -- the SQL ---------------------------------------------------------------------------


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


#: describe_table's own settings: the output functions print ``missing`` and the
#: constants of ``default`` as they print values in a pgwire_cdc session (and so as
#: pgoutput sends them to it), whatever the session running the DDL has set.
_OUTPUT_SETTINGS = "\n".join(
    f"  SET {name} = {_literal(value)}"
    for name, value in SESSION_SETTINGS.items()
    if name != "client_encoding"
)

#: The tables DDL capture covers (``c`` is a pg_class row).
_COVERED = (
    "c.relkind IN ('r', 'p') AND c.relpersistence <> 't'"
    f" AND c.relnamespace NOT IN ('pg_catalog'::regnamespace,"
    f" 'information_schema'::regnamespace, 'pg_toast'::regnamespace,"
    f" '{SCHEMA}'::regnamespace)"
)

#: The description of the table ``rel`` as JSON: the body of ``describe_table`` and, with
#: ``rel`` a query parameter, what :func:`describe` runs where the capture is not installed.
_DESCRIBE_SELECT = """SELECT jsonb_build_object(
  'schema', n.nspname,
  'name', c.relname,
  'relfilenode', c.relfilenode::bigint,
  'replica_identity', c.relreplident::text,
  'key', coalesce((
    SELECT jsonb_agg(a.attname::text ORDER BY a.attnum)
    FROM pg_index i
    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
    WHERE i.indrelid = c.oid
      AND CASE c.relreplident WHEN 'd' THEN i.indisprimary
                              WHEN 'i' THEN i.indisreplident
                              ELSE false END
  ), '[]'::jsonb),
  'columns', coalesce((
    SELECT jsonb_agg(jsonb_build_object(
      'attnum', a.attnum,
      'name', a.attname::text,
      'type', format_type(a.atttypid, a.atttypmod),
      'type_oid', a.atttypid::bigint,
      'typmod', a.atttypmod,
      'base_type_oid', base.oid::bigint,
      'base_typmod', base.typmod,
      'not_null', a.attnotnull,
      'has_missing', a.atthasmissing,
      -- attmissingval is a one-element array of the column's type (its element type an
      -- array type for an array column); array_to_string prints that element with the
      -- element type's output function, without the array's quoting.
      'missing', CASE WHEN a.atthasmissing THEN array_to_string(a.attmissingval, '') END,
      'default', pg_get_expr(d.adbin, d.adrelid),
      'generated', a.attgenerated::text
    ) ORDER BY a.attnum)
    FROM pg_attribute a
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    -- A domain's base type and modifier, through domains over domains (as the server's
    -- getBaseTypeAndTypmod): the type the column's values are sent in.
    CROSS JOIN LATERAL (
      WITH RECURSIVE chain (oid, typmod, depth) AS (
        SELECT a.atttypid, a.atttypmod, 0
        UNION ALL
        SELECT t.typbasetype, t.typtypmod, chain.depth + 1
        FROM chain JOIN pg_type t ON t.oid = chain.oid
        WHERE t.typtype = 'd'
      )
      SELECT chain.oid, chain.typmod FROM chain ORDER BY chain.depth DESC LIMIT 1
    ) base
    WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  ), '[]'::jsonb)
)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = {rel}"""

_DESCRIBE_TABLE = f"""
CREATE OR REPLACE FUNCTION {SCHEMA}.describe_table(rel oid) RETURNS jsonb
  LANGUAGE sql STABLE
  SET search_path = pg_catalog, pg_temp
{_OUTPUT_SETTINGS}
AS $body$
{_DESCRIBE_SELECT.format(rel="rel")}
$body$
"""

_VERSION_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {SCHEMA}.ddl_capture_version() RETURNS integer
  LANGUAGE sql IMMUTABLE
AS $body$ SELECT {DDL_CAPTURE_VERSION} $body$
"""

#: The message every trigger writes, from its local variables, and a WAL record after it.
#: Logical decoding files a transactional message under the LSN where its record *ends*
#: and a row change under the LSN where its record starts, and merges a transaction's
#: subtransactions by those LSNs at commit. The message is written inside a
#: subtransaction (the trigger's exception block), so when the user's next row change
#: started right where the message ended, the two would tie and the row could be decoded
#: first. ``setval`` on a sequence of our own writes a WAL record that decoding ignores
#: (sequences are not decoded, nor published by FOR ALL TABLES) and puts space between.
_EMIT = f"""
        PERFORM pg_logical_emit_message(true, {_literal(DDL_PREFIX)}, json_build_object(
          'version', {DDL_CAPTURE_VERSION},
          'event', tg_event,
          'command_tag', tg_tag,
          'command', current_query(),
          'oid', rel::bigint,
          'before', before,
          'after', after,
          'rewritten', reason IS NOT NULL,
          'rewrite_reason', reason
        )::text);
        PERFORM setval('{SCHEMA}.ddl_message_end'::regclass, 1);"""

_WARN = "RAISE WARNING 'pgwire_cdc DDL capture: %', SQLERRM;"


def _guarded(code: str) -> str:
    """``code`` in a block that turns any error into a WARNING: an error raised in an
    event trigger would abort the user's DDL. The block is a subtransaction, so what the
    code wrote before the error (a message, a stored description) is undone with it."""
    body = code.strip("\n")
    return f"""
  BEGIN
{body}
  EXCEPTION WHEN OTHERS THEN
    {_WARN}
  END;"""


def _trigger_function(name: str, variables: str, *blocks: str) -> str:
    """An event trigger function running as its owner with ``search_path`` pinned to
    ``pg_catalog``, each block guarded on its own."""
    return f"""
CREATE OR REPLACE FUNCTION {SCHEMA}.{name}() RETURNS event_trigger
  LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
{variables}
BEGIN{"".join(_guarded(block) for block in blocks)}
END
$body$
"""


#: The rewrite notes of the current command: {"<oid>": reason bits}, or '' / unset.
_NOTES = "coalesce(nullif(current_setting('pgwire_cdc.rewritten', true), ''), '{}')::jsonb"

_ON_REWRITE = _trigger_function(
    "on_table_rewrite",
    "  notes jsonb;\n  rel text;",
    f"""
    notes := {_NOTES};
    rel := pg_event_trigger_table_rewrite_oid()::text;
    notes := notes || jsonb_build_object(
      rel, coalesce((notes ->> rel)::integer, 0) | pg_event_trigger_table_rewrite_reason());
    PERFORM set_config('pgwire_cdc.rewritten', notes::text, true);""",
)

_ON_DDL_END = _trigger_function(
    "on_ddl_command_end",
    "  notes jsonb;\n  rel oid;\n  reported boolean;\n  before jsonb;\n  after jsonb;"
    "\n  reason integer;",
    f"""
    notes := {_NOTES};
    -- The tables the command reports, then their inheritance children and partitions (an
    -- ALTER TABLE recurses into them but reports the parent alone), and any table it
    -- rewrote: parents before children, in the order of the command's parts.
    FOR rel, reported IN
      WITH RECURSIVE named AS (
        SELECT cmd.objid AS oid, min(cmd.ordinality) AS pos
        FROM pg_event_trigger_ddl_commands() WITH ORDINALITY AS cmd
        WHERE cmd.classid = 'pg_class'::regclass
          AND cmd.object_type IN ('table', 'table column')
        GROUP BY cmd.objid
      ), tree AS (
        SELECT named.oid, named.pos, 0 AS depth FROM named
        UNION ALL
        SELECT i.inhrelid, tree.pos, tree.depth + 1
        FROM tree JOIN pg_inherits i ON i.inhparent = tree.oid
      ), candidates AS (
        SELECT tree.oid, tree.pos, tree.depth FROM tree
        UNION ALL
        SELECT k::oid, 2147483647, 0 FROM jsonb_object_keys(notes) AS k
      )
      SELECT c.oid, bool_or(x.depth = 0 AND x.pos < 2147483647)
      FROM candidates x JOIN pg_class c ON c.oid = x.oid
      WHERE {_COVERED}
      GROUP BY c.oid
      ORDER BY min(x.pos), min(x.depth), c.oid
    LOOP
      -- One table's failure leaves the others' messages standing.
      BEGIN
        SELECT t.description INTO before FROM {SCHEMA}.ddl_tables t WHERE t.relid = rel;
        after := {SCHEMA}.describe_table(rel);
        reason := (notes ->> rel::text)::integer;
        IF reported OR reason IS NOT NULL OR after IS DISTINCT FROM before THEN
          {_EMIT}
          INSERT INTO {SCHEMA}.ddl_tables AS t (relid, description) VALUES (rel, after)
            ON CONFLICT (relid) DO UPDATE SET description = EXCLUDED.description;
        END IF;
      EXCEPTION WHEN OTHERS THEN
        {_WARN}
      END;
    END LOOP;""",
    # Every rewrite of this command is accounted for: the notes end with it, even when
    # the block above failed (else a later DDL in the transaction would inherit them).
    """
    IF current_setting('pgwire_cdc.rewritten', true) <> '' THEN
      PERFORM set_config('pgwire_cdc.rewritten', '', true);
    END IF;""",
)

_ON_DROP = _trigger_function(
    "on_sql_drop",
    "  rel oid;\n  before jsonb;\n  after jsonb := NULL;\n  reason integer := NULL;",
    f"""
    FOR rel IN
      SELECT d.objid
      FROM pg_event_trigger_dropped_objects() d
      WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0
        AND d.object_type = 'table' AND NOT d.is_temporary
        AND d.schema_name IS DISTINCT FROM {_literal(SCHEMA)}
    LOOP
      BEGIN
        DELETE FROM {SCHEMA}.ddl_tables t WHERE t.relid = rel
          RETURNING t.description INTO before;
        {_EMIT}
      EXCEPTION WHEN OTHERS THEN
        {_WARN}
      END;
    END LOOP;""",
)

_FILL = f"""
WITH covered AS (
  SELECT c.oid FROM pg_catalog.pg_class c WHERE {_COVERED}
), gone AS (
  DELETE FROM {SCHEMA}.ddl_tables t WHERE t.relid NOT IN (SELECT oid FROM covered)
)
INSERT INTO {SCHEMA}.ddl_tables AS t (relid, description)
SELECT oid, {SCHEMA}.describe_table(oid) FROM covered
ON CONFLICT (relid) DO UPDATE SET description = EXCLUDED.description
"""

_INSTALL = [
    f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
    f"CREATE UNLOGGED TABLE IF NOT EXISTS {SCHEMA}.ddl_tables"
    " (relid oid PRIMARY KEY, description jsonb NOT NULL)",
    # A table made by hand (or restored logged) must not be published.
    f"ALTER TABLE {SCHEMA}.ddl_tables SET UNLOGGED",
    # Logged: its only use is the WAL record setval writes (see _EMIT).
    f"CREATE SEQUENCE IF NOT EXISTS {SCHEMA}.ddl_message_end",
    f"ALTER SEQUENCE {SCHEMA}.ddl_message_end SET LOGGED",
    _DESCRIBE_TABLE,
    _VERSION_FUNCTION,
    _ON_REWRITE,
    _ON_DDL_END,
    _ON_DROP,
    *(f"DROP EVENT TRIGGER IF EXISTS {name}" for name in EVENT_TRIGGERS),
    f"CREATE EVENT TRIGGER pgwire_cdc_ddl_rewrite ON table_rewrite"
    f" EXECUTE FUNCTION {SCHEMA}.on_table_rewrite()",
    f"CREATE EVENT TRIGGER pgwire_cdc_ddl_end ON ddl_command_end"
    f" EXECUTE FUNCTION {SCHEMA}.on_ddl_command_end()",
    f"CREATE EVENT TRIGGER pgwire_cdc_ddl_drop ON sql_drop EXECUTE FUNCTION {SCHEMA}.on_sql_drop()",
    # Status and check read these as any role (everything in them is in the catalogs).
    f"GRANT USAGE ON SCHEMA {SCHEMA} TO PUBLIC",
    f"GRANT SELECT ON {SCHEMA}.ddl_tables TO PUBLIC",
    _FILL,
]

_REMOVE = [
    *(f"DROP EVENT TRIGGER IF EXISTS {name}" for name in EVENT_TRIGGERS),
    f"DROP FUNCTION IF EXISTS {SCHEMA}.on_ddl_command_end()",
    f"DROP FUNCTION IF EXISTS {SCHEMA}.on_sql_drop()",
    f"DROP FUNCTION IF EXISTS {SCHEMA}.on_table_rewrite()",
    f"DROP FUNCTION IF EXISTS {SCHEMA}.describe_table(oid)",
    f"DROP FUNCTION IF EXISTS {SCHEMA}.ddl_capture_version()",
    f"DROP TABLE IF EXISTS {SCHEMA}.ddl_tables",
    f"DROP SEQUENCE IF EXISTS {SCHEMA}.ddl_message_end",
]

_PRIVILEGE_FIX = (
    "DDL capture needs a superuser (or a role that may create event triggers, such as"
    " rds_superuser on Amazon RDS or azure_pg_admin on Azure): connect as one and run"
    " `pgwire-cdc ddl-capture {action} --dsn ...` or pgwire_cdc.admin.{function}(dsn)"
)


# -- install, remove, status -----------------------------------------------------------


def _scalar(conn: Connection, query: Any, params: Any = None) -> Any:
    """The first column of the first row (None without one). Every query of this module
    is fixed text: no name or value of the caller's is formatted into it."""
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query, params)
        row = cur.fetchone()
    return row[0] if row else None


def _execute(conn: Connection, statement: Any) -> None:
    with conn.cursor() as cur:
        cur.execute(statement)


def _privilege_error(e: psycopg.Error, action: str, function: str) -> ConfigError:
    reason = e.diag.message_primary or str(e).strip()
    return ConfigError(
        f"could not {action} DDL capture: {reason}; "
        + _PRIVILEGE_FIX.format(action=action, function=function),
        sqlstate=e.sqlstate,
    )


def install_ddl_capture(dsn: str) -> DdlCaptureStatus:
    """Installs DDL capture in the database of ``dsn`` (see the module docs), or brings an
    older installation up to :data:`DDL_CAPTURE_VERSION`, in one transaction; installing
    again is harmless and refreshes every stored description. Raises
    :class:`~pgwire_cdc.errors.ConfigError` when the role may not create event triggers,
    or when a newer version is installed (remove it first to go back)."""
    with connect(dsn) as conn:
        try:
            with conn.transaction():
                _scalar(conn, "SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                installed = _installed_version(conn)
                if installed is not None and installed > DDL_CAPTURE_VERSION:
                    raise ConfigError(
                        f"DDL capture version {installed} is installed, newer than this"
                        f" package's {DDL_CAPTURE_VERSION}: install with the newer"
                        " pgwire_cdc, or `pgwire-cdc ddl-capture remove` first to go back"
                    )
                shape = _table_shape(conn)
                if shape is not None and shape != _TABLE_SHAPE:
                    # Changed by hand: it only repeats the catalogs, so it is made anew.
                    _execute(conn, f"DROP TABLE {SCHEMA}.ddl_tables")
                for statement in _INSTALL:
                    _execute(conn, statement)
        except pg_errors.InsufficientPrivilege as e:
            raise _privilege_error(e, "install", "install_ddl_capture") from None
        return status_on(conn)


def remove_ddl_capture(dsn: str) -> None:
    """Removes what :func:`install_ddl_capture` made (event triggers first, then the
    functions and the table), and the schema ``pgwire_cdc`` if nothing else is left in
    it, in one transaction. Nothing to remove is fine."""
    with connect(dsn) as conn:
        try:
            with conn.transaction():
                _scalar(conn, "SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                for statement in _REMOVE:
                    _execute(conn, statement)
                try:
                    with conn.transaction():
                        _execute(conn, f"DROP SCHEMA IF EXISTS {SCHEMA}")
                except pg_errors.DependentObjectsStillExist:
                    pass  # something else lives there: the schema stays
        except pg_errors.InsufficientPrivilege as e:
            raise _privilege_error(e, "remove", "remove_ddl_capture") from None


def ddl_capture_status(dsn: str) -> DdlCaptureStatus:
    """Whether DDL capture is installed in the database of ``dsn``, in which version, and
    whether the installation is complete (any role may ask)."""
    with connect(dsn) as conn:
        return status_on(conn)


#: The columns of ``ddl_tables``, with their types.
_TABLE_SHAPE = [("relid", "oid"), ("description", "jsonb")]


def _table_shape(conn: Connection) -> list[tuple[str, str]] | None:
    """The columns of ``ddl_tables`` (None without the table)."""
    if _scalar(conn, f"SELECT to_regclass('{SCHEMA}.ddl_tables')") is None:
        return None
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(
            "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_catalog.pg_attribute"
            f" WHERE attrelid = '{SCHEMA}.ddl_tables'::regclass AND attnum > 0"
            " AND NOT attisdropped ORDER BY attnum"
        )
        return [(name, type_) for name, type_ in cur.fetchall()]


def _installed_version(conn: Connection) -> int | None:
    if _scalar(conn, f"SELECT to_regprocedure('{SCHEMA}.ddl_capture_version()')") is None:
        return None
    return int(_scalar(conn, f"SELECT {SCHEMA}.ddl_capture_version()"))


def describe(conn: Connection, oid: int) -> dict[str, Any] | None:
    """The table ``oid`` described as the DDL messages describe it (None when there is no
    such table), read on ``conn`` without anything installed: a ``stream()`` run's
    session prints the values as its own settings say (:mod:`pgwire_cdc.connection`), as
    ``describe_table`` does."""
    row = conn.execute(_DESCRIBE_SELECT.format(rel="%(rel)s"), {"rel": oid}).fetchone()
    return row[0] if row else None


def status_on(conn: Connection) -> DdlCaptureStatus:
    """:func:`ddl_capture_status` on an open connection."""
    version = _installed_version(conn)
    if version is None:
        return DdlCaptureStatus(installed=False, version=None, current=False, tables_described=0)
    missing: list[str] = []
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(
            "SELECT evtname, evtevent, evtenabled FROM pg_catalog.pg_event_trigger"
            " WHERE evtname = ANY (%s)",
            (list(EVENT_TRIGGERS),),
        )
        triggers = {name: (event, enabled) for name, event, enabled in cur.fetchall()}
    for name, event in EVENT_TRIGGERS.items():
        if name not in triggers:
            missing.append(f"event trigger {name}")
        elif triggers[name][1] == "D":
            missing.append(f"event trigger {name} (disabled)")
        elif triggers[name][0] != event:
            missing.append(f"event trigger {name} (on {triggers[name][0]}, not {event})")
    for function in ("describe_table(oid)", "on_ddl_command_end()", "on_sql_drop()"):
        if _scalar(conn, f"SELECT to_regprocedure('{SCHEMA}.{function}')") is None:
            missing.append(f"function {SCHEMA}.{function}")
    if _scalar(conn, f"SELECT to_regclass('{SCHEMA}.ddl_message_end')") is None:
        missing.append(f"sequence {SCHEMA}.ddl_message_end")
    described = undescribed = 0
    shape = _table_shape(conn)
    if shape is None:
        missing.append(f"table {SCHEMA}.ddl_tables")
    elif shape != _TABLE_SHAPE:
        missing.append(f"table {SCHEMA}.ddl_tables (its columns were changed)")
    else:
        described = int(_scalar(conn, f"SELECT count(*) FROM {SCHEMA}.ddl_tables"))
        undescribed = int(
            _scalar(
                conn,
                f"SELECT count(*) FROM pg_catalog.pg_class c WHERE {_COVERED}"
                f" AND NOT EXISTS (SELECT 1 FROM {SCHEMA}.ddl_tables t WHERE t.relid = c.oid)",
            )
        )
    return DdlCaptureStatus(
        installed=True,
        version=version,
        current=version == DDL_CAPTURE_VERSION,
        tables_described=described,
        missing=tuple(missing),
        tables_undescribed=undescribed,
    )
