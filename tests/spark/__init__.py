"""Spark: `to_spark`, the data source, clusters, Spark Connect, the jars."""
