"""``pgwire_cdc.pipeline.run`` against real PostgreSQL 15 and 18 with a sink that records
what it is asked: the published tables and the slot's existence reach
``Sink.held_tables``, a ``held_tables`` or ``snapshot_reader`` given in the options wins
over the sink's, and each batch is applied, its missing tables made from their
change-table schemas, and only then acked."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pytest
from conftest import Database
from live.test_stream import current_lsn
from pgwire_cdc import pipeline
from pgwire_cdc.streaming import Batch, StreamOptions


class Recorder:
    """A sink keeping nothing but a log of the calls it gets."""

    def __init__(self, held: Mapping[str, Sequence[Any] | None] | None = None) -> None:
        self.held = held
        self.events: list[str] = []
        self.held_asked: list[tuple[list[str], bool]] = []
        self.servers: list[Any] = []
        self.reader_asked: list[StreamOptions] = []
        self.created: dict[str, pa.Schema] = {}
        self.tables_with_rows: set[str] = set()
        self.missing: list[str] = []

    def held_tables(
        self, published: Sequence[str], slot_exists: bool
    ) -> Mapping[str, Sequence[Any] | None] | None:
        self.held_asked.append((list(published), slot_exists))
        return self.held

    def held_shapes(self, published: Sequence[str]) -> None:
        return None

    def check_source(self, server: Any, published: Sequence[str]) -> None:
        self.servers.append(server)

    def snapshot_reader(
        self, dsn: str, options: StreamOptions
    ) -> Callable[[str, int, list[str]], None] | None:
        self.reader_asked.append(options)
        return None

    def finish(self) -> None:
        self.events.append("finish")

    def apply(self, batch: Batch) -> int:
        self.events.append("apply")
        ack = batch._ack
        assert ack is not None

        def recorded_ack() -> None:
            self.events.append("ack")
            ack()

        batch._ack = recorded_ack
        self.tables_with_rows.update(n for n, t in batch.tables.items() if t.num_rows)
        self.missing = [
            n
            for n, p in batch.snapshot_progress.items()
            if p is None and n not in self.tables_with_rows and n not in self.created
        ]
        return batch.rows

    def missing_tables(self) -> list[str]:
        self.events.append("missing")
        return list(self.missing)

    def create_tables(self, schemas: Mapping[str, pa.Schema]) -> None:
        self.events.append("create")
        self.created.update(schemas)
        self.missing = []


@pytest.fixture
def tables(db: Database) -> None:
    db.conn.execute(
        "CREATE TABLE full_t (id int PRIMARY KEY, v text);"
        " CREATE TABLE empty_t (id bigint PRIMARY KEY, note text, n numeric(8,2));"
        " INSERT INTO full_t SELECT g, 'v' || g FROM generate_series(1, 50) g;"
        " CREATE PUBLICATION pub FOR TABLE full_t, empty_t"
    )


def run(db: Database, sink: Recorder, **options: Any) -> list[tuple[Batch, Any]]:
    options.setdefault("until_lsn", current_lsn(db))
    options.setdefault("slot", "s1")
    seen: list[tuple[Batch, Any]] = []

    def on_batch(batch: Batch, result: Any) -> None:
        sink.events.append("on_batch")
        seen.append((batch, result))

    opts = StreamOptions(publication="pub", max_batch_rows=20, **options)
    count = pipeline.run(db.dsn, opts, sink, on_batch=on_batch)
    assert count == len(seen)
    return seen


def per_batch(events: list[str]) -> list[list[str]]:
    out: list[list[str]] = []
    for event in events:
        if event == "apply":
            out.append([])
        out[-1].append(event)
    return out


def test_each_batch_is_applied_its_tables_made_then_acked(db: Database, tables: None) -> None:
    sink = Recorder()
    seen = run(db, sink)
    assert sink.held_asked == [(["public.empty_t", "public.full_t"], False)]
    assert len(sink.reader_asked) == 1
    assert sum(rows for _, rows in seen) == 50
    # Once the stream ends, the sink is told so, after the last batch's ack.
    assert sink.events[-1] == "finish" and sink.events.count("finish") == 1
    steps = per_batch(sink.events[:-1])
    assert len(steps) == len(seen) > 1
    made = [s for s in steps if "create" in s]
    assert made == [["apply", "missing", "create", "ack", "on_batch"]]
    assert all(s == ["apply", "missing", "ack", "on_batch"] for s in steps if s not in made)
    # The empty table's schema is its change table's: its columns and their types.
    schema = sink.created["public.empty_t"]
    assert list(sink.created) == ["public.empty_t"]
    assert schema.names[:3] == ["id", "note", "n"]
    assert schema.field("id").type == pa.int64()
    assert "_commit_lsn" in schema.names


def test_the_sink_learns_the_slot_exists(db: Database, tables: None) -> None:
    run(db, Recorder())
    db.conn.execute("INSERT INTO full_t VALUES (100, 'later')")
    sink = Recorder(held={"public.full_t": None, "public.empty_t": None})
    seen = run(db, sink)
    assert sink.held_asked == [(["public.empty_t", "public.full_t"], True)]
    # Both tables held: only the new row comes, no copy.
    assert sum(rows for _, rows in seen) == 1
    assert not sink.created


def test_options_win_over_the_sink(db: Database, tables: None) -> None:
    run(db, Recorder())
    db.conn.execute("INSERT INTO full_t VALUES (100, 'later')")
    sink = Recorder(held={})
    # held_tables given: the sink is not asked, and empty_t is copied again while
    # streaming since it is not among them.
    seen = run(db, sink, held_tables={"public.full_t": None})
    assert sink.held_asked == []
    assert sum(rows for _, rows in seen) == 1
    assert any("public.empty_t" in b.snapshot_progress for b, _ in seen)
    # A snapshot_reader given is used as is: the sink is not asked for one.
    called: list[Any] = []
    sink = Recorder()
    run(db, sink, slot="s2", snapshot_reader=lambda *a: called.append(a))
    assert sink.reader_asked == []
    assert len(called) == 1 and sorted(called[0][2]) == ["public.empty_t", "public.full_t"]
