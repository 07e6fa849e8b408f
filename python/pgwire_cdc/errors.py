"""The exceptions of pgwire_cdc. Every error the package raises derives from :class:`Error`.

No message carries a password or a row value: they end up in logs.
"""

from __future__ import annotations

import builtins

__all__ = [
    "ColumnValueError",
    "ConfigError",
    "ConnectionError",
    "DecodeError",
    "Error",
    "SlotError",
    "SpillError",
]


class Error(Exception):
    """Base class of every pgwire_cdc error.

    ``sqlstate`` is the five-character SQLSTATE when PostgreSQL reported the error (for
    example ``"42704"`` for a missing slot, ``"28P01"`` for a wrong password), else None.
    """

    def __init__(self, *args: object, sqlstate: str | None = None) -> None:
        super().__init__(*args)
        self.sqlstate = sqlstate


class DecodeError(Error):
    """Malformed or out-of-sequence protocol bytes.

    ``message_kind`` names the pgoutput message ("Insert", "Relation", ...), ``offset`` the
    byte inside it where the problem was found, ``index`` the position of the message in a
    ``feed_many`` call (None for ``feed``). For initial-snapshot data (``CopyDecoder``)
    ``message_kind`` is "CopyData" and ``offset`` counts from the start of the COPY stream.
    """

    def __init__(
        self,
        message: str,
        *,
        message_kind: str | None = None,
        offset: int | None = None,
        reason: str | None = None,
        index: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message_kind = message_kind
        self.offset = offset
        self.reason = reason
        self.index = index


class ColumnValueError(DecodeError):
    """A column value that is malformed for its type, or that its Arrow type cannot hold
    (numeric NaN in a decimal column, an infinite date, ...; see the README's
    unrepresentable-value policy). ``table``, ``column`` and ``lsn`` say where; the value
    itself is never in the message."""

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        column: str | None = None,
        lsn: int | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.table = table
        self.column = column
        self.lsn = lsn


class ConfigError(Error):
    """The server, publication or tables are not usable as configured (wal_level,
    privileges, replica identity, ...). The message says how to fix it."""


class SlotError(Error):
    """The replication slot is missing, in use by another session, or invalidated."""


# The public name is ConnectionError; it is also the builtin, so `except ConnectionError`
# catches it either way.
class ConnectionError(Error, builtins.ConnectionError):
    """The connection to PostgreSQL failed or was lost."""


class DeltaError(Error):
    """A Delta Lake table cannot take a batch of changes (its columns do not fit, it was
    written from another stream, or the writer is not set up). The message says which
    table and what to do."""


class IcebergError(Error):
    """An Iceberg table cannot take a batch of changes (its columns do not fit, it was
    written from another stream, or Spark is not set up for Iceberg). The message says
    which table and what to do."""


class SpillError(Error):
    """A streamed or prepared transaction too large for ``spill_threshold`` could not be
    held on disk (``spill_dir`` missing, not writable, or full). Nothing was acked past it:
    after fixing the directory, streaming again delivers the transaction."""
