"""pgwire_cdc: change data capture from PostgreSQL logical replication into Apache Arrow.

The hot path (pgoutput parsing, transaction assembly, value parsing) is Rust, in
``pgwire_cdc._native``; this package is the thin Python front.
"""

from __future__ import annotations

from . import errors
from ._native import UNCHANGED_TOAST, Event
from ._native import __version__ as __version__
from .decoder import Decoder
from .errors import (
    ColumnValueError,
    ConfigError,
    ConnectionError,
    DecodeError,
    Error,
    SlotError,
    SpillError,
)
from .lsn import int_to_lsn, lsn_to_int
from .streaming import Batch, StreamOptions, resnapshot, stream

__all__ = [
    "UNCHANGED_TOAST",
    "Batch",
    "ColumnValueError",
    "ConfigError",
    "ConnectionError",
    "DecodeError",
    "Decoder",
    "Error",
    "Event",
    "SlotError",
    "SpillError",
    "StreamOptions",
    "errors",
    "int_to_lsn",
    "lsn_to_int",
    "resnapshot",
    "stream",
]
