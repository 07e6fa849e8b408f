"""Decode speed on synthetic streams of the ``bench`` and ``typed`` tables
(``tests/support/synthetic.py``): varied values of every shape, not one server capture.

From Python, one core: ``feed_many`` + ``take()`` per 100,000 messages, with the default
constructor and with ``keep_events=False``, text and binary; pypgoutput + pyarrow on the
``bench`` text stream in the same run (when installed: ``make bench-py`` installs it) for
the ratio. ``typed`` (id int8, amount numeric(12,2), at timestamptz, score float8, doc
jsonb, uid uuid) holds typed values only, no free text: its rate is that of those types'
parsers and builders. Best of ``--repeat`` passes; a release build only.

    .venv/bin/python benches/synthetic_decode.py [--rows 1000000] [--repeat 3]
        [--tables bench,typed]
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
from bench_common import Stream  # noqa: E402
from support import synthetic  # noqa: E402


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


def measure(table: str, binary: bool, rows: int, repeat: int) -> float:
    """Prints both constructors' rates on one stream; returns the default one's."""
    msgs, lsns = synthetic.messages(rows, binary, table=table)
    stream = Stream("binary" if binary else "text", binary, msgs, lsns)
    stream.batches  # noqa: B018 - cut outside the timing
    gc.freeze()
    default_rate = 0.0
    constructors: tuple[tuple[str, dict[str, bool]], ...] = (
        ("default", {}),
        ("keep_events=False", {"keep_events": False}),
    )
    for label, options in constructors:

        def decode(s: Stream, options: dict[str, bool] = options) -> int:
            return arrow(s, **options)

        rate = best(decode, stream, repeat)
        if label == "default":
            default_rate = rate
        print(f"| {table} | {stream.name} | {label} | {rate / 1e6:.2f}M |")
    # This stream's messages go before the next one's are built.
    del msgs, lsns, stream
    gc.unfreeze()
    gc.collect()
    return default_rate


def baseline(baseline_rows: int, text_rate: float) -> None:
    """pypgoutput + pyarrow on the first rows of the ``bench`` text stream, and the ratio."""
    try:
        bench_common.pypgoutput_classes()
    except ImportError:
        print("pypgoutput not installed: no baseline (make bench-py installs it)")
        return
    msgs, lsns = synthetic.messages(baseline_rows, binary=False)
    base = Stream("text", False, msgs, lsns)
    base.batches  # noqa: B018
    rate = best(bench_common.pypgoutput_arrow, base, 1)
    print(f"| bench | text | pypgoutput + pyarrow | {rate / 1e6:.3f}M |")
    print(f"\ndefault constructor, bench text: {text_rate / rate:.1f}x pypgoutput + pyarrow\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline-rows", type=int, default=100_000)
    ap.add_argument("--tables", default="bench,typed", help="comma-separated: bench, typed")
    args = ap.parse_args(argv)
    bench_common.check_release_build()
    tables = args.tables.split(",")
    unknown = set(tables) - set(synthetic.TABLES)
    if unknown:
        ap.error(f"unknown tables: {', '.join(sorted(unknown))}")
    print(f"synthetic streams, {args.rows:,} inserts each; best of {args.repeat}")
    print("| table | stream | constructor | rows/s |")
    print("|---|---|---|---:|")
    for table in tables:
        for binary in (False, True):
            rate = measure(table, binary, args.rows, args.repeat)
            if table == "bench" and not binary:
                baseline(args.baseline_rows, rate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
