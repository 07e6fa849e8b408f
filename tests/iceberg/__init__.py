"""Tests of iceberg."""
