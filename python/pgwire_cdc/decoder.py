"""The offline decoder: bare pgoutput messages in, events and Arrow change tables out."""

from __future__ import annotations

import pyarrow as pa

from . import _native
from .tables import merge_segments, table_of


class Decoder(_native.Decoder):
    """Decodes pgoutput messages (``pg_logical_slot_peek_binary_changes`` rows, or the
    payloads of XLogData frames).

    ``Decoder(proto_version=1, binary=False, *, keep_events=True, keep_tables=True)``:
    ``proto_version`` and ``binary`` as the stream was requested. Pass
    ``keep_events=False`` when only ``take()`` is used, ``keep_tables=False`` when only
    ``events()`` is, so the other output does not accumulate.

    Malformed protocol bytes raise :class:`~pgwire_cdc.errors.DecodeError` from ``feed``.
    A column value the change tables cannot hold (see the README's unrepresentable-value
    policy) is not a protocol error: its event still reaches ``events()``, its row is left
    out of the tables, and the next ``take()`` raises
    :class:`~pgwire_cdc.errors.ColumnValueError` naming the table, column and LSN; a
    further ``take()`` returns the other rows.
    """

    def take(self) -> dict[str, pa.Table]:
        """The change tables accumulated since the last call, keyed ``"schema.table"``
        (schema of CONTRACT section 3); see :mod:`pgwire_cdc.tables` for schema changes."""
        return merge_segments(self.take_segments())

    def take_segments(self) -> list[tuple[str, pa.Table]]:
        """Every segment since the last call as it is: one per table and schema version,
        in the order they started."""
        return [(name, table_of(stream)) for name, stream in self._take_segments()]
