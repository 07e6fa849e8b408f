"""A run that fails its checks changes nothing on the server, and ``check`` says what
``stream`` would say.

For each configuration problem ``stream()`` refuses, the server's publications, their
tables, the replication slots and the tables' replica identities are the same before and
after the failed run; above all a table without a replica identity is never added to a
publication, which would make PostgreSQL reject the application's UPDATE and DELETE.
Also: a new slot with a snapshot needs two free slots (checked before, and a failed copy
is a ConfigError saying what to change). PostgreSQL 15 and 18.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pgwire_cdc
import psycopg
import pytest
from cli.test_cli import run_cli
from conftest import Database
from pgwire_cdc.errors import ConfigError, SlotError

pytestmark = pytest.mark.server

STATE_QUERIES = {
    "publications": "SELECT pubname, puballtables, pubinsert, pubupdate, pubdelete,"
    " pubtruncate FROM pg_publication ORDER BY 1",
    "published": "SELECT p.pubname, pr.prrelid::regclass::text, pr.prattrs::text,"
    " pg_get_expr(pr.prqual, pr.prrelid) FROM pg_publication_rel pr"
    " JOIN pg_publication p ON p.oid = pr.prpubid ORDER BY 1, 2",
    "slots": "SELECT slot_name, slot_type, temporary FROM pg_replication_slots ORDER BY 1",
    "identities": "SELECT relname, relreplident FROM pg_class"
    " WHERE relnamespace = 'public'::regnamespace AND relkind = 'r' ORDER BY 1",
}


def server_state(conn: psycopg.Connection[Any]) -> dict[str, list[tuple[Any, ...]]]:
    return {name: conn.execute(query).fetchall() for name, query in STATE_QUERIES.items()}


def first(dsn: str, **options: Any) -> pgwire_cdc.Batch:
    options.setdefault("publication", "pub")
    options.setdefault("slot", "safety_slot")
    options.setdefault("idle_timeout", 1)
    return next(pgwire_cdc.stream(dsn, **options))


WEAK_ROLE = "safety_weak"


def weak_dsn(db: Database) -> str:
    """A role that may replicate but owns and may read nothing (dropped by the test)."""
    db.conn.execute(f"CREATE ROLE {WEAK_ROLE} LOGIN REPLICATION PASSWORD 'weak-pw'")
    return db.dsn.replace("user=postgres", f"user={WEAK_ROLE} password=weak-pw")


def setup_tables(db: Database) -> None:
    db.conn.execute(
        "CREATE TABLE ok (id int PRIMARY KEY, v text);"
        " CREATE TABLE nopk (a int, b text); INSERT INTO nopk VALUES (1, 'x');"
        " CREATE TABLE nothing (id int PRIMARY KEY); ALTER TABLE nothing REPLICA IDENTITY NOTHING;"
        " CREATE TABLE secret (id int PRIMARY KEY)"
    )


def keyless_new_publication(db: Database) -> Callable[[], Any]:
    return lambda: first(db.dsn, publication="pubnopk", tables=["public.nopk"])


def keyless_added(db: Database) -> Callable[[], Any]:
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE ok")
    return lambda: first(db.dsn, tables=["public.ok", "public.nopk"])


def identity_nothing(db: Database) -> Callable[[], Any]:
    return lambda: first(db.dsn, tables=["public.nothing"])


def missing_table(db: Database) -> Callable[[], Any]:
    return lambda: first(db.dsn, tables=["public.ok", "public.absent"])


def missing_publication(db: Database) -> Callable[[], Any]:
    return lambda: first(db.dsn, publication="nopub")


def no_select(db: Database) -> Callable[[], Any]:
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE secret")
    dsn = weak_dsn(db)
    return lambda: first(dsn)


def no_right_to_extend(db: Database) -> Callable[[], Any]:
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE secret")
    dsn = weak_dsn(db)
    return lambda: first(dsn, tables=["public.ok"], snapshot=False)


def proto_too_new(db: Database) -> Callable[[], Any]:
    if db.conn.info.server_version >= 160000:
        pytest.skip("protocol 4 is too new only for PostgreSQL 15")
    return lambda: first(db.dsn, tables=["public.ok"], proto_version=4)


CASES = {
    "keyless table, new publication": keyless_new_publication,
    "keyless table added to a publication": keyless_added,
    "replica identity nothing": identity_nothing,
    "missing table": missing_table,
    "missing publication": missing_publication,
    "role without SELECT": no_select,
    "no right to extend the publication": no_right_to_extend,
    "proto_version newer than the server": proto_too_new,
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_run_changes_nothing(db: Database, case: str) -> None:
    setup_tables(db)
    run = CASES[case](db)
    before = server_state(db.conn)
    with pytest.raises(ConfigError):
        run()
    try:
        assert server_state(db.conn) == before
        # The application's writes go on.
        db.conn.execute("UPDATE nopk SET b = 'y'; DELETE FROM nopk")
    finally:
        db.conn.execute(f"DROP ROLE IF EXISTS {WEAK_ROLE}")


def test_slot_in_use_stops_before_the_publication_changes(db: Database) -> None:
    setup_tables(db)
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE ok")
    holder = db.connect()
    holder.execute("SELECT pg_create_logical_replication_slot('held', 'pgoutput')")
    replication = psycopg.connect(db.dsn + " replication=database", autocommit=True)
    try:
        replication.execute("SELECT 1")
        # Keep the slot active: a walsender streaming from it.
        with replication.cursor() as cur:
            cur.execute(
                "START_REPLICATION SLOT held LOGICAL 0/0"
                " (proto_version '1', publication_names 'pub')"
            )
            before = server_state(db.conn)
            with pytest.raises(SlotError, match="in use"):
                first(db.dsn, slot="held", tables=["public.ok", "public.secret"])
            assert server_state(db.conn) == before
    finally:
        replication.close()
        holder.execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
            " WHERE slot_name = 'held' AND active"
        )
        holder.close()


@contextmanager
def free_slots(db: Database, wanted: int) -> Iterator[None]:
    """Physical slots fill the server until exactly `wanted` are free."""
    row = db.conn.execute(
        "SELECT current_setting('max_replication_slots')::int"
        " - (SELECT count(*) FROM pg_replication_slots)"
    ).fetchone()
    assert row is not None
    fillers = [f"filler_{i}" for i in range(row[0] - wanted)]
    for name in fillers:
        db.conn.execute("SELECT pg_create_physical_replication_slot(%s)", (name,))
    try:
        yield
    finally:
        for name in fillers:
            db.conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))


def test_a_new_slot_with_a_snapshot_needs_two_free_slots(db: Database) -> None:
    setup_tables(db)
    with free_slots(db, 1):
        before = server_state(db.conn)
        with pytest.raises(ConfigError, match="needs 2 at once") as err:
            first(db.dsn, tables=["public.ok"])
        assert "max_replication_slots" in str(err.value)
        assert server_state(db.conn) == before
        proc = run_cli(
            "check", "--dsn", db.dsn, "--json", "--publication", "pub", "--table", "public.ok"
        )
        assert proc.returncode == 1, proc.stderr
        problems = [f for f in json.loads(proc.stdout) if f["level"] == "problem"]
        assert [p["subject"] for p in problems] == ["max_replication_slots"], problems
        assert "max_replication_slots" in problems[0]["fix"]
        # Without a snapshot one slot does.
        batches = pgwire_cdc.stream(
            db.dsn, publication="pub", slot="one", tables=["public.ok"], snapshot=False,
            idle_timeout=0.5,
        )  # fmt: skip
        # No rows; a batch that only moves the LSN (WAL written meanwhile) may come.
        assert all(batch.rows == 0 for batch in batches)
        db.conn.execute("SELECT pg_drop_replication_slot('one')")


def test_a_failed_slot_copy_says_what_to_change(db: Database) -> None:
    setup_tables(db)
    db.conn.execute("INSERT INTO ok SELECT g, 'v' FROM generate_series(1, 10) g")
    batches = pgwire_cdc.stream(db.dsn, tables=["public.ok"], slot="copied", idle_timeout=1)
    batch = next(batches)
    assert batch.snapshot
    # Another client takes the last free slot while the snapshot is being written.
    with free_slots(db, 0):
        with pytest.raises(ConfigError) as err:
            batch.ack()
            for b in batches:
                b.ack()
        message = str(err.value)
        assert "could not copy replication slot" in message
        assert "max_replication_slots" in message
        batches.close()
    assert db.conn.execute(
        "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'copied%'"
    ).fetchone() == (0,)


def test_check_reports_what_stream_would_refuse_and_changes_nothing(db: Database) -> None:
    setup_tables(db)
    before = server_state(db.conn)
    proc = run_cli(
        "check", "--dsn", db.dsn, "--json", "--publication", "pubnopk", "--table", "public.nopk"
    )
    assert proc.returncode == 1, proc.stderr
    findings = json.loads(proc.stdout)
    problems = [f for f in findings if f["level"] == "problem"]
    assert [(p["topic"], p["subject"]) for p in problems] == [("table", "public.nopk")]
    assert "REPLICA IDENTITY FULL" in problems[0]["fix"]
    assert server_state(db.conn) == before
    # The same judgement as stream().
    with pytest.raises(ConfigError) as err:
        first(db.dsn, publication="pubnopk", tables=["public.nopk"])
    assert problems[0]["message"] in str(err.value)

    # A missing publication without tables: its fix is the SQL that creates it.
    proc = run_cli("check", "--dsn", db.dsn, "--json", "--publication", "nopub")
    problems = [f for f in json.loads(proc.stdout) if f["level"] == "problem"]
    assert [(p["topic"], p["subject"]) for p in problems] == [("publication", "nopub")]
    assert problems[0]["fix"].startswith('CREATE PUBLICATION "nopub" FOR TABLE')
    # ... with tables: stream would create it, and check says so.
    proc = run_cli(
        "check", "--dsn", db.dsn, "--json", "--publication", "nopub", "--table", "public.ok"
    )
    assert proc.returncode == 0, proc.stdout
    assert any(
        f["topic"] == "publication" and "creates it" in f["message"]
        for f in json.loads(proc.stdout)
    )
    assert server_state(db.conn) == before


def test_check_sees_a_slot_in_use(db: Database) -> None:
    setup_tables(db)
    db.conn.execute("CREATE PUBLICATION pub FOR TABLE ok")
    # The slot first (a stream makes it when first asked for a batch), then a change for
    # a stream on it to deliver: while that stream holds its batch, the slot is active.
    made = pgwire_cdc.stream(db.dsn, slot="busy", snapshot=False, idle_timeout=0.1)
    assert [b.tables for b in made if b.tables] == []
    holder = db.connect()
    holder.execute("INSERT INTO ok VALUES (1, 'x')")
    batches = pgwire_cdc.stream(db.dsn, slot="busy", snapshot=False, idle_timeout=30)
    batch = next(batches)
    assert list(batch.tables) == ["public.ok"]
    batch.ack()
    try:
        proc = run_cli("check", "--dsn", db.dsn, "--json", "--publication", "pub", "--slot", "busy")
        assert proc.returncode == 1, proc.stdout
        problems = [f for f in json.loads(proc.stdout) if f["level"] == "problem"]
        assert [(p["topic"], p["subject"]) for p in problems] == [("slot", "busy")]
        assert "in use" in problems[0]["message"]
        assert "pg_terminate_backend" in problems[0]["fix"]
    finally:
        batches.close()
        holder.close()
    db.conn.execute("SELECT pg_drop_replication_slot('busy')")
