"""Spark hand-off: change tables to Spark DataFrames through Arrow, Spark sessions, and
the ``pgwire_cdc`` data source.

* :mod:`~pgwire_cdc.spark.types`: :func:`to_spark`, :func:`spark_schema`,
  :func:`spark_type`, :func:`for_spark` (the Arrow -> Spark type mapping);
* :mod:`~pgwire_cdc.spark.sessions`: :func:`session`, :func:`register`, and for a
  process spark-submit started, :func:`in_spark_job` and :func:`job_session`;
* :mod:`~pgwire_cdc.spark.source`: ``format("pgwire_cdc")``, batch and streaming;
* :mod:`~pgwire_cdc.spark.snapshot`: a table read by Spark tasks under one snapshot;
* :mod:`~pgwire_cdc.spark.keeper`: the process that holds that snapshot;
* :mod:`~pgwire_cdc.spark.jars`: the pinned Delta Lake and Iceberg jars, and the
  download of Delta's;
* :mod:`~pgwire_cdc.spark.submit`: the driver script that runs ``pgwire-cdc run`` as a
  Spark job (spark-submit takes a file, not ``-m``).

This package re-exports the public names of the first two; the data source needs PySpark
when it is imported, the others only when called.
"""

from __future__ import annotations

from .jars import DELTA_SPARK_PACKAGE, ICEBERG_SPARK_PACKAGE
from .sessions import (
    DELTA_JARS_ENV,
    ICEBERG_JARS_ENV,
    delta_jars,
    iceberg_jars,
    in_spark_job,
    job_session,
    register,
    session,
)
from .types import for_spark, spark_schema, spark_type, to_spark

__all__ = [
    "DELTA_JARS_ENV",
    "DELTA_SPARK_PACKAGE",
    "ICEBERG_JARS_ENV",
    "ICEBERG_SPARK_PACKAGE",
    "delta_jars",
    "for_spark",
    "iceberg_jars",
    "in_spark_job",
    "job_session",
    "register",
    "session",
    "spark_schema",
    "spark_type",
    "to_spark",
]
