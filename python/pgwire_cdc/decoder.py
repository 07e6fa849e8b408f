"""The offline decoder: bare pgoutput messages in, events and Arrow change tables out."""

from __future__ import annotations

import pyarrow as pa

from . import _native
from .tables import merge_segments, table_of


class Decoder(_native.Decoder):
    """Decodes pgoutput messages (``pg_logical_slot_peek_binary_changes`` rows, or the
    payloads of XLogData frames).

    ``Decoder(proto_version=1, binary=False, *, keep_events=None, keep_tables=True)``:
    ``proto_version`` and ``binary`` as the stream was requested.

    A decoder keeps only what its caller drains. The change tables accumulate until
    ``take()``. For events, the decoder keeps a copy of each message it decoded and decodes
    them into :class:`~pgwire_cdc.Event` objects when ``events()`` is called. With the
    default ``keep_events=None``, until ``events()`` is first called each ``take()``
    forgets the messages of the take before it: a caller that drains only with ``take()``
    holds at most two takes' worth of messages, and ``events()`` right after a ``take()``
    still returns that take's changes.
    ``keep_events=True`` keeps every event until ``events()``; ``keep_events=False`` keeps
    none (``events()`` raises).
    ``keep_tables=False`` builds no tables (``events()`` only).

    Event row values are typed: the Python values ``take()`` gives for the same changes
    (``to_pylist()``); the wire form is under ``wire_table_row`` and the like.

    Malformed protocol bytes raise :class:`~pgwire_cdc.errors.DecodeError` from ``feed``.
    A column value the change tables cannot hold (see the unrepresentable-value policy of
    docs/change-tables.md) is not a protocol error: its row is left out of the tables and
    the next ``take()`` raises :class:`~pgwire_cdc.errors.ColumnValueError` naming the
    table, column and LSN; a further ``take()`` returns the other rows. ``events()`` does the
    same with the event of such a value.
    """

    def take(self) -> dict[str, pa.Table]:
        """The change tables accumulated since the last call, keyed ``"schema.table"``
        (schema in docs/change-tables.md); see :mod:`pgwire_cdc.tables` for schema changes."""
        return merge_segments(self.take_segments())

    def take_segments(self) -> list[tuple[str, pa.Table]]:
        """Every segment since the last call as it is: one per table and schema version,
        in the order they started."""
        return [(name, table_of(stream)) for name, stream in self._take_segments()]
