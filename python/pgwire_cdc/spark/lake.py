"""The Spark side of the lakehouse sinks: a source table's initial snapshot as a Spark
DataFrame read by tasks under an exported snapshot (``format("pgwire_cdc")``, CTID
ranges), for a table format to write straight from the tasks to its files."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pyarrow as pa

from ..errors import ConnectionError
from ..lakehouse.shape import lake_shape

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..lakehouse.format import TableFormat
    from ..lakehouse.positions import Mark
    from ..streaming import StreamOptions


def copier(
    tables: TableFormat,
    spark: SparkSession,
    dsn: str,
    options: StreamOptions,
    save: Callable[[str, DataFrame, Mark | None], None],
) -> Callable[[str, str, Mark | None], None]:
    """:meth:`~pgwire_cdc.lakehouse.format.TableFormat.copier` of a format that writes
    through ``spark``: ``copy(name, snapshot, mark)`` reads the source table under the
    exported snapshot (:func:`snapshot_frame`), makes its table when missing, and has
    ``save(ref, frame, mark)`` write the rows over it in one commit recording ``mark``."""
    publications = options.publications
    publication = publications[0] if len(publications) == 1 else None

    def copy(name: str, snapshot: str, mark: Mark | None) -> None:
        ref = tables.ref(name)
        # Spark's planner runs the data source in a Python worker already when the read
        # is made: a worker without the package fails there.
        with package_errors():
            schema, frame = snapshot_frame(spark, dsn, name, publication, snapshot)
        if not tables.exists(ref):
            tables.create(ref, schema)
        with package_errors():
            save(ref, frame, mark)

    return copy


def snapshot_frame(
    spark: SparkSession, dsn: str, name: str, publication: str | None, snapshot: str
) -> tuple[pa.Schema, DataFrame]:
    """The rows of the source table ``name`` under the exported ``snapshot``, read by as
    many Spark tasks as the session runs at once, and the schema a lakehouse table of
    them has (:func:`~pgwire_cdc.lakehouse.shape.lake_shape`)."""
    from ..connection import connect
    from . import snapshot as spark_snapshot
    from .sessions import default_parallelism, register

    # Spark may not have found the data source by itself on a session of the user's own.
    register(spark)
    with connect(dsn) as conn:
        info = spark_snapshot.describe(conn, name, publication)
    schema = lake_shape(spark_snapshot.data_schema(info).empty_table()).schema
    reader = (
        spark.read.format("pgwire_cdc")
        .option("dsn", dsn)
        .option("table", name)
        .option("snapshot", snapshot)
        .option("partitions", str(default_parallelism(spark)))
    )
    if publication is not None:
        reader = reader.option("publication", publication)
    return schema, reader.load()


@contextmanager
def package_errors() -> Iterator[None]:
    """Turns Spark's failure to find the package on its workers into the error that says
    how to make it found (:func:`~pgwire_cdc.spark.sessions.missing_package_error`), and a
    task's finding that the exported snapshot ended into a :class:`ConnectionError` (the
    stream then says that a new run takes a new snapshot)."""
    from .sessions import missing_package_error

    try:
        yield
    except Exception as e:
        clear: Exception | None = missing_package_error(e)
        if clear is None and SNAPSHOT_GONE in str(e):
            # A task found the exported snapshot ended: its replication connection went
            # (the walsender was ended, the server restarted) while Spark read the copy.
            clear = ConnectionError(
                "the exported snapshot ended while Spark tasks read the initial copy (its"
                " replication connection went)"
            )
        if clear is None:
            raise
        raise clear from e


#: The name of the error a Spark task raises when the snapshot it reads under has ended
#: (:class:`~pgwire_cdc.spark.snapshot.SnapshotGoneError`), as Spark's error text holds it.
SNAPSHOT_GONE = "SnapshotGoneError"
