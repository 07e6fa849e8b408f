"""What the Delta and Iceberg sinks share: the lakehouse sink, positions, `pipeline.run`."""
