"""Shared pieces of the Python decode benchmarks (pytest-benchmark run and report.py).

What is measured, for both libraries on the very same messages of the text capture:

* pgwire_cdc, "parse": ``Decoder(proto_version=1, binary=..., keep_events=False)`` and one
  ``feed_many(msgs, lsns)`` call: every message and every tuple is parsed, no Python event
  objects are built;
* pgwire_cdc, "parse + events": the same with ``keep_events=True`` followed by
  ``events()``, i.e. including building one Python object per event;
* pypgoutput 0.0.3, "parse": one ``pypgoutput.decoders.<Class>(msg)`` per message, the class
  picked by the tag byte (what ``LogicalReplicationReader.transform_raw`` does, with a dict
  lookup instead of its if-chain); its constructor decodes the whole message, tuples
  included. The decoded objects are dropped, like ``keep_events=False`` drops events.

MB/s counts message payload bytes only (not the 12-byte record headers of the capture
file). pypgoutput only understands text tuples ('t'), so the binary capture is measured
for pgwire_cdc only.
"""

from __future__ import annotations

import datetime as _dt
import functools
import gc
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import capture_stream

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

#: Messages of the text capture given to pypgoutput (pgwire_cdc then also runs on that same
#: prefix, for a like-for-like ratio). 0 (the default) means the whole capture: pypgoutput
#: needs about 10 s per pass over the 1,000,220 messages.
PYPGOUTPUT_MSGS = int(os.environ.get("PGWIRE_CDC_BENCH_PYPGOUTPUT_MSGS", "0"))


def capture_path(mode: str) -> Path:
    var = "PGWIRE_CDC_BENCH_CAPTURE" if mode == "text" else "PGWIRE_CDC_BENCH_CAPTURE_BINARY"
    env = os.environ.get(var)
    return Path(env) if env else capture_stream.capture_paths(capture_stream.DEFAULT_CACHE, mode)[0]


@dataclass(frozen=True)
class Stream:
    name: str
    binary: bool
    msgs: list[bytes]
    lsns: list[int]

    @property
    def n(self) -> int:
        return len(self.msgs)

    @property
    def nbytes(self) -> int:
        return sum(map(len, self.msgs))

    @property
    def inserts(self) -> int:
        return sum(1 for m in self.msgs if m[:1] == b"I")

    @functools.cached_property
    def batches(self) -> list[tuple[list[bytes], list[int]]]:
        """The stream cut into batches of ``ARROW_BATCH_MSGS`` messages, as a consumer gets
        them; built once, outside any timing (``load_stream`` does it)."""
        return [
            (self.msgs[lo : lo + ARROW_BATCH_MSGS], self.lsns[lo : lo + ARROW_BATCH_MSGS])
            for lo in range(0, self.n, ARROW_BATCH_MSGS)
        ]

    def prefix(self, n: int) -> Stream:
        if n <= 0 or n >= self.n:
            return self
        return Stream(f"{self.name}[:{n}]", self.binary, self.msgs[:n], self.lsns[:n])


def load_stream(mode: str) -> Stream:
    path = capture_path(mode)
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: record it with `.venv/bin/python benches/capture_stream.py`"
        )
    msgs, lsns = capture_stream.load_capture(path)
    stream = Stream(mode, mode == "binary", msgs, lsns)
    stream.batches  # noqa: B018 - cut the batches now, not inside a timed run
    # The garbage collector stays on, but no longer walks the capture's two million
    # objects at every full collection: a consumer never holds a whole stream at once, so
    # that cost would be the harness's, not the decoder's.
    gc.freeze()
    return stream


def capture_meta(mode: str) -> dict[str, Any]:
    meta = capture_path(mode).with_suffix(".json")
    return json.loads(meta.read_text()) if meta.exists() else {}


# --------------------------------------------------------------------------------------
# pgwire_cdc
# --------------------------------------------------------------------------------------


def native_build_profile() -> str | None:
    """`pgwire_cdc._native.BUILD_PROFILE` when the extension exposes it, else None."""
    import pgwire_cdc._native as native

    profile = getattr(native, "BUILD_PROFILE", None)
    return None if profile is None else str(profile)


def check_release_build() -> str | None:
    """Refuse to benchmark a debug build of the extension (when it says which it is)."""
    profile = native_build_profile()
    if profile is not None and profile != "release":
        raise RuntimeError(
            f"pgwire_cdc._native is a {profile!r} build; benchmark a release build "
            "(`.venv/bin/maturin develop --release`)"
        )
    return profile


def pgwire_parse(stream: Stream) -> int:
    """Parse everything, keep no events. Returns the number of messages fed."""
    import pgwire_cdc

    dec = pgwire_cdc.Decoder(
        proto_version=1, binary=stream.binary, keep_events=False, keep_tables=False
    )
    dec.feed_many(stream.msgs, stream.lsns)
    return stream.n


def pgwire_parse_events(stream: Stream) -> int:
    """Parse everything and build the Python event objects. Returns the number of events."""
    import pgwire_cdc

    dec = pgwire_cdc.Decoder(
        proto_version=1, binary=stream.binary, keep_events=True, keep_tables=False
    )
    dec.feed_many(stream.msgs, stream.lsns)
    return len(dec.events())


#: Messages fed between two ``take()`` calls in the Arrow runs: memory follows the batch.
ARROW_BATCH_MSGS = 100_000


def pgwire_arrow(stream: Stream) -> int:
    """Decode into typed Arrow change tables, one ``take()`` per batch. Returns rows."""
    import pgwire_cdc

    dec = pgwire_cdc.Decoder(proto_version=1, binary=stream.binary, keep_events=False)
    rows = 0
    for msgs, lsns in stream.batches:
        dec.feed_many(msgs, lsns)
        rows += sum(t.num_rows for t in dec.take().values())
    return rows


# --------------------------------------------------------------------------------------
# pypgoutput
# --------------------------------------------------------------------------------------


def pypgoutput_version() -> str:
    from importlib.metadata import version

    return version("pypgoutput")


def pypgoutput_classes() -> dict[int, Callable[[bytes], Any]]:
    import pypgoutput.decoders as ppo  # type: ignore[import-untyped]

    return {
        ord("B"): ppo.Begin,
        ord("C"): ppo.Commit,
        ord("R"): ppo.Relation,
        ord("I"): ppo.Insert,
        ord("U"): ppo.Update,
        ord("D"): ppo.Delete,
        ord("T"): ppo.Truncate,
    }


def pypgoutput_parse(stream: Stream) -> int:
    """Decode every message with pypgoutput. Returns the number of messages decoded."""
    by_tag = pypgoutput_classes()
    n = 0
    for m in stream.msgs:
        by_tag[m[0]](m)
        n += 1
    return n


# --------------------------------------------------------------------------------------
# Cross-check (outside any timing): both libraries read the same values
# --------------------------------------------------------------------------------------


def pypgoutput_arrow(stream: Stream) -> int:
    """pypgoutput parsing, then a pyarrow table of the inserts' column values built in
    Python, per batch. The columns stay strings: typing them would only add to this
    baseline's cost, so the ratio against it is conservative. Returns rows."""
    import pyarrow as pa

    by_tag = pypgoutput_classes()
    rows = 0
    for msgs, _ in stream.batches:
        columns: list[list[object]] | None = None
        for m in msgs:
            decoded = by_tag[m[0]](m)
            if m[:1] == b"I":
                values = [c.col_data for c in decoded.new_tuple.column_data]
                if columns is None:
                    columns = [[] for _ in values]
                for col, v in zip(columns, values, strict=True):
                    col.append(v)
        if columns:
            table = pa.table({f"c{i}": col for i, col in enumerate(columns)})
            rows += table.num_rows
    return rows


def cross_check(stream: Stream, limit: int = 2000) -> int:
    """Compare the first `limit` inserts as decoded by both libraries; returns how many
    were compared. Raises AssertionError on the first difference."""
    import pgwire_cdc

    part = stream.prefix(min(stream.n, limit * 2))
    dec = pgwire_cdc.Decoder(proto_version=1, binary=False, keep_events=True)
    dec.feed_many(part.msgs, part.lsns)
    ours = [tuple(e.wire_table_row or ()) for e in dec.events() if e.kind == "insert"]
    by_tag = pypgoutput_classes()
    theirs = []
    for m in part.msgs:
        if m[:1] == b"I":
            tup = by_tag[m[0]](m).new_tuple
            theirs.append(tuple(c.col_data for c in tup.column_data))
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a == b, f"insert #{i} differs"
        if i + 1 >= limit:
            return i + 1
    return len(ours)


# --------------------------------------------------------------------------------------
# Timing and machine description
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rate:
    what: str  # e.g. "pgwire_cdc parse"
    stream: str  # Stream.name: "text", "binary" or "text[:N]"
    n: int
    nbytes: int
    secs: float

    @property
    def msgs_per_s(self) -> float:
        return self.n / self.secs

    @property
    def mb_per_s(self) -> float:
        return self.nbytes / self.secs / 1e6


PARSE = "pgwire_cdc parse"
PARSE_EVENTS = "pgwire_cdc parse + events()"
ARROW = "pgwire_cdc Arrow tables"
PYPGOUTPUT_ARROW = "pypgoutput + pyarrow table"
PYPGOUTPUT = "pypgoutput parse"

#: Filled by the pytest benchmarks (best round of each).
RATES: list[Rate] = []


def ratio(rates: list[Rate]) -> tuple[Rate, Rate] | None:
    """(pgwire_cdc parse, pypgoutput parse) measured on the same stream, if both ran."""
    ppo = next((r for r in rates if r.what == PYPGOUTPUT), None)
    if ppo is None:
        return None
    ours = next((r for r in rates if r.what == PARSE and r.stream == ppo.stream), None)
    return None if ours is None else (ours, ppo)


def record(what: str, stream: Stream, benchmark: Any) -> None:
    """Store the best round of a finished pytest-benchmark run."""
    best = float(benchmark.stats.stats.min)
    RATES.append(Rate(what, stream.name, stream.n, stream.nbytes, best))
    benchmark.extra_info.update(
        messages=stream.n,
        payload_bytes=stream.nbytes,
        msgs_per_s=round(stream.n / best),
        mb_per_s=round(stream.nbytes / best / 1e6, 1),
    )


def best_of(fn: Callable[[Stream], int], stream: Stream, repeat: int) -> tuple[float, int]:
    """Best wall time (perf_counter) of `repeat` runs, and fn's result."""
    best = float("inf")
    result = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn(stream)
        best = min(best, time.perf_counter() - t0)
    return best, result


def machine_info() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def write_ratios(
    name: str, ratios: dict[str, float], figures: dict[str, float] | None = None
) -> Path:
    """``results/<name>.json``: the ratios against each baseline (higher is better) and
    other figures, for ``summary.py`` (latest.md and the chart)."""
    out = Path(__file__).resolve().parent / "results" / f"{name}.json"
    out.write_text(
        json.dumps(
            {
                "date": f"{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
                "machine": f"nproc={os.cpu_count()}, {platform.platform()}",
                "ratios": ratios,
                "figures": figures or {},
            },
            indent=2,
        )
        + "\n"
    )
    return out
