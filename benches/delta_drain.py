"""Draining a replication slot's backlog into Delta Lake, against ``pg_recvlogical`` over
the same WAL. Writes ``benches/results/delta_drain.md`` and ``delta_drain.json``.

Two workloads, each on a fresh database of a throwaway PostgreSQL 15 (the live benches'
``bench`` table, publication ``pub``): **inserts**, ``--inserts`` rows into the empty
table in transactions of 10,000; **updates**, ``--updates`` updates (``score + 1``) of
random existing keys of ``--base-rows`` rows, in transactions of 1,000 distinct keys.

Before the workload, each Delta contender takes the initial snapshot on a slot of its own
(``delta.run(..., until_lsn=<now>)``, not timed; on the empty table it creates the table),
and its slot and table directory are copied once per round
(``pg_copy_logical_replication_slot``, ``shutil.copytree``): the table copy records the
position its slot copy starts from, and ``run()`` skips what a table already holds.
``pg_recvlogical`` gets copies of the copy-on-write contender's slot. After the workload,
each contender drains its own copy up to the same end LSN:

* ``pg_recvlogical -f /dev/null --endpos <end> --no-loop`` with the pgoutput options
  ``stream()`` uses by default (highest ``proto_version``, binary, messages, streaming);
* ``delta.run(..., until_lsn=end)``, delta-rs writer, copy-on-write (``delta-rs``);
* the same on tables created with ``deletion_vectors=True`` (``delta-rs-dv``);
* with ``--spark``, the Spark writer (``spark``; its tables have deletion vectors).

Wall time of the whole drain (connection, decoding, writing, commits, acks); rounds
interleave the contenders; best and median of ``--repeat``. Every Delta result is checked
against PostgreSQL (rows, sums of ``amount`` and ``score``). Ratio = pg_recvlogical's time
/ the contender's (higher is better for pgwire_cdc).

Usage (run it niced on a shared machine)::

    nice -n 10 .venv/bin/python benches/delta_drain.py [--inserts 300000]
        [--base-rows 1000000] [--updates 60000] [--repeat 3] [--spark]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent / "tests"))  # support.server: the tests' PgCluster

import pgwire_cdc  # noqa: E402
from bench_common import check_release_build, machine_info  # noqa: E402
from delta_lake import (  # noqa: E402
    TABLE,
    Keys,
    bench_session,
    check_state,
    deletion_vectors_on,
    delta_files,
    expected_state,
    run_sink,
    sink_table,
    table_state,
)
from live import BENCH_TABLE, SETTINGS, fill, lsn_now  # noqa: E402
from pgwire_cdc import delta  # noqa: E402
from pgwire_cdc.streaming import DEFAULT_MAX_BATCH_ROWS, _proto_version  # noqa: E402
from support.server import PgCluster  # noqa: E402

RESULTS = HERE / "results"
RECV = "pg_recvlogical"
#: Where pg_recvlogical's slot copies come from (a slot whose snapshot went into Delta).
RECV_SOURCE = "delta-rs"
LABEL = {
    RECV: "pg_recvlogical -f /dev/null (binary)",
    "delta-rs": "delta.run(), delta-rs writer (copy-on-write)",
    "delta-rs-dv": "delta.run(), delta-rs writer (deletion vectors)",
    "spark": "delta.run(), Spark writer (deletion vectors)",
}
#: Up to 4 contenders x --repeat slot copies per workload, all alive at once.
DRAIN_SETTINGS = {**SETTINGS, "max_replication_slots": "64"}


def slot_name(kind: str, r: int) -> str:
    return f"s_{kind.replace('-', '_')}_{r}"


def recvlogical(cluster: PgCluster, dsn: str, slot: str, end: int, proto: int) -> float:
    """Drains ``slot`` up to ``end`` with pg_recvlogical, options as ``stream()``'s."""
    options = [
        f"proto_version={proto}",
        "publication_names=pub",
        "binary=true",
        "messages=true",
        *(["streaming=on"] if proto >= 2 else []),
    ]
    cmd = [str(cluster.bindir / "pg_recvlogical"), "-d", dsn, "--slot", slot, "--start"]
    for option in options:
        cmd += ["-o", option]
    cmd += ["--endpos", pgwire_cdc.int_to_lsn(end), "--no-loop", "-f", "/dev/null"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def update_workload(conn: Any, updates: int, keys: Keys, per_tx: int = 1_000) -> int:
    """``updates`` updates of random existing keys, ``per_tx`` distinct keys a transaction.
    Returns the transactions."""
    txs = done = 0
    while done < updates:
        ids = keys.sample(min(per_tx, updates - done))
        conn.execute("UPDATE bench SET score = score + 1 WHERE id = ANY(%s::bigint[])", (ids,))
        done += len(ids)
        txs += 1
        if done % 20_000 == 0 or done == updates:
            print(f"  updated {done:,}/{updates:,}", flush=True)
    return txs


def bench_workload(
    cluster: PgCluster, workload: str, sinks: list[str], spark: Any, args: argparse.Namespace
) -> dict[str, Any]:
    db = cluster.create_database(workload)
    conn = cluster.connect(db)
    dsn = cluster.dsn_for(db)
    proto = _proto_version(cluster.version)
    work = Path(tempfile.mkdtemp(prefix=f"pgwire_cdc_bench_drain_{workload}_", dir=args.workdir))
    base_rows = args.base_rows if workload == "updates" else 0
    changes = args.updates if workload == "updates" else args.inserts
    contenders = [RECV, *sinks]
    snapshot_s: dict[str, float] = {}
    created: dict[str, bool] = {}
    try:
        conn.execute(BENCH_TABLE)
        if base_rows:
            print(f"{workload}: filling {base_rows:,} rows", flush=True)
            fill(conn, base_rows)
            conn.execute("VACUUM ANALYZE bench")
        conn.execute("CREATE PUBLICATION pub FOR TABLE bench")
        # Every slot and table copy exists, the snapshot applied, before the workload.
        for kind in sinks:
            path = work / f"{kind}-0"
            start = time.perf_counter()
            run_sink(
                kind,
                dsn,
                path,
                slot_name(kind, 0),
                spark,
                until_lsn=lsn_now(conn),
                max_batch_rows=250_000,
            )
            snapshot_s[kind] = time.perf_counter() - start
            path.mkdir(parents=True, exist_ok=True)
            created[kind] = (Path(delta.table_path(path, TABLE)) / "_delta_log").is_dir()
            print(
                f"{workload}: snapshot into {kind} in {snapshot_s[kind]:.1f} s "
                f"(table created: {created[kind]})",
                flush=True,
            )
            for r in range(1, args.repeat):
                conn.execute(
                    "SELECT pg_copy_logical_replication_slot(%s, %s)",
                    (slot_name(kind, 0), slot_name(kind, r)),
                )
                shutil.copytree(path, work / f"{kind}-{r}")
        for r in range(args.repeat):
            conn.execute(
                "SELECT pg_copy_logical_replication_slot(%s, %s)",
                (slot_name(RECV_SOURCE, 0), slot_name(RECV, r)),
            )
        print(f"{workload}: workload of {changes:,} {workload}", flush=True)
        start = time.perf_counter()
        if workload == "inserts":
            fill(conn, args.inserts, start=1, batch=10_000)
            txs = -(-args.inserts // 10_000)
        else:
            txs = update_workload(conn, args.updates, Keys(base_rows, random.Random(42)))
        workload_s = time.perf_counter() - start
        end = lsn_now(conn)
        want = expected_state(conn)
        print(
            f"{workload}: {txs:,} transactions in {workload_s:.1f} s; "
            f"end LSN {pgwire_cdc.int_to_lsn(end)}; {want[0]:,} rows",
            flush=True,
        )
        load = os.getloadavg()[0]
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in contenders}
        dv_on: dict[str, bool] = {}
        for r in range(args.repeat):
            order = contenders[r % len(contenders) :] + contenders[: r % len(contenders)]
            for kind in order:
                slot = slot_name(kind, r)
                if kind == RECV:
                    took = recvlogical(cluster, dsn, slot, end, proto)
                    runs[kind].append({"seconds": took})
                    print(f"{workload} round {r}: {kind}: {took:.2f} s", flush=True)
                    continue
                path = work / f"{kind}-{r}"
                start = time.perf_counter()
                stats = run_sink(
                    kind,
                    dsn,
                    path,
                    slot,
                    spark,
                    until_lsn=end,
                    max_batch_rows=args.max_batch_rows,
                )
                took = time.perf_counter() - start
                check_state(
                    f"{workload} {kind} round {r}", table_state(sink_table(kind, path)), want
                )
                table = delta.table_path(path, TABLE)
                dv_on[kind] = deletion_vectors_on(table)
                files, nbytes = delta_files(table)
                info = {"seconds": took, "changes": stats.changes, "files": files, "bytes": nbytes}
                runs[kind].append(info | vars(stats))
                print(
                    f"{workload} round {r}: {kind}: {stats.changes:,} changes in {took:.2f} s "
                    f"({stats.batches} batches, {stats.commits} commits, {files} files; "
                    "checked)",
                    flush=True,
                )
                shutil.rmtree(path, ignore_errors=True)
        if "delta-rs-dv" in dv_on and not dv_on["delta-rs-dv"]:
            raise AssertionError(f"{workload}: the delta-rs-dv table has no deletion vectors")
    finally:
        conn.close()
        shutil.rmtree(work, ignore_errors=True)
        cluster.drop_database(db)
    return {
        "ran": machine_info()["date"],
        "load": load,
        "base_rows": base_rows,
        "changes": changes,
        "transactions": txs,
        "workload_s": workload_s,
        "final_rows": want[0],
        "proto_version": proto,
        "snapshot_s": snapshot_s,
        "created_by_snapshot": created,
        "deletion_vectors": dv_on,
        "runs": runs,
    }


def times(runs: list[dict[str, Any]]) -> list[float]:
    return [run["seconds"] for run in runs]


def ratios(result: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Per Delta contender: (pg_recvlogical best / its best, the same of the medians)."""
    recv = times(result["runs"][RECV])
    out = {}
    for kind, runs in result["runs"].items():
        if kind != RECV and runs:
            t = times(runs)
            out[kind] = (min(recv) / min(t), statistics.median(recv) / statistics.median(t))
    return out


def title(workload: str, result: dict[str, Any]) -> str:
    if workload == "inserts":
        return f"{result['changes']:,} inserts into an empty table"
    return f"{result['changes']:,} random-key updates on a {result['base_rows']:,}-row table"


def render(results: dict[str, Any], env: dict[str, str], args: argparse.Namespace) -> list[str]:
    spark = f"; PySpark {env['pyspark']}" if "pyspark" in env else ""
    lines = [
        "# Draining a slot backlog into Delta Lake, against pg_recvlogical",
        "",
        f"- Written: {env['date']}. Machine: {env['nproc']} cores ({env['cpu']}), {env['os']}; "
        f"Python {env['python']}; deltalake (delta-rs) {env['deltalake']}{spark}; "
        f"PostgreSQL {env['postgres']} on the same machine; release build of pgwire_cdc. "
        f"1-minute load average at the start: {env['load']}.",
        "- Reproduce: `nice -n 10 .venv/bin/python benches/delta_drain.py "
        f"--inserts {args.inserts} --base-rows {args.base_rows} --updates {args.updates} "
        f"--repeat {args.repeat}{' --spark' if args.spark else ''}` "
        "(`--help` for the options). Script and method: `benches/delta_drain.py`.",
        "- Method: a fresh database per workload; each Delta contender takes the initial "
        "snapshot on a slot of its own (not timed), then its slot and table are copied once "
        "per round, and pg_recvlogical gets copies of the copy-on-write contender's slot, all "
        "before the workload. Each contender then drains its own copy up to the same end "
        "LSN: `pg_recvlogical -f /dev/null` with stream()'s pgoutput options (proto_version "
        "as below, binary, messages, streaming), against `delta.run(dsn, path, "
        f"until_lsn=end, max_batch_rows={args.max_batch_rows:,})` (stream + MERGE/append + "
        "commit + ack). Rounds interleave the contenders; every Delta result is checked "
        "against PostgreSQL (rows, sums of amount and score). Ratio = pg_recvlogical's time "
        "/ the contender's: higher is better for pgwire_cdc.",
        "",
    ]
    for workload, result in results.items():
        ratio = ratios(result)
        lines += [
            f"## {title(workload, result)}",
            "",
            f"Ran {result['ran']}; {result['transactions']:,} transactions "
            f"({result['workload_s']:.1f} s), {result['final_rows']:,} rows at the end; "
            f"proto_version {result['proto_version']}; {args.repeat} rounds. 1-minute load "
            f"average at the start of the rounds: {result['load']:.2f}. Deletion vectors on "
            f"(checked after the drain): {result['deletion_vectors']}.",
            "",
            "| drain | best s | median s | all rounds (s) | changes/s (best) | "
            "vs pg_recvlogical (best) | (median) | batches | commits | files at the end | "
            "snapshot (untimed) |",
            "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for kind, runs in result["runs"].items():
            if not runs:
                continue
            t = times(runs)
            best, med = ratio.get(kind, (1.0, 1.0))
            last = runs[-1]
            snap = result["snapshot_s"].get(kind)
            lines.append(
                f"| {LABEL[kind]} | {min(t):.2f} | {statistics.median(t):.2f} | "
                f"{', '.join(f'{x:.2f}' for x in t)} | {result['changes'] / min(t):,.0f} | "
                f"**{best:.2f}x** | {med:.2f}x | {last.get('batches', '-')} | "
                f"{last.get('commits', '-')} | {last.get('files', '-')} | "
                f"{f'{snap:.1f} s' if snap is not None else '-'} |"
            )
        lines.append("")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="inserts,updates")
    ap.add_argument("--inserts", type=int, default=300_000)
    ap.add_argument("--base-rows", type=int, default=1_000_000)
    ap.add_argument("--updates", type=int, default=60_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-batch-rows", type=int, default=DEFAULT_MAX_BATCH_ROWS)
    ap.add_argument("--spark", action="store_true", help="the Spark writer too")
    ap.add_argument("--spark-memory", default="8g")
    ap.add_argument("--server", default="pg15", choices=("pg15", "pg18"))
    ap.add_argument("--workdir", default=None, help="where the tables go (default: $TMPDIR)")
    ap.add_argument(
        "--out", type=Path, default=RESULTS / "delta_drain.md", help="(and its .json next to it)"
    )
    args = ap.parse_args(argv)
    workloads = [w for w in args.workloads.split(",") if w]
    if set(workloads) - {"inserts", "updates"}:
        ap.error("--workloads: inserts, updates")
    check_release_build()
    from importlib.metadata import version

    env = machine_info()
    env["load"] = f"{os.getloadavg()[0]:.2f}"
    env["deltalake"] = version("deltalake")
    sinks = ["delta-rs", "delta-rs-dv"]
    spark = None
    if args.spark:
        os.environ.setdefault("PGWIRE_CDC_DELTA_JARS", str(ROOT / ".cache" / "jars" / "delta"))
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        spark = bench_session("pgwire_cdc-bench-delta-drain", args.spark_memory)
        env["pyspark"] = version("pyspark")
        sinks.append("spark")
    results: dict[str, Any] = {}
    try:
        with PgCluster.for_server(args.server, settings=DRAIN_SETTINGS).start() as cluster:
            version_num = cluster.version
            env["postgres"] = f"{version_num // 10000}.{version_num % 10000}"
            for workload in workloads:
                results[workload] = bench_workload(cluster, workload, sinks, spark, args)
    finally:
        if spark is not None:
            spark.stop()
    summary = {
        f"Delta drain, {title(w, res)}, {kind} vs pg_recvlogical": best
        for w, res in results.items()
        for kind, (best, _) in ratios(res).items()
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(
        json.dumps(
            {
                "date": env["date"],
                "machine": f"nproc={env['nproc']}, {platform.platform()}",
                "ratios": summary,
                "figures": {},
                "workloads": results,
                "environment": env,
                "args": {k: str(v) for k, v in vars(args).items()},
            },
            indent=2,
        )
        + "\n"
    )
    args.out.write_text("\n".join(render(results, env, args)))
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
