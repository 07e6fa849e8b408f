"""Snapshot chunks read while a writer keeps changing the same rows (the watermark
algorithm of ``pgwire_cdc.incremental``), against real PostgreSQL 15 and 18.

Property: the chunks' rows, reconciled with the stream's changes, applied together with
those changes in ``(_commit_lsn, _tx_ordinal)`` order, give exactly the source table; for
random workloads of updates, deletes, inserts and key changes in transactions held open
across chunk reads, near the rows being read.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pgwire_cdc
import psycopg
import pyarrow as pa
import pytest
from conftest import Database
from pgwire_cdc import catalog, incremental
from pgwire_cdc.errors import ConfigError

from live.test_stream import current_lsn

pytestmark = pytest.mark.server

ROWS = 600


class Writer(threading.Thread):
    """Random transactions on rows around the reader's position, some held open."""

    def __init__(self, dsn: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.rng = dsn, random.Random(seed)
        self.near = 1
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.transactions = 0
        self.next_id = 100_000

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stop.is_set():
                    with conn.transaction():
                        for _ in range(self.rng.randint(1, 4)):
                            self.change(conn)
                        time.sleep(self.rng.choice([0, 0, 0.001, 0.005, 0.02]))
                    self.transactions += 1
        except BaseException as e:
            self.error = e

    def change(self, conn: psycopg.Connection[Any]) -> None:
        key = max(1, self.near + self.rng.randint(-20, 80))
        what = self.rng.random()
        if what < 0.55:
            conn.execute(
                "UPDATE acc SET v = v + 1, note = %s WHERE id = %s",
                (f"n{self.rng.random():.6f}", key),
            )
        elif what < 0.7:
            conn.execute("DELETE FROM acc WHERE id = %s", (key,))
        elif what < 0.85:
            self.next_id += 1
            conn.execute(
                "INSERT INTO acc VALUES (%s, 0, 'new') ON CONFLICT DO NOTHING",
                (self.rng.choice([key, self.next_id]),),
            )
        else:  # a key change, to a key before or after the reader's position
            target = self.rng.choice(
                [self.rng.randint(1, ROWS), 200_000 + self.rng.randint(1, 10**6)]
            )
            conn.execute(
                "UPDATE acc SET id = %s WHERE id = %s AND NOT EXISTS"
                " (SELECT 1 FROM acc WHERE id = %s)",
                (target, key, target),
            )


def apply(rows: list[dict[str, Any]]) -> dict[int, tuple[Any, ...]]:
    """A copy of the table from change rows in commit order (upsert semantics)."""
    copy: dict[int, tuple[Any, ...]] = {}
    for row in rows:
        kind = row["_change_type"]
        if kind == "delete":
            copy.pop(row["id"], None)
            continue
        if kind == "truncate":
            copy.clear()
            continue
        before = row["_before"]
        if kind == "update" and before is not None and before.get("id") is not None:
            copy.pop(before["id"], None)
        copy[row["id"]] = (row["v"], row["note"])
    return copy


@pytest.mark.parametrize("seed", [1, 2])
def test_chunks_under_concurrent_writes_give_the_table(db: Database, seed: int) -> None:
    db.conn.execute("CREATE TABLE acc (id int PRIMARY KEY, v int, note text)")
    db.conn.execute(f"INSERT INTO acc SELECT g, g, 'n' || g FROM generate_series(1, {ROWS}) g")
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE acc")
    # The slot exists before the chunks: the stream carries every change made after it.
    # No rows; a batch that only moves the LSN (WAL written meanwhile) may come.
    assert all(
        batch.rows == 0
        for batch in pgwire_cdc.stream(
            db.dsn, publication="pub", slot="inc", snapshot=False, idle_timeout=0.2
        )
    )
    (table,) = catalog.tables_of_publications(db.conn, ["pub"])
    writer = Writer(db.dsn, seed)
    writer.start()
    chunks: list[incremental.Chunk] = []
    after = None
    reader = db.connect()
    try:
        while True:
            chunk = incremental.read_chunk(reader, table, after, 40, len(chunks))
            chunks.append(chunk)
            if chunk.last_key is None:
                break
            after = chunk.last_key
            writer.near = after[0]
            # At least two writer transactions per chunk read, however busy the
            # machine is.
            deadline = time.monotonic() + 10
            while writer.transactions < 2 * len(chunks) and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        writer.stop.set()
        writer.join()
        reader.close()
    assert writer.error is None, writer.error
    assert writer.transactions > 20

    changes: list[pa.Table] = []
    for batch in pgwire_cdc.stream(
        db.dsn, publication="pub", slot="inc", until_lsn=current_lsn(db)
    ):
        if "public.acc" in batch.tables:
            changes.append(batch.tables["public.acc"])
        batch.ack()
    delivered = [incremental.reconcile(c, ["id"], changes) for c in chunks]
    dropped = sum(c.rows.num_rows for c in chunks) - sum(t.num_rows for t in delivered)

    every = pa.concat_tables([*delivered, *changes], promote_options="permissive")
    order = every.sort_by([("_commit_lsn", "ascending"), ("_tx_ordinal", "ascending")])
    copy = apply(order.select(["id", "v", "note", "_change_type", "_before"]).to_pylist())
    source = {i: (v, n) for i, v, n in db.conn.execute("SELECT id, v, note FROM acc").fetchall()}
    assert copy == source
    # Each chunk row is placed inside its high watermark's WAL record.
    for chunk in chunks:
        positions = set(chunk.rows["_commit_lsn"].to_pylist())
        assert positions <= {chunk.high - 1}
        assert chunk.low < chunk.high
    # The chunks overlapped the writer: without reconcile() the copy would be wrong.
    raw = pa.concat_tables([*(c.rows for c in chunks), *changes], promote_options="permissive")
    raw_order = raw.sort_by([("_commit_lsn", "ascending"), ("_tx_ordinal", "ascending")])
    unreconciled = apply(
        raw_order.select(["id", "v", "note", "_change_type", "_before"]).to_pylist()
    )
    assert dropped > 0 or unreconciled == source


def test_visibility_of_32_bit_xids() -> None:
    v = incremental.Visibility.parse("4294967290:4294967300:4294967295,4294967298")
    # 32-bit xids map next to the snapshot, across the wraparound of the low 32 bits.
    assert v.full_xid(4294967291) == 4294967291
    assert v.full_xid(3) == 4294967299
    assert v.sees(4294967291) and v.sees(3) and v.sees(4294967000)  # before xmin
    assert not v.sees(4294967295) and not v.sees(2)  # in progress
    assert not v.sees(4) and not v.sees(10)  # at or after xmax


def test_a_table_without_a_key_is_not_read_in_chunks(db: Database) -> None:
    db.conn.execute("CREATE TABLE bag (a int, b text); ALTER TABLE bag REPLICA IDENTITY FULL")
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE bag")
    (table,) = catalog.tables_of_publications(db.conn, ["pub"])
    with pytest.raises(ConfigError, match="no replica-identity key"):
        incremental.read_chunk(db.conn, table, None, 10)
