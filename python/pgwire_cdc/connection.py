"""The one way pgwire_cdc opens a psycopg connection, and the session settings it applies.

Every setup, catalog, snapshot and admin connection goes through :func:`connect`: a
malformed connection string is a :class:`~pgwire_cdc.errors.ConfigError` that never echoes
it, a failed login a :class:`~pgwire_cdc.errors.ConnectionError` saying what to check,
and no message carries the password.

pgoutput's text format is each type's output function, run in the session that decodes
(the walsender, or the backend calling ``pg_logical_slot_*_changes``), so its settings
decide how dates, intervals, floats, bytea and money are printed. The value parsers read
every form PostgreSQL can print, but these settings make text and binary decoding agree
where the form carries information the binary value does not (money's currency format),
and they make every connection of a run read and print values alike.
"""

from __future__ import annotations

from typing import Any

import psycopg

from .errors import ConfigError, ConnectionError

#: Setting name -> value, set in every session pgwire_cdc opens (the replication
#: connection too).
SESSION_SETTINGS: dict[str, str] = {
    "DateStyle": "ISO",
    "IntervalStyle": "postgres",
    "TimeZone": "UTC",
    "extra_float_digits": "3",
    "bytea_output": "hex",
    "lc_monetary": "C",
    "client_encoding": "UTF8",
}

#: One statement setting them all (values passed as parameters, never formatted in).
_SET_ALL = "SELECT " + ", ".join("set_config(%s, %s, false)" for _ in SESSION_SETTINGS)
_SET_ALL_PARAMS = [part for item in SESSION_SETTINGS.items() for part in item]


def apply_settings(conn: psycopg.Connection[Any]) -> None:
    """Apply :data:`SESSION_SETTINGS` to an open connection that is not in a transaction."""
    conn.execute(_SET_ALL, _SET_ALL_PARAMS)


def connect(dsn: str, *, autocommit: bool = True) -> psycopg.Connection[Any]:
    """A psycopg connection with the session settings applied (outside any transaction,
    so that a connection opened with ``autocommit=False`` starts its first transaction
    with its first statement, as ``SET TRANSACTION SNAPSHOT`` needs)."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        raise ConfigError(
            "invalid connection string (not shown: it may hold a password); it must be"
            " libpq key=value pairs or a postgresql:// URI"
        ) from None
    password = str(params.get("password") or "")
    try:
        conn = psycopg.connect(dsn, autocommit=True)
    except psycopg.Error as e:
        raise _connection_error(e, password) from None
    try:
        apply_settings(conn)
        conn.autocommit = autocommit
    except BaseException:
        conn.close()
        raise
    return conn


def _connection_error(e: psycopg.Error, password: str) -> ConnectionError:
    """A failed connect as the error a user can act on (libpq quotes the words of a
    connection string it cannot parse, which may be a password: it is masked)."""
    message = str(e).strip()
    if password:
        message = message.replace(password, "***")
    sqlstate = getattr(e, "sqlstate", None)
    if "password authentication failed" in message or sqlstate == "28P01":
        sqlstate = "28P01"
        fix = (
            "check the role's password: the DSN's password, the PGPASSWORD environment"
            " variable or the password file (~/.pgpass); as a superuser, ALTER ROLE ..."
            " PASSWORD '...' sets it"
        )
    elif "does not support SSL" in message:
        fix = (
            "the server does not offer TLS but the DSN's sslmode requires it: turn TLS on"
            " in the server (ssl = on with ssl_cert_file and ssl_key_file in"
            " postgresql.conf, then reload) or connect with sslmode=prefer"
        )
    elif "no pg_hba.conf entry" in message:
        fix = (
            "add a line for this host, database and role to the server's pg_hba.conf and"
            " reload it (SELECT pg_reload_conf())"
        )
    else:
        fix = "check that the server is running and that host and port are right"
    return ConnectionError(f"could not connect to PostgreSQL: {message}; {fix}", sqlstate=sqlstate)
