"""LSNs: PostgreSQL prints a WAL position as two hexadecimal 32-bit halves, ``0/16B3748``."""

from __future__ import annotations

import re

__all__ = ["int_to_lsn", "lsn_to_int"]

_LSN = re.compile(r"\A([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})\Z")


def lsn_to_int(lsn: str) -> int:
    """``"0/16B3748"`` -> ``23803720``."""
    match = _LSN.match(lsn.strip()) if isinstance(lsn, str) else None
    if match is None:
        raise ValueError(f"not an LSN (expected the form 0/16B3748): {lsn!r}")
    return (int(match.group(1), 16) << 32) | int(match.group(2), 16)


def int_to_lsn(value: int) -> str:
    """``23803720`` -> ``"0/16B3748"``, as PostgreSQL prints it."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
        raise ValueError(f"an LSN is an integer in [0, 2**64): {value!r}")
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"
