"""Tables added to a pipeline later are snapshotted while streaming goes on (the
watermark chunks of ``pgwire_cdc.incremental``), against real PostgreSQL 15 and 18: a
table added by a later ``tables=`` / ``--table``, by ``ALTER PUBLICATION ... ADD TABLE``
while ``stream()`` runs, by ``resnapshot()``; with a workload on the tables throughout,
and with the consumer stopped in the middle of a table's snapshot and started again."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pgwire_cdc
import psycopg
import pytest
from conftest import Database
from pgwire_cdc import delta
from pgwire_cdc.errors import ConfigError, SlotError

pytestmark = pytest.mark.server


def source(db: Database, table: str) -> dict[int, str]:
    return dict(db.conn.execute(f"SELECT id, v FROM {table}").fetchall())  # type: ignore[arg-type]


def mirrored(path: Path, table: str) -> dict[int, str]:
    t = delta.read_table(delta.table_path(path, f"public.{table}"))
    return dict(zip(t["id"].to_pylist(), t["v"].to_pylist(), strict=True))


class Workload(threading.Thread):
    """Random updates, deletes and inserts on the given tables until stopped."""

    def __init__(self, dsn: str, tables: list[str], seed: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.tables, self.rng = dsn, tables, random.Random(seed)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.next_id = 1_000_000

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stop.is_set():
                    with conn.transaction():
                        for _ in range(self.rng.randint(1, 5)):
                            t = self.rng.choice(self.tables)
                            key = self.rng.randint(1, 1200)
                            what = self.rng.random()
                            if what < 0.6:
                                conn.execute(
                                    f"UPDATE {t} SET v = %s WHERE id = %s",  # type: ignore[arg-type]
                                    (f"w{self.rng.random():.5f}", key),
                                )
                            elif what < 0.8:
                                conn.execute(f"DELETE FROM {t} WHERE id = %s", (key,))  # type: ignore[arg-type]
                            else:
                                self.next_id += 1
                                conn.execute(
                                    f"INSERT INTO {t} VALUES (%s, 'new')"  # type: ignore[arg-type]
                                    " ON CONFLICT DO NOTHING",
                                    (self.rng.choice([key, self.next_id]),),
                                )
                    time.sleep(self.rng.choice([0, 0.001, 0.003]))
        except BaseException as e:
            self.error = e


def setup(db: Database) -> None:
    db.conn.execute(
        "CREATE TABLE lp_a (id int PRIMARY KEY, v text);"
        " CREATE TABLE lp_b (id int PRIMARY KEY, v text);"
        " INSERT INTO lp_a SELECT g, 'a' FROM generate_series(1, 1000) g;"
        " INSERT INTO lp_b SELECT g, 'b' FROM generate_series(1, 1000) g"
    )


def test_a_table_added_by_a_later_run(db: Database, tmp_path: Path) -> None:
    """The issue's reproduction, with a workload on both tables throughout."""
    setup(db)
    path = tmp_path / "m"
    common: dict[str, Any] = {"publication": "lp", "slot": "lp_slot", "idle_timeout": 1}
    delta.run(db.dsn, path, tables=["public.lp_a"], **common)
    workload = Workload(db.dsn, ["lp_a", "lp_b"], db.cluster.version % 97)
    workload.start()
    # The run ends once idle: the workload stops after a while.
    threading.Timer(4.0, workload.stop.set).start()
    try:
        stats = delta.run(
            db.dsn, path, tables=["public.lp_a", "public.lp_b"], chunk_rows=150, **common
        )
        assert stats.changes > 0
    finally:
        workload.stop.set()
        workload.join()
    assert workload.error is None, workload.error
    db.conn.execute("UPDATE lp_b SET v = 'b2' WHERE id <= 10")
    delta.run(db.dsn, path, **common)
    assert mirrored(path, "lp_b") == source(db, "lp_b")
    assert mirrored(path, "lp_a") == source(db, "lp_a")
    assert delta.DeltaSink(path).held_tables() == {"public.lp_a": None, "public.lp_b": None}


def test_alter_publication_add_table_while_streaming(db: Database, tmp_path: Path) -> None:
    setup(db)
    db.conn.execute("CREATE PUBLICATION lp FOR TABLE lp_a")
    path = tmp_path / "m"
    delta.run(db.dsn, path, publication="lp", slot="lp_slot", idle_timeout=1)
    workload = Workload(db.dsn, ["lp_a", "lp_b"], 7)
    workload.start()
    m = delta.DeltaSink(path)
    batches = pgwire_cdc.stream(
        db.dsn, publication="lp", slot="lp_slot", held_tables=m.held_tables(), chunk_rows=100,
        max_batch_ms=100,
    )  # fmt: skip
    added = False
    progress: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        for batch in batches:
            m.apply(batch)
            batch.ack()
            if batch.snapshot_progress:
                progress.append(batch.snapshot_progress)
            if not added and time.monotonic() - started > 0.5:
                db.conn.execute("ALTER PUBLICATION lp ADD TABLE lp_b")
                added = True
            if progress and progress[-1].get("public.lp_b", []) is None:
                break
            assert time.monotonic() - started < 120, "the snapshot of lp_b did not finish"
    finally:
        workload.stop.set()
        workload.join()
        batches.close()
    assert workload.error is None, workload.error
    assert len(progress) > 3  # chunk by chunk
    delta.run(db.dsn, path, publication="lp", slot="lp_slot", idle_timeout=1)
    assert mirrored(path, "lp_b") == source(db, "lp_b")
    assert mirrored(path, "lp_a") == source(db, "lp_a")


def test_a_stopped_snapshot_resumes_from_its_last_chunk(db: Database, tmp_path: Path) -> None:
    setup(db)
    path = tmp_path / "m"
    common: dict[str, Any] = {"publication": "lp", "slot": "lp_slot"}
    delta.run(db.dsn, path, tables=["public.lp_a"], idle_timeout=1, **common)
    db.conn.execute("ALTER PUBLICATION lp ADD TABLE lp_b")
    m = delta.DeltaSink(path)
    batches = pgwire_cdc.stream(db.dsn, held_tables=m.held_tables(), chunk_rows=100, **common)
    for batch in batches:
        m.apply(batch)
        batch.ack()
        if batch.snapshot_progress.get("public.lp_b"):
            break  # the consumer stops in the middle of lp_b's snapshot
    batches.close()
    resumed_after = delta.DeltaSink(path).held_tables()["public.lp_b"]
    assert resumed_after == [200] or resumed_after == [100]
    db.conn.execute("UPDATE lp_b SET v = 'late' WHERE id IN (5, 500, 999)")
    stats = delta.run(db.dsn, path, idle_timeout=1, chunk_rows=100, **common)
    assert stats.changes >= 1000 - resumed_after[0]
    assert mirrored(path, "lp_b") == source(db, "lp_b")


def test_resnapshot_reads_a_table_again(db: Database, tmp_path: Path) -> None:
    setup(db)
    path = tmp_path / "m"
    delta.run(
        db.dsn, path, publication="lp", slot="lp_slot", tables=["public.lp_b"], idle_timeout=1
    )
    with pytest.raises(SlotError, match="no stream running"):
        pgwire_cdc.resnapshot(db.dsn, "lp_slot", ["public.lp_b"])
    m = delta.DeltaSink(path)
    reads = 0
    asked: list[list[str]] = []

    def ask() -> None:
        # Once the stream runs (its slot is active), from another process's point of view.
        for _ in range(600):
            row = (
                db.connect()
                .execute("SELECT active FROM pg_replication_slots WHERE slot_name = 'lp_slot'")
                .fetchone()
            )
            if row == (True,):
                asked.append(pgwire_cdc.resnapshot(db.dsn, "lp_slot", ["lp_b"]))
                return
            time.sleep(0.1)

    asker = threading.Thread(target=ask)
    asker.start()
    batches = pgwire_cdc.stream(
        db.dsn, publication="lp", slot="lp_slot", held_tables=m.held_tables(), max_batch_ms=100,
        idle_timeout=10,
    )  # fmt: skip
    for batch in batches:
        m.apply(batch)
        batch.ack()
        for table in batch.tables.values():
            reads += table["_change_type"].to_pylist().count("read")
        if batch.snapshot_progress.get("public.lp_b", []) is None:
            break
    batches.close()
    asker.join()
    assert asked == [["public.lp_b"]]
    assert reads == 1000
    assert mirrored(path, "lp_b") == source(db, "lp_b")


def test_a_keyless_table_is_refused(db: Database, tmp_path: Path) -> None:
    db.conn.execute(
        "CREATE TABLE k (id int PRIMARY KEY, v text); CREATE TABLE bag (id int, v text);"
        " ALTER TABLE bag REPLICA IDENTITY FULL"
    )
    for batch in pgwire_cdc.stream(
        db.dsn, publication="p", slot="s", tables=["public.k"], idle_timeout=0.5
    ):
        batch.ack()
    db.conn.execute("ALTER PUBLICATION p ADD TABLE bag")
    with pytest.raises(ConfigError, match="no replica-identity key"):
        list(
            pgwire_cdc.stream(
                db.dsn, publication="p", slot="s", held_tables=["public.k"], idle_timeout=0.5
            )
        )


def when_streaming(db: Database, slot: str, sql_text: str) -> threading.Thread:
    """Runs ``sql_text`` from another connection once ``slot`` is active."""

    def run() -> None:
        with db.connect() as conn:
            for _ in range(600):
                row = conn.execute(
                    "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
                ).fetchone()
                if row == (True,):
                    conn.execute(sql_text)  # type: ignore[arg-type]
                    return
                time.sleep(0.1)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_table_created_under_for_all_tables_is_streamed_only(db: Database) -> None:
    """Created while the stream runs, so all its rows come through the stream: no copy,
    and a keyless one does not stop the stream."""
    db.conn.execute(
        "CREATE TABLE first (id int PRIMARY KEY); CREATE PUBLICATION everything FOR ALL TABLES"
    )
    for batch in pgwire_cdc.stream(db.dsn, publication="everything", slot="all", idle_timeout=0.5):
        batch.ack()
    creator = when_streaming(
        db,
        "all",
        "CREATE TABLE later (id int PRIMARY KEY, v text);"
        " INSERT INTO later SELECT g, 'x' FROM generate_series(1, 50) g;"
        " CREATE TABLE bag (v text); ALTER TABLE bag REPLICA IDENTITY FULL;"
        " INSERT INTO bag VALUES ('y')",
    )
    kinds: list[str] = []
    for batch in pgwire_cdc.stream(
        db.dsn, publication="everything", slot="all", held_tables=["public.first"], idle_timeout=3,
        max_batch_ms=100,
    ):  # fmt: skip
        for table in batch.tables.values():
            kinds += table["_change_type"].to_pylist()
        batch.ack()
    creator.join()
    assert kinds.count("insert") == 51 and "read" not in kinds


def test_an_empty_table_of_the_initial_snapshot_is_held(db: Database, tmp_path: Path) -> None:
    """A table the initial snapshot found empty (here keyless, so it could not be copied
    later) counts as held: a second run does not try to copy it."""
    db.conn.execute(
        "CREATE TABLE k (id int PRIMARY KEY); CREATE TABLE bag (v text);"
        " ALTER TABLE bag REPLICA IDENTITY FULL; INSERT INTO k VALUES (1)"
    )
    path = tmp_path / "m"
    common: dict[str, Any] = {"publication": "p", "slot": "s", "idle_timeout": 0.5}
    delta.run(db.dsn, path, tables=["public.k", "public.bag"], **common)
    assert delta.DeltaSink(path).held_tables() == {"public.k": None, "public.bag": None}
    db.conn.execute("INSERT INTO bag VALUES ('x')")
    delta.run(db.dsn, path, **common)
    assert delta.read_table(delta.table_path(path, "public.bag"))["v"].to_pylist() == ["x"]
