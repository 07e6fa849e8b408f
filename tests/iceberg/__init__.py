"""The Iceberg sink."""
