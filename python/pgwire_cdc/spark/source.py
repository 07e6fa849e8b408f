"""A Spark Structured Streaming source: ``spark.readStream.format("pgwire_cdc")``.

PySpark's Python Data Source API (PySpark 4). Spark usually finds it by itself (the
top-level ``pyspark_pgwire_cdc`` module); where it did not, register it::

    from pgwire_cdc.spark import register
    register(spark)   # nothing to do where Spark found it; session() does it already
    (spark.readStream.format("pgwire_cdc")
        .option("dsn", dsn).option("publication", "pub").option("slot", "spark_slot")
        .option("table", "public.orders")
        .load()
        .writeStream.foreachBatch(apply_batch)
        .option("checkpointLocation", "/data/chk/orders")
        .trigger(availableNow=True).start())

Rows are the change table of ``table`` (docs/change-tables.md, Spark types as in
:mod:`pgwire_cdc.spark.types`).

:class:`SourceOptions` reads the options of both the streaming and the batch source.

Offsets and exact replay
------------------------
An offset is ``{"lsn": N}``. The micro-batch between offsets ``start`` and ``end`` holds
exactly the changes of the transactions whose commit LSN is in ``[start, end)``: the
reader streams the slot up to ``end`` and drops everything outside the range, and the slot
only moves in :meth:`commit` (``pg_replication_slot_advance`` to ``end``, once Spark has
made the batch durable). So a batch that fails, or a query restarted from its checkpoint,
reads the very same rows again. ``latestOffset`` is the server's current WAL position
(with ``Trigger.AvailableNow``: the position when the query started).

The initial snapshot
--------------------
With ``snapshot`` (default ``true``) and no slot yet, the first ``latestOffset`` creates
the slot with an exported snapshot, held by a keeper process
(:mod:`pgwire_cdc.spark.keeper`), and records it in ``snapshot_dir`` (default:
``<temp dir>/pgwire_cdc_snapshots/<slot>``). The first micro-batch, ``{"lsn": -1}`` to the
slot's consistent point, is the table's rows under that snapshot, read by Spark tasks in
``partitions`` CTID ranges (default 4) as ``read`` rows: no row passes through the driver.
A failed task or micro-batch is read again under the same snapshot while the keeper holds
it (until the ranges are read, the Spark application ends, or ``snapshot_ttl`` seconds);
a query restarted from its checkpoint before its first micro-batch completed cannot
replay it and says so (drop the slot and the checkpoint to start over).

Schema changes
--------------
A streaming query's columns are fixed when it starts. Rows come in them by name: a column
dropped at the source is null in later rows, rows from before a column was added have null
in it. A change whose rows the query cannot hold — a column added or renamed (a type
change the query's type cannot take fails its cast) — stops the micro-batch that reaches
it with :class:`SchemaChangedError`, naming the columns and, with the DDL capture
(``batch.schema_changes``), the DDL. Nothing is committed, so the restarted query reads
that micro-batch again, now in the new columns (read from the catalog): the rows from
before the change are then held in them by name too, a renamed column's values under its
new name where the DDL capture told the rename.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc

from .. import admin
from ..catalog import change_table_schema
from ..connection import connect
from ..errors import ConfigError, SlotError
from ..lsn import int_to_lsn, lsn_to_int
from ..schema_changes import SchemaChange
from ..streaming import stream
from . import snapshot as spark_snapshot
from .keeper import export_snapshot
from .types import spark_schema


class SchemaChangedError(ConfigError):
    """The source table's columns changed under a running query: restart it."""


try:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamReader,
        InputPartition,
    )
except ImportError as e:  # pragma: no cover - pyspark is an optional dependency
    raise ImportError(
        "pgwire_cdc.spark.source needs PySpark 4.1 or later: pip install 'pgwire-cdc[spark]'"
    ) from e

try:
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # PySpark 4.1: Spark drives Trigger.AvailableNow through latestOffset.

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """PySpark 4.2's mix-in for ``Trigger.AvailableNow``, absent from 4.1."""


#: The offset before the initial snapshot.
BEFORE_SNAPSHOT = -1
DONE_MARKER = "_DONE.json"


def _flag(value: str) -> bool:
    return value.lower() == "true"


@dataclass(frozen=True)
class SourceOptions:
    """The options of ``format("pgwire_cdc")``, for ``spark.readStream`` (with ``slot``)
    and ``spark.read`` (without)."""

    dsn: str
    table: str
    #: The publication: needed to stream; for a batch read, it limits the columns and rows
    #: to what it publishes.
    publication: str | None = None
    #: The replication slot: streaming. Without it, a batch read.
    slot: str | None = None
    #: Binary tuples (streaming).
    binary: bool = True
    #: Option ``snapshot`` when streaming: ``true`` (default) reads the table's rows first.
    initial_snapshot: bool = True
    #: Option ``snapshot`` of a batch read: an exported snapshot the caller keeps alive.
    snapshot_name: str | None = None
    max_batch_rows: int = 100_000
    #: CTID block ranges the table's rows are read in, one Spark task each.
    partitions: int = 4
    #: Seconds the snapshot keeper holds a snapshot at most.
    snapshot_ttl: float = 86_400.0
    #: Seconds the keeper holds a batch read's snapshot once every range is read.
    keep_seconds: float = 60.0
    #: Where the streaming source records its initial snapshot.
    snapshot_dir: Path = Path()
    #: Option ``failover`` (streaming, PostgreSQL 17+): the slot is a failover slot,
    #: synchronized to standbys, as ``stream(failover=True)`` makes it.
    failover: bool = False

    @property
    def streaming(self) -> bool:
        return self.slot is not None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """The options Spark passes (names as given to ``.option()``)."""
        streaming = bool(options.get("slot"))
        what = "spark.readStream" if streaming else "spark.read"

        def need(name: str) -> str:
            value = options.get(name)
            if not value:
                raise ConfigError(f'{what}.format("pgwire_cdc") needs .option("{name}", ...)')
            return value

        dsn, table = need("dsn"), need("table")
        publication = need("publication") if streaming else options.get("publication")
        slot = options.get("slot") or None
        partitions = int(options.get("partitions", "4"))
        if partitions < 1:
            raise ConfigError("the partitions option must be at least 1")
        snapshot = options.get("snapshot")
        return cls(
            dsn=dsn,
            table=table,
            publication=publication,
            slot=slot,
            binary=_flag(options.get("binary", "true")),
            initial_snapshot=_flag(snapshot or "true") if streaming else True,
            snapshot_name=None if streaming else snapshot or None,
            max_batch_rows=int(options.get("max_batch_rows", "100000")),
            partitions=partitions,
            snapshot_ttl=float(options.get("snapshot_ttl", "86400")),
            keep_seconds=float(options.get("keep_seconds", "60")),
            failover=_flag(options.get("failover", "false")) if streaming else False,
            snapshot_dir=Path(
                options.get("snapshot_dir")
                or os.path.join(tempfile.gettempdir(), "pgwire_cdc_snapshots", slot or "")
            ),
        )


class PgwireCdcDataSource(DataSource):
    """``format("pgwire_cdc")``.

    Streaming (``spark.readStream``): options ``dsn``, ``publication``, ``slot``,
    ``table``; optional ``binary``, ``snapshot``, ``snapshot_dir``, ``max_batch_rows``,
    ``failover``.
    Rows are the table's change table.

    Batch (``spark.read``, no ``slot`` option): ``dsn``, ``table``; optional
    ``partitions`` (default 4), ``publication``, ``snapshot``, ``snapshot_ttl``,
    ``keep_seconds``. Rows are the table's rows at one point in time
    (:mod:`pgwire_cdc.spark.keeper`)."""

    @classmethod
    def name(cls) -> str:
        return "pgwire_cdc"

    def schema(self) -> Any:
        o = SourceOptions.parse(self.options)
        with connect(o.dsn) as conn:
            if not o.streaming:
                return spark_snapshot.read_schema(
                    spark_snapshot.describe(conn, o.table, o.publication)
                )
            assert o.publication is not None
            return spark_schema(change_table_schema(conn, o.publication, o.table))

    def reader(self, schema: Any) -> DataSourceReader:
        return PgwireCdcBatchReader(SourceOptions.parse(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return PgwireCdcStreamReader(SourceOptions.parse(self.options), schema)


class _Blocks(InputPartition):
    """One CTID block range of a batch read."""

    def __init__(self, snapshot: str, query: str, index: int) -> None:
        super().__init__((snapshot, query, index))
        self.snapshot = snapshot
        self.query = query
        self.index = index


class PgwireCdcBatchReader(DataSourceReader):
    """``spark.read.format("pgwire_cdc")``: see :mod:`pgwire_cdc.spark.snapshot`."""

    def __init__(self, options: SourceOptions) -> None:
        self.o = options
        with connect(options.dsn) as conn:
            self.info = spark_snapshot.describe(conn, options.table, options.publication)
            self.queries = spark_snapshot.partition_queries(conn, self.info, options.partitions)

    def partitions(self) -> Sequence[InputPartition]:
        snapshot = self.o.snapshot_name
        if not snapshot:
            snapshot, _, _ = export_snapshot(
                self.o.dsn, self.queries, self.o.snapshot_ttl, self.o.keep_seconds
            )
        return [_Blocks(snapshot, q, i) for i, q in enumerate(self.queries)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Blocks)
        yield from spark_snapshot.read_rows(
            self.o.dsn, partition.snapshot, self.info, partition.query, partition.index
        )


class _Range(InputPartition):
    """The changes committed in ``[start, end)``; for the snapshot micro-batch, one CTID
    range (``query``) of the table under the exported ``snapshot``."""

    def __init__(
        self,
        start: int,
        end: int,
        query: str | None = None,
        snapshot: str | None = None,
        info: Any = None,
        ordinal: int = 0,
        index: int = 0,
    ) -> None:
        super().__init__((start, end, query, index))
        self.start = start
        self.end = end
        self.query = query
        self.index = index
        self.snapshot = snapshot
        self.info = info
        self.ordinal = ordinal


class PgwireCdcStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    def __init__(self, options: SourceOptions, schema: Any) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        assert options.slot is not None and options.publication is not None
        self.o = options
        self.slot, self.publication = options.slot, options.publication
        self.available_now: int | None = None
        # The last offset latestOffset() returned (PySpark 4.1 does not pass the start).
        self._latest: int | None = None
        # What Spark expects of read()'s batches, exactly (list item names, nullability);
        # timestamps in UTC (PySpark 4.1's default, an argument from 4.2 on).
        utc: dict[str, Any] = {"timezone": "UTC"}
        try:
            self.arrow_schema = to_arrow_schema(schema, **utc)
        except TypeError:
            self.arrow_schema = to_arrow_schema(schema)
        if options.failover:
            with self._connect() as conn:
                admin.raise_problems(
                    admin.failover_problems(
                        admin.server_info(conn), admin.get_slot(conn, self.slot)
                    ),
                    "option failover=true not possible",
                )

    # -- driver side -----------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        return connect(self.o.dsn)

    def initialOffset(self) -> dict[str, int]:
        with self._connect() as conn:
            slot = admin.get_slot(conn, self.slot)
        if slot is not None:
            admin.check_slot_usable(slot)
            staged = self._staged_point()
            if staged is not None:
                return {"lsn": BEFORE_SNAPSHOT}
            return {"lsn": slot.confirmed_flush_lsn or 0}
        return {"lsn": BEFORE_SNAPSHOT if self.o.initial_snapshot else self._create_slot()}

    def _start_without_offset(self) -> int:
        with self._connect() as conn:
            slot = admin.get_slot(conn, self.slot)
        if slot is None:
            return BEFORE_SNAPSHOT if self.o.initial_snapshot else self._create_slot()
        # The slot exists once the snapshot is staged, and the snapshot batch was planned
        # then (the offset log holds it, for Spark to replay).
        return max(slot.confirmed_flush_lsn or 0, self._latest or 0)

    def _create_slot(self) -> int:
        with self._connect() as conn:
            if self.o.failover:  # PostgreSQL 17+ (checked when the reader was made)
                conn.execute(
                    "SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, false, true)",
                    (self.slot,),
                )
            else:
                conn.execute(
                    "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (self.slot,)
                )
            slot = admin.get_slot(conn, self.slot)
        assert slot is not None and slot.confirmed_flush_lsn is not None
        return slot.confirmed_flush_lsn

    def _current_lsn(self) -> int:
        with self._connect() as conn:
            # On a standby: how far it has replayed (pg_current_wal_lsn() fails there).
            row = conn.execute(
                "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()"
                " ELSE pg_current_wal_lsn() END::text"
            ).fetchone()
        assert row is not None
        return lsn_to_int(row[0])

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now = self._current_lsn()

    def latestOffset(
        self, start: dict[str, int] | None = None, limit: Any = None
    ) -> dict[str, int]:
        # PySpark 4.2+ passes the batch's start; 4.1 calls latestOffset() alone: then the
        # snapshot batch is due while the slot does not exist yet (or its staged files
        # wait), and offsets never go below the slot's confirmed position.
        begin = int(start["lsn"]) if start is not None else self._start_without_offset()
        if begin == BEFORE_SNAPSHOT:
            point = self._staged_point()
            if point is None:
                point = self._stage_snapshot()
            self._latest = point
            return {"lsn": point}
        end = self._current_lsn() if self.available_now is None else self.available_now
        self._latest = max(begin, end)
        return {"lsn": self._latest}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        begin, stop = int(start["lsn"]), int(end["lsn"])
        if begin == BEFORE_SNAPSHOT:
            marker = self._marker()
            if marker is None or int(marker["consistent_point"]) != stop:
                raise SlotError(
                    f"the initial snapshot recorded in {self._snapshot_path()} is missing or "
                    "belongs to another slot; the first micro-batch cannot be replayed. "
                    "Start over: drop the slot and the checkpoint"
                )
            with self._connect() as conn:
                info = spark_snapshot.describe(conn, self.o.table, self.publication)
            # Ordinals of different ranges never meet: 2^40 rows per range.
            return [
                _Range(begin, stop, q, marker["snapshot"], info, i << 40, i)
                for i, q in enumerate(marker["queries"])
            ]
        return [_Range(begin, stop)]

    def commit(self, end: dict[str, int]) -> None:
        lsn = int(end["lsn"])
        if lsn <= 0:
            return
        with self._connect() as conn:
            slot = admin.get_slot(conn, self.slot)
            if slot is None:
                raise SlotError(f"replication slot {self.slot!r} is gone")
            if (slot.confirmed_flush_lsn or 0) < lsn:
                self._advance(conn, lsn)
        if self.o.failover and not slot.failover:
            self._make_failover()

    def _advance(self, conn: psycopg.Connection[Any], lsn: int) -> None:
        # The walsender of the batch's reader may still be letting go of the slot.
        deadline = time.monotonic() + 30
        while True:
            try:
                conn.execute(
                    "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                    (self.slot, int_to_lsn(lsn)),
                )
                return
            except psycopg.errors.ObjectInUse:
                if time.monotonic() > deadline:
                    raise SlotError(
                        f"replication slot {self.slot!r} is in use by another "
                        "session; stop the other consumer of this slot"
                    ) from None
                time.sleep(0.1)

    def _make_failover(self) -> None:
        """Sets the failover flag on the slot, which a slot made with its initial snapshot
        (by the keeper's replication session) lacks. Only an idle slot takes it: here,
        between micro-batches; if a reader holds it again already, the next commit
        tries again."""
        try:
            admin.set_failover(self.o.dsn, self.slot)
        except SlotError as e:
            if e.sqlstate != "55006":  # object_in_use
                raise

    def stop(self) -> None:
        pass

    # -- the initial snapshot ----------------------------------------------------------

    def _snapshot_path(self) -> Path:
        return self.o.snapshot_dir

    def _marker(self) -> dict[str, Any] | None:
        marker = self._snapshot_path() / DONE_MARKER
        if not marker.exists():
            return None
        doc: dict[str, Any] = json.loads(marker.read_text())
        if doc.get("slot") != self.slot or doc.get("table") != self.o.table:
            return None
        return doc

    def _staged_point(self) -> int | None:
        doc = self._marker()
        return None if doc is None else int(doc["consistent_point"])

    def _stage_snapshot(self) -> int:
        """Creates the slot with an exported snapshot held by a keeper process, and
        records it (see the module documentation)."""
        path = self._snapshot_path()
        with self._connect() as conn:
            if admin.get_slot(conn, self.slot) is not None:
                raise SlotError(
                    f"slot {self.slot!r} exists but no initial snapshot is recorded in "
                    f"{path}: drop the slot to take a new snapshot, or set "
                    ".option('snapshot', 'false')"
                )
            info = spark_snapshot.describe(conn, self.o.table, self.publication)
            queries = spark_snapshot.partition_queries(conn, info, self.o.partitions)
        snapshot, point, _ = export_snapshot(
            self.o.dsn, queries, self.o.snapshot_ttl, 60.0, slot=self.slot
        )
        assert point is not None
        path.mkdir(parents=True, exist_ok=True)
        (path / DONE_MARKER).write_text(
            json.dumps(
                {
                    "slot": self.slot,
                    "table": self.o.table,
                    "consistent_point": point,
                    "snapshot": snapshot,
                    "queries": queries,
                }
            )
        )
        return point

    # -- executor side ----------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Range)
        if partition.start == BEFORE_SNAPSHOT:
            if partition.query and partition.snapshot:
                for rows in spark_snapshot.read_partition(
                    self.o.dsn,
                    partition.snapshot,
                    partition.info,
                    partition.query,
                    index=partition.index,
                    consistent_point=partition.end,
                    first_ordinal=partition.ordinal,
                ):
                    if rows.num_rows:
                        yield from self._for_spark(rows)
            return
        yield from self._changes(partition.start, partition.end)

    def _changes(self, start: int, end: int) -> Iterator[pa.RecordBatch]:
        if end <= start:
            return
        for batch in stream(
            self.o.dsn,
            publication=self.publication,
            slot=self.slot,
            snapshot=False,
            binary=self.o.binary,
            until_lsn=end,
            max_batch_rows=self.o.max_batch_rows,
        ):
            # Never acked here: only commit() moves the slot.
            ddl = [c for c in batch.schema_changes if c.table == self.o.table]
            for key, table in batch.tables.items():
                if key.split("@", 1)[0] != self.o.table:
                    continue
                commit = table["_commit_lsn"]
                table = table.filter(pc.and_(pc.greater_equal(commit, start), pc.less(commit, end)))
                if not table.num_rows:
                    continue
                yield from self._for_spark(self._in_query_columns(table, ddl))

    def _in_query_columns(self, table: pa.Table, ddl: Sequence[SchemaChange]) -> pa.Table:
        """Rows of a change table in the query's columns (see the module documentation):
        a column the query lacks stops it, unless the query already reads the table as the
        catalog describes it now (the rows are from before a DDL: a renamed column takes
        its new name, a dropped one goes)."""
        renamed = {
            old: new for c in ddl if c.kind == "rename_column" for new, old in c.renamed.items()
        }
        if any(c in renamed for c in table.column_names):
            table = table.rename_columns([renamed.get(c, c) for c in table.column_names])
        names = set(self.arrow_schema.names)
        unknown = [c for c in table.column_names if c not in names]
        if not unknown:
            return table
        with connect(self.o.dsn) as conn:
            assert self.publication is not None
            now = change_table_schema(conn, self.publication, self.o.table).names
        if set(now) != names:
            told = "; ".join(f"{c.kind} {', '.join(c.columns)}".strip() for c in ddl)
            raise SchemaChangedError(
                f"the columns of {self.o.table} changed (ALTER TABLE{': ' + told if told else ''}):"
                f" {', '.join(unknown)} not among the query's columns. Restart the query: it"
                " reads the new columns, from this micro-batch on (rows from before the change"
                " have null in the columns they lacked)"
            )
        return table.drop_columns(unknown)

    def _for_spark(self, table: pa.Table) -> Iterator[pa.RecordBatch]:
        """``table`` in the query's schema: its columns by name, null where it lacks one."""
        columns = []
        for field in self.arrow_schema:
            if field.name not in table.column_names:
                columns.append(pa.nulls(table.num_rows, field.type))
                continue
            column = table[field.name]
            if pa.types.is_dictionary(column.type):
                column = column.dictionary_decode()
            columns.append(column.cast(field.type))
        plain = pa.Table.from_arrays(columns, schema=self.arrow_schema)
        yield from plain.to_batches()
