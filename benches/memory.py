"""Peak memory of decoding the 1,000,000-insert capture into Arrow tables, batch by batch.

Reads the capture file record by record (never the whole file into Python objects), feeds
``batch`` messages, calls ``take()``, drops the tables, and so on; each batch size runs in
a fresh process, so ``ru_maxrss`` is that run's peak. Memory should follow the batch, not
the stream. The decoder is made with the default constructor (events kept compactly for
an ``events()`` call that never comes; ``take()`` bounds them); ``--no-events`` makes it
with ``keep_events=False``.

    .venv/bin/python benches/memory.py [--batches 10000 100000 1000000] [--mode text]
"""

from __future__ import annotations

import argparse
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORD_HEADER = struct.Struct(">QI")


def run_one(path: Path, binary: bool, batch: int, events: bool) -> None:
    import pgwire_cdc

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    options = {} if events else {"keep_events": False}
    dec = pgwire_cdc.Decoder(proto_version=1, binary=binary, **options)
    rows = 0
    started = time.perf_counter()
    with open(path, "rb") as f:
        msgs: list[bytes] = []
        lsns: list[int] = []
        while header := f.read(RECORD_HEADER.size):
            lsn, length = RECORD_HEADER.unpack(header)
            msgs.append(f.read(length))
            lsns.append(lsn)
            if len(msgs) == batch:
                dec.feed_many(msgs, lsns)
                rows += sum(t.num_rows for t in dec.take().values())
                msgs, lsns = [], []
        dec.feed_many(msgs, lsns)
        rows += sum(t.num_rows for t in dec.take().values())
    secs = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"{batch}\t{rows}\t{secs:.2f}\t{base / 1024:.0f}\t{peak / 1024:.0f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--mode", choices=["text", "binary"], default="text")
    ap.add_argument("--no-events", action="store_true", help="keep_events=False")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    path = HERE / ".cache" / f"bench_{args.mode}.bin"
    if args.one:
        run_one(path, args.mode == "binary", args.one, not args.no_events)
        return 0
    constructor = "keep_events=False" if args.no_events else "the default constructor"
    print(f"capture {path.name}; {constructor}; one process per batch size")
    print("| messages per take() | rows | seconds | RSS before (MB) | peak RSS (MB) |")
    print("|---:|---:|---:|---:|---:|")
    for batch in args.batches:
        out = subprocess.run(
            [sys.executable, __file__, "--mode", args.mode, "--one", str(batch)]
            + (["--no-events"] if args.no_events else []),
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        print(
            "| "
            + " | ".join(f"{int(float(x)):,}" if i != 2 else x for i, x in enumerate(out))
            + " |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
