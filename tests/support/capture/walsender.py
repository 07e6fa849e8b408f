"""A minimal logical replication (walsender) client on psycopg's libpq binding.

The SQL interface (``pg_logical_slot_peek_binary_changes``) decodes after the fact, so it
can never show what a subscriber sees while a transaction is still running: a large
transaction streamed and *then* rolled back (PostgreSQL 17+ discards already-aborted
transactions instead of streaming them), or a prepared transaction decoded at PREPARE and
rolled back afterwards. This client runs ``START_REPLICATION ... LOGICAL`` on a replication
connection and collects the pgoutput payloads of the XLogData frames as they arrive, with
their ``walStart`` LSN, so the recorder can interleave workload steps and reads.
"""

from __future__ import annotations

import select
import struct
import time
from dataclasses import dataclass

from psycopg import pq

PG_EPOCH_UNIX = 946_684_800


class WalSenderError(RuntimeError):
    """The replication connection failed or the server ended the stream."""


@dataclass(frozen=True)
class Frame:
    lsn: int  # walStart of the XLogData frame
    data: bytes  # the pgoutput message


def _now_pg_micros() -> int:
    return int((time.time() - PG_EPOCH_UNIX) * 1_000_000)


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sql_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _conninfo_literal(value: str) -> str:
    """A single-quoted libpq conninfo value."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _guc_options(gucs: dict[str, str]) -> str:
    """The libpq `options` value setting these GUCs (spaces backslash-escaped)."""
    return " ".join(f"-c {k}={v.replace(' ', chr(92) + ' ')}" for k, v in gucs.items())


class LogicalStream:
    """``START_REPLICATION SLOT slot LOGICAL 0/0 (options)`` and a buffer of frames."""

    def __init__(self, dsn: str, slot: str, options: dict[str, str], gucs: dict[str, str]):
        opts = _guc_options(gucs)
        conninfo = f"{dsn} replication=database"
        if opts:
            conninfo += f" options={_conninfo_literal(opts)}"
        self.conn = pq.PGconn.connect(conninfo.encode())
        if self.conn.status != pq.ConnStatus.OK:
            raise WalSenderError(self.conn.get_error_message())
        plugin_opts = ", ".join(f"{_quote_ident(k)} {_sql_literal(v)}" for k, v in options.items())
        query = f"START_REPLICATION SLOT {_quote_ident(slot)} LOGICAL 0/0 ({plugin_opts})"
        res = self.conn.exec_(query.encode())
        if res.status != pq.ExecStatus.COPY_BOTH:
            msg = res.error_message.decode(errors="replace")
            self.conn.finish()
            raise WalSenderError(f"START_REPLICATION failed: {msg}")
        self.conn.nonblocking = 1
        self.frames: list[Frame] = []
        self.received_up_to = 0

    def _drain(self) -> bool:
        """Move everything libpq has buffered into `frames`; False if nothing was there."""
        got = False
        while True:
            n, buf = self.conn.get_copy_data(1)
            if n == 0:
                return got
            if n < 0:
                err = self.conn.get_error_message()
                raise WalSenderError(f"replication stream ended: {err}")
            data = bytes(buf)
            got = True
            if data[:1] == b"w":
                wal_start, wal_end, _send_time = struct.unpack(">QQq", data[1:25])
                self.frames.append(Frame(wal_start, data[25:]))
                self.received_up_to = max(self.received_up_to, wal_end)
            elif data[:1] == b"k":
                wal_end, _send_time, reply = struct.unpack(">Qq?", data[1:18])
                self.received_up_to = max(self.received_up_to, wal_end)
                if reply:
                    self.send_feedback()

    def poll(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for data; True if any arrived."""
        if self._drain():
            return True
        ready, _, _ = select.select([self.conn.socket], [], [], timeout)
        if ready:
            self.conn.consume_input()
        return self._drain()

    def send_feedback(self) -> None:
        """Standby status update. Reports nothing as flushed: the slot must not advance."""
        msg = b"r" + struct.pack(">QQQq?", self.received_up_to, 0, 0, _now_pg_micros(), False)
        if self.conn.put_copy_data(msg) != 1:
            raise WalSenderError(self.conn.get_error_message())
        self.conn.flush()

    def wait_for(self, tag: str, start: int, timeout: float = 30.0) -> int:
        """Read until a frame with this first byte exists at index >= start; its index."""
        deadline = time.monotonic() + timeout
        while True:
            for i in range(start, len(self.frames)):
                if self.frames[i].data[:1] == tag.encode():
                    return i
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                tags = "".join(chr(f.data[0]) for f in self.frames[start:])
                raise WalSenderError(f"no {tag!r} message within {timeout}s (got {tags!r})")
            self.poll(min(remaining, 0.5))

    def close(self) -> None:
        if self.conn.status == pq.ConnStatus.OK:
            self.conn.put_copy_end()
            self.conn.flush()
        self.conn.finish()
