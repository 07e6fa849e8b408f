"""Spark sessions set up for pgwire_cdc: :func:`session` (UTC, Arrow transfers, Delta
Lake's jars on request) and :func:`register` (the ``pgwire_cdc`` data source)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ConfigError
from .jars import DELTA_SPARK_PACKAGE

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


#: A directory of Delta Lake jars (``pgwire-cdc jars DIR`` fills one, ``make jars``
#: ``.cache/jars/delta``): used instead of resolving DELTA_SPARK_PACKAGE from Maven
#: Central at session start.
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
            f"${DELTA_JARS_ENV} is {folder!r} but holds no jars: fill it with "
            f"`pgwire-cdc jars {folder}`, or unset it"
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
    (``pgwire-cdc jars DIR``), else ``spark.jars.packages`` resolves ``DELTA_SPARK_PACKAGE`` from
    Maven Central (a :class:`ConfigError` naming ``pgwire-cdc jars`` when that fails),
    plus Delta's SQL extension and catalog. Extra ``conf`` entries
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
    resolves = False
    if delta:
        jars = delta_jars()
        resolves = not jars
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
    try:
        spark = builder.getOrCreate()
    except Exception as e:
        if resolves and getattr(e, "getCondition", lambda: None)() == "JAVA_GATEWAY_EXITED":
            raise ConfigError(
                f"Spark did not start while resolving Delta Lake ({DELTA_SPARK_PACKAGE}, "
                "through spark.jars.packages from Maven Central; Ivy's messages above say "
                "why). Download the jars once instead: `pgwire-cdc jars DIR`, then "
                f"`export {DELTA_JARS_ENV}=DIR`"
            ) from e
        raise
    register(spark)
    return spark


def register(spark: SparkSession) -> None:
    """Registers the ``pgwire_cdc`` data source on ``spark``: ``spark.read`` (a table
    read by Spark tasks under one snapshot, :mod:`pgwire_cdc.spark.snapshot`) and
    ``spark.readStream`` (changes): :mod:`pgwire_cdc.spark.source`."""
    from pyspark.errors import AnalysisException

    from .source import PgwireCdcDataSource

    try:
        spark.dataSource.register(PgwireCdcDataSource)
    except AnalysisException as e:
        # Spark found it by itself (the top-level pyspark_pgwire_cdc module) and does not
        # let a session register a source of the same name over it: it is there.
        if e.getCondition() != "DATA_SOURCE_ALREADY_EXISTS":
            raise
