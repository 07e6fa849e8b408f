"""Two builds of pgwire_cdc side by side on the same WAL: ``stream()`` draining a slot, and
the Delta sink (delta-rs) applying what it drains, each run in its own process, the two
builds taking turns. A change that slows either down shows as a ratio below 1.

    python benches/ab_commits.py --baseline-python /path/to/other/venv/bin/python

The current build is the one this interpreter imports (``PYTHONPATH`` may point it at a
checkout); the baseline is whatever ``pgwire_cdc`` the other interpreter imports without
``PYTHONPATH`` (a wheel of another commit, for example).
Every run reads the same changes from its own copy of one template slot, made before the
workload, on one throwaway PostgreSQL 15 cluster. Results: benches/results/ab_commits.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE.parent / "tests"))  # support.server: the tests' PgCluster

import psycopg  # noqa: E402
from support.server import PgCluster  # noqa: E402

#: What one run does, in a process of its own (so each build imports only itself).
RUNNER = r"""
import json, sys, time
import pgwire_cdc
from pgwire_cdc import delta
dsn, slot, until, mode, path = sys.argv[1:6]
rows = batches = 0
started = time.perf_counter()
for batch in pgwire_cdc.stream(dsn, publication="ab", slot=slot, until_lsn=int(until),
                               held_tables=["public.ab"]):
    rows += batch.rows
    batches += 1
    if mode == "delta":
        delta.apply(batch, path)
    batch.ack()
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "rows": rows, "batches": batches,
                  "build": pgwire_cdc._native.BUILD_PROFILE}))
"""


def workload(conn: psycopg.Connection[Any], inserts: int, updates: int, deletes: int) -> int:
    """Inserts, random-key updates and deletes on ``ab``; returns the LSN after them."""
    for start in range(1, inserts + 1, 10_000):
        conn.execute(
            "INSERT INTO ab SELECT g, md5(g::text), g * 1.5"
            " FROM generate_series(%s::int, %s::int) g",
            (start, min(inserts, start + 9_999)),
        )
    for _ in range(updates // 1_000):
        conn.execute(
            "UPDATE ab SET v = md5(random()::text), n = n + 1 WHERE id IN"
            " (SELECT (random() * %s::int)::int + 1 FROM generate_series(1, 1000))",
            (inserts - 1,),
        )
    conn.execute("DELETE FROM ab WHERE id %% 20 = 0 AND id <= %s::int", (deletes * 20,))
    row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    assert row is not None
    return int(row[0])


def run_one(
    python: str, dsn: str, slot: str, until: int, mode: str, path: str, baseline: bool
) -> dict[str, Any]:
    env = dict(os.environ)
    if baseline:
        # PYTHONPATH may point the current build at a checkout; never the baseline.
        env.pop("PYTHONPATH", None)
    out = subprocess.run(
        [python, "-c", RUNNER, dsn, slot, str(until), mode, path],
        check=True,
        env=env,
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),  # not the checkout: each build imports its own package
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if result["build"] != "release":
        raise SystemExit(f"{python} imports a {result['build']} build: benchmark release builds")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-python", required=True)
    parser.add_argument("--baseline-name", default="baseline")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--inserts", type=int, default=300_000)
    parser.add_argument("--updates", type=int, default=200_000)
    parser.add_argument("--deletes", type=int, default=10_000)
    args = parser.parse_args()
    builds = {"current": sys.executable, args.baseline_name: args.baseline_python}
    cluster = PgCluster.for_server("pg15")
    cluster.start()
    results: dict[str, dict[str, list[dict[str, Any]]]] = {
        mode: {name: [] for name in builds} for mode in ("stream", "delta")
    }
    try:
        dsn = cluster.dsn
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE ab (id int PRIMARY KEY, v text, n numeric(12, 2))")
            conn.execute("CREATE PUBLICATION ab FOR TABLE ab")
            conn.execute("SELECT pg_create_logical_replication_slot('ab_template', 'pgoutput')")
            until = workload(conn, args.inserts, args.updates, args.deletes)
            for round_ in range(args.rounds):
                for mode in ("stream", "delta"):
                    # Taking turns, the baseline first in every other round.
                    order = list(builds.items())
                    if round_ % 2:
                        order.reverse()
                    for name, python in order:
                        slot = f"ab_{mode}_{name}_{round_}".lower()
                        conn.execute(
                            "SELECT pg_copy_logical_replication_slot('ab_template', %s)", (slot,)
                        )
                        with tempfile.TemporaryDirectory() as lake:
                            got = run_one(
                                python, dsn, slot, until, mode, lake, name == args.baseline_name
                            )
                        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                        results[mode][name].append(got)
                        print(
                            f"round {round_ + 1} {mode:6} {name:10} {got['seconds']:7.2f} s"
                            f" ({got['rows']} rows, {got['batches']} batches)",
                            flush=True,
                        )
    finally:
        cluster.stop()
    report(args, builds, results)


def report(
    args: argparse.Namespace,
    builds: dict[str, str],
    results: dict[str, dict[str, list[dict[str, Any]]]],
) -> None:
    base = args.baseline_name
    lines = [
        f"# Two builds on the same WAL ({dt.date.today().isoformat()})",
        "",
        f"`python benches/ab_commits.py --baseline-python ... --baseline-name {base}`:"
        f" {args.inserts:,} inserts, {args.updates:,} random-key updates and deletes on one"
        f" table, PostgreSQL 15, {platform.machine()}, {args.rounds} rounds taking turns;"
        " median seconds of each build, and the current build's speed as a ratio of the"
        " baseline's (above 1: faster).",
        "",
        "| run | changes | current (s) | " + base + " (s) | ratio |",
        "|---|---|---|---|---|",
    ]
    for mode, label in (
        ("stream", "stream() drains the slot"),
        ("delta", "+ delta.apply (delta-rs)"),
    ):
        cur = statistics.median(r["seconds"] for r in results[mode]["current"])
        old = statistics.median(r["seconds"] for r in results[mode][base])
        rows = results[mode]["current"][0]["rows"]
        lines.append(f"| {label} | {rows:,} | {cur:.2f} | {old:.2f} | {old / cur:.2f}x |")
    out = HERE / "results" / "ab_commits.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
