"""What a publication publishes, column by column, and how to copy it (psycopg 3).

``pgoutput`` describes each published table in a Relation message: schema and table name
(unquoted), replica identity, and the *published* columns in column order (``attnum``),
each with its type OID, type modifier (``atttypmod``) and a flag for replica-identity
columns. Which columns are published:

- PostgreSQL 15+ publications may carry a column list per table (``FOR TABLE t (a, b)``)
  and a row filter (``WHERE (...)``); ``pg_publication_tables.attnames`` / ``.rowfilter``
  show the effective ones;
- generated columns are never published before PostgreSQL 18; from 18 a publication with
  ``publish_generated_columns = stored`` publishes stored generated columns, and a column
  list may name them; virtual generated columns are never published;
- dropped and system columns never are.

The replica-identity flag follows the table's ``relreplident``: ``d`` the primary-key
columns, ``i`` the columns of the ``REPLICA IDENTITY USING INDEX`` index, ``f`` every
column, ``n`` none. With ``publish_via_partition_root`` the partitioned root is the published
table (its columns and identity); without it, each leaf partition is.

Types. The Rust decoder types a column by its *base type*, resolved here (and by
:func:`type_map` for types the live stream meets): a built-in type (OID < 16384) is itself,
with the column's typmod; a domain is its base type, recursively (the typmod comes from the
innermost domain's ``typtypmod`` when the column's is -1); an enum is ``text`` (25, -1); a
type whose binary send function is text's (``textsend``, ``citextsend``, ``bpcharsend``,
``varcharsend``: citext and the like) is ``text``; an array whose element resolves to X is
X's array type (``enum[]`` -> ``text[]`` 1009); anything else (composites, user ranges,
other extension types) stays itself, unresolved.

Initial snapshot. :func:`snapshot_queries` builds the ``COPY (SELECT ...) TO STDOUT
(FORMAT BINARY)`` statements that read the published rows and columns of a table, split
into non-overlapping ranges of heap blocks (``ctid`` ranges, PostgreSQL 14+ scans them with
a TID Range Scan) for plain tables large enough, so that several connections sharing one
exported snapshot can copy in parallel.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.rows import tuple_row

from .errors import ConfigError

__all__ = [
    "DEFAULT_MIN_BLOCKS_PER_RANGE",
    "ColumnInfo",
    "TableInfo",
    "published_tables",
    "snapshot_queries",
    "table_blocks",
    "type_map",
]

Connection = psycopg.Connection[Any]

#: PostgreSQL's first OID for user-created objects; below it every type is built in.
FIRST_NORMAL_OID = 16384
TEXT_OID = 25
_TEXT_SEND = frozenset({"textsend", "citextsend", "bpcharsend", "varcharsend"})

#: snapshot_queries splits a table only when each range gets at least this many blocks
#: (8 KiB each by default: 8 MiB per range).
DEFAULT_MIN_BLOCKS_PER_RANGE = 1024


def _rows(conn: Connection, query: Any, params: Any = None) -> list[tuple[Any, ...]]:
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query, params)
        return cur.fetchall() if cur.description is not None else []


@dataclass
class ColumnInfo:
    """One published column, as pgoutput's Relation message describes it."""

    name: str
    attnum: int
    type_oid: int  # pg_attribute.atttypid
    type_modifier: int  # pg_attribute.atttypmod
    type_name: str  # format_type(atttypid, atttypmod), e.g. "numeric(10,2)"
    is_key: bool  # part of the replica identity
    base_type_oid: int  # the type the decoder uses (module docs)
    base_type_modifier: int


@dataclass
class TableInfo:
    """One published table."""

    oid: int
    schema: str
    name: str
    qualified: str  # "schema.table", unquoted, as pgoutput names it
    relkind: str  # 'r' table, 'p' partitioned table
    replica_identity: str  # pg_class.relreplident: 'd', 'i', 'f' or 'n'
    is_partitioned: bool
    row_filter: str | None  # the publication's WHERE expression (PostgreSQL 15+)
    columns: list[ColumnInfo]

    def descriptions(self) -> list[tuple[str, int, int, int, int, bool]]:
        """The published columns as the extension takes them (``CopyDecoder``,
        ``change_table_schema``, snapshot tasks): name, type, base type, their type
        modifiers, and whether the column is in the replica-identity key."""
        return [
            (c.name, c.type_oid, c.base_type_oid, c.type_modifier, c.base_type_modifier, c.is_key)
            for c in self.columns
        ]

    def change_table_schema(self) -> pa.Schema:
        """The Arrow schema of this table's change table, as the stream and the snapshot
        build it."""
        from . import _native
        from .tables import table_of

        stream = _native.change_table_schema(
            self.oid, self.schema, self.name, self.replica_identity, self.descriptions()
        )
        schema: pa.Schema = table_of(stream).schema
        return schema


# -- types ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _PgType:
    oid: int
    typtype: str
    basetype: int
    typtypmod: int
    elem: int
    typlen: int
    typarray: int
    send: str | None


class _TypeResolver:
    """The pg_type rows of some types and of everything their resolution needs."""

    def __init__(self, conn: Connection, oids: Iterable[int]) -> None:
        seeds = sorted({int(o) for o in oids} | {TEXT_OID})
        rows = _rows(
            conn,
            "WITH RECURSIVE closure(oid) AS ("
            "  SELECT unnest(%s::oid[])"
            "  UNION"
            "  SELECT x.oid FROM closure c JOIN pg_type t ON t.oid = c.oid"
            "  CROSS JOIN LATERAL (VALUES (t.typbasetype), (t.typelem)) AS x(oid)"
            "  WHERE x.oid <> 0 AND c.oid >= %s"
            ")"
            " SELECT t.oid, t.typtype::text, t.typbasetype, t.typtypmod, t.typelem, t.typlen,"
            "  t.typarray, p.proname::text"
            " FROM closure c JOIN pg_type t ON t.oid = c.oid"
            " LEFT JOIN pg_proc p ON p.oid = t.typsend",
            (seeds, FIRST_NORMAL_OID),
        )
        self.types = {row[0]: _PgType(*row) for row in rows}

    def resolve(self, oid: int, typmod: int = -1) -> tuple[int, int]:
        if oid < FIRST_NORMAL_OID:
            return oid, typmod
        t = self.types.get(oid)
        if t is None:  # unknown OID (a type dropped meanwhile): leave it alone
            return oid, typmod
        if t.typtype == "d":
            return self.resolve(t.basetype, typmod if typmod != -1 else t.typtypmod)
        if t.typtype == "e":
            return TEXT_OID, -1
        if t.typtype == "b" and t.elem != 0 and t.typlen == -1:
            elem, elem_mod = self.resolve(t.elem, typmod)
            elem_type = self.types.get(elem)
            if elem_type is not None and elem_type.typarray != 0:
                return elem_type.typarray, elem_mod
            return oid, typmod
        if t.send in _TEXT_SEND:
            return TEXT_OID, -1
        return oid, typmod


def type_map(conn: Connection, oids: Iterable[int]) -> dict[int, tuple[int, int]]:
    """``oid -> (base_oid, base_typmod)`` for each type OID (resolution in the module
    docs; typmod -1 in). An OID that names no type maps to itself."""
    wanted = sorted({int(o) for o in oids})
    resolver = _TypeResolver(conn, [o for o in wanted if o >= FIRST_NORMAL_OID])
    return {oid: resolver.resolve(oid) for oid in wanted}


# -- published tables -----------------------------------------------------------------------


def published_tables(conn: Connection, publication: str) -> list[TableInfo]:
    """The tables ``publication`` publishes with their published columns (module docs),
    ordered by schema and name. :class:`ConfigError` if the publication does not exist."""
    version = conn.info.server_version
    pub_columns = {
        name
        for (name,) in _rows(
            conn,
            "SELECT attname::text FROM pg_attribute"
            " WHERE attrelid = 'pg_catalog.pg_publication'::regclass AND attnum > 0",
        )
    }
    if not _rows(conn, "SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,)):
        raise ConfigError(
            f"publication {sql.Identifier(publication).as_string(conn)} does not exist"
        )
    lists = version >= 150000
    tables = _rows(
        conn,
        sql.SQL(
            "SELECT c.oid, pt.schemaname::text, pt.tablename::text, c.relkind::text,"
            " c.relreplident::text, {}"
            " FROM pg_publication_tables pt"
            " JOIN pg_namespace n ON n.nspname = pt.schemaname"
            " JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename"
            " WHERE pt.pubname = %s ORDER BY pt.schemaname, pt.tablename"
        ).format(
            sql.SQL("pt.rowfilter, pt.attnames::text[]" if lists else "NULL::text, NULL::text[]")
        ),
        (publication,),
    )
    return _describe(conn, tables, pub_columns)


def table_info(conn: Connection, table: str) -> TableInfo:
    """A table's description as a publication without column list or row filter would
    publish it: every column (generated ones left out). ``table`` is "schema.table"."""
    schema, _, name = table.rpartition(".")
    tables = _rows(
        conn,
        "SELECT c.oid, n.nspname::text, c.relname::text, c.relkind::text,"
        " c.relreplident::text, NULL::text, NULL::text[]"
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')",
        (schema or "public", name),
    )
    if not tables:
        raise ConfigError(f"no table {table!r}: give it as schema.table")
    return _describe(conn, tables, set())[0]


def _describe(
    conn: Connection, tables: list[tuple[Any, ...]], pub_columns: set[str]
) -> list[TableInfo]:
    """TableInfo of ``tables`` rows (oid, schema, name, relkind, replica identity, row
    filter, published column names)."""
    if not tables:
        return []
    columns = _rows(
        conn,
        "SELECT a.attrelid, a.attnum, a.attname::text, a.atttypid, a.atttypmod,"
        " format_type(a.atttypid, a.atttypmod), a.attgenerated::text,"
        " COALESCE(c.relreplident = 'f' OR a.attnum = ANY (k.indkey), false)"
        " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
        " LEFT JOIN LATERAL (SELECT i.indkey::int2[] AS indkey FROM pg_index i"
        "   WHERE i.indrelid = c.oid AND ((c.relreplident = 'd' AND i.indisprimary)"
        "     OR (c.relreplident = 'i' AND i.indisreplident)) LIMIT 1) k ON true"
        " WHERE a.attrelid = ANY (%s::oid[]) AND a.attnum > 0 AND NOT a.attisdropped"
        " ORDER BY a.attrelid, a.attnum",
        ([t[0] for t in tables],),
    )
    resolver = _TypeResolver(conn, [c[3] for c in columns if c[3] >= FIRST_NORMAL_OID])
    # PostgreSQL 18 (pubgencols) reports generated columns in attnames exactly when they are
    # published; before it they never are, though 15-17 list them in attnames.
    trust_attnames = "pubgencols" in pub_columns
    by_table: dict[int, list[ColumnInfo]] = {}
    for relid, attnum, name, typid, typmod, type_name, generated, is_key in columns:
        base, base_mod = resolver.resolve(typid, typmod)
        by_table.setdefault(relid, []).append(
            ColumnInfo(name, attnum, typid, typmod, type_name, is_key, base, base_mod)
        )
        if generated and not trust_attnames:
            by_table[relid].pop()
    out = []
    for oid, schema, name, relkind, ident, row_filter, attnames in tables:
        cols = by_table.get(oid, [])
        if attnames is not None:
            published = set(attnames)
            cols = [c for c in cols if c.name in published]
        out.append(
            TableInfo(
                oid=oid,
                schema=schema,
                name=name,
                qualified=f"{schema}.{name}",
                relkind=relkind,
                replica_identity=ident,
                is_partitioned=relkind == "p",
                row_filter=row_filter,
                columns=cols,
            )
        )
    return out


def tables_of_publications(conn: Connection, publications: Sequence[str]) -> list[TableInfo]:
    """The tables several publications publish together, as pgoutput streams them with
    ``publication_names`` naming them all: each table once, with its published columns,
    and with the row filters of the publications that publish it joined by ``OR`` (none
    when one of them has none, as pgoutput does)."""
    merged: dict[int, TableInfo] = {}
    for publication in publications:
        for table in published_tables(conn, publication):
            seen = merged.get(table.oid)
            if seen is None:
                merged[table.oid] = table
                continue
            if seen.row_filter is None or table.row_filter is None:
                row_filter = None
            else:
                row_filter = f"({seen.row_filter}) OR ({table.row_filter})"
            attnums = {c.attnum for c in seen.columns}
            columns = sorted(
                [*seen.columns, *(c for c in table.columns if c.attnum not in attnums)],
                key=lambda c: c.attnum,
            )
            merged[table.oid] = replace(seen, row_filter=row_filter, columns=columns)
    return sorted(merged.values(), key=lambda t: (t.schema, t.name))


# -- snapshot -------------------------------------------------------------------------------


def table_blocks(conn: Connection, table_oid: int) -> int:
    """The table's current size in heap blocks (``pg_relation_size / block_size``; 0 for a
    partitioned table, whose rows live in its partitions)."""
    rows = _rows(
        conn,
        "SELECT pg_relation_size(c.oid) / current_setting('block_size')::bigint"
        " FROM pg_class c WHERE c.oid = %s",
        (table_oid,),
    )
    if not rows:
        raise ConfigError(f"no table with OID {table_oid}")
    return int(rows[0][0])


def snapshot_queries(
    table: TableInfo,
    ranges: int,
    blocks: int,
    *,
    min_blocks_per_range: int = DEFAULT_MIN_BLOCKS_PER_RANGE,
) -> list[str]:
    """The COPY statements of ``table``'s initial snapshot.

    Each is ``COPY (SELECT "c1", "c2" FROM ONLY "s"."t" [WHERE (row filter) AND ctid
    range]) TO STDOUT (FORMAT BINARY)``: the published columns in Relation-message order,
    the publication's row filter, ``ONLY`` so a plain table's inheritance children are not
    read with it (a partitioned table is read whole: its partitions are its rows).

    A plain table (relkind ``'r'``) of ``blocks`` heap blocks is split into
    ``min(ranges, blocks // min_blocks_per_range)`` block ranges when that is more than
    one: ``ctid < '(b1,0)'``, ``ctid >= '(b1,0)' AND ctid < '(b2,0)'``, ...,
    ``ctid >= '(bn,0)'``. The first range has no lower bound and the last no upper bound,
    so the ranges never overlap and cover every block, including blocks added after
    ``blocks`` was read. Partitioned and small tables give one statement.

    Run each statement as it is (no query parameters) in a transaction that uses the
    slot's exported snapshot.
    """
    if ranges < 1:
        raise ValueError(f"ranges must be at least 1, not {ranges}")
    if blocks < 0:
        raise ValueError(f"blocks cannot be negative: {blocks}")
    if min_blocks_per_range < 1:
        raise ValueError(f"min_blocks_per_range must be at least 1, not {min_blocks_per_range}")
    # A type without a binary decoder is read in its text form (the snapshot decoder
    # reads such a column's field as text, as the stream does in text format).
    from . import _native

    selected: list[sql.Composable] = [
        sql.Identifier(c.name)
        if _native.binary_decodable(c.base_type_oid)
        else sql.SQL("{}::text").format(sql.Identifier(c.name))
        for c in table.columns
    ]
    columns = sql.SQL(", ").join(selected)
    relation = sql.Identifier(table.schema, table.name)
    source = sql.SQL("ONLY {}").format(relation) if table.relkind == "r" else relation
    count = min(ranges, blocks // min_blocks_per_range) if table.relkind == "r" else 1
    bounds: list[tuple[int | None, int | None]] = [(None, None)]
    if count > 1:
        cuts = [blocks * i // count for i in range(1, count)]
        lows: list[int | None] = [None, *cuts]
        highs: list[int | None] = [*cuts, None]
        bounds = list(zip(lows, highs, strict=True))
    statements = []
    for low, high in bounds:
        conditions: list[sql.Composable] = []
        if table.row_filter:
            conditions.append(sql.SQL("({})").format(sql.SQL(table.row_filter)))
        if low is not None:
            conditions.append(sql.SQL("ctid >= {}::tid").format(sql.Literal(f"({low},0)")))
        if high is not None:
            conditions.append(sql.SQL("ctid < {}::tid").format(sql.Literal(f"({high},0)")))
        where = (
            sql.SQL(" WHERE {}").format(sql.SQL(" AND ").join(conditions))
            if conditions
            else sql.SQL("")
        )
        statement = sql.SQL("COPY (SELECT {} FROM {}{}) TO STDOUT (FORMAT BINARY)").format(
            columns, source, where
        )
        statements.append(statement.as_string(None))
    return statements


def unreadable_tables(conn: psycopg.Connection[Any], tables: list[TableInfo]) -> list[str]:
    """The tables (quoted ``"schema"."table"``) the session's role may not read whole: no
    SELECT on the table nor on each published column. The initial snapshot needs it."""
    denied = []
    for t in tables:
        row = conn.execute(
            "SELECT has_table_privilege(%s::oid, 'SELECT') OR coalesce(bool_and("
            " has_column_privilege(%s::oid, c, 'SELECT')), false) FROM unnest(%s::text[]) c",
            (t.oid, t.oid, [c.name for c in t.columns]),
        ).fetchone()
        if not (row and row[0]):
            denied.append(sql.Identifier(t.schema, t.name).as_string(conn))
    return denied


def current_role(conn: psycopg.Connection[Any]) -> str:
    """The session's role, quoted."""
    row = conn.execute("SELECT current_user").fetchone()
    return sql.Identifier(row[0] if row else "").as_string(conn)


def change_table_schema(conn: Connection, publication: str, table: str) -> pa.Schema:
    """The Arrow schema of ``table``'s change table (as the stream and snapshot build it)."""
    infos = {t.qualified: t for t in published_tables(conn, publication)}
    info = infos.get(table)
    if info is None:
        raise ConfigError(
            f"table {table!r} is not in publication {publication!r} (it has: "
            f"{', '.join(sorted(infos)) or 'no tables'}); add it with ALTER PUBLICATION "
            f"{publication} ADD TABLE {table}"
        )
    return info.change_table_schema()
