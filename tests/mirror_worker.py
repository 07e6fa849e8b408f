"""The mirror in a process of its own, for the kill tests (test_spark.py,
test_crash_torture.py).

Usage: mirror_worker.py DSN PATH UNTIL_LSN [--crash-at STEP --nth N] [--log FILE]
                        [--max-batch-rows N]

Mirrors publication ``pub`` through slot ``s1`` into PATH up to UNTIL_LSN. With
``--crash-at`` (a step name of `Mirror`: ``table-written`` or ``committed``) the process
kills itself with SIGKILL the Nth time it reaches that step: no clean-up runs, as in a
real crash. ``--log`` appends one JSON line per applied batch (rows delivered, rows the
watermark skipped as already applied), flushed at once, so the counts survive a kill.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from typing import Any

from pgwire_cdc import mirror


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    parser.add_argument("path")
    parser.add_argument("until", type=int)
    parser.add_argument("--crash-at", default="")
    parser.add_argument("--nth", type=int, default=0)
    parser.add_argument("--log")
    parser.add_argument("--max-batch-rows", type=int, default=50)
    args = parser.parse_args()
    seen = 0

    def on_step(step: str) -> None:
        nonlocal seen
        if step == args.crash_at:
            seen += 1
            if seen == args.nth:
                os.kill(os.getpid(), signal.SIGKILL)

    log = open(args.log, "a") if args.log else None

    def on_batch(_m: Any, batch: Any, stats: mirror.ApplyStats) -> None:
        if log is not None:
            log.write(json.dumps({"rows": batch.rows, "skipped": stats.skipped}) + "\n")
            log.flush()

    mirror.run(
        args.dsn,
        args.path,
        publication="pub",
        slot="s1",
        until_lsn=args.until,
        max_batch_rows=args.max_batch_rows,
        on_step=on_step,
        on_batch=on_batch,
    )


if __name__ == "__main__":
    main()
