"""`admin`, `catalog` and `check` against live servers."""
