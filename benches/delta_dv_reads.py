"""Reads of a Delta table kept by deletion vectors, after many live batches, before and
after compaction, against a copy-on-write table of the same rows. Writes
``benches/results/delta_dv_reads.md`` and ``.json``.

1. A ``--rows``-row table of ``bench`` rows (``benches/delta_lake.py``'s builder, files of
   500,000 rows) gets the ``deletionVectors`` feature; ``--batches`` batches of
   ``--updates`` random-key updates each go through ``DeltaSink(path).apply`` (the
   delta-rs writer's MERGE by deletion vectors), as a live stream would commit them. Each
   batch's apply time is recorded (the MERGE's cost on a table that grows files and
   deletion vectors). This is done twice, on two copies: without the stream's own
   compaction (``auto_compact=False``: every file and deletion vector stays) and with it
   (the default: small and worn files rewritten after a MERGE, see
   ``pgwire_cdc.delta.maintain``).
2. A copy-on-write table of the same rows (written fresh by ``write_deltalake``).
3. Full scans (every column, every row: ``sum(hash(*))`` in Spark, ``count(*)`` and
   ``sum(score)`` over all columns read in DuckDB and delta-rs) of: the table after the
   batches (both), the first after ``delta.compact``, and the copy-on-write table; best of
   ``--repeat``, the readers interleaved. deltalake's reader (1.6.6) can deadlock planning
   a scan of a table where more than about 500 files carry a deletion vector
   (delta-io/delta-rs#4657), so it is not run on such a table, and the row counts and the
   copy-on-write table's rows come from DuckDB.

Usage::

    .venv/bin/python benches/delta_dv_reads.py [--rows 1000000] [--batches 1000]
        [--updates 100] [--repeat 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent / "tests"))  # support.server: the tests' PgCluster

from bench_common import check_release_build, machine_info  # noqa: E402
from delta_lake import (  # noqa: E402
    DEFAULT_ROWS_PER_FILE,
    TABLE,
    bench_session,
    build_table,
    delta_files,
    duckdb_connection,
    duckdb_table,
    template_rows,
    update_batch,
)
from live import SETTINGS  # noqa: E402
from pgwire_cdc import delta  # noqa: E402
from support.server import PgCluster  # noqa: E402

RESULTS = HERE / "results"
#: Above this many files with a deletion vector, deltalake's reader is not run (see above).
DELTA_RS_MAX_DV_FILES = 400


def dv_files(path: str) -> int:
    """How many of the table's data files carry a deletion vector, from a replay of its
    log's commits (deltalake's add-action listing does not show deletion vectors)."""
    live: dict[str, bool] = {}
    for commit in sorted((Path(path) / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                live[action["add"]["path"]] = bool(action["add"].get("deletionVector"))
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    return sum(live.values())


def count_rows(path: str) -> int:
    return duckdb_table(path).num_rows


def duckdb_scan(path: str) -> Callable[[], Any]:
    conn = duckdb_connection()

    def scan() -> Any:
        return conn.execute(f"SELECT count(*), sum(hash(t)) FROM delta_scan('{path}') t").fetchall()

    return scan


def delta_rs_scan(path: str) -> Callable[[], Any]:
    return lambda: delta.read_table(path).num_rows


def spark_scan(spark: Any, path: str) -> Callable[[], Any]:
    return lambda: spark.read.format("delta").load(path).selectExpr("sum(hash(*))").collect()


def apply_batches(
    template: Any, base: Path, auto_compact: bool, args: argparse.Namespace
) -> dict[str, Any]:
    """Applies the random-key update batches to the table under ``base`` (the same keys
    for every table: seeded); their apply times and the stream's own compactions."""
    sink = delta.DeltaSink(base, auto_compact=auto_compact)
    rng = random.Random(7)
    lsn = 1 << 40
    applies = []
    compactions = []
    started = time.perf_counter()
    for i in range(args.batches):
        keys = rng.sample(range(1, args.rows + 1), args.updates)
        lsn += 10_000
        batch = update_batch(template, keys, lsn, i)
        start = time.perf_counter()
        sink.apply(batch)
        applies.append(time.perf_counter() - start)
        merge = getattr(sink.writer, "last_merge", None) or {}
        if merge.get("compaction", {}).get("version") is not None:
            compactions.append(merge["compaction"])
        if (i + 1) % 100 == 0:
            print(
                f"{base.name}: {i + 1} batches in {time.perf_counter() - started:.0f} s "
                f"(median apply {statistics.median(applies[-100:]) * 1000:.0f} ms)",
                flush=True,
            )
    return {
        "seconds": time.perf_counter() - started,
        "median": statistics.median(applies) * 1000,
        "p99": sorted(applies)[int(0.99 * (len(applies) - 1))] * 1000,
        "max": max(applies) * 1000,
        "first_100_median": statistics.median(applies[:100]) * 1000,
        "last_100_median": statistics.median(applies[-100:]) * 1000,
        "compactions": len(compactions),
        "compaction_ms": [c["ms"] for c in compactions],
        "compacted_files": sum(c["files_removed"] for c in compactions),
    }


def best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batches", type=int, default=1_000)
    ap.add_argument("--updates", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-spark", dest="spark", action="store_false")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", type=Path, default=RESULTS / "delta_dv_reads.md")
    args = ap.parse_args(argv)
    check_release_build()
    os.environ.setdefault("PGWIRE_CDC_DELTA_JARS", str(HERE.parent / ".cache" / "jars" / "delta"))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    cluster = PgCluster.for_server("pg15", settings=SETTINGS)
    cluster.start()
    try:
        template = template_rows(cluster, min(DEFAULT_ROWS_PER_FILE, args.rows))
    finally:
        cluster.stop()
    work = Path(tempfile.mkdtemp(prefix="pgwire_cdc_bench_dv_reads_", dir=args.workdir))
    spark = None
    try:
        applied: dict[str, dict[str, Any]] = {}
        for name, auto in (("dv", False), ("dv-auto", True)):
            path = delta.table_path(work / name, TABLE)
            build_table(template, args.rows, DEFAULT_ROWS_PER_FILE, path)
            delta.enable_deletion_vectors(path)
            applied[name] = apply_batches(template, work / name, auto, args)
            if count_rows(path) != args.rows:
                raise AssertionError("the table lost or gained rows")
        dv = delta.table_path(work / "dv", TABLE)
        cow = delta.table_path(work / "cow", TABLE)
        from deltalake import write_deltalake

        write_deltalake(cow, duckdb_table(dv), target_file_size=1 << 34)
        tables: dict[str, str] = {
            "dv": dv,
            "dv-auto": delta.table_path(work / "dv-auto", TABLE),
            "cow": cow,
        }
        layout: dict[str, dict[str, int]] = {}
        if args.spark:
            spark = bench_session("pgwire_cdc-bench-dv-reads")
        scans: dict[str, dict[str, float]] = {}

        def measure(name: str, path: str) -> None:
            files, nbytes = delta_files(path)
            with_dv = dv_files(path)
            layout[name] = {"files": files, "bytes": nbytes, "with_dv": with_dv}
            readers: dict[str, Callable[[], Any]] = {"duckdb": duckdb_scan(path)}
            if with_dv <= DELTA_RS_MAX_DV_FILES:
                readers["delta-rs"] = delta_rs_scan(path)
            if spark is not None:
                readers["spark"] = spark_scan(spark, path)
            scans[name] = {}
            for reader, fn in readers.items():
                fn()  # warm: file metadata, JIT
                scans[name][reader] = best(fn, args.repeat)
                print(f"{name}: {reader} full scan {scans[name][reader]:.3f} s", flush=True)

        for name in ("dv", "dv-auto", "cow"):
            measure(name, tables[name])
        start = time.perf_counter()
        compacted = delta.compact(dv)
        compact_s = time.perf_counter() - start
        print(f"compaction: {compact_s:.1f} s, {compacted}", flush=True)
        if count_rows(dv) != args.rows:
            raise AssertionError("compaction lost or gained rows")
        measure("compacted", dv)
        result = {
            "ran": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
            "load": os.getloadavg()[0],
            "rows": args.rows,
            "batches": args.batches,
            "updates": args.updates,
            "applied": applied,
            "layout": layout,
            "scans": scans,
            "compaction": {"seconds": compact_s, **compacted},
            "machine": machine_info(),
            "deltalake": version("deltalake"),
        }
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    args.out.write_text(render(result))
    print(args.out.read_text())
    return 0


def render(r: dict[str, Any]) -> str:
    lines = [
        "# Reads of a Delta table kept by deletion vectors",
        "",
        f"Run {r['ran']} (load {r['load']:.1f}) with `.venv/bin/python benches/delta_dv_reads.py"
        f" --rows {r['rows']} --batches {r['batches']} --updates {r['updates']}`: "
        f"{r['rows']:,} rows, {r['batches']:,} batches of {r['updates']:,} random-key updates "
        "applied by the delta-rs writer's MERGE by deletion vectors, to one table without "
        "the stream's own compaction (`auto_compact=False`) and to another with it (the "
        "default); then full scans (every row, every column; best of the runs) of both, of "
        "the first after `delta.compact`, and of a copy-on-write table of the same rows.",
        "",
        "## The batches (apply time per batch, ms)",
        "",
        "| table | all batches s | median | p99 | max | first 100 (median) | last 100 (median) "
        "| the stream's compactions | their ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, a in r["applied"].items():
        ms = a["compaction_ms"]
        spread = f"{min(ms):.0f} to {max(ms):.0f}" if ms else "-"
        lines.append(
            f"| {'auto compaction' if name == 'dv-auto' else 'no auto compaction'} | "
            f"{a['seconds']:.0f} | {a['median']:.0f} | {a['p99']:.0f} | {a['max']:.0f} | "
            f"{a['first_100_median']:.0f} | {a['last_100_median']:.0f} | "
            f"{a['compactions']} ({a['compacted_files']} files) | {spread} |"
        )
    lines += ["", "## Full scans (seconds)", ""]
    readers = sorted({reader for s in r["scans"].values() for reader in s})
    lines.append("| table | files | with a deletion vector | MB | " + " | ".join(readers) + " |")
    lines.append("|---|---:|---:|---:|" + "---:|" * len(readers))
    names = {
        "dv": f"after {r['batches']:,} batches (deletion vectors, no auto compaction)",
        "dv-auto": f"after {r['batches']:,} batches (deletion vectors, auto compaction)",
        "compacted": "the first, compacted",
        "cow": "copy-on-write, same rows",
    }
    for name in ("dv", "dv-auto", "compacted", "cow"):
        scans = r["scans"].get(name, {})
        layout = r["layout"].get(name, {})
        cells = " | ".join(f"{scans[x]:.3f}" if x in scans else "not run" for x in readers)
        lines.append(
            f"| {names[name]} | {layout.get('files', 0)} | {layout.get('with_dv', 0)} | "
            f"{layout.get('bytes', 0) / 1e6:,.1f} | {cells} |"
        )
    c = r["compaction"]
    lines += [
        "",
        f"delta-rs (`deltalake` {r.get('deltalake', '?')}) is not run on a "
        f"table with more than {DELTA_RS_MAX_DV_FILES} files carrying a deletion vector: "
        "it can deadlock planning such a scan (delta-io/delta-rs#4657).",
        "",
        f"Compaction took {c['seconds']:.1f} s: {c['files_removed']} files rewritten as "
        f"{c['files_added']}, {c['rows_purged']:,} deleted rows purged, {c['rows_kept']:,} "
        "rows kept.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
