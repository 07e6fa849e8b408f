"""Iceberg sink benchmarks (``pgwire_cdc.iceberg``) next to the Delta sink's Spark writer,
in one process and one Spark session: throughput and the cost of one MERGE against table
size. Writes ``benches/results/iceberg.md`` and ``iceberg.json``.

The Iceberg tables live in a local catalog (``iceberg.local_catalog_conf``: JDBC on one
SQLite file, a warehouse directory) under ``--workdir``; the sink creates its tables with
its default properties (merge-on-read, format v3: a MERGE writes deletion vectors).

1. **End to end** (``--parts e2e``): ``delta_lake.py``'s part 1 (``bench_e2e``: the same
   workload, method and check against PostgreSQL), with three contenders: the Parquet
   mirror baseline, the Delta Spark writer (deletion vectors) and ``iceberg.run``. Round
   0 of each takes the initial snapshot; the other rounds start from a copy made before
   the workload: the slot by ``pg_copy_logical_replication_slot``, the Iceberg table by
   ``register_table`` of round 0's metadata file under another namespace (its data files
   are shared: Iceberg never changes a file, a MERGE writes new ones), the others' by
   copying their directory. Rounds interleave the contenders.
2. **One MERGE against table size** (``--parts scale``). Tables of ``--sizes`` rows of the
   ``bench`` shape, ``--rows-per-file`` rows per data file, built directly from one
   template tile of real rows (``delta_lake.template_rows``) with ids shifted per tile:
   the Delta table by delta-rs (``delta_lake.build_table``) with deletion vectors then
   turned on, the Iceberg table (created as the sink creates its tables) by Spark, one
   append of one file per tile. One change table of ``--updates`` updates of random
   distinct keys (``delta_lake.update_batch``) goes through
   ``DeltaSink(path, "spark", spark).apply(batch)`` and
   ``IcebergSink(spark, catalog, namespace).apply(batch)``: one MERGE each. Every run
   starts from a fresh copy of the table: Delta's directory is copied; the Iceberg table
   is registered anew (``register_table``) on the built table's metadata file, so each
   run sees the very same snapshot, files and metadata, and nothing of another run; then
   ``sync``. ``--repeat`` runs interleave the writers; best and median; each run is
   checked (row count, updated values). What the commit wrote: Delta's log entry
   (``delta_lake.last_commit``), Iceberg's snapshot summary and manifest entries. Where
   the time goes: Spark's own records of the MERGE (SQL executions, plan metrics, jobs
   and stages; :class:`Executions`), read after each run.
3. **The MERGE statement against table size** (``--parts merge``; written to
   ``benches/results/iceberg_merge.md`` and ``.json``). Tables of ``--sizes`` rows built as
   in part 2 (Delta's deletion vectors turned on by delta-rs), and three batches:
   ``--updates`` updates of random distinct keys; the same number of changes of which
   ``--inserts`` insert new keys above the table's largest; ``--updates`` updates of the
   newest keys (the last data file's). Three contenders on fresh copies
   (:class:`IcebergMerge`: the Iceberg sink's steps from the change table, with the MERGE of
   every clause or with ``iceberg.merge.merge_statement``'s statement and settings; the
   delta-rs writer's MERGE by deletion vectors, ``DeltaSink(path, "delta-rs").apply``),
   interleaved, taking turns at going first; each run checked (row count, updated values,
   inserted keys) and, for Iceberg, profiled as in part 2 (rows and bytes shuffled, the
   join, whether Spark's runtime Bloom filter ran).

Usage (``make bench-spark`` runs it with the defaults)::

    .venv/bin/python benches/iceberg_lake.py [--parts e2e,scale,merge] [--base-rows 1000000]
        [--changes 200000] [--sizes 1000000,10000000] [--updates 10000] [--inserts 1000]
        [--repeat 5]

A run of only some of parts 1 and 2 keeps the other's last results in ``iceberg.json`` and
rewrites ``iceberg.md`` from both.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import logging
import os
import platform
import random
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import delta_lake as dl  # noqa: E402  (also puts tests/ on sys.path: support.server)
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from bench_common import check_release_build, machine_info  # noqa: E402
from live import SETTINGS  # noqa: E402
from pgwire_cdc import _native, delta, iceberg  # noqa: E402
from pgwire_cdc.iceberg.merge import (  # noqa: E402
    adds_keys,
    applied,
    key_bounds,
    merge_statement,
    row_kinds,
)
from pgwire_cdc.lakehouse.shape import data_columns, lake_shape  # noqa: E402
from pgwire_cdc.lakehouse.sql import merge_clauses, unchanged_names  # noqa: E402
from pgwire_cdc.spark.types import spark_schema  # noqa: E402
from pgwire_cdc.streaming import Batch  # noqa: E402
from pgwire_cdc.tables import key_columns, table_of  # noqa: E402
from support.server import PgCluster  # noqa: E402

RESULTS = HERE / "results"
#: The Spark (and pyiceberg) name of the local Iceberg catalog.
CATALOG = "lake"
#: The Iceberg table of ``public.bench`` (the sink's default name).
ICEBERG_TABLE = "public_bench"
LABEL = {
    "parquet": "Parquet mirror (baseline)",
    "spark": "Delta, Spark writer (deletion vectors)",
    "iceberg": "Iceberg sink (merge-on-read, v3)",
}
#: Part 2's writers.
SCALE_WRITERS = {
    "delta": "Delta, Spark writer (deletion vectors)",
    "iceberg": "Iceberg (merge-on-read, v3)",
}


class Lake:
    """The run's local Iceberg catalog: its directory, Spark and pyiceberg views."""

    def __init__(self, directory: Path, spark: Any) -> None:
        self.directory = directory
        self.spark = spark

    def ref(self, namespace: str, table: str = ICEBERG_TABLE) -> str:
        return f"{CATALOG}.{namespace}.{table}"

    def metadata_file(self, namespace: str, table: str = ICEBERG_TABLE) -> str:
        catalog = iceberg.local_catalog(CATALOG, self.directory)
        return str(catalog.load_table(f"{namespace}.{table}").metadata_location)

    def register(self, metadata_file: str, namespace: str, table: str = ICEBERG_TABLE) -> None:
        """A new table ``namespace.table`` whose current state is ``metadata_file``'s."""
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{namespace}")
        self.spark.sql(
            f"CALL {CATALOG}.system.register_table(table => '{namespace}.{table}', "
            f"metadata_file => '{metadata_file}')"
        ).collect()

    def read(self, namespace: str, table: str = ICEBERG_TABLE) -> pa.Table:
        """The table's rows as pyiceberg reads them (deletion vectors applied)."""
        return iceberg.read_table(
            iceberg.local_catalog(CATALOG, self.directory), f"{namespace}.{table}"
        )

    def current_summary(self, ref: str) -> dict[str, str]:
        (row,) = self.spark.sql(
            f"SELECT summary FROM {ref}.snapshots WHERE snapshot_id = "
            f"(SELECT snapshot_id FROM {ref}.refs WHERE name = 'main')"
        ).collect()
        return dict(row["summary"])

    def last_commit(self, ref: str) -> dict[str, Any]:
        """What the table's current snapshot wrote: its summary (less the engine's and
        the sink's own keys) and its added manifest entries by kind."""
        summary = {
            k: v
            for k, v in self.current_summary(ref).items()
            if k.startswith(("added-", "removed-", "deleted-", "total-", "spark.merge"))
        }
        entries = self.spark.sql(
            "SELECT data_file.content AS content, data_file.file_format AS format, "
            "count(*) AS n, sum(data_file.record_count) AS records, "
            "count(DISTINCT data_file.file_path) AS paths, "
            "sum(coalesce(data_file.content_size_in_bytes, data_file.file_size_in_bytes)) "
            "AS bytes "
            f"FROM {ref}.entries WHERE status = 1 AND snapshot_id = "
            f"(SELECT snapshot_id FROM {ref}.refs WHERE name = 'main') "
            "GROUP BY data_file.content, data_file.file_format"
        ).collect()
        return {"summary": summary, "added": [r.asDict() for r in entries]}

    def data_files(self, ref: str) -> list[str]:
        return [
            r["file_path"] for r in self.spark.sql(f"SELECT file_path FROM {ref}.files").collect()
        ]

    def files(self, ref: str) -> dict[str, int]:
        summary = self.current_summary(ref)
        return {
            "files": int(summary.get("total-data-files", 0)),
            "delete_files": int(summary.get("total-delete-files", 0)),
            "bytes": int(summary.get("total-files-size", 0)),
        }


# -- 1. end to end --------------------------------------------------------------------


def iceberg_contender(lake: Lake) -> dl.Contender:
    """``iceberg.run`` as a contender of ``delta_lake.bench_e2e``: each round's directory
    name names its namespace (``iceberg-1`` → ``e2e_iceberg_1``); a round's start is round
    0's table registered under the round's namespace."""

    def namespace(path: Path) -> str:
        return "e2e_" + path.name.replace("-", "_")

    def run(dsn: str, path: Path, slot: str, spark: Any, **options: Any) -> Any:
        return iceberg.run(
            dsn, CATALOG, namespace(path), publication="pub", slot=slot, spark=spark, **options
        )

    def copy(src: Path, dst: Path) -> None:
        lake.register(lake.metadata_file(namespace(src)), namespace(dst))

    return dl.Contender(
        run=run,
        table=lambda path: lake.read(namespace(path)),
        copy=copy,
        files=lambda path: lake.files(lake.ref(namespace(path))),
    )


def bench_e2e(cluster: PgCluster, spark: Any, lake: Lake, args: argparse.Namespace) -> Any:
    sinks = {
        "parquet": dl.contender("parquet"),
        "spark": dl.contender("spark"),
        "iceberg": iceberg_contender(lake),
    }
    return dl.bench_e2e(cluster, spark, args, {k: sinks[k] for k in args.contenders})


# -- 2. one MERGE against table size --------------------------------------------------


def build_iceberg(lake: Lake, template: pa.Table, rows: int, rows_per_file: int, ns: str) -> str:
    """The Iceberg table ``ns.public_bench`` of ``rows`` rows, created as the sink creates
    its tables (its properties: merge-on-read, v3), written by Spark: the template's data
    columns tile after tile, ids shifted by the tile's offset, one append of one file per
    tile. Returns its metadata file."""
    from pyspark.sql import functions as F

    data = lake_shape(template).select(data_columns(template)).slice(0, rows_per_file)
    sink = iceberg.IcebergSink(lake.spark, CATALOG, ns)
    ref = sink.table_ref(dl.TABLE)
    sink.create(ref, data.schema)
    tile = lake.spark.createDataFrame(data, schema=spark_schema(data.schema)).coalesce(1)
    tile = tile.cache()
    tile.count()
    try:
        for lo in range(0, rows, rows_per_file):
            n = min(rows_per_file, rows - lo)
            part = tile.limit(n) if n < rows_per_file else tile
            part.withColumn("id", F.col("id") + F.lit(lo)).writeTo(ref).append()
    finally:
        tile.unpersist()
    return lake.metadata_file(ns)


def parquet_codec(uri: str) -> str:
    """The compression of a Parquet data file's first column chunk."""
    import pyarrow.parquet as pq

    path = uri.removeprefix("file://").removeprefix("file:")
    return str(pq.ParquetFile(path).metadata.row_group(0).column(0).compression)


def check_iceberg(lake: Lake, ref: str, batch: Any, rows: int) -> None:
    """The MERGE left ``rows`` rows and every key of the batch holds its new score."""
    changes = batch.tables[dl.TABLE]
    some = changes.slice(0, 20)
    ids = ", ".join(str(i) for i in some["id"].to_pylist())
    got = lake.spark.sql(f"SELECT id, score FROM {ref} WHERE id IN ({ids})").collect()
    want = dict(zip(some["id"].to_pylist(), some["score"].to_pylist(), strict=True))
    if {r["id"]: r["score"] for r in got} != want:
        raise AssertionError(f"{ref}: the updated rows do not hold the batch's values")
    (row,) = lake.spark.sql(f"SELECT count(*) AS n FROM {ref}").collect()
    if row["n"] != rows:
        raise AssertionError(f"{ref}: {row['n']:,} rows after the MERGE, expected {rows:,}")


class Executions:
    """Spark's own record of the SQL executions of this session (its SQL status store, kept
    with the UI off too) and of their jobs and stages (the app status store): what a MERGE
    ran, for how long, reading and shuffling how much."""

    def __init__(self, spark: Any) -> None:
        self.sql = spark._jsparkSession.sharedState().statusStore()
        self.app = spark.sparkContext._jsc.sc().statusStore()

    def _list(self) -> Any:
        return self.sql.executionsList()

    def last_id(self) -> int:
        executions = self._list()
        return int(executions.last().executionId()) if executions.size() else -1

    def since(self, mark: int) -> list[Any]:
        """The executions after the one ``mark`` names, oldest first."""
        executions = self._list()
        found = []
        for i in range(executions.size() - 1, -1, -1):
            e = executions.apply(i)
            if e.executionId() <= mark:
                break
            found.append(e)
        return found[::-1]

    def profile(self, mark: int) -> dict[str, Any]:
        """The executions after ``mark`` (one statement's: its own and those it ran
        nested): each one's wall time; the union of their jobs' running time (the rest of
        the statement's time is the driver's: planning, table metadata, the commit); per
        stage, tasks and times; and over all plan nodes: the rows table scans returned
        (scans of a Delta log left out), the scans, bytes shuffled and the joins used."""
        executions = self.since(mark)
        spans: list[tuple[int, int]] = []
        stages: list[dict[str, Any]] = []
        out: dict[str, Any] = {
            "executions": [],
            "scan_rows": 0,
            "scans": 0,
            "scan_columns": [],
            "shuffle_bytes": 0,
            "shuffle_records": 0,
            "joins": [],
            "runtime_filter": False,
        }
        for e in executions:
            done = e.completionTime()
            wall = done.get().getTime() - e.submissionTime() if done.isDefined() else None
            out["executions"].append(
                {
                    "id": int(e.executionId()),
                    "root": int(e.rootExecutionId()),
                    "what": str(e.description()).splitlines()[0][:100],
                    "ms": wall,
                }
            )
            jobs = e.jobs().keys().iterator()
            while jobs.hasNext():
                job = self.app.job(jobs.next())
                start, end = job.submissionTime(), job.completionTime()
                if start.isDefined() and end.isDefined():
                    spans.append((start.get().getTime(), end.get().getTime()))
                ids = job.stageIds()
                for i in range(ids.size()):
                    try:
                        stage = self.app.lastStageAttempt(ids.apply(i))
                    except Exception:  # a stage never submitted (a reused shuffle's): none kept
                        continue
                    if str(stage.status()) != "COMPLETE":
                        continue  # skipped (its shuffle output reused)
                    first, last = stage.firstTaskLaunchedTime(), stage.completionTime()
                    stages.append(
                        {
                            "id": int(stage.stageId()),
                            "tasks": int(stage.numTasks()),
                            "ms": (
                                last.get().getTime() - first.get().getTime()
                                if first.isDefined() and last.isDefined()
                                else None
                            ),
                            "run_ms": int(stage.executorRunTime()),
                            "input_bytes": int(stage.inputBytes()),
                            "shuffle_read_bytes": int(stage.shuffleReadBytes()),
                            "shuffle_write_bytes": int(stage.shuffleWriteBytes()),
                        }
                    )
            if "might_contain(" in str(e.physicalPlanDescription()):
                out["runtime_filter"] = True
            for columns in scan_columns(str(e.physicalPlanDescription())):
                if columns not in out["scan_columns"]:
                    out["scan_columns"].append(columns)
            values = self.sql.executionMetrics(e.executionId())
            nodes = self.sql.planGraph(e.executionId()).allNodes()
            for j in range(nodes.size()):
                node = nodes.apply(j)
                name = str(node.name())
                metrics = {}
                ms = node.metrics()
                for k in range(ms.size()):
                    m = ms.apply(k)
                    v = values.get(m.accumulatorId())
                    if v.isDefined():
                        metrics[str(m.name())] = metric_value(str(v.get()))
                if "Join" in name and name not in out["joins"]:
                    out["joins"].append(name)
                if name.startswith(("BatchScan", "Scan parquet")) and not delta_log(
                    str(node.desc())
                ):
                    out["scans"] += 1
                    out["scan_rows"] += int(metrics.get("number of output rows", 0))
                if name == "Exchange":
                    out["shuffle_bytes"] += int(metrics.get("shuffle bytes written", 0))
                    out["shuffle_records"] += int(metrics.get("shuffle records written", 0))
        out["jobs_ms"] = union_ms(spans)
        out["stages"] = sorted({s["id"]: s for s in stages}.values(), key=lambda s: s["id"])
        return out


def delta_log(text: str) -> bool:
    """Whether a scan's description is of a Delta log (a checkpoint), not of the table."""
    return "_delta_log" in text or "DeltaLogFileIndex" in text


def scan_columns(plan: str) -> list[str]:
    """The columns each table scan of a physical plan description returns (Delta log
    scans left out)."""
    found = []
    for section in re.split(r"\n\(\d+\) ", plan):
        if section.startswith(("BatchScan", "Scan parquet")) and not delta_log(section):
            output = re.search(r"^Output \[\d+\]: \[(.*)\]$", section, re.MULTILINE)
            if output:
                found.append(", ".join(re.sub(r"#\d+L?", "", c) for c in output[1].split(", ")))
    return found


def metric_value(text: str) -> float:
    """A SQL metric as Spark shows it (``400,000``, ``67.2 MiB``, ``3.7 s``, or a
    ``total (min, med, max ...)`` header and a line starting with the total) as a
    number: rows, bytes or milliseconds."""
    line = text.strip().splitlines()[-1].split(" (", 1)[0].strip()
    number, _, unit = line.partition(" ")
    scale = {
        "": 1,
        "B": 1,
        "KiB": 1 << 10,
        "MiB": 1 << 20,
        "GiB": 1 << 30,
        "ms": 1,
        "s": 1000,
        "m": 60_000,
        "h": 3_600_000,
    }
    try:
        return float(number.replace(",", "")) * scale.get(unit, 1)
    except ValueError:
        return 0.0


def union_ms(spans: list[tuple[int, int]]) -> int:
    """The length of the union of the [start, end] intervals (ms)."""
    total = 0
    end = None
    for a, b in sorted(spans):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


@contextlib.contextmanager
def sql_timer(
    spark: Any, spent: dict[str, float], profile: dict[str, Any] | None = None
) -> Iterator[None]:
    """While active: the time of every ``spark.sql(...)`` call the sinks make, summed by
    the statement's first word (``MERGE``, ``REFRESH``, ``SELECT``, ...) into ``spent``
    (statements such as MERGE run inside the call); with ``profile``, what the MERGE ran
    (:meth:`Executions.profile`, read after the call, outside the timing)."""
    original = spark.sql
    executions = Executions(spark) if profile is not None else None
    marks: list[int] = []

    def timed(query: str, *args: Any, **kwargs: Any) -> Any:
        word = query.split(None, 1)[0].upper() if query.strip() else "?"
        if word == "MERGE" and executions is not None:
            marks.append(executions.last_id())
        start = time.perf_counter()
        try:
            return original(query, *args, **kwargs)
        finally:
            spent[word] = spent.get(word, 0.0) + time.perf_counter() - start

    spark.sql = timed
    try:
        yield
    finally:
        del spark.sql
    if executions is not None and marks:
        profile.update(executions.profile(marks[0]))


def bench_scale(
    cluster: PgCluster, spark: Any, lake: Lake, args: argparse.Namespace
) -> dict[str, Any]:
    from deltalake import DeltaTable

    writers = list(SCALE_WRITERS)
    template = dl.template_rows(cluster, min(args.rows_per_file, max(args.sizes)))
    work = Path(tempfile.mkdtemp(prefix="pgwire_cdc_bench_iceberg_scale_", dir=args.workdir))
    results: dict[str, Any] = {
        "ran": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "load": os.getloadavg()[0],
        "updates": args.updates,
        "rows_per_file": args.rows_per_file,
        "repeat": args.repeat,
        "sizes": {},
    }
    lsn = 1 << 40
    runs = 0

    def one_merge(
        w: str, delta_master: Path, iceberg_meta: str, size: int, keys: list[int], seed: int
    ) -> tuple[float, dict[str, float], dict[str, Any], Any, dict[str, Any]]:
        """One timed MERGE of ``w`` on a fresh copy; (seconds, spark.sql time by
        statement, what the MERGE ran, stats, what the commit wrote)."""
        nonlocal lsn, runs
        lsn += 100_000
        runs += 1
        batch = dl.update_batch(template, keys, lsn, seed)
        spent: dict[str, float] = {}
        profile: dict[str, Any] = {}
        if w == "delta":
            run = work / f"delta-run-{runs}"
            shutil.copytree(delta_master, run)
            sink: Any = delta.DeltaSink(run, "spark", spark)
        else:
            ns = f"scale_run_{runs}"
            lake.register(iceberg_meta, ns)
            sink = iceberg.IcebergSink(spark, CATALOG, ns)
        # The copy's dirty pages go to disk now, not during the timed MERGE.
        os.sync()
        with sql_timer(spark, spent, profile):
            start = time.perf_counter()
            stats = sink.apply(batch)
            took = time.perf_counter() - start
        if w == "delta":
            path = delta.table_path(run, dl.TABLE)
            dl.check_updated(path, batch, size)
            commit = dl.last_commit(path)
            shutil.rmtree(run, ignore_errors=True)
        else:
            ref = lake.ref(ns)
            check_iceberg(lake, ref, batch, size)
            commit = lake.last_commit(ref)
        return took, spent, profile, stats, commit

    try:
        # Warm-up (JIT, Spark's first plans of each writer's MERGE), not timed.
        warm = min(100_000, template.num_rows)
        warm_delta = work / "warm-delta"
        dl.build_table(template, warm, warm, delta.table_path(warm_delta, dl.TABLE))
        dl.enable_deletion_vectors(spark, delta.table_path(warm_delta, dl.TABLE))
        warm_meta = build_iceberg(lake, template, warm, warm, "scale_warm")
        for w in writers:
            keys = random.Random(1).sample(range(1, warm + 1), 1_000)
            one_merge(w, warm_delta, warm_meta, warm, keys, 0)
        shutil.rmtree(warm_delta)
        for size in args.sizes:
            start = time.perf_counter()
            delta_master = work / f"{size}-delta"
            path = delta.table_path(delta_master, dl.TABLE)
            dl.build_table(template, size, args.rows_per_file, path)
            dl.enable_deletion_vectors(spark, path)
            files, nbytes = dl.delta_files(path)
            delta_s = time.perf_counter() - start
            start = time.perf_counter()
            meta = build_iceberg(lake, template, size, args.rows_per_file, f"scale_{size}")
            iceberg_files = lake.files(lake.ref(f"scale_{size}"))
            iceberg_s = time.perf_counter() - start
            print(
                f"scale: {size:,} rows built: Delta {files} files, {nbytes / 1e6:,.0f} MB "
                f"({delta_s:.1f} s); Iceberg {iceberg_files['files']} files, "
                f"{iceberg_files['bytes'] / 1e6:,.0f} MB ({iceberg_s:.1f} s)",
                flush=True,
            )
            entry: dict[str, Any] = {
                "delta": {
                    "files": files,
                    "bytes": nbytes,
                    "build_s": delta_s,
                    "codec": parquet_codec(DeltaTable(path).file_uris()[0]),
                },
                "iceberg": {
                    **iceberg_files,
                    "build_s": iceberg_s,
                    "codec": parquet_codec(lake.data_files(lake.ref(f"scale_{size}"))[0]),
                },
                "writers": {
                    w: {"times": [], "spent": [], "profiles": [], "commit": None} for w in writers
                },
            }
            # Runs interleave the writers (taking turns at going first), so that noise
            # from other jobs spreads over all.
            for rep in range(args.repeat):
                keys = random.Random(size + rep).sample(range(1, size + 1), args.updates)
                for w in writers[rep % 2 :] + writers[: rep % 2]:
                    took, spent, profile, stats, commit = one_merge(
                        w, delta_master, meta, size, keys, rep
                    )
                    res = entry["writers"][w]
                    res["times"].append(took)
                    res["spent"].append(spent)
                    res["profiles"].append(profile)
                    if res["commit"] is None:
                        res["commit"] = commit
                    print(
                        f"scale: {size:,} rows, {w}, run {rep + 1}: {took:.2f} s "
                        f"({stats.updated:,} updated; MERGE statement "
                        f"{spent.get('MERGE', 0):.2f} s, Spark jobs "
                        f"{profile.get('jobs_ms', 0) / 1000:.2f} s, target rows scanned "
                        f"{profile.get('scan_rows', 0):,.0f} in {profile.get('scans', 0)} "
                        f"scans, {profile.get('shuffle_bytes', 0) / 1e6:,.1f} MB shuffled)",
                        flush=True,
                    )
            shutil.rmtree(delta_master, ignore_errors=True)
            results["sizes"][str(size)] = entry
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


# -- 3. the MERGE statement against table size ----------------------------------------

#: Part 3's contenders.
MERGE_CONTENDERS = {
    "iceberg-every-clause": "Iceberg, every clause for every batch",
    "iceberg": "Iceberg, `iceberg.merge.merge_statement`",
    "delta-rs-dv": "Delta, delta-rs writer (deletion vectors)",
}


def every_clause_statement(
    ref: str, view: str, columns: list[str], keys: list[str], unchanged: set[str], truncate: bool
) -> str:
    """The MERGE with every clause whatever the batch holds, and no key range: the
    baseline of :func:`pgwire_cdc.iceberg.merge.merge_statement`."""
    clauses = merge_clauses(columns, keys, unchanged, spark=True)
    update = ", ".join(f"t.{c} = {e}" for c, e in clauses["update"].items())
    names = ", ".join(clauses["insert"])
    values = ", ".join(clauses["insert"].values())
    sql = (
        f"MERGE INTO {ref} t USING {view} s ON {clauses['on']} "
        "WHEN MATCHED AND s._delete THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {update} "
        f"WHEN NOT MATCHED AND NOT s._delete THEN INSERT ({names}) VALUES ({values})"
    )
    if truncate:
        sql += " WHEN NOT MATCHED BY SOURCE THEN DELETE"
    return sql


def mixed_batch(
    template: pa.Table, updated: list[int], added: list[int], commit_lsn: int, seed: int
) -> Batch:
    """``delta_lake.update_batch`` of the keys ``updated``, then inserts of the new keys
    ``added`` (real row values, as the updates have)."""
    batch = dl.update_batch(template, [*updated, *added], commit_lsn, seed)
    changes = batch.tables[dl.TABLE]
    i = changes.schema.get_field_index("_change_type")
    field = changes.schema.field(i)
    kinds = pa.array(["update"] * len(updated) + ["insert"] * len(added), field.type)
    return Batch(tables={dl.TABLE: changes.set_column(i, field, kinds)}, lsn=batch.lsn)


def link_copy(src: Path, dst: Path) -> None:
    """A copy of a Delta table's directory whose Parquet files are hard links: delta-rs
    never changes a file, it writes new ones (data, deletion vectors, log entries)."""

    def copy(s: str, d: str) -> None:
        if s.endswith(".parquet"):
            os.link(s, d)
        else:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=copy)


class IcebergMerge:
    """Part 3's Iceberg MERGE, as the sink runs it from a batch's change table: reduced
    (``_native.reduce_changes``), a temporary view of the reduced rows, one MERGE (every
    clause, or ``merge_statement``'s with its session settings held), the view dropped."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake
        self.views = 0

    def __call__(
        self, ref: str, batch: Batch, statement: str, spent: dict[str, float], profile: Any
    ) -> float:
        spark = self.lake.spark
        start = time.perf_counter()
        changes = lake_shape(batch.tables[dl.TABLE])
        columns = data_columns(changes)
        keys = key_columns(changes)
        assert keys is not None
        stream, counts = _native.reduce_changes(changes, columns, keys)
        source = table_of(stream)
        if pc.any(source["_from"].is_valid()).as_py():
            raise AssertionError("the bench's batches move no row")
        source = source.drop_columns(["_from"])
        self.views += 1
        view = f"pgwire_cdc_bench_source_{self.views}"
        spark.createDataFrame(source, schema=spark_schema(source.schema)).createOrReplaceTempView(
            view
        )
        truncate = counts["truncated"] > 0
        if statement == "iceberg":
            st = merge_statement(
                ref,
                view,
                columns,
                keys,
                unchanged_names(source),
                truncate=truncate,
                **row_kinds(source, adds=adds_keys(changes, keys)),
                bounds=key_bounds(source.select(keys)),
            )
            sql, settings = st.sql, st.settings
        else:
            sql = every_clause_statement(
                ref, view, columns, keys, unchanged_names(source), truncate
            )
            settings = {}
        try:
            with sql_timer(spark, spent, profile), applied(spark.conf, settings):
                spark.sql(sql).collect()
        finally:
            spark.catalog.dropTempView(view)
        return time.perf_counter() - start


def bench_merge(
    cluster: PgCluster, spark: Any, lake: Lake, args: argparse.Namespace
) -> dict[str, Any]:
    contenders = list(MERGE_CONTENDERS)
    template = dl.template_rows(cluster, min(args.rows_per_file, max(args.sizes)))
    work = Path(tempfile.mkdtemp(prefix="pgwire_cdc_bench_iceberg_merge_", dir=args.workdir))
    batches = {
        "updates": f"{args.updates:,} updates of random keys",
        "mixed": f"{args.inserts:,} inserts of new keys + {args.updates - args.inserts:,} "
        "updates of random keys",
        "recent": f"{args.updates:,} updates of the newest keys",
    }
    results: dict[str, Any] = {
        "ran": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "load": os.getloadavg()[0],
        "updates": args.updates,
        "inserts": args.inserts,
        "rows_per_file": args.rows_per_file,
        "repeat": args.repeat,
        "batches": batches,
        "sizes": {},
    }
    merge = IcebergMerge(lake)
    lsn = 1 << 41
    runs = 0

    def one(
        w: str, size: int, masters: dict[str, Any], updated: list[int], added: list[int], seed: int
    ) -> dict[str, Any]:
        """One timed MERGE of contender ``w`` on a fresh copy of the table, checked."""
        nonlocal lsn, runs
        lsn += 100_000
        runs += 1
        batch = mixed_batch(template, updated, added, lsn, seed)
        rows = size + len(added)
        spent: dict[str, float] = {}
        profile: dict[str, Any] = {}
        if w == "delta-rs-dv":
            run = work / f"delta-run-{runs}"
            link_copy(masters["delta"], run)
            sink = delta.DeltaSink(run, "delta-rs", spark)
            os.sync()
            start = time.perf_counter()
            sink.apply(batch)
            took = time.perf_counter() - start
            path = delta.table_path(run, dl.TABLE)
            dl.check_updated(path, batch, rows)
            commit = dl.last_commit(path)
            shutil.rmtree(run, ignore_errors=True)
            return {"s": took, "commit": commit}
        ns = f"merge_run_{runs}"
        lake.register(masters["iceberg"], ns)
        ref = lake.ref(ns)
        spark.sql(f"REFRESH TABLE {ref}")
        os.sync()
        took = merge(ref, batch, w, spent, profile)
        check_iceberg(lake, ref, batch, rows)
        (found,) = spark.sql(f"SELECT count(*) AS n FROM {ref} WHERE id > {size}").collect()
        if found["n"] != len(added):
            raise AssertionError(f"{ref}: {found['n']} new keys, expected {len(added)}")
        return {
            "s": took,
            "statement_s": spent.get("MERGE", 0.0),
            "profile": profile,
            "commit": lake.last_commit(ref),
        }

    def keys_of(size: int, kind: str, rep: int) -> tuple[list[int], list[int]]:
        picked = random.Random(size * 7 + rep).sample(range(1, size + 1), args.updates)
        if kind == "updates":
            return picked, []
        if kind == "recent":
            return list(range(size - args.updates + 1, size + 1)), []
        return picked[args.inserts :], list(range(size + 1, size + 1 + args.inserts))

    try:
        # Warm-up (JIT, Spark's first plans of each statement, delta-rs's first MERGE).
        warm = min(100_000, template.num_rows)
        warm_delta = work / "warm-delta"
        dl.build_table(template, warm, warm, delta.table_path(warm_delta, dl.TABLE))
        delta.enable_deletion_vectors(delta.table_path(warm_delta, dl.TABLE))
        warm_masters = {
            "delta": warm_delta,
            "iceberg": build_iceberg(lake, template, warm, warm, "merge_warm"),
        }
        for kind in batches:
            updated = random.Random(1).sample(range(1, warm + 1), 1_000)
            if kind == "recent":
                updated = list(range(warm - 999, warm + 1))
            added = list(range(warm + 1, warm + 101)) if kind == "mixed" else []
            for w in contenders:
                one(w, warm, warm_masters, updated, added, 0)
        shutil.rmtree(warm_delta)
        for size in args.sizes:
            start = time.perf_counter()
            delta_master = work / f"{size}-delta"
            path = delta.table_path(delta_master, dl.TABLE)
            dl.build_table(template, size, args.rows_per_file, path)
            delta.enable_deletion_vectors(path)
            delta_files, delta_bytes = dl.delta_files(path)
            ns = f"merge_{size}"
            masters = {
                "delta": delta_master,
                "iceberg": build_iceberg(lake, template, size, args.rows_per_file, ns),
            }
            files = lake.files(lake.ref(ns))
            print(
                f"merge: {size:,} rows built ({time.perf_counter() - start:.0f} s): Delta "
                f"{delta_files} files, {delta_bytes / 1e6:,.0f} MB; Iceberg {files['files']} "
                f"files, {files['bytes'] / 1e6:,.0f} MB",
                flush=True,
            )
            entry: dict[str, Any] = {
                "delta": {"files": delta_files, "bytes": delta_bytes},
                "iceberg": files,
                "batches": {kind: {w: {"runs": []} for w in contenders} for kind in batches},
            }
            # Runs interleave the contenders, each taking its turn at going first.
            for rep in range(args.repeat):
                for kind in batches:
                    updated, added = keys_of(size, kind, rep)
                    turn = rep % len(contenders)
                    for w in contenders[turn:] + contenders[:turn]:
                        res = one(w, size, masters, updated, added, rep)
                        res["load"] = os.getloadavg()[0]
                        entry["batches"][kind][w]["runs"].append(res)
                        prof = res.get("profile") or {}
                        print(
                            f"merge: {size:,} rows, {kind}, {w}, run {rep + 1}: "
                            f"{res['s']:.2f} s"
                            + (
                                f" (MERGE statement {res['statement_s']:.2f} s, Spark jobs "
                                f"{prof.get('jobs_ms', 0) / 1000:.2f} s, "
                                f"{prof.get('shuffle_records', 0):,.0f} rows / "
                                f"{prof.get('shuffle_bytes', 0) / 1e6:,.1f} MB shuffled, "
                                f"{', '.join(prof.get('joins', []))}"
                                f"{', Bloom filter' if prof.get('runtime_filter') else ''})"
                                if w != "delta-rs-dv"
                                else ""
                            )
                            + f"; load {res['load']:.2f}",
                            flush=True,
                        )
            shutil.rmtree(delta_master, ignore_errors=True)
            results["sizes"][str(size)] = entry
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


# -- the report -----------------------------------------------------------------------


class LoadSampler:
    """The 1-minute load average every ``every`` seconds while the block runs."""

    def __init__(self, every: float = 10.0) -> None:
        self.every = every
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(self.every)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, float]:
        s = self.samples or [os.getloadavg()[0]]
        return {"min": min(s), "mean": statistics.fmean(s), "max": max(s), "samples": len(s)}


def load_note(part: dict[str, Any]) -> str:
    """The load at a part's start and during it (2 cores: above 2, other jobs competed)."""
    note = dl.load_note(part)
    during = part.get("load_during")
    if during:
        note += (
            f" During it (sampled every 10 s): mean {during['mean']:.1f}, min "
            f"{during['min']:.1f}, max {during['max']:.1f}."
        )
    return note


def iceberg_wrote(commit: dict[str, Any]) -> str:
    """What an Iceberg MERGE's snapshot added, in words."""
    parts = []
    for e in sorted(commit["added"], key=lambda e: (e["content"], e["format"])):
        if e["content"] == 0:
            what = f"{e['n']} data file{'s' if e['n'] != 1 else ''}"
            what += f" ({e['records']:,} rows, {e['bytes'] / 1e6:,.1f} MB)"
        elif e["format"].upper() == "PUFFIN":
            what = (
                f"{e['n']} deletion vectors ({e['records']:,} rows) in {e['paths']} Puffin "
                f"file{'s' if e['paths'] != 1 else ''} ({e['bytes'] / 1e3:,.1f} kB)"
            )
        else:
            kind = "position" if e["content"] == 1 else "equality"
            what = (
                f"{e['n']} {kind} delete files ({e['records']:,} rows, {e['bytes'] / 1e3:,.1f} kB)"
            )
        parts.append(what)
    removed = int(commit["summary"].get("removed-data-files", 0))
    parts.append(f"{removed} data files removed")
    copied = commit["summary"].get("spark.merge-into.num-target-rows-copied")
    if copied is not None:
        parts.append(f"{int(copied):,} unchanged rows copied")
    return ", ".join(parts)


def delta_wrote(commit: dict[str, Any]) -> str:
    wrote = (
        f"{commit['written']} files written ({commit['written_bytes'] / 1e6:,.1f} MB), "
        f"{commit['dropped']} dropped"
    )
    if commit["with_dv"]:
        wrote += f", {commit['with_dv']} kept with a deletion vector"
    copied = commit["metrics"].get("numTargetRowsCopied")
    if copied is not None:
        wrote += f"; {int(copied):,} unchanged rows copied"
    return wrote


def render(parts: dict[str, Any], env: dict[str, str]) -> list[str]:
    lines = [
        "# Iceberg sink next to the Delta sink's Spark writer: throughput, one MERGE against "
        "table size",
        "",
        f"- Written: {env['date']}. Machine: {env['nproc']} cores ({env['cpu']}), 24 GiB RAM, "
        f"{env['os']}; Python {env['python']}; PySpark {env.get('pyspark', '?')} "
        f"(`local[2]`, driver memory {env.get('spark_memory', '?')}), one Spark session for "
        f"both: Iceberg {env.get('iceberg_spark', '?')} Spark runtime, Delta Lake "
        f"{env.get('delta_spark', '?')} jars; deltalake (delta-rs) {env.get('deltalake', '?')} "
        f"builds the Delta tables of (b), pyiceberg {env.get('pyiceberg', '?')} reads the "
        f"Iceberg tables of (a) for the check; PostgreSQL {env.get('postgres', '?')} on the "
        "same machine; release build of pgwire_cdc. The Iceberg catalog: "
        "`iceberg.local_catalog_conf` (JDBC on SQLite, local warehouse); tables as the sink "
        "creates them (merge-on-read, format v3: deletion vectors).",
        "- Reproduce: `make bench-spark` (runs `benches/spark.py`, `benches/delta_lake.py`, "
        "then this one), or alone: `.venv/bin/python benches/iceberg_lake.py "
        "[--parts e2e,scale] [--repeat 5]` (`--help` for the sizes). Script and method: "
        "`benches/iceberg_lake.py` (part (a) is `delta_lake.py`'s `bench_e2e`).",
        "- Noise: other jobs (test suites, Spark) may share these 2 cores; hence best and "
        "median of several runs, interleaved so that load spreads over all contenders. "
        "Spark's times move most with such load, and a loaded machine inflates a short "
        "MERGE relatively more than a long one, which flatters a large-over-small ratio "
        "(the 1-minute load average at each part's start and during it is given: above "
        "2, other jobs competed for the cores).",
        "",
    ]
    e2e = parts.get("e2e")
    if e2e:
        best = {k: max(runs, key=dl.rate) for k, runs in e2e["runs"].items() if runs}
        base = dl.rate(best["parquet"]) if "parquet" in best else None
        rounds = len(next(iter(e2e["runs"].values())))
        lines += [
            f"## (a) End to end: `stream()` → table, {e2e['changes']:,} changes",
            "",
            f"Ran {e2e['ran']}. `bench` table of {e2e['base_rows']:,} rows "
            f"({e2e['final_rows']:,} at the end); {e2e['changes']:,} changes in "
            f"{e2e['transactions']:,} transactions of 100..1,000 rows: 60 % updates and 20 % "
            "deletes of random live keys, 20 % inserts. Each contender drains its own copy "
            "of a slot made before the workload, up to the same end LSN: stream + apply + "
            f"ack, `max_batch_rows={e2e['max_batch_rows']:,}`. Round 0 of each contender "
            "took the initial snapshot; the other rounds start from copies made before the "
            "workload (Iceberg: round 0's metadata file registered under another "
            "namespace). Rounds interleave the contenders; best of "
            f"{rounds} rounds (the first round of each Spark sink carries its first "
            "MERGE; the first Spark sink's snapshot carries the session's first Spark "
            "jobs). Every result is checked against PostgreSQL (rows, sum of amount and "
            "score; the Iceberg tables read by pyiceberg)." + load_note(e2e),
            "",
            "| sink | best s | changes/s | vs Parquet mirror | all rounds (s) | batches | "
            "table commits | files at the end | snapshot of the base rows |",
            "|---|---:|---:|---:|---|---:|---:|---|---:|",
        ]
        for kind, run in best.items():
            all_s = ", ".join(f"{r['seconds']:.1f}" for r in e2e["runs"][kind])
            ratio = f"{dl.rate(run) / base:.2f}x" if base else "-"
            commits = run.get("commits")
            files = "-"
            if "delete_files" in run:
                files = (
                    f"{run['files']} data + {run['delete_files']} delete "
                    f"({run['bytes'] / 1e6:,.0f} MB)"
                )
            elif "files" in run:
                files = f"{run['files']} ({run['bytes'] / 1e6:,.0f} MB)"
            lines.append(
                f"| {LABEL[kind]} | {run['seconds']:.1f} | {dl.rate(run):,.0f} | {ratio} | "
                f"{all_s} | {run['batches']} | {commits if commits is not None else '-'} | "
                f"{files} | {e2e['snapshot_s'][kind]:.1f} s |"
            )
        if "iceberg" in best and "spark" in best:
            lines += [
                "",
                f"Iceberg over the Delta Spark writer: "
                f"**{dl.rate(best['iceberg']) / dl.rate(best['spark']):.2f}x** the changes/s "
                "(best rounds).",
            ]
        lines.append("")
    scale = parts.get("scale")
    if scale:
        lines += render_scale(scale)
    return lines


#: Delta's MERGE runs nested SQL executions; their descriptions say which step each is.
DELTA_STEPS = (
    ("Delta: Compute snapshot", "log snapshot"),
    ("materialize source", "materialize source"),
    ("scanning files for matches", "find touched files"),
    ("Writing modified data", "write changed rows"),
    ("Writing Deletion Vectors", "write deletion vectors"),
)


def delta_steps(profile: dict[str, Any]) -> dict[str, float]:
    """Seconds per step of a Delta MERGE, from its nested executions."""
    steps: dict[str, float] = {}
    for e in profile.get("executions", []):
        for marker, step in DELTA_STEPS:
            if marker in e["what"] and e["ms"] is not None:
                steps[step] = steps.get(step, 0.0) + e["ms"] / 1000
                break
    return steps


def stage_words(stage: dict[str, Any]) -> str:
    words = f"{stage['tasks']} task{'s' if stage['tasks'] != 1 else ''}"
    if stage["ms"] is not None:
        words += f" {stage['ms'] / 1000:.2f} s"
    moved = []
    if stage["shuffle_read_bytes"]:
        moved.append(f"shuffle in {stage['shuffle_read_bytes'] / 1e6:,.1f} MB")
    if stage["shuffle_write_bytes"]:
        moved.append(f"out {stage['shuffle_write_bytes'] / 1e6:,.1f} MB")
    return words + (f" ({', '.join(moved)})" if moved else "")


def median_run(times: list[float]) -> int:
    """The index of the run whose time is the median (the lower one of an even count)."""
    order = sorted(range(len(times)), key=lambda i: times[i])
    return order[(len(order) - 1) // 2]


def render_scale(scale: dict[str, Any]) -> list[str]:
    lines = [
        f"## (b) One MERGE of {scale['updates']:,} random-key updates against table size",
        "",
        f"Ran {scale['ran']}, {scale['repeat']} runs per writer and size."
        + load_note(scale)
        + f" Tables of the `bench` shape, {scale['rows_per_file']:,} rows per data file, "
        "built directly from one tile of real rows generated by PostgreSQL, ids shifted "
        "per tile: Delta by delta-rs (`delta_lake.build_table`, one file per tile) with "
        "deletion vectors then turned on; Iceberg created as the sink creates its tables "
        "(merge-on-read, v3) and written by Spark, one append of one file per tile. One "
        "change table of updates of random distinct keys (`delta_lake.update_batch`: "
        "real rows, `score` and `flag` changed, no column left unchanged, so both sinks' "
        "MERGE assigns `SET c = s.c`) through `DeltaSink(path, 'spark', "
        "spark).apply(batch)` and `IcebergSink(spark, catalog, namespace).apply(batch)`: "
        "one MERGE each, plus the sink's position read and reduction (timed as a whole). "
        "Every run starts from a fresh copy: Delta's directory copied; the Iceberg table "
        "registered anew (`register_table`) on the built table's metadata file, so each "
        "run sees the same snapshot, files and metadata and nothing of another run (data "
        "files are shared: nothing rewrites them); then `sync`, so no copy is still being "
        "written out during the timing. Runs interleave the writers, taking turns at "
        "going first; each is checked (row count, updated values). What the commit "
        "wrote: Delta's log entry, Iceberg's snapshot summary and manifest entries.",
        "",
        "| table rows | writer | files | MB (codec) | best s | median s | all runs (s) | "
        "what the commit wrote |",
        "|---:|---|---:|---:|---:|---:|---|---|",
    ]
    sizes = sorted(scale["sizes"], key=int)
    for size in sizes:
        entry = scale["sizes"][size]
        for w, res in entry["writers"].items():
            table = entry[w]
            wrote = (delta_wrote if w == "delta" else iceberg_wrote)(res["commit"])
            codec = f" ({table['codec'].lower()})" if table.get("codec") else ""
            lines.append(
                f"| {int(size):,} | {SCALE_WRITERS[w]} | {table['files']} | "
                f"{table['bytes'] / 1e6:,.0f}{codec} | {min(res['times']):.2f} | "
                f"{statistics.median(res['times']):.2f} | "
                f"{', '.join(f'{t:.2f}' for t in res['times'])} | {wrote} |"
            )
    if len(sizes) >= 2:
        small, big = sizes[0], sizes[-1]
        factor = int(big) / int(small)
        lines += ["", f"Time for the {factor:.0f}x table over the small one:", ""]
        for w in scale["sizes"][small]["writers"]:
            if w not in scale["sizes"][big]["writers"]:
                continue
            small_t = scale["sizes"][small]["writers"][w]["times"]
            big_t = scale["sizes"][big]["writers"][w]["times"]
            lines.append(
                f"- {SCALE_WRITERS[w]}: best {min(big_t):.2f} s / {min(small_t):.2f} s = "
                f"**{min(big_t) / min(small_t):.1f}x**; medians "
                f"{statistics.median(big_t) / statistics.median(small_t):.1f}x"
            )
        lines.append("")
        for size in sizes:
            ws = scale["sizes"][size]["writers"]
            if "iceberg" in ws and "delta" in ws:
                ice, dlt = ws["iceberg"]["times"], ws["delta"]["times"]
                lines.append(
                    f"- {int(size):,} rows: Iceberg's best time is "
                    f"**{min(ice) / min(dlt):.2f}x** Delta's (medians "
                    f"{statistics.median(ice) / statistics.median(dlt):.2f}x)"
                )
    lines += [
        "",
        "### Where a MERGE's time goes",
        "",
        "From Spark's own records of the run with the median time (its SQL status store: "
        "the MERGE's executions, plan nodes and metrics; the app status store: their jobs "
        'and stages). *MERGE statement*: the `spark.sql("MERGE ...")` call; *Spark '
        "jobs*: the time some job of it was running; the difference is the driver's "
        "alone (planning, reading table metadata, the commit). *Table scans*: scans of "
        "the target in the plans, the rows they returned, the columns they read. Delta's "
        "MERGE runs as nested executions, summed per step; Iceberg's as one, listed per "
        "stage.",
        "",
        "| table rows | writer | apply s | MERGE statement s | Spark jobs s | driver only s "
        "| table scans: rows (scans) | columns read | shuffled MB | joins | steps / stages |",
        "|---:|---|---:|---:|---:|---:|---|---|---:|---|---|",
    ]
    for size in sizes:
        for w, res in scale["sizes"][size]["writers"].items():
            if not res.get("profiles"):
                continue
            i = median_run(res["times"])
            prof = res["profiles"][i]
            merge = res["spent"][i].get("MERGE", 0.0)
            jobs = prof.get("jobs_ms", 0) / 1000
            if w == "delta":
                inside = ", ".join(f"{k} {v:.2f} s" for k, v in delta_steps(prof).items())
            else:
                inside = "; ".join(stage_words(st) for st in prof.get("stages", []))
            columns = " / ".join(f"`{c}`" for c in prof.get("scan_columns", []))
            lines.append(
                f"| {int(size):,} | {SCALE_WRITERS[w]} | {res['times'][i]:.2f} | {merge:.2f} | "
                f"{jobs:.2f} | {merge - jobs:.2f} | {prof.get('scan_rows', 0):,.0f} "
                f"({prof.get('scans', 0)}) | {columns} | "
                f"{prof.get('shuffle_bytes', 0) / 1e6:,.1f} | "
                f"{', '.join(prof.get('joins', []))} | {inside} |"
            )
    lines += ["", *reading(scale, sizes[-1]), ""]
    return lines


def last_stage_s(profile: dict[str, Any]) -> float:
    stages = profile.get("stages") or [{"ms": 0}]
    return float(stages[-1]["ms"] or 0) / 1000


def reading(scale: dict[str, Any], size: str) -> list[str]:
    """How to read the table above, from the largest table's median runs."""
    writers = scale["sizes"][size]["writers"]
    out = []
    ice = writers.get("iceberg")
    if ice and ice.get("profiles"):
        prof = ice["profiles"][median_run(ice["times"])]
        rows = max(prof.get("scan_rows", 0), 1)
        out.append(
            f"- Iceberg, {int(size):,} rows: one execution. Its scan reads the key and the "
            f"row-position columns of all {prof['scan_rows']:,.0f} rows; they are "
            f"shuffled ({prof['shuffle_bytes'] / 1e6:,.0f} MB, "
            f"{prof['shuffle_bytes'] / rows:.0f} bytes a row) and joined to the source "
            f"by {', '.join(prof.get('joins', [])) or '?'}: the MERGE's `WHEN NOT MATCHED "
            "THEN INSERT` makes the join an outer join that keeps every source row, and "
            "Spark does not broadcast the side an outer join keeps, so the table's side is "
            f"shuffled and sorted instead of the {scale['updates']:,} source rows being "
            "broadcast. That work grows with the table; the last stage (writing one data "
            "file and the deletion vectors) does not "
            f"({last_stage_s(prof):.2f} s here)."
        )
    dlt = writers.get("delta")
    if dlt and dlt.get("profiles"):
        prof = dlt["profiles"][median_run(dlt["times"])]
        out.append(
            f"- Delta, {int(size):,} rows: one execution per step (above), nested in the "
            f"MERGE's; their scans read the table's key column {prof['scans']} times "
            f"({prof['scan_rows']:,.0f} rows in all): to find the touched files, to write "
            "the changed rows, to write the deletion vectors; joins: "
            f"{', '.join(prof.get('joins', [])) or '?'}."
        )
    return out


def ratios_and_figures(parts: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    ratios: dict[str, float] = {}
    figures: dict[str, float] = {}
    e2e = parts.get("e2e")
    if e2e:
        best = {k: max(runs, key=dl.rate) for k, runs in e2e["runs"].items() if runs}
        if "iceberg" in best:
            figures["Iceberg end to end, changes/s"] = dl.rate(best["iceberg"])
            if "parquet" in best:
                ratios["Iceberg end to end vs Parquet mirror"] = dl.rate(best["iceberg"]) / dl.rate(
                    best["parquet"]
                )
            if "spark" in best:
                figures["Iceberg over Delta Spark writer end to end"] = dl.rate(
                    best["iceberg"]
                ) / dl.rate(best["spark"])
    scale = parts.get("scale")
    if scale:
        for size, entry in scale["sizes"].items():
            for w, res in entry["writers"].items():
                figures[f"MERGE of {scale['updates']:,} updates, {int(size):,} rows, {w}, ms"] = (
                    min(res["times"]) * 1000
                )
    return ratios, figures


def environment(args: argparse.Namespace, pg_version: int | None) -> dict[str, str]:
    from importlib.metadata import version

    env = machine_info()
    env["deltalake"] = version("deltalake")
    env["pyiceberg"] = version("pyiceberg")
    env["pyspark"] = version("pyspark")
    env["spark_memory"] = args.spark_memory
    jars = list(Path(os.environ.get("PGWIRE_CDC_DELTA_JARS", "")).glob("delta-spark_*.jar"))
    env["delta_spark"] = jars[0].stem.rsplit("-", 1)[-1] if jars else "?"
    jars = list(
        Path(os.environ.get("PGWIRE_CDC_ICEBERG_JARS", "")).glob("iceberg-spark-runtime-*.jar")
    )
    env["iceberg_spark"] = jars[0].stem.rsplit("-", 1)[-1] if jars else "?"
    if pg_version:
        env["postgres"] = f"{pg_version // 10000}.{pg_version % 10000}"
    return env


def save(parts: dict[str, Any], args: argparse.Namespace, pg_version: int) -> None:
    env = environment(args, pg_version)
    ratios, figures = ratios_and_figures(parts)
    args.out.with_suffix(".json").write_text(
        json.dumps(
            {
                "date": env["date"],
                "machine": f"nproc={env['nproc']}, {platform.platform()}",
                "ratios": ratios,
                "figures": figures,
                "parts": parts,
                "environment": env,
            },
            indent=2,
        )
        + "\n"
    )
    args.out.write_text("\n".join(render(parts, env)))


def render_merge(part: dict[str, Any], env: dict[str, str]) -> list[str]:
    """``iceberg_merge.md``: part 3."""
    sizes = sorted(part["sizes"], key=int)
    lines = [
        "# Iceberg's MERGE against table size: the statement of `iceberg.merge`, next to "
        "every clause and to Delta",
        "",
        f"- Written: {env['date']}; ran {part['ran']}. Machine: {env['nproc']} cores "
        f"({env['cpu']}), 24 GiB RAM, {env['os']}; Python {env['python']}; PySpark "
        f"{env.get('pyspark', '?')} (`local[2]`, driver memory {env.get('spark_memory', '?')}); "
        f"Iceberg {env.get('iceberg_spark', '?')} Spark runtime; deltalake (delta-rs) "
        f"{env.get('deltalake', '?')}; PostgreSQL {env.get('postgres', '?')} (the template "
        f"rows); pgwire_cdc's extension built optimised (`_native.BUILD_PROFILE` "
        f"{env.get('build', '?')}).",
        "- Reproduce: `.venv/bin/python benches/iceberg_lake.py --parts merge` (defaults: "
        "`--sizes 1000000,10000000 --updates 10000 --inserts 1000 --repeat 5`); script and "
        "method: `benches/iceberg_lake.py`, part 3.",
        "- Noise: 2 cores shared with other jobs;" + load_note(part) + " Each run's load is "
        "in `iceberg_merge.json`. Contenders run interleaved, taking turns at going first; "
        "best and median of the runs.",
        "",
        f"Tables of the `bench` shape, {part['rows_per_file']:,} rows per data file, built "
        "from one tile of real rows generated by PostgreSQL, ids shifted per tile (ids "
        "ascending, so each file holds one range of keys). Iceberg: created as the sink "
        "creates its tables (merge-on-read, format v3), written by Spark; every run "
        "registers the built table's metadata file anew (`register_table`: same snapshot and "
        "files, nothing of another run). Delta: written by delta-rs, deletion vectors turned "
        "on; every run a copy (data files hard-linked). Each batch is one transaction of real "
        "row values (`score` and `flag` changed, no column left unchanged); the updated keys "
        "drawn at random over the whole table, or the newest ones (the last data file's); the "
        "inserted keys new ones above the largest. "
        "Iceberg: from the batch's change table, the sink's steps (reduce, a temporary view "
        "of the reduced rows, one MERGE, the view dropped), with the MERGE of every clause "
        "(the same statement for every batch) or with the statement "
        "`iceberg.merge.merge_statement` builds, its session settings held. Delta: "
        "`DeltaSink(path, 'delta-rs').apply(batch)` on the table with deletion vectors (a "
        "process's first MERGE: it reads every key). Each run is checked (row count, updated "
        "values, inserted keys).",
        "",
    ]
    for kind, label in part["batches"].items():
        lines += [
            f"## {label}",
            "",
            "| table rows | contender | best s | median s | all runs (s) |",
            "|---:|---|---:|---:|---|",
        ]
        for size in sizes:
            for w, res in part["sizes"][size]["batches"][kind].items():
                times = [r["s"] for r in res["runs"]]
                lines.append(
                    f"| {int(size):,} | {MERGE_CONTENDERS[w]} | {min(times):.2f} | "
                    f"{statistics.median(times):.2f} | "
                    f"{', '.join(f'{t:.2f}' for t in times)} |"
                )
        if len(sizes) >= 2:
            small, big = sizes[0], sizes[-1]
            lines += ["", f"{int(big) // int(small)}x the rows, time over the small table's:", ""]
            for w in part["sizes"][small]["batches"][kind]:
                a = [r["s"] for r in part["sizes"][small]["batches"][kind][w]["runs"]]
                b = [r["s"] for r in part["sizes"][big]["batches"][kind][w]["runs"]]
                lines.append(
                    f"- {MERGE_CONTENDERS[w]}: best **{min(b) / min(a):.1f}x**, medians "
                    f"{statistics.median(b) / statistics.median(a):.1f}x"
                )
        lines.append("")
    lines += [
        "## Where a MERGE's time goes",
        "",
        "Iceberg's runs with the median time, from Spark's own records of the MERGE (its "
        "SQL status store: plan nodes and their metrics; jobs and stages): *statement*, the "
        '`spark.sql("MERGE ...")` call; *Spark jobs*, the time some job of it ran (the '
        "rest is the driver's: planning, table metadata, the commit); *table rows read*, "
        "what the scan of the table returned; *rows shuffled*, records written by all of "
        "its exchanges (the table's side, the batch's side, the rows to write).",
        "",
        "| batch | table rows | contender | apply s | statement s | Spark jobs s | table rows "
        "read | rows shuffled | MB shuffled | join | Bloom filter | what the commit wrote |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for kind in part["batches"]:
        for size in sizes:
            for w, res in part["sizes"][size]["batches"][kind].items():
                if w == "delta-rs-dv":
                    continue
                times = [r["s"] for r in res["runs"]]
                run = res["runs"][median_run(times)]
                prof = run["profile"]
                lines.append(
                    f"| {kind} | {int(size):,} | {MERGE_CONTENDERS[w]} | {run['s']:.2f} | "
                    f"{run['statement_s']:.2f} | {prof.get('jobs_ms', 0) / 1000:.2f} | "
                    f"{prof.get('scan_rows', 0):,.0f} | {prof.get('shuffle_records', 0):,.0f} | "
                    f"{prof.get('shuffle_bytes', 0) / 1e6:,.1f} | "
                    f"{', '.join(prof.get('joins', []))} | "
                    f"{'yes' if prof.get('runtime_filter') else 'no'} | "
                    f"{iceberg_wrote(run['commit'])} |"
                )
    lines.append("")
    return lines


def save_merge(part: dict[str, Any], args: argparse.Namespace, pg_version: int | None) -> Path:
    env = environment(args, pg_version)
    env["build"] = check_release_build() or "release"
    figures: dict[str, float] = {}
    for size, entry in part["sizes"].items():
        for kind, by in entry["batches"].items():
            for w, res in by.items():
                figures[f"MERGE, {kind}, {int(size):,} rows, {w}, best ms"] = (
                    min(r["s"] for r in res["runs"]) * 1000
                )
    out = args.out.with_name("iceberg_merge.md")
    out.with_suffix(".json").write_text(
        json.dumps(
            {
                "date": env["date"],
                "machine": f"nproc={env['nproc']}, {platform.platform()}",
                "ratios": {},
                "figures": figures,
                "parts": {"merge": part},
                "environment": env,
            },
            indent=2,
        )
        + "\n"
    )
    out.write_text("\n".join(render_merge(part, env)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="e2e,scale,merge")
    ap.add_argument("--contenders", default="parquet,spark,iceberg", help="part 1's sinks")
    ap.add_argument("--base-rows", type=int, default=1_000_000)
    ap.add_argument("--changes", type=int, default=200_000)
    ap.add_argument("--max-batch-rows", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--rows-per-file", type=int, default=dl.DEFAULT_ROWS_PER_FILE)
    ap.add_argument("--updates", type=int, default=10_000)
    ap.add_argument(
        "--inserts", type=int, default=1_000, help="part 3's mixed batch: inserts of --updates"
    )
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--spark-memory", default="8g")
    ap.add_argument("--server", default="pg15")
    ap.add_argument(
        "--render-only", action="store_true", help="rewrite the .md from the .json, run nothing"
    )
    ap.add_argument("--workdir", default=None, help="where the tables go (default: $TMPDIR)")
    ap.add_argument(
        "--out", type=Path, default=RESULTS / "iceberg.md", help="(and its .json next to it)"
    )
    args = ap.parse_args(argv)
    args.parts = [p for p in args.parts.split(",") if p]
    args.contenders = [c for c in args.contenders.split(",") if c]
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    check_release_build()
    os.environ.setdefault("PGWIRE_CDC_DELTA_JARS", str(ROOT / ".cache" / "jars" / "delta"))
    os.environ.setdefault("PGWIRE_CDC_ICEBERG_JARS", str(ROOT / ".cache" / "jars" / "iceberg"))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    parts: dict[str, Any] = {}
    stored: dict[str, Any] = {}
    if args.out.with_suffix(".json").exists():
        stored = json.loads(args.out.with_suffix(".json").read_text())
        parts = stored.get("parts", {})
    if args.render_only:
        args.out.write_text("\n".join(render(parts, stored.get("environment") or {})))
        print(args.out.read_text())
        merge_out = args.out.with_name("iceberg_merge.md")
        if merge_out.with_suffix(".json").exists():
            merged = json.loads(merge_out.with_suffix(".json").read_text())
            merge_out.write_text(
                "\n".join(render_merge(merged["parts"]["merge"], merged["environment"]))
            )
            print(merge_out.read_text())
        return 0

    from pgwire_cdc.spark import session
    from pyspark.logger import PySparkLogger

    catalog_dir = Path(
        tempfile.mkdtemp(prefix="pgwire_cdc_bench_iceberg_catalog_", dir=args.workdir)
    )
    spark = session(
        "pgwire_cdc-bench-iceberg",
        "local[2]",
        delta=True,
        iceberg=True,
        **{
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": args.spark_memory,
        },
        **iceberg.local_catalog_conf(CATALOG, catalog_dir),
    )
    spark.sparkContext.setLogLevel("ERROR")
    # The sinks probe for a table with REFRESH TABLE, whose expected "not found" PySpark
    # would log in full.
    PySparkLogger.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    lake = Lake(catalog_dir, spark)
    cluster = PgCluster.for_server(args.server, settings=SETTINGS)
    cluster.start()
    started = time.perf_counter()
    try:
        pg_version = cluster.version
        if "e2e" in args.parts:
            with LoadSampler() as load:
                parts["e2e"] = bench_e2e(cluster, spark, lake, args)
            parts["e2e"]["load_during"] = load.summary()
            save(parts, args, pg_version)
        if "scale" in args.parts:
            with LoadSampler() as load:
                parts["scale"] = bench_scale(cluster, spark, lake, args)
            parts["scale"]["load_during"] = load.summary()
            save(parts, args, pg_version)
        if "merge" in args.parts:
            with LoadSampler() as load:
                merged = bench_merge(cluster, spark, lake, args)
            merged["load_during"] = load.summary()
            print(save_merge(merged, args, pg_version).read_text())
    finally:
        cluster.stop()
        spark.stop()
        shutil.rmtree(catalog_dir, ignore_errors=True)
    if {"e2e", "scale"} & set(args.parts):
        print(args.out.read_text())
    print(f"ran {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
