"""Spark hand-off: change tables to Spark DataFrames through Arrow.

``createDataFrame`` takes the ``pyarrow.Table`` itself (PySpark 4), with an explicit Spark
schema built from the Arrow schema, so every type lands where it belongs rather than where
Spark's inference would put it:

==============================  ===============================================
Arrow                           Spark
==============================  ===============================================
bool, int16/32/64               boolean, short, int, long
float32 / float64               float, double (NaN and ±Infinity kept)
decimal128(p, s)                decimal(p, s)
string (also dictionary)        string
binary                          binary
date32                          date
time64[us]                      string ``HH:MM:SS.ffffff`` (see below)
timestamp[us]                   timestamp_ntz (wall-clock time, no zone)
timestamp[us, tz=UTC]           timestamp (an instant; shown in the session time
                                zone, so run Spark with ``spark.sql.session.timeZone
                                = UTC`` to see PostgreSQL's UTC values as they are)
struct (interval, ``_before``)  struct of the same fields
list<T>                         array<T>
==============================  ===============================================

``time`` columns: Spark's own TIME type (4.1+) is off by default
(``spark.sql.timeType.enabled``), Parquet files holding it fail on an ordinary session
(``UNSUPPORTED_TIME_TYPE``) and Delta Lake has no time type at all. So a ``time`` value
reaches Spark as a fixed-width string, ``13:45:00.000000``: every reader reads it,
strings sort in time order, and ``to_timestamp(col, 'HH:mm:ss.SSSSSS')`` or a cast to
Spark's TIME type turns it back. The change tables themselves keep ``time64[us]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.types as pat

from .errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType


def spark_type(arrow: pa.DataType) -> DataType:
    """The Spark type of an Arrow type of a change table."""
    from pyspark.sql import types as T

    if pat.is_dictionary(arrow):
        return spark_type(arrow.value_type)
    simple: list[tuple[Any, Any]] = [
        (pat.is_boolean, T.BooleanType),
        (pat.is_int8, T.ByteType),
        (pat.is_int16, T.ShortType),
        (pat.is_int32, T.IntegerType),
        (pat.is_int64, T.LongType),
        (pat.is_float32, T.FloatType),
        (pat.is_float64, T.DoubleType),
        (pat.is_string, T.StringType),
        (pat.is_large_string, T.StringType),
        (pat.is_binary, T.BinaryType),
        (pat.is_large_binary, T.BinaryType),
        (pat.is_date32, T.DateType),
    ]
    for test, make in simple:
        if test(arrow):
            made: DataType = make()
            return made
    if pat.is_decimal(arrow):
        return T.DecimalType(arrow.precision, arrow.scale)
    if pat.is_timestamp(arrow):
        return T.TimestampType() if arrow.tz is not None else T.TimestampNTZType()
    if pat.is_time64(arrow):
        return T.StringType()  # see the module docs
    if pat.is_struct(arrow):
        return T.StructType([T.StructField(f.name, spark_type(f.type), True) for f in arrow])
    if pat.is_list(arrow) or pat.is_large_list(arrow):
        return T.ArrayType(spark_type(arrow.value_type), True)
    raise ConfigError(f"no Spark type for the Arrow type {arrow}")


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of a change table (or of its data columns); every column nullable."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(f.name, spark_type(f.type), True) for f in schema])


def _has_time(arrow: pa.DataType) -> bool:
    if pat.is_time(arrow):
        return True
    if pat.is_struct(arrow):
        return any(_has_time(f.type) for f in arrow)
    if pat.is_list(arrow) or pat.is_large_list(arrow):
        return _has_time(arrow.value_type)
    return False


def _time_as_string(arrow: pa.DataType) -> pa.DataType:
    """``arrow`` with every time type (nested ones too) replaced by string."""
    if pat.is_time(arrow):
        return pa.string()
    if pat.is_struct(arrow):
        return pa.struct([f.with_type(_time_as_string(f.type)) for f in arrow])
    if pat.is_list(arrow):
        return pa.list_(arrow.value_field.with_type(_time_as_string(arrow.value_type)))
    if pat.is_large_list(arrow):
        return pa.large_list(arrow.value_field.with_type(_time_as_string(arrow.value_type)))
    return arrow


def for_spark(table: pa.Table) -> pa.Table:
    """The table as Spark takes it: time columns as ``HH:MM:SS.ffffff`` strings (cast by
    Arrow, no per-row Python); other columns as they are."""
    if not any(_has_time(f.type) for f in table.schema):
        return table
    schema = pa.schema(
        [f.with_type(_time_as_string(f.type)) for f in table.schema], metadata=table.schema.metadata
    )
    return table.cast(schema)


def to_spark(spark: SparkSession, tables: dict[str, pa.Table]) -> dict[str, DataFrame]:
    """One DataFrame per change table: ``createDataFrame`` straight from the Arrow table
    with its exact Spark schema (no pandas, no per-row Python)."""
    return {
        name: spark.createDataFrame(for_spark(table), schema=spark_schema(table.schema))
        for name, table in tables.items()
    }


#: The Delta Lake build for the pinned PySpark minor version (4.1): Delta publishes one
#: artifact per Spark minor version, and a mismatch fails at run time.
DELTA_SPARK_PACKAGE = "io.delta:delta-spark_4.1_2.13:4.4.0"
#: A directory of Delta Lake jars (``make jars`` fills ``.cache/jars/delta``): used
#: instead of resolving DELTA_SPARK_PACKAGE from Maven Central at session start.
DELTA_JARS_ENV = "PGWIRE_CDC_DELTA_JARS"


def delta_jars() -> list[str]:
    """The jars of $PGWIRE_CDC_DELTA_JARS that Spark does not ship itself (Spark's own
    copies of Hadoop, Parquet, Jackson, Scala... win)."""
    import glob
    import os

    import pyspark

    folder = os.environ.get(DELTA_JARS_ENV)
    if not folder:
        return []
    jars = sorted(glob.glob(os.path.join(folder, "*.jar")))
    if not jars:
        raise ConfigError(
            f"${DELTA_JARS_ENV} is {folder!r} but holds no jars; run `make jars` or unset it"
        )

    def artifact(path: str) -> str:
        return os.path.basename(path).rsplit("-", 1)[0]

    spark_jars = os.path.join(os.path.dirname(pyspark.__file__), "jars", "*.jar")
    shipped = {artifact(j) for j in glob.glob(spark_jars)}
    return [j for j in jars if artifact(j) not in shipped]


def session(
    app_name: str = "pgwire_cdc", master: str = "local[*]", delta: bool = False, **conf: str
) -> SparkSession:
    """A Spark session set up the way the hand-off expects: UTC session time zone and
    Arrow transfers on. For a local master, Spark's Python workers run this interpreter
    (``spark.pyspark.python``), so they import pgwire_cdc without an activated virtual
    environment; executors of a cluster need the package installed.

    The ``pgwire_cdc`` data source is registered on it (:func:`register`).
    ``delta=True`` configures Delta Lake: the jars of ``$PGWIRE_CDC_DELTA_JARS`` when set
    (``make jars``), else ``spark.jars.packages`` resolves ``DELTA_SPARK_PACKAGE`` from
    Maven Central, plus Delta's SQL extension and catalog. Extra ``conf`` entries
    (``**{"spark.key": "value"}``) are passed through."""
    import os
    import sys

    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    if master.startswith("local"):
        # PySpark reads the variable (RDD functions) and the JVM the setting (SQL UDFs,
        # data sources); a choice the user made already stays.
        python = os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = builder.config("spark.pyspark.python", python)
        # One machine: a few shuffle partitions, not 200 (nor Delta's 50 for its log).
        builder = builder.config("spark.sql.shuffle.partitions", "4")
        builder = builder.config("spark.databricks.delta.snapshotPartitions", "2")
    if delta:
        jars = delta_jars()
        if jars:
            builder = builder.config("spark.jars", ",".join(jars))
        else:
            builder = builder.config("spark.jars.packages", DELTA_SPARK_PACKAGE)
        builder = builder.config(
            "spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension"
        ).config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def register(spark: SparkSession) -> None:
    """Registers the ``pgwire_cdc`` data source on ``spark``: ``spark.read`` (a table
    read by Spark tasks under one snapshot, :mod:`pgwire_cdc.spark_snapshot`) and
    ``spark.readStream`` (changes, :mod:`pgwire_cdc.spark_source`)."""
    from .spark_source import register as register_source

    register_source(spark)
