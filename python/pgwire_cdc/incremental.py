"""Snapshot chunks read while streaming goes on: the watermark algorithm of Netflix's DBLog
(Debezium calls it incremental snapshots), for a table whose existing rows a pipeline does
not hold yet.

A table is read in chunks of rows in key order. For each chunk, in one ``REPEATABLE READ``
transaction:

1. the transaction's snapshot *S* is taken, and its visibility (``pg_current_snapshot()``:
   ``xmin``, ``xmax`` and the transactions in progress) is kept;
2. a *low watermark* is written into the WAL (``pg_logical_emit_message`` with
   ``transactional = false``: logged at once, at its place in WAL order, and visible to
   the stream under the prefix :data:`WATERMARK_PREFIX`);
3. the chunk is read under *S* (``COPY ... (FORMAT BINARY)`` into a change table of
   ``read`` rows by the same decoder as the initial snapshot);
4. a *high watermark* is written; its LSN *h* is where the chunk's rows belong in the
   stream.

Every transaction that committed before *h* comes through the stream before *h*, and
every one that committed after it comes after. A transaction *S* sees has its effect in the
chunk already, so the chunk's rows placed at *h* are at least as new as anything before
them. A transaction *S* does not see (in progress when *S* was taken, or begun later) but
that committed before *h* changed rows the chunk holds in an older state: :func:`reconcile`
drops every key such a transaction touched from the chunk, so its change (delivered before
*h*) stands. Changes after *h* apply on top of the chunk's rows. So the table's rows arrive
exactly once each, and an older chunk value never overwrites a newer change. Comparing
against *S* itself (not only against the low watermark) also covers a transaction whose
commit record is in the WAL before the low watermark but that was not yet visible when
*S* was taken.

The chunk's rows carry ``_lsn`` = ``_commit_lsn`` = *h* - 1: inside the watermark's own WAL
record, so no transaction's commit LSN equals it and ``(_commit_lsn, _tx_ordinal)`` orders
them after everything committed before *h* and before everything committed after it.

Tables without a replica-identity key cannot be read in key order nor matched by key: such
a table is read whole, in one chunk, when it must be read again (a rewrite, a resnapshot;
:func:`read_whole`): under a ``SHARE`` lock taken before the chunk's snapshot, which waits
for the transactions writing the table and holds off new ones until the high watermark,
so no transaction the snapshot misses touched it before the watermark, and the rows
replace the table's there (``CopyRange.whole``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from . import _native, tables
from .catalog import TableInfo
from .errors import ConfigError
from .lsn import lsn_to_int
from .tables import table_of

log = logging.getLogger("pgwire_cdc")

#: The prefix of the watermark messages (``pg_logical_emit_message``).
WATERMARK_PREFIX = "pgwire_cdc.watermark"

_XID_SPACE = 1 << 32


@dataclass(frozen=True)
class Visibility:
    """Which transactions a snapshot sees (``pg_current_snapshot()``, 64-bit xids)."""

    xmin: int
    xmax: int
    in_progress: frozenset[int]

    @classmethod
    def parse(cls, text: str) -> Visibility:
        """From ``pg_current_snapshot()::text``: ``xmin:xmax:xip1,xip2,...``."""
        xmin, xmax, xip = text.split(":")
        return cls(int(xmin), int(xmax), frozenset(int(x) for x in xip.split(",") if x))

    def full_xid(self, xid: int) -> int:
        """The 64-bit xid of a 32-bit one (as pgoutput sends it) of a transaction within
        2^31 of this snapshot, which every transaction the stream delivers around it is."""
        behind = (self.xmax - xid) % _XID_SPACE
        if behind <= _XID_SPACE // 2:
            return self.xmax - behind
        return self.xmax + (xid - self.xmax) % _XID_SPACE

    def sees(self, xid: int) -> bool:
        """Whether the snapshot sees the (committed) transaction with this 32-bit xid."""
        full = self.full_xid(xid)
        return full < self.xmax and full not in self.in_progress


@dataclass
class Chunk:
    """One chunk of a table read under its own snapshot, between two watermarks."""

    table: str  # "schema.table"
    rows: pa.Table  # a change table of ``read`` rows, in key order
    visibility: Visibility
    low: int  # the low watermark's LSN
    high: int  # the high watermark's LSN
    #: The key of the last row read (the next chunk starts after it); None when this chunk
    #: reached the end of the table.
    last_key: tuple[Any, ...] | None
    #: The key the chunk starts after (None: the table's start).
    after: tuple[Any, ...] | None = None
    #: With a row filter (``where``): the keys of every row the source holds from
    #: ``after`` to ``last_key``, filtered or not, under the chunk's snapshot; None when the
    #: chunk's rows are all of them.
    range_keys: pa.Table | None = None
    #: The whole table, read under a lock (a table without a key: :func:`read_whole`).
    whole: bool = False

    @property
    def position(self) -> int:
        """The ``_lsn`` / ``_commit_lsn`` of the chunk's rows (module docs)."""
        return self.high - 1


def key_columns(table: TableInfo) -> list[str]:
    """The replica-identity key columns of ``table`` (ConfigError when it has none)."""
    keys = tables.key_columns(table.change_table_schema())
    if keys is None:
        raise ConfigError(
            f"{table.qualified} has no replica-identity key (a primary key or REPLICA IDENTITY"
            " USING INDEX), so it cannot be read in key-ordered chunks while streaming; give"
            " it a primary key, or take a new slot with an initial snapshot"
        )
    return keys


def _key_bound(table: TableInfo, keys: list[str], values: Sequence[Any]) -> sql.Composable:
    by_name = {c.name: c for c in table.columns}
    return sql.SQL(", ").join(
        sql.SQL("{}::{}").format(sql.Literal(value), sql.SQL(by_name[k].type_name))
        for k, value in zip(keys, values, strict=True)
    )


def chunk_query(
    table: TableInfo,
    after: Sequence[Any] | None,
    limit: int,
    conn: psycopg.Connection[Any] | None = None,
    only: Sequence[Sequence[Any]] | None = None,
    where: str | None = None,
) -> str:
    """``COPY (SELECT <published columns> FROM ONLY t WHERE <row filter> AND (k1, k2) >
    (after) ORDER BY k1, k2 LIMIT n) TO STDOUT (FORMAT BINARY)``: the next chunk; with
    ``only``, the rows of those keys instead (``(k1, k2) IN (...)``); ``where``: only the
    rows this SQL condition holds for."""
    keys = key_columns(table)
    selected = _select_list(table)
    key_list = sql.SQL(", ").join(sql.Identifier(k) for k in keys)
    conditions: list[sql.Composable] = []
    if table.row_filter:
        conditions.append(sql.SQL("({})").format(sql.SQL(table.row_filter)))
    if where:
        conditions.append(sql.SQL("({})").format(sql.SQL(where)))
    if after is not None:
        bound = _key_bound(table, keys, after)
        conditions.append(sql.SQL("({}) > ({})").format(key_list, bound))
    if only is not None:
        listed = sql.SQL(", ").join(
            sql.SQL("({})").format(_key_bound(table, keys, key)) for key in only
        )
        conditions.append(sql.SQL("({}) IN ({})").format(key_list, listed))
    filtered = (
        sql.SQL(" WHERE {}").format(sql.SQL(" AND ").join(conditions))
        if conditions
        else sql.SQL("")
    )
    source = _relation(table)
    query = sql.SQL(
        "COPY (SELECT {} FROM {}{} ORDER BY {} LIMIT {}) TO STDOUT (FORMAT BINARY)"
    ).format(selected, source, filtered, key_list, sql.Literal(int(limit)))
    return query.as_string(conn)


def range_keys_query(
    table: TableInfo,
    after: Sequence[Any] | None,
    upto: Sequence[Any] | None,
    conn: psycopg.Connection[Any] | None = None,
) -> str:
    """``SELECT k1, k2 FROM ONLY t WHERE <row filter> AND (k1, k2) > (after) AND (k1, k2)
    <= (upto)``: the keys of every published row after ``after`` up to ``upto`` (None: no
    bound)."""
    keys = key_columns(table)
    key_list = sql.SQL(", ").join(sql.Identifier(k) for k in keys)
    conditions: list[sql.Composable] = [sql.SQL("true")]
    if table.row_filter:
        conditions.append(sql.SQL("({})").format(sql.SQL(table.row_filter)))
    if after is not None:
        conditions.append(sql.SQL("({}) > ({})").format(key_list, _key_bound(table, keys, after)))
    if upto is not None:
        conditions.append(sql.SQL("({}) <= ({})").format(key_list, _key_bound(table, keys, upto)))
    source = _relation(table)
    query = sql.SQL("SELECT {} FROM {} WHERE {}").format(
        key_list, source, sql.SQL(" AND ").join(conditions)
    )
    return query.as_string(conn)


def check_where(conn: psycopg.Connection[Any], schema: str, name: str, where: str) -> None:
    """Raises ConfigError unless ``where`` is one SQL condition on the rows of the table
    ``schema.name`` (run as one prepared statement, which a second statement cannot ride
    along with)."""
    relation = sql.Identifier(schema, name)
    query = sql.SQL("SELECT 1 FROM ONLY {} WHERE ({}) LIMIT 0").format(relation, sql.SQL(where))
    try:
        with conn.transaction():
            conn.execute(query, prepare=True)
    except psycopg.Error as e:
        problem = e.diag.message_primary or type(e).__name__
        raise ConfigError(f"--where is no condition on {schema}.{name}'s rows: {problem}") from e


def read_whole(conn: psycopg.Connection[Any], table: TableInfo, number: int = 0) -> Chunk:
    """All rows of ``table`` (a table without a key) as one chunk, read under a ``SHARE``
    lock taken before the chunk's snapshot (see the module documentation)."""
    filtered = (
        sql.SQL(" WHERE ({})").format(sql.SQL(table.row_filter))
        if table.row_filter
        else sql.SQL("")
    )
    query = sql.SQL("COPY (SELECT {} FROM {}{}) TO STDOUT (FORMAT BINARY)").format(
        _select_list(table), _relation(table), filtered
    )
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        # Before the snapshot (the transaction's first query takes it): every transaction
        # that wrote the table has committed, and none can until the high watermark.
        conn.execute(sql.SQL("LOCK TABLE {} IN SHARE MODE").format(_relation(table)))
        visibility, low, high, rows = _between_watermarks(conn, table, query, number)
    return Chunk(table.qualified, rows, visibility, low, high, None, whole=True)


def _select_list(table: TableInfo) -> sql.Composable:
    """The published columns as a COPY's SELECT reads them (text where the decoder has
    no binary form of the type)."""
    return sql.SQL(", ").join(
        sql.Identifier(c.name)
        if _native.binary_decodable(c.base_type_oid)
        else sql.SQL("{}::text").format(sql.Identifier(c.name))
        for c in table.columns
    )


def _relation(table: TableInfo) -> sql.Composable:
    """The table, without its inheritance children (a partitioned table: with its
    partitions)."""
    relation = sql.Identifier(table.schema, table.name)
    return sql.SQL("ONLY {}").format(relation) if table.relkind == "r" else relation


def _between_watermarks(
    conn: psycopg.Connection[Any], table: TableInfo, query: str | sql.Composed, number: int
) -> tuple[Visibility, int, int, pa.Table]:
    """Steps 1 to 4 of the module docs in the open ``REPEATABLE READ`` transaction: the
    snapshot's visibility, the low and high watermarks, and the rows ``query`` (a COPY)
    read, at the high watermark's place."""
    row = conn.execute("SELECT pg_current_snapshot()::text").fetchone()
    assert row is not None
    visibility = Visibility.parse(row[0])
    low = _watermark(conn, "low", table.qualified, number)
    chunks: list[bytes] = []
    with conn.cursor().copy(query) as copy:
        for data in copy:
            chunks.append(bytes(data))
    high = _watermark(conn, "high", table.qualified, number)
    decoder = _native.CopyDecoder(
        table.oid, table.schema, table.name, table.replica_identity, table.descriptions(), high - 1
    )
    decoder.feed_many(chunks)
    return visibility, low, high, table_of(decoder.finish())


def _watermark(conn: psycopg.Connection[Any], kind: str, table: str, chunk: int) -> int:
    content = json.dumps({"kind": kind, "table": table, "chunk": chunk})
    row = conn.execute(
        "SELECT pg_logical_emit_message(false, %s, %s)::text", (WATERMARK_PREFIX, content)
    ).fetchone()
    assert row is not None
    return lsn_to_int(row[0])


def read_chunk(
    conn: psycopg.Connection[Any],
    table: TableInfo,
    after: Sequence[Any] | None,
    limit: int,
    number: int = 0,
    only: Sequence[Sequence[Any]] | None = None,
    where: str | None = None,
) -> Chunk:
    """The chunk of at most ``limit`` rows after key ``after`` (None: from the start), or
    the rows of the keys ``only``, by the steps of the module docs, on ``conn``
    (autocommit, not in a transaction); ``where``: of the rows this condition holds for."""
    keys = key_columns(table)
    query = chunk_query(table, after, limit, conn, only, where)
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        visibility, low, high, rows = _between_watermarks(conn, table, query, number)
        last_key: tuple[Any, ...] | None = None
        if only is None and rows.num_rows == limit and limit > 0:
            last = rows.slice(rows.num_rows - 1, 1).select(keys).to_pylist()[0]
            last_key = tuple(last[k] for k in keys)
        in_range = None
        if where and only is None:
            # Still under the chunk's snapshot (REPEATABLE READ): every row of the range,
            # filtered or not, so that the consumer tells the rows the source lacks.
            found = conn.execute(range_keys_query(table, after, last_key, conn)).fetchall()
            in_range = pa.table(
                {
                    k: pa.array([r[i] for r in found], rows.schema.field(k).type)
                    for i, k in enumerate(keys)
                }
            )
    start = tuple(after) if after is not None and only is None else None
    return Chunk(table.qualified, rows, visibility, low, high, last_key, start, in_range)


def _unseen_keys(chunk: Chunk, keys: list[str], changes: pa.Table) -> tuple[pa.Table, bool]:
    """The keys that changes of transactions ``chunk``'s snapshot does not see, committed
    before its high watermark, touched (new and old images); and whether such a
    transaction truncated the table."""
    early = changes.filter(pc.less(changes["_commit_lsn"], pa.scalar(chunk.high, pa.int64())))
    if early.num_rows == 0:
        return pa.table({k: changes[k].slice(0, 0) for k in keys}), False
    xids = [x for x in pc.unique(early["_xid"]).to_pylist() if x is not None]
    unseen = [x for x in xids if not chunk.visibility.sees(x)]
    if not unseen:
        return pa.table({k: early[k].slice(0, 0) for k in keys}), False
    touched = early.filter(pc.is_in(early["_xid"], value_set=pa.array(unseen, early["_xid"].type)))
    kinds = pc.cast(touched["_change_type"], pa.string())
    truncated = bool(pc.any(pc.equal(kinds, "truncate")).as_py())
    parts = [touched.select(keys)]
    before = touched["_before"]
    if before.null_count < len(before):
        flat = pa.table({k: pc.struct_field(before, k) for k in keys})
        parts.append(flat)
    found = pa.concat_tables([p.cast(parts[0].schema) for p in parts])
    mask = None
    for k in keys:
        valid = pc.is_valid(found[k])
        mask = valid if mask is None else pc.and_(mask, valid)
    assert mask is not None
    return found.filter(mask), truncated


def unseen_keys(chunk: Chunk, keys: list[str], changes: Iterable[pa.Table]) -> pa.Table | None:
    """The keys that transactions the chunk's snapshot does not see, committed before
    its high watermark, touched, in ``changes`` (the table's change tables the stream
    delivered around the chunk: every change committed before the high watermark since
    the chunk's snapshot; more do no harm); None when such a transaction truncated the
    table."""
    schema = chunk.rows.select(keys).schema
    conflicts = [schema.empty_table()]
    for changed in (t for t in changes if t.num_rows):
        found, truncated = _unseen_keys(chunk, keys, changed)
        if truncated:
            return None
        conflicts.append(found.select(keys).cast(schema))
    return pa.concat_tables(conflicts)


def reconcile(chunk: Chunk, keys: list[str], changes: Iterable[pa.Table]) -> pa.Table:
    """The chunk's rows to deliver: all but those whose key a transaction the chunk's
    snapshot does not see, committed before the high watermark, touched (module docs;
    ``changes`` as :func:`unseen_keys` takes them)."""
    if chunk.rows.num_rows == 0:
        return chunk.rows
    unseen = unseen_keys(chunk, keys, changes)
    if unseen is None:
        return chunk.rows.slice(0, 0)
    if unseen.num_rows == 0:
        return chunk.rows
    indexed = chunk.rows.select(keys).append_column(
        "_row", pa.array(range(chunk.rows.num_rows), pa.int64())
    )
    kept = indexed.join(unseen.cast(indexed.select(keys).schema), keys, join_type="left anti")
    order = pc.sort_indices(kept["_row"])
    return chunk.rows.take(pc.take(kept["_row"], order))


def copy_range(chunk: Chunk, keys: list[str], changes: Iterable[pa.Table]) -> CopyRange | None:
    """The key range ``chunk`` read whole; None when a transaction it did not see
    truncated the table (the consumer's rows of the range are then not known to it)."""
    if chunk.whole:
        return CopyRange(None, None, pa.table({}), chunk.position, whole=True)
    unseen = unseen_keys(chunk, keys, changes)
    if unseen is None:
        return None
    held = chunk.range_keys if chunk.range_keys is not None else chunk.rows.select(keys)
    keep = pa.concat_tables([held.select(keys).cast(unseen.schema), unseen])
    return CopyRange(chunk.after, chunk.last_key, keep, chunk.position)


def _keys_of(rows: pa.Table, keys: list[str]) -> list[tuple[Any, ...]]:
    return [tuple(r[k] for k in keys) for r in rows.select(keys).to_pylist()]


@dataclass(frozen=True)
class CopyRange:
    """A key range a chunk read whole (``Batch.snapshot_ranges``): the source held, as of
    ``lsn`` (the chunk's rows' place), no row with a key after ``after`` (None: from the
    table's start) up to ``upto`` (None: to its end) but those of ``keep`` — a consumer's
    rows of other keys in that range are rows the source no longer has, to be deleted at
    ``lsn``. ``keep`` also holds the keys of transactions the chunk did not see (their
    changes come through the stream)."""

    after: tuple[Any, ...] | None
    upto: tuple[Any, ...] | None
    keep: pa.Table
    lsn: int
    #: The chunk is the whole table (one without a key: :func:`read_whole`): the rows the
    #: consumer holds before ``lsn`` are replaced by the chunk's, whatever their keys.
    whole: bool = False


@dataclass
class _Job:
    """One table's incremental snapshot."""

    table: TableInfo
    keys: list[str]
    #: Rows up to this key are delivered (None: none yet).
    after: tuple[Any, ...] | None
    #: Keys a chunk dropped (a change the chunk's snapshot did not see): read again.
    retry: list[tuple[Any, ...]]
    chunks: int = 0
    rows: int = 0
    estimate: int = 0
    read_all: bool = False
    #: Only the rows this SQL condition holds for (None: every row).
    where: str | None = None
    #: A table without a key, read whole under a lock (:func:`read_whole`).
    whole: bool = False


class Snapshots:
    """The incremental snapshots of one stream: one chunk at a time, its rows handed out
    in the first batch that reaches its high watermark.

    ``step`` is called with each batch's change tables and position before the batch is
    handed out (it reads nothing from the server); it returns the chunk rows to add to the
    batch and the snapshot progress to report with it; ``read_next`` then reads the next
    chunk (``Batch.snapshot_progress``): per table, the key up to which its rows
    have been delivered (a list; empty: none yet), or None once all of them have.
    """

    def __init__(self, conn: psycopg.Connection[Any], chunk_rows: int) -> None:
        self.conn = conn
        self.chunk_rows = chunk_rows
        self.jobs: dict[str, _Job] = {}
        self.pending: tuple[_Job, Chunk, bool] | None = None  # (job, chunk, is a retry)
        #: The changes of the pending chunk's table since the chunk before it was handed
        #: out (reconcile() looks at those committed before the high watermark).
        self.window: list[pa.Table] = []
        self.recent: list[pa.Table] = []
        self.announce: dict[str, list[Any] | None] = {}

    @property
    def active(self) -> bool:
        return bool(self.jobs)

    @property
    def waiting_for(self) -> int | None:
        """The high watermark the pending chunk waits for."""
        return self.pending[1].high if self.pending is not None else None

    def add(
        self,
        table: TableInfo,
        after: Sequence[Any] | None = None,
        where: str | None = None,
        *,
        whole: bool = False,
    ) -> None:
        """Snapshot ``table`` (again), after key ``after`` (None: from the start); with
        ``where``, the rows this SQL condition holds for. A table without a key is read
        whole under a lock with ``whole`` (:func:`read_whole`), and refused without it."""
        keyless = tables.key_columns(table.change_table_schema()) is None
        keys = [] if keyless and whole else key_columns(table)
        row = self.conn.execute(
            "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = %s", (table.oid,)
        ).fetchone()
        job = _Job(
            table,
            keys,
            tuple(after) if after is not None and not keyless else None,
            [],
            where=None if keyless else where,
            whole=keyless,
        )
        job.estimate = int(row[0]) if row else 0
        if self.pending is not None and self.pending[0].table.qualified == table.qualified:
            self.pending = None  # read again from the new starting point
        self.jobs[table.qualified] = job
        self.announce[table.qualified] = list(job.after or ())
        log.info(
            "incremental snapshot of %s%s%s: about %d rows, %d per chunk",
            table.qualified,
            " (rows of a condition)" if where else "",
            f" from after key {list(job.after)}" if job.after is not None else "",
            job.estimate,
            self.chunk_rows,
        )

    @property
    def wants_chunk(self) -> bool:
        """Whether :meth:`read_next` has a chunk to read."""
        return self.pending is None and bool(self.jobs)

    def read_next(self, tables: dict[str, pa.Table], handed_out: bool) -> None:
        """Reads the next chunk (on the connection; psycopg errors go to the caller, who
        may call again). ``tables``: the batch just handed out; ``handed_out``: whether it
        carried the previous chunk's rows."""
        if not self.wants_chunk:
            return
        job = next(iter(self.jobs.values()))
        if not handed_out:
            # Changes handed out just before the chunk's snapshot may still be invisible
            # to it (a commit is in the WAL before it is visible).
            changed = tables.get(job.table.qualified)
            self.recent = [changed] if changed is not None and changed.num_rows else []
        if job.whole:
            self.pending = (job, read_whole(self.conn, job.table, job.chunks), False)
        elif job.retry:
            keys, rest = job.retry[: self.chunk_rows], job.retry[self.chunk_rows :]
            chunk = read_chunk(self.conn, job.table, None, len(keys), job.chunks, keys)
            job.retry = rest
            self.pending = (job, chunk, True)
        else:
            chunk = read_chunk(
                self.conn, job.table, job.after, self.chunk_rows, job.chunks, where=job.where
            )
            self.pending = (job, chunk, False)
        self.window = []

    def step(
        self, tables: dict[str, pa.Table], lsn: int
    ) -> tuple[dict[str, pa.Table], dict[str, list[Any] | None], dict[str, list[CopyRange]]]:
        """The chunk rows to add to the batch at ``lsn``, the progress to report with it,
        and the key ranges the chunk read whole (:class:`CopyRange`)."""
        rows: dict[str, pa.Table] = {}
        ranges: dict[str, list[CopyRange]] = {}
        progress, self.announce = self.announce, {}
        if self.pending is not None:
            job, chunk, retry = self.pending
            changed = tables.get(job.table.qualified)
            if changed is not None and changed.num_rows:
                self.window.append(changed)
            if lsn >= chunk.high:
                self.pending = None
                around = [*self.recent, *self.window]
                delivered = chunk.rows if chunk.whole else reconcile(chunk, job.keys, around)
                if not retry:
                    found = copy_range(chunk, job.keys, around)
                    if found is not None:
                        ranges[job.table.qualified] = [found]
                self.recent, self.window = self.window, []
                rows[job.table.qualified] = delivered
                if delivered.num_rows < chunk.rows.num_rows:
                    kept = set(_keys_of(delivered, job.keys))
                    job.retry += [k for k in _keys_of(chunk.rows, job.keys) if k not in kept]
                job.rows += delivered.num_rows
                if not retry:
                    job.chunks += 1
                    job.after = chunk.last_key if chunk.last_key is not None else job.after
                    job.read_all = chunk.last_key is None
                if not job.retry:
                    name = job.table.qualified
                    if job.read_all:
                        del self.jobs[name]
                        progress[name] = None
                        log.info("incremental snapshot of %s done: %d rows", name, job.rows)
                    else:
                        progress[name] = list(job.after or ())
                        log.info(
                            "incremental snapshot of %s: %d of about %d rows",
                            name,
                            job.rows,
                            job.estimate,
                        )
        return rows, progress, ranges
