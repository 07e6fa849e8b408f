"""verify's source side read by Spark tasks (:mod:`pgwire_cdc.lakehouse.verify`).

A big source table is read as the Spark snapshot reads one (:mod:`.snapshot`): CTID block
ranges, one per task, each read under verify's exported snapshot by a connection of the
task's own and the Rust COPY decoder. A task writes the rows of its range to an Arrow IPC
file in verify's spill directory (read back later only for the keys changes after the
snapshot touched, and for a repair's rows) and hands the driver, per row, the key's and
the values' 64-bit digests: 16 bytes a row instead of the row. Smaller tables are read in
verify's own process the same way, one range each. The spill directory must be one that
the tasks and verify's process both see (a local session's, or a shared file system).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from ..catalog import TableInfo
from ..connection import connect
from ..errors import ConfigError
from ..lakehouse.digests import KEY_DIGEST, ROW_DIGEST, Spill, digests
from ..lakehouse.shape import data_columns, lake_shape
from ..lakehouse.verify import SourceReader
from ..tables import key_columns

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: A table of at least this many 8 KiB blocks (100 MiB: some million rows of a narrow
#: table) is read by Spark tasks by default; a smaller one in verify's process.
SPARK_MIN_BLOCKS = 12_800


@dataclass(frozen=True)
class RangeReader:
    """A Spark task's work (picklable): each input row ``(index, query)`` names a block
    range, read under ``snapshot`` into the file ``table-<number>-<index>.arrow`` of
    ``directory``; the output is the digests of its rows (``_end`` false), then one row
    for the range (``_end`` true: ``_k`` its index, ``_d`` its row count), so the driver
    knows the files."""

    dsn: str
    snapshot: str
    info: TableInfo
    consistent_point: int
    directory: str
    number: int

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index, query in zip(batch["i"].to_pylist(), batch["q"].to_pylist(), strict=True):
                yield from self.read(int(index), str(query))

    def read(self, index: int, query: str) -> Iterator[pa.RecordBatch]:
        from .snapshot import read_partition

        part = Spill(self.directory, f"{self.number}-{index}")
        rows = 0
        for table in read_partition(
            self.dsn,
            self.snapshot,
            self.info,
            query,
            index=index,
            consistent_point=self.consistent_point,
        ):
            shaped = lake_shape(table)
            if shaped.num_rows == 0:
                continue
            part.write(shaped)
            rows += shaped.num_rows
            found = digests(shaped, key_columns(shaped), data_columns(shaped))
            n = found.num_rows
            keyed = KEY_DIGEST in found.column_names
            k = found[KEY_DIGEST].combine_chunks() if keyed else pa.nulls(n, pa.int64())
            d = found[ROW_DIGEST].combine_chunks()
            yield _output(k, d, pa.repeat(False, n))
        part.close()
        closing = (pa.array([index], pa.int64()), pa.array([rows], pa.int64()))
        yield _output(*closing, pa.repeat(True, 1))


def _output(k: pa.Array, d: pa.Array, end: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([k, d, end], names=[KEY_DIGEST, ROW_DIGEST, "_end"])


def source_reader(
    spark: SparkSession,
    dsn: str,
    publication: str | None,
    min_blocks: int = SPARK_MIN_BLOCKS,
    tasks_at_once: int | None = None,
) -> SourceReader:
    """verify's reader of source tables: of at least ``min_blocks`` blocks by Spark tasks
    (as many ranges as the session runs tasks at once, ``tasks_at_once`` when known),
    smaller ones in this process."""
    from .. import catalog
    from .lake import package_errors
    from .sessions import default_parallelism, register
    from .snapshot import describe, partition_queries

    # Asked of Spark once, by the first table it reads.
    parallelism: list[int] = [tasks_at_once] if tasks_at_once is not None else []
    registered: list[bool] = []

    def read(name: str, snapshot: str, consistent_point: int, spill: Spill) -> None:
        with connect(dsn) as conn:
            info = describe(conn, name, publication)
            blocks = catalog.table_blocks(conn, info.oid)
            if blocks >= min_blocks and not registered:
                register(spark)  # a worker needs the package; the session may not have it
                registered.append(True)
                if not parallelism:
                    parallelism.append(default_parallelism(spark))
            tasks = parallelism[0] if blocks >= min_blocks else 1
            queries = partition_queries(conn, info, tasks)
        directory = str(spill.path.parent)
        number = int(spill.path.stem.rsplit("-", 1)[-1])
        reader = RangeReader(dsn, snapshot, info, consistent_point, directory, number)
        if len(queries) == 1 and blocks < min_blocks:
            out = pa.Table.from_batches(list(reader.read(0, queries[0])))
        else:
            frame = spark.createDataFrame(list(enumerate(queries)), "i int, q string")
            schema = f"{KEY_DIGEST} long, {ROW_DIGEST} long, _end boolean"
            # A worker without the package fails with an error that says how to fix it.
            with package_errors():
                out = frame.repartition(len(queries)).mapInArrow(reader, schema).toArrow()
        _adopt(spill, info, out, directory, number)

    return read


def verify_reader(
    spark: SparkSession | None, dsn: str, publication: str | None, spark_source: bool | None
) -> SourceReader | None:
    """The source reader of ``verify(spark_source=...)``: every table by Spark tasks with
    ``True``; None (verify's stream reads the source) without a session or with
    ``False``. By default (None), tables of at least :data:`SPARK_MIN_BLOCKS` blocks by
    Spark tasks when the session runs more tasks at once than this machine has cores (a
    cluster): on one machine verify's own reader is faster (benches/verify.py)."""
    if spark is None or spark_source is False:
        return None
    if spark_source:
        return source_reader(spark, dsn, publication, 0)
    from .sessions import default_parallelism

    tasks = default_parallelism(spark)
    if tasks <= (os.cpu_count() or 1):
        return None
    return source_reader(spark, dsn, publication, SPARK_MIN_BLOCKS, tasks)


def _adopt(spill: Spill, info: TableInfo, out: pa.Table, directory: str, number: int) -> None:
    """``spill`` made of the tasks' files and digests ``out``."""
    ends = out["_end"]
    closing = out.filter(ends)
    found = out.filter(pc.invert(ends))
    del out
    counts = closing[ROW_DIGEST].to_pylist()
    parts = [Path(directory) / f"table-{number}-{i}.arrow" for i in closing[KEY_DIGEST].to_pylist()]
    for path, count in zip(parts, counts, strict=True):
        if count and not path.exists():
            raise ConfigError(
                f"{info.qualified}: the file a Spark task wrote its rows to is not here"
                f" ({path}): give verify a spill directory the tasks and this process both"
                " see (spill_dir=...), or spark_source=False"
            )
    change_schema = lake_shape(info.change_table_schema().empty_table()).schema
    keyed = key_columns(change_schema.empty_table()) is not None
    columns = [KEY_DIGEST, ROW_DIGEST] if keyed else [ROW_DIGEST]
    spill.adopt(parts, change_schema, sum(counts), found.select(columns))
