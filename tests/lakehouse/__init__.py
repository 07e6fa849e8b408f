"""Tests of lakehouse."""
