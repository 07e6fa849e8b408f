"""Tests of wheels."""
