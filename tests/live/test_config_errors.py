"""Bad configuration through `pgwire_cdc.stream()`, against real PostgreSQL 15 and 18: each
case raises its own `pgwire_cdc.errors` class, and the message names the fix (the SQL or
the setting).

| case | error | the message says |
|---|---|---|
| wal_level = replica | ConfigError | set wal_level = logical ... restart |
| publication missing, no tables given | ConfigError | CREATE PUBLICATION ... FOR TABLE |
| table missing | ConfigError | tables not found: "public"."nope" |
| slot active in another session | SlotError | SELECT pg_terminate_backend(pid) |
| slot invalidated (wal_status = lost) | SlotError | SELECT pg_drop_replication_slot(...) |
| REPLICA IDENTITY NOTHING / no primary key | ConfigError | ALTER TABLE ... REPLICA IDENTITY FULL |
| role without REPLICATION | ConfigError | ALTER ROLE ... REPLICATION |
| role without SELECT on a table | ConfigError | GRANT SELECT ON ... TO ... |
| wrong password | ConnectionError (28P01) | check the role's password ... |
| sslmode=require, server with ssl = off | ConnectionError | turn TLS on ... or sslmode=prefer |
| proto_version newer than the server | ConfigError | pass proto_version=N or leave it unset |
| slot name PostgreSQL refuses | ConfigError | lower-case letters, digits, underscores |

The server-side cases run on clusters of their own (pg_hba.conf is edited; slots may hold
back at most 1 MB of WAL, so one can be lost for real).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pgwire_cdc
import pytest
from conftest import Database, fresh_database
from pgwire_cdc.errors import ConfigError, ConnectionError, SlotError
from psycopg import sql
from support.fault_support import PASSWORD, PASSWORD_ROLE, password_cluster
from support.server import SERVERS, PgCluster

pytestmark = pytest.mark.server


@pytest.fixture(scope="module", params=SERVERS, ids=SERVERS)
def cfg_cluster(request: pytest.FixtureRequest) -> Iterator[PgCluster]:
    with password_cluster(request.param, {"max_slot_wal_keep_size": "1MB"}) as cluster:
        yield cluster


@pytest.fixture
def cfg_db(cfg_cluster: PgCluster) -> Iterator[Database]:
    with fresh_database(cfg_cluster) as db:
        db.conn.execute(
            "CREATE TABLE t (id int PRIMARY KEY, v text); CREATE PUBLICATION pub FOR TABLE t"
        )
        db.conn.execute(sql.SQL("GRANT SELECT ON t TO {}").format(sql.Identifier(PASSWORD_ROLE)))
        yield db


def first(dsn: str, **options: Any) -> pgwire_cdc.Batch:
    options.setdefault("publication", "pub")
    options.setdefault("slot", "s1")
    options.setdefault("idle_timeout", 1)
    return next(pgwire_cdc.stream(dsn, **options))


def new_role(db: Database, attributes: str) -> str:
    name = f"Cfg role {uuid.uuid4().hex[:6]}"
    db.conn.execute(
        sql.SQL("CREATE ROLE {} " + attributes).format(sql.Identifier(name))  # type: ignore[arg-type]
    )
    return name


def dsn_as(db: Database, user: str, extra: str = "") -> str:
    quoted = user.replace("'", "\\'")
    return f"{db.dsn.replace('user=postgres', '')} user='{quoted}' {extra}"


@pytest.mark.parametrize("server", SERVERS)
def test_wal_level_not_logical(server: str) -> None:
    with PgCluster.for_server(server, settings={"wal_level": "replica"}) as cluster:
        with pytest.raises(ConfigError) as err:
            first(cluster.dsn, tables=["public.x"])
    message = str(err.value)
    assert "wal_level is 'replica'" in message
    assert "ALTER SYSTEM SET wal_level = logical) and restart the server" in message


def test_missing_publication_without_tables(cfg_db: Database) -> None:
    with pytest.raises(ConfigError) as err:
        first(cfg_db.dsn, publication="No pub")
    assert 'publication "No pub" does not exist' in str(err.value)
    assert 'CREATE PUBLICATION "No pub" FOR TABLE' in str(err.value)


def test_missing_table(cfg_db: Database) -> None:
    with pytest.raises(ConfigError) as err:
        first(cfg_db.dsn, publication="newpub", tables=["public.t", "public.nope"])
    assert 'tables not found: "public"."nope"' in str(err.value)
    # Nothing was created.
    assert cfg_db.conn.execute("SELECT count(*) FROM pg_publication").fetchone() == (1,)


def test_slot_active_in_another_session(cfg_db: Database) -> None:
    holder = pgwire_cdc.stream(cfg_db.dsn, publication="pub", slot="s1", idle_timeout=30)
    cfg_db.conn.execute("INSERT INTO t VALUES (1, 'a')")
    next(holder).ack()  # snapshot copied and acked: the permanent slot exists
    cfg_db.conn.execute("INSERT INTO t VALUES (2, 'b')")
    next(holder).ack()  # now streaming from it
    try:
        row = cfg_db.conn.execute(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 's1'"
        ).fetchone()
        assert row is not None and row[0] is not None
        with pytest.raises(SlotError) as err:
            first(cfg_db.dsn)
        message = str(err.value)
        assert f"replication slot 's1' is in use by the process with PID {row[0]}" in message
        assert f"SELECT pg_terminate_backend({row[0]})" in message
    finally:
        holder.close()  # type: ignore[attr-defined]


def test_lost_slot(cfg_db: Database) -> None:
    conn = cfg_db.conn
    conn.execute("SELECT pg_create_logical_replication_slot('behind', 'pgoutput')")
    for _ in range(30):
        conn.execute("INSERT INTO t SELECT g, repeat('w', 200) FROM generate_series(1, 3000) g")
        conn.execute("DELETE FROM t")
        conn.execute("SELECT pg_switch_wal()")
        conn.execute("CHECKPOINT")
        row = conn.execute(
            "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'behind'"
        ).fetchone()
        if row == ("lost",):
            break
    assert row == ("lost",)
    with pytest.raises(SlotError) as err:
        first(cfg_db.dsn, slot="behind")
    message = str(err.value)
    assert "replication slot 'behind' is invalidated" in message
    assert "SELECT pg_drop_replication_slot('behind')" in message
    assert "a fresh initial snapshot" in message


@pytest.mark.parametrize(
    ("setup", "state"),
    [
        ("CREATE TABLE bad (id int PRIMARY KEY); ALTER TABLE bad REPLICA IDENTITY NOTHING",
         "has REPLICA IDENTITY NOTHING"),
        ("CREATE TABLE bad (id int)", "has no primary key (REPLICA IDENTITY DEFAULT)"),
    ],
    ids=["nothing", "no-primary-key"],
)  # fmt: skip
def test_replica_identity_that_cannot_publish(cfg_db: Database, setup: str, state: str) -> None:
    cfg_db.conn.execute(setup)
    with pytest.raises(ConfigError) as err:
        first(cfg_db.dsn, publication="badpub", tables=["public.bad"])
    message = str(err.value)
    assert f'"public"."bad" {state}' in message
    assert 'ALTER TABLE "public"."bad" REPLICA IDENTITY FULL' in message


def test_role_without_replication(cfg_db: Database) -> None:
    role = new_role(cfg_db, "LOGIN")
    with pytest.raises(ConfigError) as err:
        first(dsn_as(cfg_db, role))
    quoted = sql.Identifier(role).as_string(cfg_db.conn)
    assert f"as a superuser run ALTER ROLE {quoted} REPLICATION" in str(err.value)


def test_role_without_select(cfg_db: Database) -> None:
    role = new_role(cfg_db, "LOGIN REPLICATION")
    with pytest.raises(ConfigError) as err:
        first(dsn_as(cfg_db, role))
    quoted = sql.Identifier(role).as_string(cfg_db.conn)
    assert f'GRANT SELECT ON "public"."t" TO {quoted}' in str(err.value)
    # Streaming changes alone needs no SELECT.
    cfg_db.conn.execute("INSERT INTO t VALUES (1, 'x')")
    stream = pgwire_cdc.stream(
        dsn_as(cfg_db, role), publication="pub", slot="s1", snapshot=False, idle_timeout=1
    )
    try:
        with pytest.raises(StopIteration):
            next(stream)  # the slot starts now: the insert before it is not streamed
    finally:
        stream.close()  # type: ignore[attr-defined]


def test_wrong_password(cfg_db: Database) -> None:
    with pytest.raises(ConnectionError) as err:
        first(dsn_as(cfg_db, PASSWORD_ROLE, "password=wrong-one"))
    assert err.value.sqlstate == "28P01"
    message = str(err.value)
    assert f'password authentication failed for user "{PASSWORD_ROLE}"' in message
    assert "check the role's password" in message and "wrong-one" not in message
    # The right one works.
    cfg_db.conn.execute("INSERT INTO t VALUES (1, 'a')")
    escaped = PASSWORD.replace("'", "\\'")
    assert first(dsn_as(cfg_db, PASSWORD_ROLE, f"password='{escaped}'"), idle_timeout=0.5)


def test_tls_required_but_not_offered(cfg_db: Database) -> None:
    with pytest.raises(ConnectionError) as err:
        first(cfg_db.dsn + " sslmode=require")
    message = str(err.value)
    assert "turn TLS on in the server (ssl = on" in message
    assert "or connect with sslmode=prefer" in message


def test_proto_version_newer_than_the_server(cfg_db: Database) -> None:
    version = cfg_db.cluster.version
    if version >= 160000:
        pytest.skip("PostgreSQL 16+ speaks every pgoutput version")
    with pytest.raises(ConfigError) as err:
        first(cfg_db.dsn, proto_version=4)
    message = str(err.value)
    assert "proto_version=4 needs PostgreSQL 16 or later, but the server is 15." in message
    assert "pass proto_version=3 or leave it unset" in message


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"slot": "My Slot"}, "invalid replication slot name 'My Slot': PostgreSQL allows only"),
        ({"slot": "x" * 64}, "at most 63 characters"),
        ({"proto_version": 5}, "proto_version must be 1, 2, 3 or 4, not 5"),
        ({"reconnect_attempts": -1}, "must not be negative"),
        ({"reconnect_max_delay": -1.0}, "must not be negative"),
        ({"stall_timeout": -1.0}, "0 turns stall detection off"),
        ({"spill_threshold": -1}, "0 holds nothing in memory"),
        ({"spill_dir": "/no/such/dir"}, "spill_dir '/no/such/dir' is not a writable directory"),
    ],
)
def test_options_checked_before_connecting(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        first("host=127.0.0.1 port=1", **options)


def test_malformed_dsn_does_not_echo_it() -> None:
    with pytest.raises(ConfigError) as err:
        first("host=127.0.0.1 password=abc def-secret")
    assert "def-secret" not in str(err.value)
    assert "invalid connection string" in str(err.value)


def test_unreachable_server() -> None:
    with pytest.raises(ConnectionError) as err:
        first("host=127.0.0.1 port=1 user=x dbname=y")
    assert "check that the server is running and that host and port are right" in str(err.value)
