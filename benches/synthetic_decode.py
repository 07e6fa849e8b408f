"""Decode speed on synthetic streams of the ``bench`` table (``tests/synthetic.py``): varied
values of every shape, not one server capture.

From Python, one core: ``feed_many`` + ``take()`` per 100,000 messages, with the default
constructor and with ``keep_events=False``, text and binary; pypgoutput + pyarrow on the
text stream in the same run (when installed: ``make bench-py`` installs it) for the ratio.
Best of ``--repeat`` passes; a release build only.

    .venv/bin/python benches/synthetic_decode.py [--rows 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import bench_common  # noqa: E402
import synthetic  # noqa: E402
from bench_common import Stream  # noqa: E402


def arrow(stream: Stream, **options: bool) -> int:
    import pgwire_cdc

    dec = pgwire_cdc.Decoder(proto_version=1, binary=stream.binary, **options)
    rows = 0
    for msgs, lsns in stream.batches:
        dec.feed_many(msgs, lsns)
        rows += sum(t.num_rows for t in dec.take().values())
    return rows


def best(fn: Callable[[Stream], int], stream: Stream, repeat: int) -> float:
    """Rows per second of the fastest pass."""
    fastest, rows = float("inf"), 0
    for _ in range(repeat):
        started = time.perf_counter()
        rows = fn(stream)
        fastest = min(fastest, time.perf_counter() - started)
    return rows / fastest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline-rows", type=int, default=100_000)
    args = ap.parse_args(argv)
    bench_common.check_release_build()
    print(f"synthetic bench-table streams, {args.rows:,} inserts; best of {args.repeat}")
    print("| stream | constructor | rows/s |")
    print("|---|---|---:|")
    text_rate = 0.0
    for binary in (False, True):
        msgs, lsns = synthetic.messages(args.rows, binary)
        stream = Stream("binary" if binary else "text", binary, msgs, lsns)
        stream.batches  # noqa: B018 - cut outside the timing
        gc.freeze()
        for label, options in (("default", {}), ("keep_events=False", {"keep_events": False})):
            rate = best(lambda s, o=options: arrow(s, **o), stream, args.repeat)
            if not binary and label == "default":
                text_rate = rate
            print(f"| {stream.name} | {label} | {rate / 1e6:.2f}M |")
        if not binary:
            try:
                bench_common.pypgoutput_classes()
            except ImportError:
                print("pypgoutput not installed: no baseline (make bench-py installs it)")
                continue
            base = stream.prefix(args.baseline_rows)
            base.batches  # noqa: B018
            rate = best(bench_common.pypgoutput_arrow, base, 1)
            print(f"| text | pypgoutput + pyarrow | {rate / 1e6:.3f}M |")
            print(f"\ndefault constructor, text: {text_rate / rate:.1f}x pypgoutput + pyarrow\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
