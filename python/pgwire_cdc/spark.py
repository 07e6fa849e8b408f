"""Spark hand-off: change tables to Spark DataFrames through Arrow."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def to_spark(spark: SparkSession, tables: dict[str, pa.Table]) -> dict[str, DataFrame]:
    """One DataFrame per change table: ``createDataFrame`` straight from the Arrow table
    (PySpark 4 takes ``pyarrow.Table``; no pandas, no per-row Python)."""
    return {name: spark.createDataFrame(table) for name, table in tables.items()}
