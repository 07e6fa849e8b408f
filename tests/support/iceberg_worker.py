"""`pgwire_cdc.iceberg.run` in a process of its own, with its own local Spark, for the
kill tests (test_iceberg_torture.py): delta_worker.py's counterpart for the Iceberg sink.

Usage::

    iceberg_worker.py DSN DIR UNTIL_LSN [--crash-at STEP --nth N] [--kill-after SECONDS]
                      [--log FILE] [--max-batch-rows N] [--namespace torture]
                      [--property KEY=VALUE ...] [--publication pub] [--slot s1]

Keeps one Iceberg table per table of publication ``--publication`` (default ``pub``)
through slot ``--slot`` (default ``s1``) in namespace ``--namespace`` of the local
JDBC-on-SQLite catalog ``lake`` in DIR (`iceberg.local_catalog_conf`), up to UNTIL_LSN (an
integer LSN), with a ``local[1]`` Spark session and the Iceberg jars of ``make jars``.
``--property`` sets a table property of the tables created (over the sink's defaults).

``--crash-at``, ``--nth`` and ``--log`` are delta_worker.py's (the steps: ``committed``,
``between-tables``, ``before-ack``). ``--kill-after`` kills the process with SIGKILL that
many seconds after its Spark session is up (a Spark start takes longer than the kill
times, so a timer started with the process would only ever kill Spark starting). At a
clean end the process prints the run's `iceberg.ApplyStats` as one JSON line and exits 0.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
from typing import Any

from pgwire_cdc import iceberg

# Run by path: the tests folder on the path, for the shared parts of the Delta worker.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from support.delta_worker import _die, crash_points, worker_arguments

CATALOG = "lake"


def main() -> None:
    parser = worker_arguments()
    parser.add_argument("--kill-after", type=float)
    parser.add_argument("--namespace", default="torture")
    parser.add_argument("--property", action="append", default=[])
    args = parser.parse_args()
    on_step, on_batch = crash_points(
        iceberg.IcebergSink, args.crash_at, args.nth, args.log, args.slow
    )

    from pgwire_cdc.spark import session

    # The Iceberg jars `make jars` fetched, as conftest.py uses them; Python workers run
    # this interpreter.
    jars = os.path.join(os.path.dirname(__file__), "..", "..", ".cache", "jars", "iceberg")
    if os.path.isdir(jars):
        os.environ.setdefault("PGWIRE_CDC_ICEBERG_JARS", os.path.abspath(jars))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf: dict[str, Any] = dict(iceberg.local_catalog_conf(CATALOG, args.path))
    conf.update(
        {
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "1",
            "spark.driver.memory": "1g",
        }
    )
    spark = session("iceberg_worker", "local[1]", iceberg=True, **conf)
    spark.sparkContext.setLogLevel("ERROR")
    if args.kill_after is not None:
        timer = threading.Timer(args.kill_after, _die)
        timer.daemon = True
        timer.start()
    properties = dict(p.split("=", 1) for p in args.property)
    total = iceberg.run(
        args.dsn,
        CATALOG,
        args.namespace,
        publication=args.publication,
        slot=args.slot,
        spark=spark,
        properties=properties or None,
        until_lsn=args.until,
        max_batch_rows=args.max_batch_rows,
        on_step=on_step,
        on_batch=on_batch,
    )
    print(json.dumps(dataclasses.asdict(total)), flush=True)


if __name__ == "__main__":
    main()
