"""`pgwire_cdc.delta.run` in a process of its own, for the kill tests
(test_crash_torture.py; reusable by any test that SIGKILLs the consumer).

Usage::

    delta_worker.py DSN PATH UNTIL_LSN [--crash-at STEP --nth N] [--log FILE] [--slow S]
                    [--max-batch-rows N] [--writer delta-rs|spark]
                    [--publication pub] [--slot s1] [--history scd2] [--deletes soft]
                    [--change-data-feed] [--storage-options JSON]

Keeps one Delta table per table of publication ``--publication`` (default ``pub``)
through slot ``--slot`` (default ``s1``) under PATH, up to UNTIL_LSN (an integer LSN),
with the delta-rs writer unless ``--writer spark`` (a local Spark session with Delta is
started then). ``--max-batch-rows`` defaults to 50.

With ``--crash-at`` the process kills itself with SIGKILL (no clean-up runs, as in a real
crash) the Nth time (``--nth``, from 1) it reaches STEP:

* ``committed``: right after any Delta commit;
* ``between-tables``: right after a Delta commit that another table's commit of the same
  batch follows (the commit ordinal within the batch is below the number of tables the
  batch holds rows of): the batch is in some tables and not in others;
* ``before-ack``: after every commit of a batch, before the slot is acked (a batch that
  committed nothing, all of it skipped, does not count).

``--log`` appends one JSON line per batch applied and acked (``rows`` delivered,
``skipped``: rows at or below a table's recorded position, delivered again and skipped,
``commits``), flushed at once, so the counts survive a later kill. At a clean end the
process prints the run's `delta.ApplyStats` as one JSON line on stdout and exits 0; a
crash point reached exits by SIGKILL (return code -9). ``--slow S`` waits S seconds before
each batch is applied (a slow sink). ``--storage-options`` (a JSON object) are delta-rs's
options for a PATH on an object store (``s3://bucket/prefix``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from pgwire_cdc import delta
from pgwire_cdc.tables import parse_segment_key

STEPS = ("committed", "between-tables", "before-ack")


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def crash_points(
    sink_class: Any, crash_at: str, nth: int, log_path: str | None, slow: float = 0.0
) -> tuple[Callable[[str], None], Callable[[Any, Any, Any], None]]:
    """The ``on_step`` and ``on_batch`` of a worker's run, and ``sink_class.apply``
    patched: the process kills itself the ``nth`` time it reaches ``crash_at`` (one of
    STEPS, or "" for never), and appends a JSON line per batch applied to ``log_path``;
    with ``slow`` each batch waits that many seconds before it is applied (a slow sink:
    the stream keeps its slot's WAL and its walsender's keepalives meanwhile).
    Shared by the workers of the Delta and the Iceberg sinks (iceberg_worker.py), whose
    sinks call ``on_step("committed")`` after each commit."""
    seen = 0
    # The batch being applied: how many tables it holds rows of, commits made so far.
    current = {"tables": 0, "commits": 0}

    def reached(step: str) -> None:
        nonlocal seen
        if step == crash_at:
            seen += 1
            if seen == nth:
                _die()

    def on_step(step: str) -> None:
        if step != "committed":
            return
        current["commits"] += 1
        reached("committed")
        if current["commits"] < current["tables"]:
            reached("between-tables")

    apply = sink_class.apply

    def apply_then_maybe_crash(sink: Any, batch: Any) -> Any:
        names = {parse_segment_key(key)[0] for key, t in batch.tables.items() if t.num_rows}
        current.update(tables=len(names), commits=0)
        if slow:
            time.sleep(slow)
        stats = apply(sink, batch)
        if stats.commits:
            reached("before-ack")  # run() acks right after apply() returns
        return stats

    sink_class.apply = apply_then_maybe_crash

    log = open(log_path, "a") if log_path else None

    def on_batch(_sink: Any, batch: Any, stats: Any) -> None:
        if log is not None:
            line = {"rows": batch.rows, "skipped": stats.skipped, "commits": stats.commits}
            log.write(json.dumps(line) + "\n")
            log.flush()

    return on_step, on_batch


def worker_arguments() -> argparse.ArgumentParser:
    """The arguments every worker takes (see the module documentation)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    parser.add_argument("path")
    parser.add_argument("until", type=int)
    parser.add_argument("--crash-at", default="", choices=("", *STEPS))
    parser.add_argument("--nth", type=int, default=0)
    parser.add_argument("--log")
    parser.add_argument("--slow", type=float, default=0.0)
    parser.add_argument("--max-batch-rows", type=int, default=50)
    parser.add_argument("--publication", default="pub")
    parser.add_argument("--slot", default="s1")
    return parser


def main() -> None:
    if os.environ.get("PGWIRE_CDC_WORKER_LOG"):
        # The run's INFO lines (snapshots, slots, start positions) on stderr, for the chaos
        # runs' reports.
        import logging

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    parser = worker_arguments()
    parser.add_argument("--writer", default="delta-rs", choices=delta.WRITERS)
    parser.add_argument("--deletion-vectors", action="store_true")
    parser.add_argument("--history", default=None)
    parser.add_argument("--deletes", default="hard")
    parser.add_argument("--change-data-feed", action="store_true")
    parser.add_argument("--storage-options", type=json.loads, default=None)
    args = parser.parse_args()
    on_step, on_batch = crash_points(delta.DeltaSink, args.crash_at, args.nth, args.log, args.slow)

    spark = None
    if args.writer == "spark":
        from pgwire_cdc.spark import session

        # The Delta Lake jars `make jars` fetched, as conftest.py uses them.
        jars = os.path.join(os.path.dirname(__file__), "..", "..", ".cache", "jars", "delta")
        if os.path.isdir(jars):
            os.environ.setdefault("PGWIRE_CDC_DELTA_JARS", os.path.abspath(jars))
        conf: dict[str, Any] = {"spark.ui.enabled": "false"}
        spark = session("delta_worker", "local[1]", delta=True, **conf)
    total = delta.run(
        args.dsn,
        args.path,
        publication=args.publication,
        slot=args.slot,
        writer=args.writer,
        spark=spark,
        until_lsn=args.until,
        max_batch_rows=args.max_batch_rows,
        on_step=on_step,
        on_batch=on_batch,
        deletion_vectors=args.deletion_vectors,
        history=args.history,
        deletes=args.deletes,
        change_data_feed=args.change_data_feed,
        storage_options=args.storage_options,
    )
    print(json.dumps(dataclasses.asdict(total)), flush=True)


if __name__ == "__main__":
    main()
