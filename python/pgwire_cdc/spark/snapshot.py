"""A table read by Spark tasks: CTID block ranges under one exported snapshot.

::

    df = (spark.read.format("pgwire_cdc")
          .option("dsn", dsn).option("table", "public.orders")
          .option("partitions", 8)
          .load())

The result is the table at one point in time: its columns (with a ``publication`` option:
the columns that publication publishes, and only the rows its row filter passes), typed as
:func:`pgwire_cdc.spark.spark_type` types them (``time`` as ``HH:MM:SS.ffffff`` strings).

How: planning exports one snapshot (``pg_export_snapshot()`` in a ``REPEATABLE READ``
transaction) and splits the table's heap into ``partitions`` block ranges —
``ctid < '(b1,0)'``, ``ctid >= '(b1,0)' AND ctid < '(b2,0)'``, ..., ``ctid >= '(bn,0)'``:
no range overlaps and the last is open-ended, so rows in blocks added meanwhile are read
too. Each Spark task opens its own connection, imports the snapshot (``SET TRANSACTION
SNAPSHOT``) and runs ``COPY (SELECT ... WHERE <range>) TO STDOUT (FORMAT BINARY)``; the
Rust COPY decoder turns the bytes into Arrow record batches handed to Spark. No row passes
through the driver, nor through per-row Python. Since every task reads under the same
snapshot, a row that a concurrent UPDATE moves to another block is seen exactly once, in
the block the snapshot sees it in.

A snapshot lives only as long as the transaction that exported it. Spark plans in a
short-lived Python process, so planning starts a small *keeper* process that holds the
exporting transaction open until every partition has been read (then ``keep_seconds``
longer, default 60, so retried or repeated reads of the same DataFrame find it), the Spark
driver exits, or ``snapshot_ttl`` seconds pass (default 86400), whichever comes first. A
task that finds the snapshot gone raises an error saying to load the DataFrame again.
Holding a snapshot holds back VACUUM on the server (as any long transaction does), which is
why the keeper lets go as soon as it can. The ``snapshot`` option reads under a snapshot the
caller exported and keeps alive instead (``delta.run`` uses the one its new replication slot
exports, so the Delta tables and the stream meet exactly at the slot's consistent point).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql

from .. import _native, catalog
from ..catalog import TableInfo
from ..connection import connect
from ..errors import ConfigError, Error
from ..tables import METADATA_COLUMNS, table_of
from .keeper import DONE_CHANNEL, done_payload
from .types import for_spark, spark_schema


class SnapshotGoneError(Error):
    """The snapshot a DataFrame was planned with has ended."""


def describe(conn: psycopg.Connection[Any], table: str, publication: str | None) -> TableInfo:
    """The table as read: with a publication, its published columns and row filter."""
    if publication is None:
        return catalog.table_info(conn, table)
    infos = {t.qualified: t for t in catalog.published_tables(conn, publication)}
    name = table if "." in table else f"public.{table}"
    info = infos.get(name)
    if info is None:
        raise ConfigError(
            f"table {table!r} is not in publication {publication!r}; add it with ALTER "
            f"PUBLICATION {publication} ADD TABLE {table}, or leave the publication option out"
        )
    return info


def _columns(info: TableInfo) -> list[tuple[str, int, int, int, int, bool]]:
    return [
        (c.name, c.type_oid, c.base_type_oid, c.type_modifier, c.base_type_modifier, c.is_key)
        for c in info.columns
    ]


def data_schema(info: TableInfo) -> pa.Schema:
    """The Arrow schema of the rows read (a change table's data columns)."""
    decoder = _native.CopyDecoder(
        info.oid, info.schema, info.name, info.replica_identity, _columns(info), 0
    )
    # An empty COPY BINARY stream: the decoder's empty change table has the schema.
    decoder.feed(b"PGCOPY\n\xff\r\n\x00" + bytes(8) + b"\xff\xff")
    schema = table_of(decoder.finish()).schema
    return pa.schema([f for f in schema if f.name not in METADATA_COLUMNS], schema.metadata)


def partition_queries(conn: psycopg.Connection[Any], info: TableInfo, partitions: int) -> list[str]:
    """One COPY statement per CTID block range (see the module documentation)."""
    blocks = catalog.table_blocks(conn, info.oid)
    return catalog.snapshot_queries(info, partitions, blocks, min_blocks_per_range=1)


def read_partition(
    dsn: str,
    snapshot: str,
    info: TableInfo,
    query: str,
    batch_rows: int = 65_536,
    *,
    index: int,
    consistent_point: int = 0,
    first_ordinal: int = 0,
) -> Iterator[pa.Table]:
    """The rows of one block range (``query``, number ``index`` of the ranges the
    snapshot's keeper waits for), read under ``snapshot``, as change tables of ``read``
    rows (at ``consistent_point``, ``_tx_ordinal`` from ``first_ordinal``) of at most
    about ``batch_rows`` rows each. Tells the keeper when the range has been read."""
    decoder = _native.CopyDecoder(
        info.oid,
        info.schema,
        info.name,
        info.replica_identity,
        _columns(info),
        consistent_point,
        first_ordinal,
    )
    with connect(dsn) as conn:
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            try:
                conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
            except psycopg.errors.InvalidParameterValue as e:
                raise SnapshotGoneError(
                    f"the snapshot this read of {info.qualified} was planned with has ended "
                    "(its keeper stopped, or the exporting session went away): load the "
                    "DataFrame again"
                ) from e
            with conn.cursor().copy(query) as copy:
                for data in copy:
                    decoder.feed(bytes(data))
                    if decoder.rows >= batch_rows:
                        yield table_of(decoder.take())
            yield table_of(decoder.finish())
            conn.execute("SELECT pg_notify(%s, %s)", (DONE_CHANNEL, done_payload(snapshot, index)))


def read_rows(
    dsn: str, snapshot: str, info: TableInfo, query: str, index: int
) -> Iterator[pa.RecordBatch]:
    """:func:`read_partition`'s rows as record batches of the table's columns in Spark's
    types (the batch reader's output)."""
    names = [c.name for c in info.columns]
    for rows in read_partition(dsn, snapshot, info, query, index=index):
        yield from _batches(rows, names)


def _batches(rows: pa.Table, names: list[str]) -> Iterator[pa.RecordBatch]:
    if rows.num_rows == 0:
        return
    data = for_spark(rows.select(names))
    data = data.cast(pa.schema([pa.field(f.name, f.type, True) for f in data.schema]))
    yield from data.to_batches()


def read_schema(info: TableInfo) -> Any:
    """The Spark schema of a batch read of ``info``."""
    return spark_schema(for_spark(data_schema(info).empty_table()).schema)
