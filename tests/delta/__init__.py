"""Tests of delta."""
