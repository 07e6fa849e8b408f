"""``delta.read(path, tables, as_of_lsn=...)`` against real PostgreSQL: money moves between
two tables (``support.bank``) while ``delta.run`` keeps them, in batches small enough to
cut transactions in two; every table read as of every point the sink recorded holds the
invariants of one moment of the source (the balances sum to the total, each balance is
what the ledger says), the newest point equals the source once the run ends, and a cut
batch still made one. The Spark writer's points, read by Spark: test_delta.py's
``test_spark_writer_tables_equal_source``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import Database
from live.test_stream import current_lsn
from pgwire_cdc import delta
from pgwire_cdc.errors import DeltaError
from pgwire_cdc.lakehouse.points import POINTS
from support.bank import SCHEMA, TABLES, Transfers, balanced, source_rows
from support.lakes import cuts


def keep(db: Database, path: Path, transfers: Transfers, **options: Any) -> list[bool]:
    """Copies the tables, then runs the pipeline while ``transfers`` write, until it is
    idle after them; returns, per batch of that run, whether it ended inside a
    transaction (as a batch does at ``max_batch_rows``)."""
    ends: list[bool] = []
    options = dict(options, publication="pub", slot="s1", as_of_every=0, max_batch_ms=100)
    delta.run(db.dsn, path, until_lsn=current_lsn(db), **options)
    transfers.start()
    try:
        delta.run(
            db.dsn,
            path,
            idle_timeout=2,
            on_batch=lambda _sink, batch, _stats: ends.append(cuts(batch)),
            **options,
        )
    finally:
        transfers.stop.set()
        transfers.join()
    assert transfers.error is None, transfers.error
    return ends


def multiset(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(sorted(r.items())) for r in rows)


def point_lsns(path: Path) -> list[int]:
    points = delta.read_table(delta.table_path(path, POINTS))
    return sorted(set(points["lsn"].to_pylist()))


def test_every_point_is_one_moment_of_the_source(db: Database, tmp_path: Path) -> None:
    db.conn.execute(SCHEMA)
    ends = keep(db, tmp_path, Transfers(db.dsn, seed=3, count=60, pause=0.02), max_batch_rows=12)
    # Batches cut transactions in two; a point stands at every batch's LSN all the same.
    assert sum(ends) >= 3
    lsns = point_lsns(tmp_path)
    assert len(lsns) >= len(ends)
    ledger_rows = []
    for lsn in lsns:
        got = delta.read(tmp_path, TABLES, as_of_lsn=lsn)
        assert got.lsn == lsn and set(got) == set(TABLES)
        balanced({name: table.to_pylist() for name, table in got.items()})
        ledger_rows.append(got["public.ledger"].num_rows)
    assert ledger_rows == sorted(ledger_rows) and ledger_rows[-1] > ledger_rows[0]
    # The newest point is the source as the run left it.
    latest = delta.read(tmp_path, TABLES)
    assert latest.lsn == lsns[-1]
    now = source_rows(db.conn)
    for name in TABLES:
        assert multiset(latest[name].to_pylist()) == multiset(now[name]), name
    # Between two points: the earlier one; a table the points do not hold: refused.
    assert delta.read(tmp_path, ["public.ledger"], as_of_lsn=lsns[1] + 1).lsn == lsns[1]
    with pytest.raises(DeltaError, match="no as-of point"):
        delta.read(tmp_path, ["public.nope"])
