"""Prometheus metrics (``pgwire_cdc.metrics``): ``pgwire-cdc stream --delta --metrics-port``
in a process of its own against PostgreSQL 18 with a workload, a walsender terminated
once and an idle spell; the endpoint is scraped while it runs and every metric must be
there with plausible values."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import fresh_database
from pgwire_cdc import cli
from prometheus_client.parser import text_string_to_metric_families
from support.server import free_port

#: Every metric name the endpoint serves (counters with their ``_total`` sample).
NAMES = [
    "pgwire_cdc_changes_total",
    "pgwire_cdc_received_bytes_total",
    "pgwire_cdc_batches_total",
    "pgwire_cdc_batches_applied_total",
    "pgwire_cdc_apply_seconds_count",
    "pgwire_cdc_apply_seconds_sum",
    "pgwire_cdc_commit_lag_seconds",
    "pgwire_cdc_last_commit_timestamp_seconds",
    "pgwire_cdc_source_lag_bytes",
    "pgwire_cdc_slot_wal_status",
    "pgwire_cdc_copy_rows_total",
    "pgwire_cdc_copy_done",
    "pgwire_cdc_reconnects_total",
    "pgwire_cdc_heartbeats_total",
]


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the endpoint: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted({"slot": "m", **labels}.items()))))


def wait_for(what: str, check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.3)
    pytest.fail(f"timed out waiting for {what}")


def test_stream_serves_metrics(pg18_cluster: Any, tmp_path: Path) -> None:
    port = free_port()
    with fresh_database(pg18_cluster) as db:
        db.conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        db.conn.execute("INSERT INTO t SELECT g, 'seed' FROM generate_series(1, 200) g")
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgwire_cdc.cli", "stream", "--dsn", db.dsn,
             "--publication", "pub", "--table", "public.t", "--slot", "m",
             "--delta", str(tmp_path / "delta"), "--metrics-port", str(port),
             "--heartbeat-interval", "1", "--max-batch-ms", "200"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            active = "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'm' AND active"
            pid = wait_for("the stream", lambda: db.conn.execute(active).fetchone())[0]
            started = time.time()
            for i in range(20):
                db.conn.execute(
                    "INSERT INTO t SELECT g, 'new' FROM generate_series(%s::int, %s::int) g",
                    (1000 + i * 10, 1009 + i * 10),
                )
                db.conn.execute("UPDATE t SET v = 'changed' WHERE id = %s", (i + 1,))
                time.sleep(0.05)
            db.conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
            db.conn.execute("DELETE FROM t WHERE id <= 10")

            def settled() -> Any:
                samples = scrape(port)
                changes = value(samples, "pgwire_cdc_changes_total", table="public.t") or 0
                ready = (
                    changes >= 230
                    and (value(samples, "pgwire_cdc_reconnects_total") or 0) >= 1
                    and (value(samples, "pgwire_cdc_heartbeats_total") or 0) >= 1
                    and value(samples, "pgwire_cdc_source_lag_bytes") is not None
                )
                return samples if ready else None

            samples = wait_for("the metrics", settled)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        assert proc.returncode == cli.EXIT_INTERRUPTED, err

    names = {name for name, _ in samples}
    assert not [n for n in NAMES if n not in names], names
    # 200 snapshot rows, 200 inserted + 20 updated + 10 deleted.
    assert value(samples, "pgwire_cdc_copy_rows_total", table="public.t") == 200
    assert value(samples, "pgwire_cdc_copy_done", table="public.t") == 1
    assert value(samples, "pgwire_cdc_changes_total", table="public.t") == 230
    batches = value(samples, "pgwire_cdc_batches_total")
    applied = value(samples, "pgwire_cdc_batches_applied_total")
    assert batches is not None and applied is not None and 2 <= applied <= batches
    assert (value(samples, "pgwire_cdc_apply_seconds_count") or 0) >= 2
    assert (value(samples, "pgwire_cdc_apply_seconds_sum") or 0) > 0
    assert (value(samples, "pgwire_cdc_received_bytes_total") or 0) > 0
    lag = value(samples, "pgwire_cdc_commit_lag_seconds")
    assert lag is not None and 0 <= lag < 30
    committed = value(samples, "pgwire_cdc_last_commit_timestamp_seconds")
    assert committed is not None and started - 5 <= committed <= time.time()
    source_lag = value(samples, "pgwire_cdc_source_lag_bytes")
    assert source_lag is not None and 0 <= source_lag < 16 << 20
    assert value(samples, "pgwire_cdc_slot_wal_status", status="reserved") == 1
    assert value(samples, "pgwire_cdc_slot_wal_status", status="lost") == 0
    assert value(samples, "pgwire_cdc_reconnects_total") == 1


def test_spark_query_progress_shows_the_commit_time(
    pg18_cluster: Any, classic_spark: Any, tmp_path: Path
) -> None:
    """The recipe of docs/operations.md: ``observe`` the newest ``_commit_ts`` of each
    micro-batch (as Unix microseconds); the query's progress then carries it."""
    from pgwire_cdc.spark import register
    from pyspark.sql import functions as F

    register(classic_spark)
    with fresh_database(pg18_cluster) as db:
        db.conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        db.conn.execute("CREATE PUBLICATION pub FOR TABLE t")
        changes = (
            classic_spark.readStream.format("pgwire_cdc")
            .option("dsn", db.dsn)
            .option("publication", "pub")
            .option("slot", "spark_lag")
            .option("table", "public.t")
            .option("snapshot_dir", str(tmp_path / "snapshot"))
            .load()
        )
        last_commit = F.unix_micros(F.max("_commit_ts")).alias("last_commit_us")
        observed = changes.observe("pgwire_cdc", last_commit)

        query = (
            # Observed metrics are computed when the micro-batch runs, as in a real sink.
            observed.writeStream.foreachBatch(lambda df, batch_id: df.count())
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        try:
            wait_for("the snapshot micro-batch", lambda: query.recentProgress)
            before = time.time()
            db.conn.execute("INSERT INTO t SELECT g, 'x' FROM generate_series(1, 10) g")

            def observed_commit() -> list[Any]:
                rows = [p["observedMetrics"].get("pgwire_cdc") for p in query.recentProgress]
                return [r["last_commit_us"] for r in rows if r and r["last_commit_us"]]

            seen = wait_for("a micro-batch with changes", observed_commit, timeout=120)
        finally:
            query.stop()
        db.conn.execute("SELECT pg_drop_replication_slot('spark_lag')")
    # Microseconds since the Unix epoch, UTC (the progress's JSON would cut a timestamp
    # to whole seconds in the session's time zone).
    assert before - 5 <= max(seen) / 1e6 <= time.time()
