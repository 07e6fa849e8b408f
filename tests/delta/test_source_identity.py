"""The lake knows its source, against real servers: Delta tables kept by ``delta.run`` record
the cluster, timeline and database of every commit, and a run against another cluster,
another database, or the same cluster restored to an earlier point (a copy of its data
directory taken before the lake's last changes: a replaced volume) stops before streaming
with an error that says so, leaving the tables as they were; ``verify(recover=True)`` then
brings the tables to the restored server's rows and makes a new slot there, and the
pipeline follows that server.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import Database, fresh_database
from live.test_stream import current_lsn
from pgwire_cdc import delta
from pgwire_cdc.delta.table import open_table, recorded_source
from pgwire_cdc.errors import DeltaError
from support.server import PgCluster

SETUP = (
    "CREATE TABLE acct (id int PRIMARY KEY, balance int);"
    " INSERT INTO acct SELECT g, 100 FROM generate_series(1, 50) g;"
    " CREATE PUBLICATION pub FOR TABLE acct"
)


def keep(db: Database, path: Path) -> delta.ApplyStats:
    return delta.run(db.dsn, path, publication="pub", slot="s1", until_lsn=current_lsn(db))


def recorded(path: Path) -> tuple[str, int, str]:
    found = recorded_source(open_table(str(delta.table_path(path, "public.acct")), None))
    assert found is not None
    return found.system, found.timeline, found.database


@pytest.mark.server
def test_another_cluster_or_database_is_refused(
    pg18_cluster: PgCluster, pg15_cluster: PgCluster, tmp_path: Path
) -> None:
    with fresh_database(pg18_cluster) as db:
        db.conn.execute(SETUP)
        keep(db, tmp_path)
        system, timeline, database = recorded(tmp_path)
        row = db.conn.execute("SELECT system_identifier::text FROM pg_control_system()").fetchone()
        assert row is not None and (system, timeline, database) == (row[0], 1, db.name)
        before = delta.read_table(delta.table_path(tmp_path, "public.acct")).num_rows
        for cluster in (pg15_cluster, pg18_cluster):
            with fresh_database(cluster) as other:
                other.conn.execute(SETUP)
                says = "another PostgreSQL cluster" if cluster is pg15_cluster else "database"
                with pytest.raises(DeltaError, match=says) as refused:
                    keep(other, tmp_path)
                assert "drop the slot" in str(refused.value)
                slots = other.conn.execute(
                    "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()"
                ).fetchone()
                assert slots == (0,), "nothing streamed"
        assert delta.read_table(delta.table_path(tmp_path, "public.acct")).num_rows == before


def _copy_data(cluster: PgCluster) -> PgCluster:
    """A second cluster on a copy of ``cluster``'s data directory (stopped for the copy)."""
    assert cluster.basedir is not None
    cluster.shutdown()
    copy = PgCluster(cluster.bindir, name=f"{cluster.name}-copy", settings=cluster.settings)
    copy.basedir = cluster.basedir.with_name(cluster.basedir.name + "-copy")
    # cp -a keeps the owner (the postgres OS user when run as root) and modes.
    subprocess.run(["cp", "-a", str(cluster.basedir), str(copy.basedir)], check=True)
    (copy.datadir / "postmaster.pid").unlink(missing_ok=True)
    cluster.start()
    return copy


@pytest.mark.server
def test_a_server_restored_to_an_earlier_point_is_refused(tmp_path: Path) -> None:
    cluster = PgCluster.for_server("pg18")
    copy: PgCluster | None = None
    try:
        cluster.start()
        name = cluster.create_database()
        with cluster.connect(name) as conn:
            conn.execute(SETUP)
            keep(Database(cluster, name, conn), tmp_path)
        copy = _copy_data(cluster)
        with cluster.connect(name) as conn:
            conn.execute("UPDATE acct SET balance = balance + 1 WHERE id <= 10")
            keep(Database(cluster, name, conn), tmp_path)
        held = delta.read_table(delta.table_path(tmp_path, "public.acct"))
        cluster.shutdown()
        copy.start()
        with copy.connect(name) as conn:
            restored = Database(copy, name, conn)
            with pytest.raises(DeltaError, match="restored to an earlier point") as refused:
                keep(restored, tmp_path)
            assert "public.acct" in str(refused.value) and "verify --recover" in str(refused.value)
            assert delta.read_table(delta.table_path(tmp_path, "public.acct")) == held
            # To follow the restored server instead: once its WAL is past the lake's
            # changes, the tables are brought to its rows and a new slot made there.
            conn.execute("CREATE TABLE pad AS SELECT g FROM generate_series(1, 20000) g")
            conn.execute("SELECT pg_drop_replication_slot('s1')")
            report = delta.verify(
                restored.dsn, tmp_path, publication="pub", slot="s1", recover=True
            )
            assert report.slot_made == "s1"
            assert report.tables["public.acct"].different == 10
            conn.execute("UPDATE acct SET balance = 7 WHERE id = 50")
            keep(restored, tmp_path)
            lake = delta.read_table(delta.table_path(tmp_path, "public.acct"))
            rows = conn.execute("SELECT id, balance FROM acct ORDER BY id").fetchall()
            pairs = zip(lake["id"].to_pylist(), lake["balance"].to_pylist(), strict=True)
            assert sorted(pairs) == rows
        copy.stop()
    finally:
        if copy is not None:
            copy.stop()
        cluster.stop()
