"""Change tables in Spark's types: the floor of :mod:`pgwire_cdc.spark` (it imports
nothing else of the package but its errors and the stored column types of
:mod:`pgwire_cdc.lakehouse.shape`), so :meth:`pgwire_cdc.Batch.to_spark` and the
Delta writers use it without the rest of the Spark support.

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

from ..errors import ConfigError
from ..lakehouse.shape import has_time as has_time
from ..lakehouse.shape import times_as_strings

#: The table as Spark takes it: time columns as ``HH:MM:SS.ffffff`` strings (see the module
#: documentation; the types a lakehouse table stores have them so too).
for_spark = times_as_strings

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


def to_spark(spark: SparkSession, tables: dict[str, pa.Table]) -> dict[str, DataFrame]:
    """One DataFrame per change table: ``createDataFrame`` straight from the Arrow table
    with its exact Spark schema (no pandas, no per-row Python)."""
    return {
        name: spark.createDataFrame(for_spark(table), schema=spark_schema(table.schema))
        for name, table in tables.items()
    }
