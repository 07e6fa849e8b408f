"""The everyday migrations (``schema_workload.MIGRATIONS``) with the DDL capture
installed, against real PostgreSQL: after each step every Delta table equals its source
table, all columns — ADD COLUMN with a default (on a keyless table too), RENAME, DROP and
ADD again, ALTER TYPE ... USING and a volatile default (rewrites: the stream reads the
table again), widening, TRUNCATE and reload. Each Delta writer: delta-rs with deletion
vectors and copy-on-write (batches of a few rows, so that batches end between a DDL and
the rows around it; checked after each step), and Spark (all the migrations in one run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pgwire_cdc
import pytest
from conftest import Database
from live.test_stream import current_lsn
from pgwire_cdc import delta
from pgwire_cdc.admin import install_ddl_capture
from support.schema_workload import MIGRATIONS


def keep_through_migrations(db: Database, path: Path, *, each: bool, **options: Any) -> None:
    """Runs the steps at the source and keeps the tables: after ``each`` step (checked
    after each), or once after the first and once after all (checked then)."""
    install_ddl_capture(db.dsn)
    last = len(MIGRATIONS) - 1
    for i, step in enumerate(MIGRATIONS):
        step.run(db.conn)
        if each or i in (0, last):
            until = current_lsn(db)
            delta.run(db.dsn, path, publication="pub", slot="s1", until_lsn=until, **options)
            step.check(db.conn, lambda name: delta.read_table(delta.table_path(path, name)))


@pytest.mark.parametrize("deletion_vectors", [True, False], ids=["dv", "cow"])
def test_migrations_with_delta_rs(db: Database, tmp_path: Path, deletion_vectors: bool) -> None:
    keep_through_migrations(
        db, tmp_path, each=True, deletion_vectors=deletion_vectors, max_batch_rows=7
    )


def test_migrations_with_the_spark_writer(db: Database, tmp_path: Path, spark_in: Any) -> None:
    """Every migration in one run (a Spark MERGE costs seconds): the DDL among the rows
    of one stream, the tables equal to the source at its end."""
    spark = spark_in("classic")
    keep_through_migrations(db, tmp_path, each=False, writer="spark", spark=spark)


#: Without the DDL capture a DDL shows in the first change of its table after it: one for
#: each table, after each step.
TOUCH = "UPDATE m SET n = n WHERE id = 1; UPDATE k SET a = a WHERE a = 1"


def test_migrations_without_the_capture_in_one_stream(db: Database, tmp_path: Path) -> None:
    """Without the DDL capture, a stream that runs through the migrations learns each one
    from the catalog at the first change of its table after it: applied exactly where
    the catalog tells what happened (a default, a rename, a drop and an add), the table
    read again where it cannot (a rewrite, or the catalog moved on since)."""
    first, *rest = MIGRATIONS
    first.run(db.conn)
    sink = delta.DeltaSink(tmp_path)
    batches = pgwire_cdc.stream(
        db.dsn, publication="pub", slot="s1", idle_timeout=60, max_batch_rows=7, schema_watch=True
    )
    copying: set[str] = set()

    def catch_up() -> None:
        until = current_lsn(db)
        for batch in batches:
            sink.apply(batch)
            batch.ack()
            for name, progress in batch.snapshot_progress.items():
                (copying.add if isinstance(progress, list) else copying.discard)(name)
            # Past the initial snapshot (its reads hold the tables until it ends) and
            # any copy, and caught up.
            if batch.lsn >= until and not copying and not batch.snapshot:
                return
        raise AssertionError("the stream ended before it caught up")

    try:
        snapshot = next(batches)  # the slot exists from here on
        sink.apply(snapshot)
        snapshot.ack()
        db.conn.execute(TOUCH)
        catch_up()
        for step in rest:
            step.run(db.conn)
            db.conn.execute(TOUCH)
            catch_up()
            step.check(db.conn, lambda name: delta.read_table(delta.table_path(tmp_path, name)))
    finally:
        batches.close()


@pytest.mark.parametrize("capture", [True, False], ids=["capture", "no-capture"])
def test_a_primary_key_added_and_removed_inside_one_batch(
    db: Database, tmp_path: Path, capture: bool
) -> None:
    """A keyless ``REPLICA IDENTITY FULL`` table (a multiset) gets a primary key, then
    goes back to FULL, with changes on either side of each, all in one batch: the rows
    after each change of key are matched on the new one (a key change, a delete by key,
    a duplicate row once FULL again)."""
    if capture:
        install_ddl_capture(db.dsn)
    db.conn.execute(
        "CREATE TABLE kt (id int NOT NULL, v text); ALTER TABLE kt REPLICA IDENTITY FULL;"
        " INSERT INTO kt SELECT g, 'a' FROM generate_series(1, 5) g;"
        " CREATE PUBLICATION pub FOR TABLE kt"
    )
    delta.run(db.dsn, tmp_path, publication="pub", slot="s1", until_lsn=current_lsn(db))
    db.conn.execute(
        "UPDATE kt SET v = 'full' WHERE id = 1;"
        " ALTER TABLE kt ADD PRIMARY KEY (id), REPLICA IDENTITY DEFAULT;"
        " UPDATE kt SET v = 'keyed' WHERE id = 2; UPDATE kt SET id = 30 WHERE id = 3;"
        " DELETE FROM kt WHERE id = 4;"
        " ALTER TABLE kt REPLICA IDENTITY FULL; ALTER TABLE kt DROP CONSTRAINT kt_pkey;"
        " UPDATE kt SET v = 'full again' WHERE id = 5; INSERT INTO kt VALUES (5, 'full again')"
    )
    delta.run(db.dsn, tmp_path, publication="pub", slot="s1", until_lsn=current_lsn(db))
    got = delta.read_table(delta.table_path(tmp_path, "public.kt")).to_pylist()
    want = db.conn.execute("SELECT id, v FROM kt").fetchall()
    assert sorted((r["id"], r["v"]) for r in got) == sorted(want)
    assert len(got) == 5


def test_ddl_made_between_two_runs_without_the_capture(db: Database, tmp_path: Path) -> None:
    """Without the DDL capture, DDL made while no run streams is measured against the
    source description the lake recorded (``pgwire_cdc.source_shape``), not against the
    catalog the next run starts with: a column dropped and added again with the same name
    and type (which no Relation message shows) makes the table be read again; a dropped
    column and one dropped and added again beside it are applied exactly at the table's
    first change; a keyless table given a column with a default (its rows matched whole)
    is read again whole. All tables then equal the source, every column."""
    db.conn.execute(
        "CREATE TABLE w1 (id int PRIMARY KEY, a int, b text);"
        " CREATE TABLE w2 (id int PRIMARY KEY, a int, b text, c text);"
        " CREATE TABLE w3 (a int, b text); ALTER TABLE w3 REPLICA IDENTITY FULL;"
        " INSERT INTO w1 SELECT g, g, 'old' FROM generate_series(1, 20) g;"
        " INSERT INTO w2 SELECT g, g, 'old', 'gone' FROM generate_series(1, 20) g;"
        " INSERT INTO w3 SELECT g % 10, 'b' FROM generate_series(1, 20) g;"
        " CREATE PUBLICATION pub FOR TABLE w1, w2, w3"
    )

    def keep() -> None:
        delta.run(db.dsn, tmp_path, publication="pub", slot="s1", until_lsn=current_lsn(db))

    keep()
    db.conn.execute(
        "ALTER TABLE w1 DROP COLUMN b; ALTER TABLE w1 ADD COLUMN b text;"
        " ALTER TABLE w2 DROP COLUMN b; ALTER TABLE w2 ADD COLUMN b text;"
        " ALTER TABLE w2 DROP COLUMN c;"
        " UPDATE w2 SET a = a + 100 WHERE id = 1;"
        " ALTER TABLE w3 ADD COLUMN c int NOT NULL DEFAULT 7;"
        " UPDATE w3 SET b = 'changed' WHERE a = 3"
    )
    keep()
    keep()  # a run with nothing new changes nothing
    for name in ("w1", "w2", "w3"):
        got = delta.read_table(delta.table_path(tmp_path, f"public.{name}"))
        cur = db.conn.execute(f"SELECT * FROM {name}")
        columns = [c.name for c in cur.description or ()]
        want = sorted(cur.fetchall())
        assert sorted(got.column_names) == sorted(columns), name
        rows = sorted(tuple(r[c] for c in columns) for r in got.to_pylist())
        assert rows == want, name
