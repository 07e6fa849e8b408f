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

import logging
from collections.abc import Callable
from typing import Any

import psycopg

from .errors import ConfigError, ConnectionError

log = logging.getLogger("pgwire_cdc")

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


class SetupConnection:
    """The ordinary connection of a ``stream()`` run, beside its replication connection:
    catalog look-ups, copy-state notes, snapshot chunks, heartbeats and ``resnapshot()``
    requests go through it. Work runs through :meth:`run`, which opens the connection
    again when it was lost; ``on_open`` is called with each connection opened again,
    before it is used."""

    def __init__(
        self,
        dsn: str,
        conn: psycopg.Connection[Any],
        on_open: Callable[[psycopg.Connection[Any]], None],
    ) -> None:
        self._dsn = dsn
        self._on_open = on_open
        #: The open connection; None once closed, or lost and not yet opened again.
        self.conn: psycopg.Connection[Any] | None = conn
        #: Whether the server refused the last attempt to open it again (it shuts down,
        #: say), until an attempt succeeds.
        self.refused = False

    @property
    def usable(self) -> bool:
        """Open, and not known to be lost."""
        return self.conn is not None and not self.conn.closed and not self.conn.broken

    def run(self, work: Callable[[psycopg.Connection[Any]], None]) -> None:
        """Runs ``work`` on the connection, opening it again when it was lost. A failure
        of the connection is logged and the work is left for the caller to try again
        (at the next batch): the replication connection has its own reconnects, and its
        failures end the stream if they last."""
        try:
            if not self.usable:
                self.close()
                try:
                    conn = connect(self._dsn)
                except ConnectionError:
                    self.refused = True
                    raise
                self.refused = False
                self._on_open(conn)
                self.conn = conn
            assert self.conn is not None
            work(self.conn)
        except (psycopg.OperationalError, ConnectionError) as e:
            log.warning("setup connection lost (%s); trying again at the next batch", e)

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except psycopg.Error as e:
                log.debug("closing the setup connection failed: %s", e)
            self.conn = None
