"""What column policies cost the decode: three hashed columns on the synthetic ``bench``
stream (``tests/support/synthetic.py``: id, name, amount, ts, flag, score, doc jsonb, uid).

From Python, one core, the same messages: ``feed_many`` + ``take()`` per 100,000 messages
(the decode), then the same with ``name``, ``doc`` and ``uid`` hashed
(:func:`pgwire_cdc._native.apply_column_policies`, what ``stream(column_policies=...)``
applies to each batch) — and with those three dropped. Best of ``--repeat`` passes, text
and binary; a release build only. Writes ``benches/results/policy_cost.md``.

    .venv/bin/python benches/policy_cost.py [--rows 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from bench_common import Stream, native_build_profile  # noqa: E402
from support import synthetic  # noqa: E402

HASHED = ("name", "doc", "uid")


def decode(stream: Stream, rules: list[tuple[str, str, bytes, int]]) -> int:
    import pgwire_cdc
    from pgwire_cdc import _native
    from pgwire_cdc.tables import table_of

    dec = pgwire_cdc.Decoder(proto_version=1, binary=stream.binary)
    rows = 0
    for msgs, lsns in stream.batches:
        dec.feed_many(msgs, lsns)
        for table in dec.take().values():
            if rules:
                table = table_of(_native.apply_column_policies(table, rules))
            rows += table.num_rows
    return rows


def best(stream: Stream, rules: list[Any], repeat: int) -> float:
    fastest, rows = float("inf"), 0
    for _ in range(repeat):
        started = time.perf_counter()
        rows = decode(stream, rules)
        fastest = min(fastest, time.perf_counter() - started)
    return rows / fastest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    hashed = [(c, "hash", b"salt", 0) for c in HASHED]
    dropped = [(c, "drop", b"", 0) for c in HASHED]
    lines = []
    for binary in (False, True):
        msgs, lsns = synthetic.messages(args.rows, binary, table="bench")
        stream = Stream("binary" if binary else "text", binary, msgs, lsns)
        stream.batches  # noqa: B018 - cut outside the timing
        gc.freeze()
        plain = best(stream, [], args.repeat)
        with_hash = best(stream, hashed, args.repeat)
        with_drop = best(stream, dropped, args.repeat)
        lines.append(
            f"| {stream.name} | {plain / 1e6:.2f}M | {with_hash / 1e6:.2f}M |"
            f" {plain / with_hash:.2f} | {with_drop / 1e6:.2f}M |"
        )
        print(lines[-1], flush=True)
        del msgs, lsns, stream
        gc.unfreeze()
        gc.collect()
    load = os.getloadavg()[0]
    out = HERE / "results" / "policy_cost.md"
    out.write_text(
        "\n".join(
            [
                "# What column policies cost the decode",
                "",
                f"- Measured {dt.date.today()} on this project's 2-core machine; the extension"
                f" reports the `{native_build_profile() or '?'}` profile; load average"
                f" {load:.1f} at the end.",
                f"- `benches/policy_cost.py --rows {args.rows} --repeat {args.repeat}`: the"
                " synthetic `bench` stream decoded into change tables, alone and with `name`,"
                " `doc` (jsonb) and `uid` hashed (SHA-256 with a salt) or dropped.",
                "",
                "| stream | decode, rows/s | + 3 hashed, rows/s | time ratio"
                " | + 3 dropped, rows/s |",
                "|---|---:|---:|---:|---:|",
                *lines,
                "",
            ]
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
