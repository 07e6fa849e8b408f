"""The lake knows its source (:mod:`pgwire_cdc.lakehouse.identity`), without a server:
what a commit records, and which recorded sources and positions a server refuses; the
sink recording the source with every commit (in memory and in Delta tables) and refusing
another one."""

from __future__ import annotations

import pytest
from pgwire_cdc.lakehouse.identity import Server, parse_history, refusal
from pgwire_cdc.lakehouse.positions import (
    NO_PROGRESS,
    Commit,
    Mark,
    Source,
    progress_of,
    source_of,
)
from pgwire_cdc.streaming import Batch
from support.lakes import KEYED, Lake, source

ONE = Source("7312000000000000001", 1, "app")
SERVER = Server(ONE, wal_end=0x5000)


def test_a_commit_records_its_source_beside_its_progress() -> None:
    both = Commit("pgwire_cdc", 10, ["k"], ONE).metadata()
    assert source_of(both) == ONE and progress_of(both) == ["k"]
    alone = Commit("pgwire_cdc", 10, NO_PROGRESS, ONE).metadata()
    assert source_of(alone) == ONE and progress_of(alone) is NO_PROGRESS
    assert Commit("pgwire_cdc", 10).metadata() is None
    assert source_of('{"pgwire_cdc": {"progress": null}}') is None
    assert source_of('{"pgwire_cdc": {"source": {"system": "1"}}}') is None
    assert source_of("not json") is None
    assert Mark(10, source=ONE).commit().source == ONE


def test_the_same_source_within_its_wal_passes() -> None:
    assert refusal("public.t", "the table t", ONE, 0x4FFF, SERVER) is None
    assert refusal("public.t", "the table t", ONE, None, SERVER) is None
    assert refusal("public.t", "the table t", None, 0x9000, SERVER) is None


@pytest.mark.parametrize(
    ("recorded", "says"),
    [
        (Source("7312000000000000002", 1, "app"), "another PostgreSQL cluster"),
        (Source("7312000000000000001", 1, "other"), "written from database 'other'"),
    ],
)
def test_another_source_is_refused(recorded: Source, says: str) -> None:
    reason = refusal("public.t", "the table t", recorded, 0x10, SERVER)
    assert reason is not None and says in reason and "drop the slot" in reason


def test_changes_past_the_wal_end_are_refused() -> None:
    reason = refusal("public.t", "the table t", ONE, 0x5000, SERVER)
    assert reason is not None
    assert "0/5000" in reason and "restored to an earlier point" in reason


def test_a_new_timeline_passes_what_it_shares_and_refuses_the_rest() -> None:
    # Timeline 1 left at 0/3000 for 2, 2 at 0/4000 for 3: this server is on 3.
    server = Server(Source(ONE.system, 3, "app"), 0x9000, ((1, 0x3000), (2, 0x4000)))
    assert refusal("t", "t", ONE, 0x2FFF, server) is None
    assert refusal("t", "t", Source(ONE.system, 2, "app"), 0x3FFF, server) is None
    assert refusal("t", "t", Source(ONE.system, 3, "app"), 0x8FFF, server) is None
    reason = refusal("t", "t", ONE, 0x3000, server)
    assert reason is not None and "left timeline 1 (0/3000)" in reason
    branch = refusal("t", "t", Source(ONE.system, 4, "app"), 0x10, server)
    assert branch is not None and "another branch" in branch


def test_timeline_history_files() -> None:
    content = "1\t0/3000158\tno recovery target specified\n\n2\t1/A0\tbefore 2026-01-01\n"
    assert parse_history(content) == ((1, 0x3000158), (2, 0x1_0000_00A0))


def test_the_sink_records_the_source_and_refuses_another(lake: Lake) -> None:
    src = source()
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 1, "name": "a", "note": "t", "n": 1})
    sink = lake.sink()
    sink.check_source(SERVER, [KEYED])
    changes = src.batch()
    sink.apply(Batch(tables=changes.tables, lsn=changes.lsn, timeline=1))
    assert lake.format.source(lake.format.ref(KEYED)) == ONE
    # A batch from a promoted standby: the commits record its timeline.
    with src.transaction() as tx:
        tx.insert(KEYED, {"id": 2, "name": "b", "note": "t", "n": 2})
    later = src.batch()
    sink.apply(Batch(tables=later.tables, lsn=later.lsn, timeline=2))
    assert lake.format.source(lake.format.ref(KEYED)) == Source(ONE.system, 2, "app")
    other = Server(Source("42", 1, "app"), wal_end=2**40)
    with pytest.raises(lake.format.error, match="another PostgreSQL cluster"):
        lake.sink().check_source(other, [KEYED])
    behind = Server(Source(ONE.system, 2, "app"), wal_end=src.commits[-1])
    with pytest.raises(lake.format.error, match="restored to an earlier point"):
        lake.sink().check_source(behind, [KEYED])
    lake.sink().check_source(Server(Source(ONE.system, 2, "app"), src.lsn), [KEYED])
