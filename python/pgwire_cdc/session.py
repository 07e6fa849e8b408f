"""Session settings every connection pgwire_cdc opens applies.

pgoutput's text format is each type's output function, run in the session that decodes
(the walsender, or the backend calling ``pg_logical_slot_*_changes``), so its settings
decide how dates, intervals, floats, bytea and money are printed. The value parsers read
every form PostgreSQL can print, but these settings make text and binary decoding agree
where the form carries information the binary value does not (money's currency format).
"""

from __future__ import annotations

from typing import Any

#: Setting name -> value.
SESSION_SETTINGS: dict[str, str] = {
    "DateStyle": "ISO",
    "IntervalStyle": "postgres",
    "TimeZone": "UTC",
    "extra_float_digits": "3",
    "bytea_output": "hex",
    "lc_monetary": "C",
    "client_encoding": "UTF8",
}


def libpq_options() -> str:
    """The settings as a libpq ``options`` string (``-c name=value ...``)."""
    return " ".join(f"-c {name}={value}" for name, value in SESSION_SETTINGS.items())


def apply(conn: Any) -> None:
    """Apply the settings to an open psycopg connection (``SET``; quoted, not formatted
    into SQL)."""
    for name, value in SESSION_SETTINGS.items():
        conn.execute("SELECT set_config(%s, %s, false)", (name, value))
