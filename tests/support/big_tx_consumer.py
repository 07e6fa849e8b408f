"""A ``pgwire_cdc.stream()`` consumer in a process of its own, so that its peak RSS is its
own: used by tests/live/test_large_transactions.py.

Streams ``public.big`` from an existing slot (no snapshot), acks every batch, and stops
after a row arrives in ``public.done`` (or after ``--max-batches``). Prints one JSON line:
rows and id sum of ``big``, distinct commit LSNs, batches, the largest batch, and the
process's peak RSS (``VmHWM``).

    python tests/support/big_tx_consumer.py DSN --slot s1 [--streaming on|off] [--spill-dir D]
        [--spill-threshold BYTES] [--max-batch-rows N] [--sleep S] [--max-batches N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pgwire_cdc
import pyarrow.compute as pc


def peak_rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dsn")
    ap.add_argument("--slot", default="s1")
    ap.add_argument("--publication", default="pub")
    ap.add_argument("--streaming", choices=("on", "off"), default="on")
    ap.add_argument("--spill-dir")
    ap.add_argument("--spill-threshold", type=int, default=64 << 20)
    ap.add_argument("--max-batch-rows", type=int, default=100_000)
    ap.add_argument("--sleep", type=float, default=0.0, help="seconds per batch (slow consumer)")
    ap.add_argument("--max-batches", type=int, default=0)
    args = ap.parse_args()

    rows = id_sum = batches = largest = 0
    commits: set[int] = set()
    done = False
    for batch in pgwire_cdc.stream(
        args.dsn,
        publication=args.publication,
        slot=args.slot,
        snapshot=False,
        idle_timeout=180,
        max_batch_rows=args.max_batch_rows,
        streaming=args.streaming == "on",
        spill_threshold=args.spill_threshold,
        spill_dir=args.spill_dir,
    ):
        big = batch.tables.get("public.big")
        if big is not None and big.num_rows:
            rows += big.num_rows
            id_sum += pc.sum(big["id"]).as_py()
            commits.update(pc.unique(big["_commit_lsn"]).to_pylist())
            largest = max(largest, big.num_rows)
        marker = batch.tables.get("public.done")
        done = marker is not None and marker.num_rows > 0
        batch.ack()
        batches += 1
        print(f"batch {batches} rows {rows}", file=sys.stderr, flush=True)
        if args.sleep:
            time.sleep(args.sleep)
        if done or (args.max_batches and batches >= args.max_batches):
            break
    print(
        json.dumps(
            {
                "rows": rows,
                "id_sum": id_sum,
                "commits": len(commits),
                "batches": batches,
                "largest_batch": largest,
                "done": done,
                "peak_rss_mb": peak_rss_kb() / 1024,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
