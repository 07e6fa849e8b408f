"""pytest configuration for the benchmarks: shared captures, and a summary with the rates.

Each benchmark test records its best round in ``bench_common.RATES``; the terminal summary
prints msgs/s, MB/s and the pgwire_cdc / pypgoutput ratio.
"""

from __future__ import annotations

from typing import Any

import bench_common
import pytest


@pytest.fixture(scope="session")
def release_build() -> str | None:
    pytest.importorskip("pgwire_cdc")
    return bench_common.check_release_build()


@pytest.fixture(scope="session")
def text_stream() -> bench_common.Stream:
    try:
        return bench_common.load_stream("text")
    except FileNotFoundError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def binary_stream() -> bench_common.Stream:
    try:
        return bench_common.load_stream("binary")
    except FileNotFoundError as e:
        pytest.skip(str(e))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    rates = bench_common.RATES
    if not rates:
        return
    tr = terminalreporter
    tr.section("decode throughput (best round)")
    for r in rates:
        tr.write_line(
            f"{r.what:<28} {r.stream:<14} {r.n:>9,} msgs {r.secs:8.3f} s"
            f" {r.msgs_per_s:>13,.0f} msgs/s {r.mb_per_s:9.1f} MB/s"
        )
    pair = bench_common.ratio(rates)
    if pair:
        ours, ppo = pair
        tr.write_line(
            f"ratio pgwire_cdc / pypgoutput, parsing alone, same {ppo.n:,} messages:"
            f" {ours.msgs_per_s / ppo.msgs_per_s:.1f}x"
        )
    arrow = {r.stream: r for r in rates if r.what == bench_common.ARROW}
    ppo_arrow = next((r for r in rates if r.what == bench_common.PYPGOUTPUT_ARROW), None)
    if ppo_arrow and "text" in arrow:
        # Rows: both count the inserts of the same whole text capture.
        tr.write_line(
            "ratio pgwire_cdc Arrow tables / pypgoutput + pyarrow table, text:"
            f" {ppo_arrow.secs / arrow['text'].secs:.1f}x"
        )
