"""Tests of decoder."""
