"""Durable signals (:mod:`pgwire_cdc.signals`, ``pgwire-cdc signal``): a resnapshot
signal sent while no pipeline runs is in the WAL, and the next run carries it out (the
table read again while it streams on: rows the lake lost behind the pipeline's back come
back); a signal for another slot is left alone."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from cli.test_cli import run_cli
from conftest import Database
from deltalake import DeltaTable
from live.test_stream import current_lsn
from pgwire_cdc import delta


def run(db: Database, path: Path) -> None:
    delta.run(
        db.dsn,
        path,
        publication="pub",
        slot="s1",
        until_lsn=current_lsn(db),
        deletion_vectors=False,
        chunk_rows=16,
    )


def lake_rows(path: Path) -> list[tuple[object, ...]]:
    rows = delta.read_table(delta.table_path(path, "public.t")).to_pylist()
    return sorted((r["id"], r["v"]) for r in rows)


def test_a_resnapshot_signal_sent_while_no_pipeline_runs_is_carried_out_by_the_next_run(
    db: Database, tmp_path: Path
) -> None:
    db.conn.execute(
        "CREATE TABLE t (id int PRIMARY KEY, v text);"
        " INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 50) g;"
        " CREATE PUBLICATION pub FOR TABLE t"
    )
    run(db, tmp_path)
    # The lake loses rows behind the pipeline's back (a hand-made delete).
    DeltaTable(delta.table_path(tmp_path, "public.t")).delete("id <= 10")
    assert len(lake_rows(tmp_path)) == 40
    # A signal for another pipeline's slot changes nothing here.
    other = run_cli("signal", "resnapshot", "public.t", "--slot", "other", "--dsn", db.dsn)
    assert other.returncode == 0, other.stderr
    db.conn.execute("UPDATE t SET v = 'changed' WHERE id = 20")
    run(db, tmp_path)
    assert len(lake_rows(tmp_path)) == 40
    # No pipeline runs now: the signal waits in the WAL for the next run.
    proc = run_cli("signal", "resnapshot", "public.t", "--dsn", db.dsn)
    assert proc.returncode == 0, proc.stderr
    assert "public.t" in proc.stdout
    db.conn.execute("UPDATE t SET v = 'after the signal' WHERE id = 30")
    run(db, tmp_path)
    assert lake_rows(tmp_path) == sorted(db.conn.execute("SELECT id, v FROM t").fetchall())
    assert len(lake_rows(tmp_path)) == 50


def test_a_resnapshot_deletes_the_rows_the_source_no_longer_has(
    db: Database, tmp_path: Path
) -> None:
    """Rows the lake holds that the source has not (made by hand here: a lost slot's
    deletes look the same) go with the re-copy of their key range, chunk by chunk, while
    the stream goes on; with ``--where`` only the rows of the condition are read again,
    and a row outside it whose key lies in a range a chunk read stays as it is."""
    from deltalake import write_deltalake

    db.conn.execute(
        "CREATE TABLE t (id int PRIMARY KEY, v text);"
        " INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g;"
        " CREATE PUBLICATION pub FOR TABLE t"
    )
    run(db, tmp_path)
    path = delta.table_path(tmp_path, "public.t")
    table = DeltaTable(path)
    table.update(updates={"v": "'stale'"}, predicate="id IN (5, 7, 60)")
    extra = delta.read_table(path, "id <= 3")
    ids = pa.array([0, 55 + 1000, 1001], extra.schema.field("id").type)
    write_deltalake(path, extra.set_column(0, "id", ids), mode="append")
    # Keys before the first row, between two chunks' rows, past the last one.
    db.conn.execute("DELETE FROM t WHERE id = 50")  # streamed: not the re-copy's work
    where = "id % 5 = 0"
    proc = run_cli("signal", "resnapshot", "public.t", "--where", where, "--dsn", db.dsn)
    assert proc.returncode == 0, proc.stderr
    db.conn.execute("UPDATE t SET v = 'moved on' WHERE id = 70")
    run(db, tmp_path)
    source = sorted(db.conn.execute("SELECT id, v FROM t").fetchall())
    # id 5's stale value came back (it is of the condition), 60 too; 7 is not read again
    # but stays (the source has it); the rows the source never had are gone, the
    # condition notwithstanding.
    expected = [(i, "stale" if i == 7 else v) for i, v in source]
    assert lake_rows(tmp_path) == expected
    injected = "1=1; DROP TABLE t"
    bad = run_cli("signal", "resnapshot", "public.t", "--where", injected, "--dsn", db.dsn)
    assert bad.returncode != 0 and "--where" in bad.stderr
    assert db.conn.execute("SELECT count(*) FROM t").fetchone() == (len(source),)


def test_a_pause_holds_every_later_change_until_a_resume(db: Database, tmp_path: Path) -> None:
    """``signal pause``: the changes committed before it are delivered, nothing after it,
    and the slot stays before it (a run started while paused stays paused); ``signal
    resume``: the changes since the pause follow, each once."""
    db.conn.execute(
        "CREATE TABLE t (id int PRIMARY KEY, v text);"
        " INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 5) g;"
        " CREATE PUBLICATION pub FOR TABLE t"
    )
    run(db, tmp_path)
    db.conn.execute("INSERT INTO t VALUES (6, 'before the pause')")
    assert run_cli("signal", "pause", "--dsn", db.dsn).returncode == 0
    db.conn.execute("INSERT INTO t VALUES (7, 'paused')")
    db.conn.execute("UPDATE t SET v = 'paused too' WHERE id = 1")
    run(db, tmp_path)
    held = [(i, f"v{i}") for i in range(1, 6)] + [(6, "before the pause")]
    assert lake_rows(tmp_path) == held
    slot = db.conn.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 's1'"
    ).fetchone()
    run(db, tmp_path)  # started while paused: it reads the pause again
    assert lake_rows(tmp_path) == held
    again = db.conn.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 's1'"
    ).fetchone()
    assert again == slot  # never past the pause
    bad = run_cli("signal", "pause", "public.t", "--dsn", db.dsn)
    assert bad.returncode != 0 and "names no tables" in bad.stderr
    assert run_cli("signal", "resume", "--dsn", db.dsn).returncode == 0
    db.conn.execute("DELETE FROM t WHERE id = 2")
    run(db, tmp_path)
    assert lake_rows(tmp_path) == sorted(db.conn.execute("SELECT id, v FROM t").fetchall())
    # Paused and resumed again within one run's reach: nothing is held.
    assert run_cli("signal", "pause", "--dsn", db.dsn).returncode == 0
    db.conn.execute("INSERT INTO t VALUES (8, 'between')")
    assert run_cli("signal", "resume", "--dsn", db.dsn).returncode == 0
    run(db, tmp_path)
    assert lake_rows(tmp_path) == sorted(db.conn.execute("SELECT id, v FROM t").fetchall())
