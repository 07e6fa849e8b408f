"""Lets Spark 4 find the ``pgwire_cdc`` data source on any session, Spark Connect included,
without a ``register()`` call: Spark imports every top-level module named ``pyspark_*`` it
can see and registers the ``DefaultSource`` it defines under that source's name
(``spark.read.format("pgwire_cdc")``, ``spark.readStream.format("pgwire_cdc")``).
"""

from pgwire_cdc.spark.source import PgwireCdcDataSource as DefaultSource

__all__ = ["DefaultSource"]
