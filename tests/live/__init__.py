"""`stream()` against live servers."""
