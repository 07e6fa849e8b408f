"""pytest-benchmark: pgwire_cdc vs pypgoutput on the captured 1,000,000-insert stream.

Run with ``.venv/bin/pytest benches -q --benchmark-only`` after building the extension in
release mode (``.venv/bin/maturin develop --release``) and recording the capture
(``.venv/bin/python benches/capture_stream.py``). See bench_common.py for exactly what each
benchmark measures. pypgoutput runs on the whole text capture unless
PGWIRE_CDC_BENCH_PYPGOUTPUT_MSGS=N asks for the first N messages; pgwire_cdc is then also
measured on that prefix, so the ratio is always taken on the same messages.
"""

from __future__ import annotations

from typing import Any

import bench_common
import pytest
from bench_common import (
    ARROW,
    PARSE,
    PARSE_EVENTS,
    PYPGOUTPUT,
    PYPGOUTPUT_ARROW,
    Stream,
    record,
)

ROUNDS = 3


@pytest.fixture(scope="module")
def ppo_stream(text_stream: Stream) -> Stream:
    """The messages pypgoutput is given: the text capture or a prefix of it."""
    return text_stream.prefix(bench_common.PYPGOUTPUT_MSGS)


def _run(benchmark: Any, fn: Any, stream: Stream) -> int:
    result: int = benchmark.pedantic(fn, args=(stream,), rounds=ROUNDS, iterations=1)
    return result


def test_cross_check(release_build: str | None, ppo_stream: Stream) -> None:
    """Not timed: both libraries decode the same values from the same messages."""
    pytest.importorskip("pypgoutput.decoders")
    assert bench_common.cross_check(ppo_stream) > 0


def test_pgwire_cdc_parse_text(
    benchmark: Any, release_build: str | None, text_stream: Stream
) -> None:
    benchmark.group = "parse"
    assert _run(benchmark, bench_common.pgwire_parse, text_stream) == text_stream.n
    record(PARSE, text_stream, benchmark)


def test_pgwire_cdc_parse_binary(
    benchmark: Any, release_build: str | None, binary_stream: Stream
) -> None:
    benchmark.group = "parse"
    assert _run(benchmark, bench_common.pgwire_parse, binary_stream) == binary_stream.n
    record(PARSE, binary_stream, benchmark)


def test_pgwire_cdc_parse_events_text(
    benchmark: Any, release_build: str | None, text_stream: Stream
) -> None:
    benchmark.group = "parse + events()"
    assert _run(benchmark, bench_common.pgwire_parse_events, text_stream) == text_stream.n
    record(PARSE_EVENTS, text_stream, benchmark)


def test_pgwire_cdc_parse_text_prefix(
    benchmark: Any, release_build: str | None, text_stream: Stream, ppo_stream: Stream
) -> None:
    if ppo_stream.n == text_stream.n:
        pytest.skip("pypgoutput runs on the whole capture: test_pgwire_cdc_parse_text covers it")
    benchmark.group = "parse"
    assert _run(benchmark, bench_common.pgwire_parse, ppo_stream) == ppo_stream.n
    record(PARSE, ppo_stream, benchmark)


def test_pypgoutput_parse_text(benchmark: Any, ppo_stream: Stream) -> None:
    pytest.importorskip("pypgoutput.decoders")
    benchmark.group = "parse"
    assert _run(benchmark, bench_common.pypgoutput_parse, ppo_stream) == ppo_stream.n
    record(PYPGOUTPUT, ppo_stream, benchmark)


@pytest.mark.parametrize("mode", ["text", "binary"])
def test_pgwire_cdc_arrow(
    benchmark: Any, release_build: str | None, mode: str, request: pytest.FixtureRequest
) -> None:
    """Typed Arrow change tables, a ``take()`` every ARROW_BATCH_MSGS messages."""
    stream: Stream = request.getfixturevalue(f"{mode}_stream")
    benchmark.group = "Arrow tables"
    assert _run(benchmark, bench_common.pgwire_arrow, stream) == stream.inserts
    record(ARROW, stream, benchmark)


def test_pypgoutput_arrow_text(benchmark: Any, text_stream: Stream) -> None:
    """The baseline: pypgoutput parsing, then a pyarrow table of the values per batch."""
    pytest.importorskip("pypgoutput.decoders")
    benchmark.group = "Arrow tables"
    assert _run(benchmark, bench_common.pypgoutput_arrow, text_stream) == text_stream.inserts
    record(PYPGOUTPUT_ARROW, text_stream, benchmark)
