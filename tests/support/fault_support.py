"""Helpers of the reliability suites (test_faults, test_config_errors, test_security,
test_wal_safety): a TCP proxy that can stall and drop connections, throwaway clusters with
a password role, and a consumer that mirrors a stream up to a given LSN.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
from pgwire_cdc import lsn_to_int
from pgwire_cdc.streaming import Batch

from support.server import PgCluster
from support.stream_workload import TABLES, Mirror, source_rows

#: The password of `PASSWORD_ROLE` on clusters made by `password_cluster` (what no log
#: line, exception or repr may contain).
PASSWORD = "Sw0rd-fish ÄÖ %secret"
PASSWORD_ROLE = "cdc_pw"


@contextlib.contextmanager
def password_cluster(server: str, settings: dict[str, str] | None = None) -> Iterator[PgCluster]:
    """A started cluster of its own (its pg_hba.conf is changed) on which the
    `PASSWORD_ROLE` role (LOGIN REPLICATION) must log in over TCP with `PASSWORD`
    (SCRAM)."""
    cluster = PgCluster.for_server(server, settings=settings)
    cluster.start()
    try:
        cluster.set_password(PASSWORD_ROLE, PASSWORD)
        cluster.add_hba_lines([f"host all {PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256"])
        yield cluster
    finally:
        cluster.stop()


def current_lsn(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return lsn_to_int(row[0])


def mark(conn: psycopg.Connection[Any]) -> int:
    """Commits a transaction holding only a logical decoding message and returns an LSN
    inside it: the batch that carries its commit has a ``batch.lsn`` past the returned
    LSN, and every change committed before it is in that batch or an earlier one."""
    with conn.transaction():
        row = conn.execute(
            "SELECT pg_logical_emit_message(true, 'pgwire_cdc_test', 'mark')::text"
        ).fetchone()
    assert row is not None
    return lsn_to_int(row[0])


def mirror_until(
    stream: Iterator[Batch], mirror: Mirror, end: int, *, ack: bool = True
) -> list[Batch]:
    """Applies (and acks) batches until one reaches `end` (from `mark`); the stream stays
    open."""
    batches = []
    for batch in stream:
        mirror.apply(batch.tables)
        if ack:
            batch.ack()
        batches.append(batch)
        if batch.lsn >= end:
            break
    return batches


def assert_mirror_equals_source(conn: psycopg.Connection[Any], mirror: Mirror) -> None:
    for name in TABLES:
        assert mirror.rows(name) == source_rows(conn, name), name
    # Nothing was delivered twice within the run.
    assert len(set(mirror.changes)) == len(mirror.changes)


class StallProxy:
    """A TCP proxy on 127.0.0.1 in front of a server port, one thread per direction of
    each connection. `pause()` stops forwarding on every connection (old and new: bytes
    are read but held), like a network path that went silent; `drop()` closes every
    connection (both ends see it closed); `resume()` forwards again."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.forwarding = threading.Event()
        self.forwarding.set()
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        self.connections = 0
        self.closed = False
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def dsn(self, dbname: str, user: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={user} dbname={dbname}"

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self.lock:
                self.sockets += [client, upstream]
                self.connections += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                self.forwarding.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            # Each direction's thread closes the socket it reads: a connection that ended
            # holds no descriptor (an HTTP client makes thousands).
            with self.lock:
                if src in self.sockets:
                    self.sockets.remove(src)
            src.close()

    def pause(self) -> None:
        self.forwarding.clear()

    def resume(self) -> None:
        self.forwarding.set()

    def drop(self) -> None:
        """Closes every connection made so far."""
        with self.lock:
            sockets, self.sockets = self.sockets, []
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        self.drop()
        self.resume()
