"""The Delta Lake sink."""
