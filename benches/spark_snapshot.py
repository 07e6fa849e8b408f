"""A table snapshot into Delta Lake: Spark tasks (``spark.read.format("pgwire_cdc")``)
against the driver-side snapshot of ``stream()`` and the ADBC PostgreSQL driver.

A throwaway PostgreSQL 15 gets ``--rows`` rows (default 10,000,000) of the live benches'
``bench`` table (``live.BENCH_TABLE``, filled by ``live.fill``), then ``VACUUM ANALYZE``
and a checkpoint, so that no reader sets hint bits or reads dirty buffers. The contenders,
each timed as a whole (wall clock, best of ``--rounds``):

* **ADBC**: ``adbc_driver_postgresql`` ``SELECT * FROM bench``, the record batches
  streamed and counted (``fetch_record_batch``: the same decoding work as
  ``fetch_arrow_table`` without holding 10 M rows); one connection.
* **stream()**: ``pgwire_cdc.stream()`` on a new slot, initial snapshot only
  (``until_lsn=0``, the snapshot's consistent point), ``snapshot_workers=2``; rows
  counted, and in a second run written to a Delta table with delta-rs
  (``DeltaSink(path).apply(batch)`` per snapshot batch, then ``ack``). The slot is
  dropped after each run.
* **Spark**: ``spark.read.format("pgwire_cdc").option("partitions", N).load()`` written
  as ``format("noop")`` (the read alone) and as ``format("delta").mode("overwrite")`` to
  an empty directory, with ``local[1]`` (partitions 1 and 4) and ``local[2]``
  (partitions 4). Each master runs in a child process of this script whose Spark session
  (JVM) is started and warmed up on a 100,000-row copy of the table before any timing:
  JVM start-up is not in the figures; planning (schema, CTID ranges, the snapshot keeper)
  is, as it is part of every job.

Every result is checked: ADBC and stream() count the rows, the Delta tables are counted
after the run (outside the timing). CPU seconds of each run are split into the
PostgreSQL server's (its process tree, backends reaped included), other jobs on the
machine (processes neither the server's nor this script's), and the rest: the client side
(Python, Rust, the JVM and its Python workers). Each run first waits for the machine to be
quiet, and a run that other jobs disturbed is run again (``Meter``).

Before starting, the script waits (polling every 30 s, at most ``--wait-minutes``) while
another benchmark (``benches/delta_lake.py``) runs on the machine.

Writes ``benches/results/spark_snapshot.md`` and ``.json``. Usage::

    .venv/bin/python benches/spark_snapshot.py [--rows 10000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import pgwire_cdc  # noqa: E402
from bench_common import check_release_build, machine_info  # noqa: E402
from live import BENCH_TABLE, SETTINGS, fill  # noqa: E402

#: Other benchmarks this one must not run at the same time as.
OTHER_BENCHES = ["benches/delta_lake.py"]
#: Rows of the warm-up table of the Spark sessions.
WARM_ROWS = 100_000
#: (master, partitions) of the Spark runs; a master's runs share one child process.
SPARK_CONFIGS = [("local[1]", 1), ("local[1]", 4), ("local[2]", 4)]
#: Batch size of the stream() runs (both the counting and the delta-rs one).
STREAM_BATCH_ROWS = 1_000_000
STREAM_BATCH_BYTES = 512 << 20

# -- CPU accounting ---------------------------------------------------------------------

_CLK = os.sysconf("SC_CLK_TCK")


def machine_cpu() -> float:
    """Busy CPU seconds of the whole machine since boot (all but idle and iowait)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:9]]
    return (sum(values) - values[3] - values[4]) / _CLK


def _processes() -> dict[int, tuple[int, int, float]]:
    """pid -> (parent pid, start time, CPU seconds with the children it has reaped)."""
    procs: dict[int, tuple[int, int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu = sum(int(v) for v in fields[11:15]) / _CLK
        procs[int(entry)] = (int(fields[1]), int(fields[19]), cpu)
    return procs


def _descendants(procs: dict[int, tuple[int, int, float]], roots: list[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid in procs and pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


class CpuSample:
    """Busy CPU of the machine, of the server's process tree, and per process of every
    other process that is neither the server's nor this benchmark's."""

    def __init__(self, server_pid: int, client_pid: int) -> None:
        self.machine = machine_cpu()
        procs = _processes()
        server = _descendants(procs, [server_pid])
        mine = _descendants(procs, [client_pid]) | server
        self.server = sum(procs[p][2] for p in server)
        self.others = {(p, v[1]): v[2] for p, v in procs.items() if p not in mine}

    def since(self, before: CpuSample) -> tuple[float, float, float]:
        """(server, client, other) CPU seconds from ``before`` to this sample.

        ``other``: the CPU of processes not ours, from their counters (own time plus the
        children they reaped), less the counters at ``before`` of those that have gone
        since (a parent that reaped them now counts their whole life); a job that came
        and went in between is counted by its parent, or missed (then it counts as ours).
        ``client``: the rest of the machine's busy time, so this benchmark's processes,
        including the Spark Python workers that exited meanwhile (PySpark's daemon does
        not wait for them, so no parent's counters hold them), and the kernel's work for
        them."""
        server = self.server - before.server
        other = sum(cpu - before.others.get(key, 0.0) for key, cpu in self.others.items())
        other -= sum(cpu for key, cpu in before.others.items() if key not in self.others)
        other = max(other, 0.0)
        client = (self.machine - before.machine) - server - other
        return server, client, other


class Meter:
    """Times runs: wall clock, and CPU seconds of the PostgreSQL server, of this benchmark's
    own processes (the client: this script, its Spark child, the JVM, Python workers) and
    of everything else on the machine (``other``: jobs this benchmark does not control).

    A run waits first until the machine is quiet (``other`` under ``QUIET_CORES`` cores
    for ``QUIET_SAMPLE_S``, waiting at most ``quiet_wait`` seconds), and a run during which
    ``other`` averaged more than ``QUIET_CORES`` cores counts as disturbed and is run again
    (at most ``retries`` times). Disturbed runs are kept, marked, and only count when no
    run of that contender was clean."""

    QUIET_CORES = 0.15
    QUIET_SAMPLE_S = 2.0

    def __init__(
        self, server_pid: int, client_pid: int, quiet_wait: float = 600, retries: int = 2
    ) -> None:
        self.server_pid, self.client_pid = server_pid, client_pid
        self.quiet_wait, self.retries = quiet_wait, retries

    def _sample(self) -> CpuSample:
        return CpuSample(self.server_pid, self.client_pid)

    def wait_quiet(self) -> None:
        deadline = time.monotonic() + self.quiet_wait
        said = False
        while True:
            before = self._sample()
            time.sleep(self.QUIET_SAMPLE_S)
            _, _, other = self._sample().since(before)
            if other / self.QUIET_SAMPLE_S < self.QUIET_CORES:
                return
            if time.monotonic() > deadline:
                print("  the machine is still busy with other jobs; timing anyway", flush=True)
                return
            if not said:
                print(
                    f"  other jobs busy ({other / self.QUIET_SAMPLE_S:.1f} cores); waiting",
                    flush=True,
                )
                said = True
            time.sleep(3)

    def once(self, fn: Callable[[], int]) -> dict[str, Any]:
        self.wait_quiet()
        before, t0 = self._sample(), time.perf_counter()
        rows = fn()
        wall = time.perf_counter() - t0
        server, client, other = self._sample().since(before)
        return {
            "s": wall,
            "rows": rows,
            "server_cpu": server,
            "client_cpu": client,
            "other_cpu": other,
            "disturbed": other / wall > self.QUIET_CORES,
        }

    def run(
        self, fn: Callable[[], int], check: Callable[[dict[str, Any]], None] = lambda r: None
    ) -> list[dict[str, Any]]:
        """``fn`` run once, again while disturbed; ``check`` sees each run's result."""
        attempts: list[dict[str, Any]] = []
        for _ in range(1 + self.retries):
            run = self.once(fn)
            check(run)
            attempts.append(run)
            if not run["disturbed"]:
                break
            print(f"  disturbed ({run['other_cpu']:.1f} CPU s of other jobs); again", flush=True)
        return attempts


def postmaster_pid(datadir: Path) -> int:
    return int((datadir / "postmaster.pid").read_text().split()[0])


def wait_for_other_benches(minutes: float) -> None:
    deadline = time.monotonic() + minutes * 60
    while True:
        running = [
            b
            for b in OTHER_BENCHES
            if subprocess.run(["pgrep", "-f", b], capture_output=True).returncode == 0
        ]
        if not running:
            return
        if time.monotonic() > deadline:
            print(f"still running after {minutes:g} min: {running}; going on", flush=True)
            return
        print(f"waiting for {', '.join(running)} to finish ...", flush=True)
        time.sleep(30)


# -- the driver-side contenders ---------------------------------------------------------


def run_adbc(uri: str) -> int:
    import adbc_driver_postgresql.dbapi as adbc

    rows = 0
    with adbc.connect(uri) as conn, conn.cursor() as cur:
        cur.execute("SELECT * FROM bench")
        for batch in cur.fetch_record_batch():
            rows += batch.num_rows
    return rows


def run_stream(dsn: str, slot: str, delta_path: str | None) -> int:
    sink = None
    if delta_path is not None:
        from pgwire_cdc.delta import DeltaSink

        sink = DeltaSink(delta_path)
    rows = 0
    for batch in pgwire_cdc.stream(
        dsn,
        publication="benchpub",
        slot=slot,
        snapshot=True,
        binary=True,
        until_lsn=0,
        snapshot_workers=2,
        max_batch_rows=STREAM_BATCH_ROWS,
        max_batch_bytes=STREAM_BATCH_BYTES,
    ):
        if batch.snapshot:
            rows += batch.rows
            if sink is not None:
                sink.apply(batch)
        batch.ack()
    return rows


def delta_rows(path: str) -> int:
    """Rows of the sink's Delta table of ``public.bench`` under ``path`` (read by
    DataFusion, which applies deletion vectors)."""
    from deltalake import DeltaTable, QueryBuilder
    from pgwire_cdc.delta import table_path
    from pgwire_cdc.tables import table_of

    table = DeltaTable(table_path(path, "public.bench"))
    counted = table_of(QueryBuilder().register("t", table).execute("SELECT count(*) AS n FROM t"))
    return int(counted["n"][0].as_py())


# -- Spark (a child process per master) -------------------------------------------------


def spark_child(request: dict[str, Any]) -> dict[str, Any]:
    """Runs in ``--spark-child``: one session, warm-up, then the timed rounds."""
    os.environ.setdefault("PGWIRE_CDC_DELTA_JARS", str(ROOT / ".cache" / "jars" / "delta"))
    from pgwire_cdc.spark import session

    master, dsn, workdir = request["master"], request["dsn"], Path(request["workdir"])
    meter = Meter(
        request["server_pid"], request["client_pid"], request["quiet_wait"], request["retries"]
    )
    started = time.perf_counter()
    spark = session(
        "pgwire_cdc-bench-spark-snapshot",
        master,
        delta=True,
        **{
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": request["memory"],
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - started

    def job(table: str, partitions: int, sink: str) -> int:
        df = (
            spark.read.format("pgwire_cdc")
            .option("dsn", dsn)
            .option("table", f"public.{table}")
            .option("partitions", partitions)
            .option("keep_seconds", "1")
            .load()
        )
        if sink == "noop":
            df.write.format("noop").mode("overwrite").save()
            return -1
        df.write.format("delta").mode("overwrite").save(str(workdir / f"spark_{partitions}"))
        return -1

    def count(partitions: int) -> int:
        path = str(workdir / f"spark_{partitions}")
        return int(spark.read.format("delta").load(path).count())

    partitions_list: list[int] = request["partitions"]
    for p in partitions_list:
        for sink in ("noop", "delta"):
            shutil.rmtree(workdir / f"spark_{p}", ignore_errors=True)
            job("warm", p, sink)
    assert count(partitions_list[0]) == request["warm_rows"]
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in range(request["rounds"]):
        for p in partitions_list:
            for sink in ("noop", "delta"):
                key = f"spark {master} p{p} {sink}"

                def one(p: int = p, sink: str = sink) -> int:
                    shutil.rmtree(workdir / f"spark_{p}", ignore_errors=True)
                    return job("bench", p, sink)

                def check(run: dict[str, Any], p: int = p, sink: str = sink) -> None:
                    if sink == "delta":
                        run["rows"] = count(p)
                        assert run["rows"] == request["rows"], (run["rows"], request["rows"])

                attempts = meter.run(one, check)
                runs.setdefault(key, []).extend(attempts)
                print(
                    f"  round {r + 1}: {key}: " + ", ".join(f"{a['s']:.2f} s" for a in attempts),
                    file=sys.stderr,
                    flush=True,
                )
    for p in partitions_list:
        shutil.rmtree(workdir / f"spark_{p}", ignore_errors=True)
    spark.stop()
    return {"startup_s": startup, "runs": runs}


def run_spark_master(master: str, partitions: list[int], request: dict[str, Any]) -> dict:
    request = {**request, "master": master, "partitions": partitions}
    proc = subprocess.run(
        [sys.executable, __file__, "--spark-child", json.dumps(request)],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    result: dict[str, Any] = json.loads(line[len("RESULT ") :])
    return result


# -- the report ---------------------------------------------------------------------------


def best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest undisturbed run (the fastest of all when every run was disturbed)."""
    clean = [r for r in runs if not r.get("disturbed")]
    return min(clean or runs, key=lambda r: r["s"])


LABELS = {
    "adbc": ("ADBC PostgreSQL driver, `SELECT *` into Arrow", "1 (Python + C)", "1", "none"),
    "stream": ("`stream()` snapshot, `snapshot_workers=2`", "1 process", "2", "none"),
    "stream delta-rs": (
        "`stream()` snapshot + `DeltaSink` (delta-rs)",
        "1 process",
        "2",
        "Delta (delta-rs)",
    ),
}


def label_of(key: str) -> tuple[str, str, str, str]:
    if key in LABELS:
        return LABELS[key]
    _, master, part, sink = key.split(" ")
    sink_name = "none (`noop`)" if sink == "noop" else "Delta (Spark)"
    return (f'Spark `format("pgwire_cdc")`, `{master}`', master, part[1:], sink_name)


def render(doc: dict[str, Any]) -> str:
    runs: dict[str, list[dict[str, Any]]] = doc["runs"]
    rows = doc["rows"]
    env = doc["env"]
    adbc = best(runs["adbc"])["s"] if "adbc" in runs else None
    lines = [
        f"# Table snapshot into Delta Lake: Spark tasks vs `stream()` vs ADBC ({rows:,} rows)",
        "",
        f"- Run: {env['date']}. Machine: {env['nproc']} cores ({env['cpu']}), "
        f"{env['mem']}, {env['os']}; Python {env['python']}; PySpark {env['pyspark']}, "
        f"Delta Lake {env['delta_spark']} jars, deltalake (delta-rs) {env['deltalake']}, "
        f"adbc-driver-postgresql {env['adbc']}; PostgreSQL {env['postgres']} on the same "
        "machine (server and client share the 2 cores); release build of pgwire_cdc.",
        f"- Reproduce: `.venv/bin/python benches/spark_snapshot.py --rows {rows}` "
        "(script and method: `benches/spark_snapshot.py`; `--help` for the options).",
        f"- Table: `bench` (8 columns: bigint key, text, numeric(12,2), timestamptz, bool, "
        f"float8, jsonb, uuid), {rows:,} rows, {doc['table_mb']:,.0f} MB heap, "
        "`VACUUM ANALYZE`d and checkpointed, all in the OS page cache.",
        f"- Best of {doc['rounds']} rounds per contender (wall clock of the whole job; "
        "Spark: `load()` + write, so planning, the snapshot export and the Delta commit are "
        f"in; the Spark JVM starts ({doc['spark_startup']}) and is warmed up on a "
        f"{WARM_ROWS:,}-row table before any timing).",
        "- CPU seconds of the best run: the PostgreSQL server's process tree (backends "
        "included), and the client (this benchmark's processes: Python, the Rust decoder, "
        "the JVM and its Python workers); *cores busy* = (server + client) / wall. Runs "
        "wait for the machine to be quiet; a run during which other jobs on the machine "
        f"took more than {Meter.QUIET_CORES} cores on average is marked `*`, run again, and "
        "counts only when no run of that contender was undisturbed.",
        "",
        "| reader | client cores | parallel reads | sink | best s | rows/s | vs ADBC | "
        "CPU s: server / client | cores busy | all runs (s) |",
        "|---|---|---:|---|---:|---:|---:|---|---:|---|",
    ]
    for key, key_runs in runs.items():
        name, cores, parallel, sink = label_of(key)
        b = best(key_runs)
        vs = f"{adbc / b['s']:.2f}x" if adbc else "-"
        lines.append(
            f"| {name} | {cores} | {parallel} | {sink} | {b['s']:.2f} | {rows / b['s']:,.0f} | "
            f"{vs} | {b['server_cpu']:.1f} / {b['client_cpu']:.1f} | "
            f"{(b['server_cpu'] + b['client_cpu']) / b['s']:.2f} | "
            + ", ".join(f"{r['s']:.2f}{'*' if r.get('disturbed') else ''}" for r in key_runs)
            + " |"
        )
    scaling = scaling_of(runs, rows, int(env["nproc"]))
    lines += [
        "",
        "## Spark: 1 core to 2 cores",
        "",
        "Same plan (4 CTID ranges = 4 tasks), `local[1]` against `local[2]`, best runs. "
        "*CPU per row* is server + client CPU over the rows; *cores busy* as above; "
        f"*bound*: the most {env['nproc']} cores can give over `local[1]` at its CPU per row "
        f"({env['nproc']} / local[1]'s cores busy), since the server shares these cores.",
        "",
        "| sink | local[1] rows/s | cores busy | CPU per row | local[2] rows/s | cores busy "
        "| CPU per row | speed-up (goal >= 1.7x) | bound on this machine |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for sink, s in scaling.items():
        lines.append(
            f"| {sink} | {s['one']:,.0f} | {s['busy_one']:.2f} | {s['us_one']:.1f} µs | "
            f"{s['two']:,.0f} | {s['busy_two']:.2f} | {s['us_two']:.1f} µs | "
            f"**{s['ratio']:.2f}x** | {s['bound']:.2f}x |"
        )
    lines += ["", *cpu_notes(runs, rows, scaling, int(env["nproc"]))]
    lines += ["", *NOTES_SCALING, ""]
    if doc.get("remarks"):
        lines += ["### Remarks on this run", "", *doc["remarks"], ""]
    return "\n".join(lines)


def cpu_notes(
    runs: dict[str, list[dict[str, Any]]], rows: int, scaling: dict[str, Any], cores: int
) -> list[str]:
    """What the CPU figures say about 2 cores, and about more (derived, not measured)."""
    noop, delta = runs.get("spark local[2] p4 noop"), runs.get("spark local[2] p4 delta")
    if not (noop and delta and scaling):
        return []
    n, d = best(noop), best(delta)
    server_us = n["server_cpu"] / rows * 1e6
    client_noop_us = n["client_cpu"] / rows * 1e6
    client_delta_us = d["client_cpu"] / rows * 1e6
    read = next(iter(scaling.values()))
    write = list(scaling.values())[-1]
    return [
        "### What the CPU figures say",
        "",
        f"`local[1]` is not one core's worth of work: while its one task thread runs, the "
        f"PostgreSQL backend serving it (COPY) and the JVM's own threads (taking in the "
        "Arrow batches, Parquet encoding, GC, JIT) run beside it, so it already keeps "
        f"{read['busy_one']:.2f} of the "
        f"{cores} cores busy. Adding the second core can then give at most "
        f"{read['bound']:.2f}x; the read alone gets {read['ratio']:.2f}x, with `local[2]` "
        f"keeping the machine {read['busy_two']:.2f} cores busy. The 1.7x goal "
        f"needs a machine whose server does not share the client's {cores} cores; here it "
        "cannot be reached by any reader, and the driver-side `stream()` and ADBC hit the "
        "same ceiling (their *cores busy* column).",
        "",
        f"Per row, the server spends {server_us:.2f} µs of CPU (COPY BINARY of the 8 "
        f"columns, whoever reads), the Spark client {client_noop_us:.2f} µs to read "
        f"(`noop`) and {client_delta_us:.2f} µs to read and write Delta. The CPU per row "
        f"hardly changes from 1 to 2 task slots (read: {read['us_one']:.1f} -> "
        f"{read['us_two']:.1f} µs, Delta: {write['us_one']:.1f} -> {write['us_two']:.1f} "
        "µs, server and client together), and the tasks share nothing, so with the "
        "server on machines of its own the read scales with the cores given to it. "
        f"Derived from these figures, not measured: one server core feeds about "
        f"{1e6 / server_us:,.0f} rows/s, one executor core reads about "
        f"{1e6 / client_noop_us:,.0f} rows/s and writes about {1e6 / client_delta_us:,.0f} "
        f"rows/s into Delta: one server core keeps about {client_delta_us / server_us:.1f} "
        f"executor cores writing Delta busy ({client_noop_us / server_us:.1f} reading "
        "only), until the table's blocks come from disk rather than memory.",
    ]


SINKS = (("noop", "none (`noop`: the read alone)"), ("delta", "Delta (Spark)"))


def scaling_of(runs: dict[str, list[dict[str, Any]]], rows: int, cores: int) -> dict[str, Any]:
    """local[1] against local[2], both with 4 partitions, per sink."""
    scaling: dict[str, Any] = {}
    for sink, label in SINKS:
        one, two = runs.get(f"spark local[1] p4 {sink}"), runs.get(f"spark local[2] p4 {sink}")
        if not (one and two):
            continue
        b1, b2 = best(one), best(two)
        busy1 = (b1["server_cpu"] + b1["client_cpu"]) / b1["s"]
        busy2 = (b2["server_cpu"] + b2["client_cpu"]) / b2["s"]
        scaling[label] = {
            "one": rows / b1["s"],
            "two": rows / b2["s"],
            "ratio": b1["s"] / b2["s"],
            "busy_one": busy1,
            "busy_two": busy2,
            "us_one": (b1["server_cpu"] + b1["client_cpu"]) / rows * 1e6,
            "us_two": (b2["server_cpu"] + b2["client_cpu"]) / rows * 1e6,
            "bound": cores / busy1,
        }
    return scaling


NOTES_SCALING = [
    "### How it scales past one machine",
    "",
    "Reading is planned by the driver and done by the tasks. Planning (a Python worker on "
    "the driver) reads the catalog, exports one snapshot (`pg_export_snapshot()`, held by a "
    "small keeper process) and cuts the heap into `partitions` CTID block ranges: it moves "
    "no row. Each task opens its own PostgreSQL connection, imports that snapshot (`SET "
    "TRANSACTION SNAPSHOT`) and runs `COPY (SELECT ... WHERE ctid in its range) TO STDOUT "
    "(FORMAT BINARY)`, decoded to Arrow by the Rust COPY decoder in the executor's Python "
    "worker, then written by the same task (one Delta data file per task; the driver "
    "commits the Delta log once). So the tasks share nothing but the snapshot: executors on "
    "other machines read their ranges in parallel, each with its own client CPU, and the "
    "client side grows with the cluster. What bounds the read is the server: one backend "
    "(one core) per running task, its I/O for the table's blocks (here all cached; from "
    "disk, the heap's read bandwidth) and `max_connections` (one connection per running "
    "task, plus the keeper's two). Use at least as many `partitions` as the cluster runs "
    "tasks at once, and no more running tasks than the server has cores to spare.",
    "",
    "On this machine the server and the client share 2 cores, so the 2-core figure is a "
    "floor, not the ceiling: with `local[2]` two PostgreSQL backends, two Python workers "
    "and the JVM compete for the same 2 cores. The CPU column shows how the work splits "
    "between the server (COPY) and the client (decode, Arrow to the JVM, Parquet).",
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--server", default="pg15", choices=("pg15", "pg18"))
    ap.add_argument("--spark-memory", default="6g")
    ap.add_argument(
        "--skip", default="", help="comma list of: adbc, stream, stream-delta, spark1, spark2"
    )
    ap.add_argument("--wait-minutes", type=float, default=20)
    ap.add_argument(
        "--quiet-wait",
        type=float,
        default=300,
        help="seconds a run waits at most for other jobs on the machine to calm down",
    )
    ap.add_argument(
        "--retries", type=int, default=2, help="extra runs when other jobs disturbed a run"
    )
    ap.add_argument("--workdir", default=None, help="where the Delta tables go (default: $TMPDIR)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "spark_snapshot.md")
    ap.add_argument(
        "--render", action="store_true", help="only rewrite the .md from the .json next to it"
    )
    ap.add_argument("--spark-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.render:
        args.out.write_text(render(json.loads(args.out.with_suffix(".json").read_text())))
        print(args.out.read_text())
        return 0
    if args.spark_child is not None:
        result = spark_child(json.loads(args.spark_child))
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    skip = {s for s in args.skip.split(",") if s}
    check_release_build()
    os.environ.setdefault("PGWIRE_CDC_DELTA_JARS", str(ROOT / ".cache" / "jars" / "delta"))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    wait_for_other_benches(args.wait_minutes)

    sys.path.append(str(ROOT / "tests"))
    from support.server import PgCluster

    workdir = Path(tempfile.mkdtemp(prefix="spark_snapshot_", dir=args.workdir))
    runs: dict[str, list[dict[str, Any]]] = {}
    startups: list[str] = []
    try:
        with PgCluster.for_server(args.server, settings=SETTINGS).start() as cluster:
            name = cluster.create_database("bench")
            dsn = cluster.dsn_for(name)
            conn = cluster.connect(name)
            conn.execute(BENCH_TABLE)
            print(f"filling bench with {args.rows:,} rows ...", flush=True)
            fill(conn, args.rows, batch=100_000)
            conn.execute(f"CREATE TABLE warm AS SELECT * FROM bench WHERE id <= {WARM_ROWS}")
            conn.execute("VACUUM ANALYZE bench")
            conn.execute("VACUUM ANALYZE warm")
            conn.execute("CHECKPOINT")
            conn.execute("CREATE PUBLICATION benchpub FOR TABLE bench")
            row = conn.execute("SELECT pg_relation_size('bench')").fetchone()
            assert row is not None
            table_mb = row[0] / 1e6
            server_pid = postmaster_pid(cluster.datadir)
            meter = Meter(server_pid, os.getpid(), args.quiet_wait, args.retries)
            uri = f"postgresql://postgres@127.0.0.1:{cluster.port}/{name}"
            # Read the table once so that every contender finds it in the page cache.
            run_adbc(uri)
            wait_for_other_benches(args.wait_minutes)

            # Driver-side contenders, rounds interleaved.
            slots = iter(range(1_000_000))

            def check_rows(run: dict[str, Any]) -> None:
                assert run["rows"] == args.rows, run

            def stream_run(delta: bool) -> int:
                slot = f"snap_{next(slots)}"
                path = str(workdir / "deltars") if delta else None
                if path:
                    shutil.rmtree(path, ignore_errors=True)
                try:
                    rows = run_stream(dsn, slot, path)
                finally:
                    conn.execute(
                        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                        "WHERE slot_name = %s",
                        (slot,),
                    )
                if path:
                    assert delta_rows(path) == rows, (delta_rows(path), rows)
                    shutil.rmtree(path, ignore_errors=True)
                return rows

            for r in range(args.rounds):
                contenders: list[tuple[str, Callable[[], int]]] = [
                    ("adbc", lambda: run_adbc(uri)),
                    ("stream", lambda: stream_run(False)),
                    ("stream delta-rs", lambda: stream_run(True)),
                ]
                for key, fn in contenders:
                    if key.replace(" delta-rs", "-delta") in skip:
                        continue
                    attempts = meter.run(fn, check_rows)
                    runs.setdefault(key, []).extend(attempts)
                    took = ", ".join(f"{a['s']:.2f} s" for a in attempts)
                    print(f"round {r + 1}: {key}: {took}", flush=True)

            # Spark, one child process (JVM) per master.
            request = {
                "dsn": dsn,
                "workdir": str(workdir),
                "rows": args.rows,
                "warm_rows": WARM_ROWS,
                "rounds": args.rounds,
                "memory": args.spark_memory,
                "server_pid": server_pid,
                "client_pid": os.getpid(),
                "quiet_wait": args.quiet_wait,
                "retries": args.retries,
            }
            masters: dict[str, list[int]] = {}
            for master, p in SPARK_CONFIGS:
                if f"spark{master[6]}" not in skip:
                    masters.setdefault(master, []).append(p)
            for master, partitions in masters.items():
                print(f"Spark {master}, partitions {partitions} ...", flush=True)
                result = run_spark_master(master, partitions, request)
                startups.append(f"{master}: {result['startup_s']:.1f} s")
                runs.update(result["runs"])
            pg_version = cluster.version
            conn.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    from importlib.metadata import version

    env = machine_info()
    env["mem"] = f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB RAM"
    env["pyspark"] = version("pyspark")
    env["deltalake"] = version("deltalake")
    env["adbc"] = version("adbc-driver-postgresql")
    jars = list(Path(os.environ["PGWIRE_CDC_DELTA_JARS"]).glob("delta-spark_*.jar"))
    env["delta_spark"] = jars[0].stem.rsplit("-", 1)[-1] if jars else "?"
    env["postgres"] = f"{pg_version // 10000}.{pg_version % 10000}"

    scaling = scaling_of(runs, args.rows, int(env["nproc"]))
    doc: dict[str, Any] = {
        "date": env["date"],
        "machine": f"nproc={env['nproc']}, {platform.platform()}",
        "rows": args.rows,
        "rounds": args.rounds,
        "table_mb": table_mb,
        "spark_startup": ", ".join(startups) or "-",
        "env": env,
        "runs": runs,
        "scaling": scaling,
        "ratios": {},
        "figures": {},
    }
    adbc_s = best(runs["adbc"])["s"] if "adbc" in runs else None
    for key, key_runs in runs.items():
        rate = args.rows / best(key_runs)["s"]
        doc["figures"][f"{key}, rows/s"] = rate
        if adbc_s and key != "adbc":
            doc["ratios"][f"{key} vs ADBC"] = adbc_s / best(key_runs)["s"]
    for label, s in scaling.items():
        doc["ratios"][f"Spark local[2] vs local[1], sink {label.split(' ')[0]}"] = s["ratio"]
    doc["medians"] = {k: statistics.median(r["s"] for r in v) for k, v in runs.items()}
    args.out.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
    args.out.write_text(render(doc))
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
