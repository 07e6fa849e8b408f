"""Prometheus metrics of running streams: what an operator graphs and alerts on.

Nothing is recorded until metrics are turned on, with :func:`serve` (an HTTP endpoint,
``pgwire-cdc stream --metrics-port``) or :func:`enable` (into a registry of your own).
From then on every ``stream()`` of the process records into the same :class:`Metrics`,
each series labelled with its slot, once per batch (vectorised Arrow reductions, no
per-row Python), and looks at its slot on a connection of its own every
:data:`SLOT_POLL_S` seconds for the server-side figures (source lag, ``wal_status``).

The names follow Prometheus's conventions (``_total`` counters, ``_seconds`` and
``_bytes`` units); docs/operations.md lists them with their Debezium equivalents.
``prometheus_client`` is an optional dependency: ``pip install 'pgwire-cdc[metrics]'``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from .errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa
    from prometheus_client import CollectorRegistry

log = logging.getLogger("pgwire_cdc")

#: Seconds between looks at a streamed slot (source lag, wal_status).
SLOT_POLL_S = 5.0
#: The values of ``pg_replication_slots.wal_status`` (``lost``: invalidated).
WAL_STATUSES = ("reserved", "extended", "unreserved", "lost")
#: Buckets of ``pgwire_cdc_apply_seconds``: a batch takes milliseconds to minutes.
APPLY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

_lock = threading.Lock()
_default: Metrics | None = None


class Metrics:
    """The metric families of pgwire_cdc, registered in ``registry`` (default:
    ``prometheus_client.REGISTRY``, the one :func:`prometheus_client.start_http_server`
    serves)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        try:
            import prometheus_client as prom
        except ImportError:
            raise ConfigError(
                "metrics need the prometheus_client package: pip install 'pgwire-cdc[metrics]'"
            ) from None
        r = prom.REGISTRY if registry is None else registry
        self.registry = r
        counter = partial(prom.Counter, registry=r)
        gauge = partial(prom.Gauge, registry=r)
        slot, table = ["slot"], ["slot", "table"]
        # What a stream delivers and what its consumer acks.
        self.changes = counter(
            "pgwire_cdc_changes", "Change rows delivered (insert, update, delete, truncate)", table
        )
        self.received_bytes = counter(
            "pgwire_cdc_received_bytes", "Arrow bytes of the change tables delivered", slot
        )
        self.batches = counter("pgwire_cdc_batches", "Batches handed to the consumer", slot)
        self.batches_applied = counter(
            "pgwire_cdc_batches_applied", "Batches the consumer made durable and acked", slot
        )
        self.apply_seconds = prom.Histogram(
            "pgwire_cdc_apply_seconds",
            "Time to make one batch durable in a sink and ack it",
            slot,
            registry=r,
            buckets=APPLY_BUCKETS,
        )
        self.commit_lag = gauge(
            "pgwire_cdc_commit_lag_seconds",
            "When the last acked transaction was acked, minus when it committed",
            slot,
        )
        self.last_commit = gauge(
            "pgwire_cdc_last_commit_timestamp_seconds",
            "Commit time (Unix seconds) of the last acked transaction",
            slot,
        )
        # The slot as the server sees it (SlotMetrics.watch).
        self.source_lag = gauge(
            "pgwire_cdc_source_lag_bytes",
            "Server WAL position minus the slot's confirmed_flush_lsn",
            slot,
        )
        self.safe_wal = gauge(
            "pgwire_cdc_slot_safe_wal_size_bytes",
            "WAL that can be written before the slot is in danger of losing WAL it needs"
            " (pg_replication_slots.safe_wal_size; absent without max_slot_wal_keep_size)",
            slot,
        )
        self.wal_status = gauge(
            "pgwire_cdc_slot_wal_status",
            "1 for the slot's wal_status, 0 for the others",
            ["slot", "status"],
        )
        # Copies of existing rows, connection faults, heartbeats.
        self.copy_rows = counter(
            "pgwire_cdc_copy_rows",
            "Existing rows copied (initial and incremental snapshots)",
            table,
        )
        self.copy_done = gauge(
            "pgwire_cdc_copy_done", "1 once a table's copy is complete, 0 while it runs", table
        )
        self.reconnects = counter(
            "pgwire_cdc_reconnects", "Replication connections re-established after a loss", slot
        )
        self.heartbeats = counter(
            "pgwire_cdc_heartbeats", "Heartbeat messages written while idle", slot
        )

        #: The streams recording here (:meth:`ready`), and the lag past which a stream is
        #: not ready (bytes of WAL its slot holds; None: any).
        self.streams: list[SlotMetrics] = []
        self.max_lag_bytes: float | None = None

    def for_slot(self, slot: str) -> SlotMetrics:
        """The recorder of one stream on ``slot``."""
        found = SlotMetrics(self, slot)
        self.streams.append(found)
        return found

    def ready(self) -> tuple[bool, str]:
        """``/readyz``: whether every stream of the process streams changes (its initial
        copy done) with its slot's lag within :attr:`max_lag_bytes`; and why not."""
        live = [s for s in self.streams if not s.closed]
        if not live:
            return False, "no stream is running"
        for s in live:
            if not s.streaming:
                return False, f"slot {s.slot}: not streaming changes yet"
            if self.max_lag_bytes is not None and s.lag is not None and s.lag > self.max_lag_bytes:
                return (
                    False,
                    f"slot {s.slot}: {s.lag:.0f} bytes behind (at most {self.max_lag_bytes:.0f})",
                )
        return True, "ready"


def enable(registry: CollectorRegistry | None = None) -> Metrics:
    """Turns metrics on: every ``stream()`` of this process records into the returned
    :class:`Metrics` from now on. The first call decides the registry (default:
    ``prometheus_client.REGISTRY``); later calls return the same object."""
    global _default
    with _lock:
        if _default is None:
            _default = Metrics(registry)
        elif registry is not None and registry is not _default.registry:
            raise ConfigError("metrics are already enabled with another registry")
        return _default


def active() -> Metrics | None:
    """The metrics streams record into, or None while metrics are off."""
    return _default


def serve(
    port: int,
    addr: str = "127.0.0.1",
    registry: CollectorRegistry | None = None,
    max_lag_bytes: float | None = None,
) -> Any:
    """Turns metrics on (:func:`enable`) and serves, from a daemon thread, on
    ``http://addr:port``: ``/metrics`` (the Prometheus text format), ``/healthz`` (200 while
    the process runs) and ``/readyz`` (200 once every stream reads changes with its slot's
    lag within ``max_lag_bytes``, else 503 with the reason). Returns the server."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    metrics = enable(registry)
    metrics.max_lag_bytes = max_lag_bytes

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._send(200, b"ok\n")
            elif path == "/readyz":
                ready, why = metrics.ready()
                self._send(200 if ready else 503, why.encode() + b"\n")
            else:
                self._send(404, b"not found: /metrics, /healthz, /readyz\n")

        def _send(self, code: int, body: bytes, kind: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # probes every few seconds: not worth a log line each

    try:
        server = ThreadingHTTPServer((addr, port), Handler)
    except OSError as e:
        raise ConfigError(
            f"cannot serve metrics on {addr}:{port}: {e.strerror or e}; choose a free port"
        ) from None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="pgwire_cdc-http", daemon=True).start()
    return server


def _commit_seconds(tables: Mapping[str, pa.Table]) -> float | None:
    """The latest ``_commit_ts`` of the change tables, as Unix seconds (None: no commit)."""
    import pyarrow.compute as pc

    latest = None
    for table in tables.values():
        if table.num_rows and "_commit_ts" in table.column_names:
            value = pc.max(table["_commit_ts"]).as_py()
            if value is not None and (latest is None or value > latest):
                latest = value
    return None if latest is None else latest.timestamp()


class SlotMetrics:
    """What one stream records (the :class:`Metrics` children of its slot), and the
    thread that looks at the slot."""

    def __init__(self, metrics: Metrics, slot: str) -> None:
        self.m = metrics
        self.slot = slot
        #: The latest commit time of each batch handed out and not acked yet.
        self.pending: dict[int, float] = {}
        #: The last batch acked (-1: none).
        self.acked_seq = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Streaming changes (past its initial copy); the slot's lag as last seen; ended.
        self.streaming = False
        self.lag: float | None = None
        self.closed = False
        # Counters show from the start (at 0), not from their first event.
        for family in (
            metrics.batches, metrics.batches_applied, metrics.received_bytes,
            metrics.reconnects, metrics.heartbeats,
        ):  # fmt: skip
            family.labels(slot)
        metrics.apply_seconds.labels(slot)

    def batch(
        self,
        seq: int,
        tables: Mapping[str, pa.Table],
        copied: Mapping[str, int],
        progress: Mapping[str, Any],
    ) -> None:
        """Batch ``seq`` is handed out: ``tables`` its change tables, ``copied`` the rows
        of each that are copied rows, ``progress`` its ``snapshot_progress``."""
        m, slot = self.m, self.slot
        m.batches.labels(slot).inc()
        size = 0
        for name, table in tables.items():
            size += table.nbytes
            changes = table.num_rows - copied.get(name, 0)
            if changes:
                m.changes.labels(slot, name).inc(changes)
        for name, rows in copied.items():
            m.copy_rows.labels(slot, name).inc(rows)
        for name, after in progress.items():
            m.copy_done.labels(slot, name).set(1 if after is None else 0)
        m.received_bytes.labels(slot).inc(size)
        if len(copied) < len(tables):
            committed = _commit_seconds(tables)
            if committed is not None:
                self.pending[seq] = committed

    def copy_started(self, tables: list[str]) -> None:
        for name in tables:
            self.m.copy_done.labels(self.slot, name).set(0)

    def acked(self, seq: int) -> None:
        """The consumer acked batch ``seq`` and every earlier one."""
        if seq <= self.acked_seq:
            return
        self.m.batches_applied.labels(self.slot).inc(seq - self.acked_seq)
        self.acked_seq = seq
        done = [s for s in self.pending if s <= seq]
        if not done:
            return
        committed = max(self.pending.pop(s) for s in done)
        self.m.last_commit.labels(self.slot).set(committed)
        self.m.commit_lag.labels(self.slot).set(max(0.0, time.time() - committed))

    def reconnected(self) -> None:
        self.m.reconnects.labels(self.slot).inc()

    def heartbeat(self) -> None:
        self.m.heartbeats.labels(self.slot).inc()

    # -- the slot, seen from the server ----------------------------------------------

    def watch(self, dsn: str) -> None:
        """Starts looking at the slot every :data:`SLOT_POLL_S` seconds on a connection
        of its own (opened again after a failure), until :meth:`close`."""
        self._thread = threading.Thread(
            target=self._watch, args=(dsn,), name=f"pgwire_cdc-metrics-{self.slot}", daemon=True
        )
        self._thread.start()

    def _watch(self, dsn: str) -> None:
        from .connection import connect

        conn = None
        while not self._stop.is_set():
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = connect(dsn)
                self._look(conn)
            except Exception as e:  # a metrics failure must not end a stream
                log.debug("metrics: looking at slot %s failed: %s", self.slot, e)
                if conn is not None:
                    conn.close()
                conn = None
            self._stop.wait(SLOT_POLL_S)
        if conn is not None:
            conn.close()

    def _look(self, conn: Any) -> None:
        # On a standby (a synced slot) the WAL position is how far it has replayed.
        row = conn.execute(
            "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()"
            " ELSE pg_current_wal_lsn() END - confirmed_flush_lsn)::float8,"
            " wal_status, safe_wal_size::float8"
            " FROM pg_replication_slots WHERE slot_name = %s",
            (self.slot,),
        ).fetchone()
        if row is None:
            return  # not made yet (the initial snapshot runs under a temporary slot)
        lag, status, safe = row
        if lag is not None:
            self.lag = max(0.0, lag)
            self.m.source_lag.labels(self.slot).set(self.lag)
        if safe is not None:
            self.m.safe_wal.labels(self.slot).set(safe)
        for name in WAL_STATUSES:
            self.m.wal_status.labels(self.slot, name).set(1 if name == status else 0)

    def changes_started(self) -> None:
        """The stream reads changes now (its initial copy, if any, is handed out)."""
        self.streaming = True

    def close(self) -> None:
        self.closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
