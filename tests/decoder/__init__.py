"""The decoder: golden captures, malformed input, change tables, values against PostgreSQL."""
