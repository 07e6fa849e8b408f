"""Time pgwire_cdc against pypgoutput once, outside pytest-benchmark, and write the table.

Plain wall-clock timing (time.perf_counter, best of --repeat runs) of the runs described in
bench_common.py, on the captures recorded by capture_stream.py (recorded first if missing),
plus the criterion figures of ``cargo bench --bench decode`` when target/criterion holds
them. Writes ``benches/results/decode.md`` and prints it.

    .venv/bin/python benches/report.py [--repeat 3] [--pypgoutput-msgs 100000] [--out PATH]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
from pathlib import Path
from typing import Any

import bench_common
import capture_stream
from bench_common import Stream

TARGET_RATIO = 50.0


def criterion_rows(
    stream_sizes: dict[str, tuple[int, int]], ppo_rate: float
) -> tuple[list[str], str | None]:
    """Rows for the criterion results (mean time per pass over the capture), if any."""
    target = Path(os.environ.get("CARGO_TARGET_DIR", bench_common.HERE.parent / "target"))
    root = target / "criterion"
    rows: list[str] = []
    newest: float | None = None
    labels = {
        "parse_message": "`parse_message`",
        "decoder_feed": "`Decoder::feed` + NullSink",
        "arrow_tables": "`Decoder::feed` + ArrowSink + `take()` (Arrow tables)",
    }
    for group, label in labels.items():
        for mode in ("text", "binary"):
            # decode.rs reports each benchmark twice (MB and msgs throughput); same timing.
            for unit in ("MB", "msgs"):
                full_id = f"{group}/{mode}/{unit}"
                found = None
                for bj in root.glob(f"{group}/*/new/benchmark.json"):
                    try:
                        if json.loads(bj.read_text()).get("full_id") == full_id:
                            found = bj.parent
                            break
                    except ValueError:
                        continue
                if found is None:
                    continue
                est = json.loads((found / "estimates.json").read_text())
                secs = est["mean"]["point_estimate"] / 1e9
                n, nbytes = stream_sizes[mode]
                what = label
                rows.append(
                    f"| {what} ({mode}) | {n:,} | {secs:.4f} | {n / secs:,.0f} |"
                    f" {nbytes / secs / 1e6:,.1f} | {n / secs / ppo_rate:.1f}x |"
                )
                mtime = (found / "estimates.json").stat().st_mtime
                newest = mtime if newest is None else max(newest, mtime)
                break
    when = (
        _dt.datetime.fromtimestamp(newest, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        if newest is not None
        else None
    )
    return rows, when


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (best kept)")
    ap.add_argument(
        "--pypgoutput-msgs",
        type=int,
        default=bench_common.PYPGOUTPUT_MSGS,
        help="messages of the text capture given to pypgoutput (0 = all)",
    )
    ap.add_argument("--out", type=Path, default=bench_common.RESULTS / "decode.md")
    args = ap.parse_args(argv)

    if not bench_common.capture_path("text").exists():
        capture_stream.ensure_capture()
    profile = bench_common.check_release_build()
    text = bench_common.load_stream("text")
    binary = bench_common.load_stream("binary")
    prefix = text.prefix(args.pypgoutput_msgs)
    print(f"loaded captures: text {text.n:,} msgs, binary {binary.n:,} msgs", flush=True)

    checked = bench_common.cross_check(prefix)
    print(f"cross-check: first {checked:,} inserts decode identically in both", flush=True)

    runs: list[tuple[str, Stream, Any]] = [
        (bench_common.PARSE, text, bench_common.pgwire_parse),
        (bench_common.PARSE, binary, bench_common.pgwire_parse),
        (bench_common.PARSE_EVENTS, text, bench_common.pgwire_parse_events),
    ]
    if prefix.n < text.n:
        runs.append((bench_common.PARSE, prefix, bench_common.pgwire_parse))
    runs.append((bench_common.PYPGOUTPUT, prefix, bench_common.pypgoutput_parse))
    runs += [
        (bench_common.ARROW, text, bench_common.pgwire_arrow),
        (bench_common.ARROW, binary, bench_common.pgwire_arrow),
        (bench_common.PYPGOUTPUT_ARROW, text, bench_common.pypgoutput_arrow),
    ]
    rates: list[bench_common.Rate] = []
    for what, stream, fn in runs:
        secs, _ = bench_common.best_of(fn, stream, args.repeat)
        r = bench_common.Rate(what, stream.name, stream.n, stream.nbytes, secs)
        rates.append(r)
        print(
            f"{r.what:<28} {r.stream:<14} {r.n:>9,} msgs {r.secs:8.3f} s"
            f" {r.msgs_per_s:>13,.0f} msgs/s {r.mb_per_s:9.1f} MB/s",
            flush=True,
        )
    pair = bench_common.ratio(rates)
    assert pair is not None
    ours, ppo = pair
    ratio_parse = ours.msgs_per_s / ppo.msgs_per_s
    with_events = next(r for r in rates if r.what == bench_common.PARSE_EVENTS)
    ratio_events = with_events.msgs_per_s / ppo.msgs_per_s
    arrow_text = next(r for r in rates if r.what == bench_common.ARROW and r.stream == text.name)
    arrow_binary = next(
        r for r in rates if r.what == bench_common.ARROW and r.stream == binary.name
    )
    ppo_arrow = next(r for r in rates if r.what == bench_common.PYPGOUTPUT_ARROW)
    ratio_arrow = arrow_text.msgs_per_s / ppo_arrow.msgs_per_s

    m = bench_common.machine_info()
    meta = bench_common.capture_meta("text")
    bmeta = bench_common.capture_meta("binary")
    ppo_note = (
        f"the first {prefix.n:,} messages ({prefix.inserts:,} inserts) of the text capture;"
        " pgwire_cdc was also run on that prefix, and the ratio uses that run"
        if prefix.n < text.n
        else "the whole text capture, the same messages as pgwire_cdc"
    )
    lines = [
        "# Decode throughput: pgwire_cdc vs pypgoutput",
        "",
        f"- Date: {m['date']}",
        f"- Machine: {m['cpu']}, nproc = {m['nproc']}, {m['os']}",
        f"- Python {m['python']}; pgwire_cdc native build profile: "
        f"{profile or 'not exposed by the extension (BUILD_PROFILE missing)'}; "
        f"pypgoutput {bench_common.pypgoutput_version()}",
        "- Capture (benches/capture_stream.py): `create table bench (id bigint primary key,"
        " name text, amount numeric(12,2), ts timestamptz, flag bool, score float8, doc jsonb,"
        f" uid uuid)`, {meta.get('rows', text.inserts):,} inserts in transactions of"
        f" {meta.get('batch', '?'):,} rows, read from PostgreSQL"
        f" {meta.get('server_version', '?')} with `pg_logical_slot_get_binary_changes`"
        f" (pgoutput, proto_version 1). Text tuples: {text.n:,} messages,"
        f" {text.nbytes / 1e6:.1f} MB; binary tuples (`binary 'true'`): {binary.n:,} messages,"
        f" {binary.nbytes / 1e6:.1f} MB. Messages by tag: {meta.get('messages_by_tag', '?')}"
        f" (text), {bmeta.get('messages_by_tag', '?')} (binary).",
        f"- pypgoutput runs on {ppo_note}. MB = 10^6 bytes of pgoutput message payload.",
        f"- Plain timing with `time.perf_counter`, best of {args.repeat} runs, one process,"
        " GC enabled, the loaded captures frozen (`gc.freeze()`, so collections do not walk"
        " them) (benches/report.py). Before timing, the first"
        f" {checked:,} inserts were checked to decode to identical values in both libraries.",
        "",
        "## Python (benches/report.py)",
        "",
        "| run | stream | messages | best s | msgs/s | MB/s | msgs/s vs pypgoutput |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rates:
        lines.append(
            f"| {r.what} | {r.stream} | {r.n:,} | {r.secs:.3f} | {r.msgs_per_s:,.0f} |"
            f" {r.mb_per_s:,.1f} | {r.msgs_per_s / ppo.msgs_per_s:.1f}x |"
        )
    verdict = "meets" if ratio_parse >= TARGET_RATIO else "DOES NOT meet"
    lines += [
        "",
        f"**Ratio, parsing alone, same {ppo.n:,} messages: {ratio_parse:.1f}x pypgoutput**"
        f" ({verdict} the {TARGET_RATIO:.0f}x target).",
        "",
        f"Including building Python event objects (`feed_many` + `events()`, full text"
        f" capture): {ratio_events:.1f}x pypgoutput's parse rate.",
        "",
        f"Typed Arrow change tables (`take()` every {bench_common.ARROW_BATCH_MSGS:,}"
        f" messages): text {text.inserts / arrow_text.secs:,.0f} rows/s, binary"
        f" {binary.inserts / arrow_binary.secs:,.0f} rows/s ({text.inserts:,} rows);"
        f" {ratio_arrow:.1f}x pypgoutput + a pyarrow table of its (untyped) values.",
        "",
        '"pgwire_cdc parse" = `Decoder(proto_version=1, binary=..., keep_events=False,'
        " keep_tables=False)` and"
        " one `feed_many(msgs, lsns)`: every message and tuple parsed, no Python objects built."
        ' "+ events()" = the same with `keep_events=True`, then `events()` (one Python'
        " object per message). pypgoutput = one `pypgoutput.decoders.<Class>(msg)` per message"
        " (class chosen by the tag byte), which decodes the whole message including the"
        " tuple; results dropped. pypgoutput cannot decode binary tuples, so the binary"
        ' capture is pgwire_cdc only; its "vs pypgoutput" figure compares the same rows'
        " in binary format with pypgoutput on the text format.",
    ]
    crit, when = criterion_rows(
        {"text": (text.n, text.nbytes), "binary": (binary.n, binary.nbytes)}, ppo.msgs_per_s
    )
    lines += ["", "## Rust (criterion, `cargo bench --bench decode`)", ""]
    if crit:
        lines += [
            "Criterion mean time per pass over the whole capture (the `.../MB` benchmark ids;"
            f" results from {when}), no Python involved. The last column divides by the"
            " pypgoutput rate measured above.",
            "",
            "| benchmark | messages | mean s | msgs/s | MB/s | msgs/s vs pypgoutput |",
            "|---|---:|---:|---:|---:|---:|",
            *crit,
        ]
    else:
        lines.append("No criterion results found under target/criterion: run `make bench-rust`.")
    text_md = "\n".join(lines) + "\n"

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text_md)
    bench_common.write_ratios(
        "decode",
        {
            "parse vs pypgoutput": ratio_parse,
            "Arrow tables (text) vs pypgoutput + pyarrow": ratio_arrow,
            "Arrow tables (binary) vs pypgoutput + pyarrow": arrow_binary.msgs_per_s
            / ppo_arrow.msgs_per_s,
        },
        {
            # Rows, not messages: the inserts (the 220 Begin, Commit and Relation
            # messages make no row).
            "Arrow tables, text, rows/s": text.inserts / arrow_text.secs,
            "Arrow tables, binary, rows/s": binary.inserts / arrow_binary.secs,
        },
    )
    print()
    print(text_md)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
