"""pgwire_cdc.ddl_capture against real PostgreSQL 15 and 18: install, status and remove, the
privilege they need, the messages the event triggers write (read back through a pgoutput
slot and pgwire_cdc's own decoder), the text of each added column's missing value against
what the table's existing rows read, DDL that goes on when the triggers fail, and the
``ddl-capture`` and ``check`` commands."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from conftest import Database
from pgwire_cdc import Decoder, admin, cli, ddl_capture, lsn_to_int
from pgwire_cdc.errors import ConfigError

PEEK = (
    "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes("
    "'s', NULL, NULL, 'proto_version', '1', 'publication_names', 'pub', 'messages', 'true')"
)


#: A table's stored description.
STORED = "SELECT description FROM pgwire_cdc.ddl_tables WHERE relid = %s"


def scalar(conn: psycopg.Connection[Any], query: Any, params: Any = None) -> Any:
    """The first column of the first row; None without a row."""
    row = conn.execute(query, params).fetchone()
    return row[0] if row else None


@dataclass
class Capture:
    """DDL capture installed in a test database, with a FOR ALL TABLES publication and a
    pgoutput slot made after it: :meth:`events` decodes what the slot holds so far."""

    db: Database
    seen: int = 0

    def events(self) -> list[Any]:
        decoder = Decoder(proto_version=1)
        for lsn, data in self.db.conn.execute(PEEK).fetchall():
            decoder.feed(bytes(data), lsn_to_int(lsn))
        return decoder.events()

    def last_transaction(self) -> list[Any]:
        """The events between the last transaction's begin and commit."""
        events = self.events()
        commits = [i for i, e in enumerate(events) if e.kind == "commit"]
        return events[commits[-2] + 1 : commits[-1]]

    def all_messages(self) -> list[dict[str, Any]]:
        out = []
        for event in self.events():
            if event.kind == "message":
                assert event.prefix == ddl_capture.DDL_PREFIX and event.transactional
                out.append(json.loads(event.content))
        return out

    def new(self) -> list[dict[str, Any]]:
        """The messages written since the last call."""
        messages = self.all_messages()
        fresh, self.seen = messages[self.seen :], len(messages)
        return fresh

    def run(self, statement: str) -> list[dict[str, Any]]:
        """Runs ``statement`` and returns the messages it wrote."""
        self.db.conn.execute(statement)
        return self.new()

    def one(self, statement: str) -> dict[str, Any]:
        """Runs ``statement`` and returns the one message it wrote."""
        fresh = self.run(statement)
        assert len(fresh) == 1, fresh
        return fresh[0]

    def oid(self, table: str) -> int:
        return int(scalar(self.db.conn, "SELECT %s::regclass::oid", (table,)))


@pytest.fixture
def capture(db: Database) -> Capture:
    ddl_capture.install_ddl_capture(db.dsn)
    db.conn.execute("CREATE PUBLICATION pub FOR ALL TABLES")
    db.conn.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
    return Capture(db)


def columns(description: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in description["columns"]}


def names(description: dict[str, Any]) -> list[tuple[int, str]]:
    return [(c["attnum"], c["name"]) for c in description["columns"]]


@contextlib.contextmanager
def role(db: Database) -> Iterator[tuple[str, str]]:
    """A fresh LOGIN role with a password (no superuser), and the DSN that logs in as it;
    dropped after, with what it was granted and owns in the test database."""
    name = f"ddl_{uuid.uuid4().hex[:8]}"
    password = f"pw-{uuid.uuid4().hex}"
    db.conn.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{password}'")
    try:
        yield name, db.dsn.replace("user=postgres", f"user={name} password={password}")
    finally:
        db.conn.execute(f"DROP OWNED BY {name}")
        db.conn.execute(f"DROP ROLE {name}")


def password_of(dsn: str) -> str:
    return dsn.split("password=", 1)[1].split()[0]


# -- install, status, remove -------------------------------------------------------------


def test_install_status_and_remove(db: Database) -> None:
    db.conn.execute("CREATE TABLE a (id int PRIMARY KEY); CREATE TABLE b (x text)")
    db.conn.execute("CREATE TEMP TABLE scratch (x int); CREATE VIEW v AS SELECT 1 AS one")
    none = ddl_capture.ddl_capture_status(db.dsn)
    assert (none.installed, none.version, none.current, none.tables_described) == (
        False,
        None,
        False,
        0,
    )

    status = admin.install_ddl_capture(db.dsn)
    assert (status.installed, status.version, status.current) == (True, 1, True)
    assert status.tables_described == 2 and status.healthy  # a, b: not the temp table, view
    assert admin.install_ddl_capture(db.dsn) == status  # again: nothing changes
    assert admin.ddl_capture_status(db.dsn) == status
    assert scalar(db.conn, "SELECT pgwire_cdc.ddl_capture_version()") == 1
    assert ddl_capture.DDL_CAPTURE_VERSION == 1
    triggers = dict(
        db.conn.execute(
            "SELECT evtname, evtevent FROM pg_event_trigger WHERE evtname LIKE 'pgwire_cdc%'"
        ).fetchall()
    )
    assert triggers == {
        "pgwire_cdc_ddl_end": "ddl_command_end",
        "pgwire_cdc_ddl_drop": "sql_drop",
        "pgwire_cdc_ddl_rewrite": "table_rewrite",
    }
    persistence = (
        "SELECT relpersistence FROM pg_class WHERE oid = 'pgwire_cdc.ddl_tables'::regclass"
    )
    assert scalar(db.conn, persistence) == "u"
    definer = db.conn.execute(
        "SELECT bool_and(prosecdef), bool_and('search_path=pg_catalog, pg_temp' = ANY (proconfig))"
        " FROM pg_proc WHERE pronamespace = 'pgwire_cdc'::regnamespace AND proname LIKE 'on_%'"
    ).fetchone()
    assert definer == (True, True)

    admin.remove_ddl_capture(db.dsn)
    assert not ddl_capture.ddl_capture_status(db.dsn).installed
    assert scalar(db.conn, "SELECT to_regnamespace('pgwire_cdc')") is None
    assert scalar(db.conn, "SELECT count(*) FROM pg_event_trigger") == 0
    admin.remove_ddl_capture(db.dsn)  # nothing left: fine

    # A schema holding something else stays.
    ddl_capture.install_ddl_capture(db.dsn)
    db.conn.execute("CREATE TABLE pgwire_cdc.mine (x int)")
    ddl_capture.remove_ddl_capture(db.dsn)
    assert scalar(db.conn, "SELECT to_regclass('pgwire_cdc.mine')::text") == "pgwire_cdc.mine"
    assert scalar(db.conn, "SELECT to_regclass('pgwire_cdc.ddl_tables')") is None


def test_install_upgrades_an_older_version_in_place(db: Database) -> None:
    db.conn.execute("CREATE TABLE a (id int PRIMARY KEY)")
    ddl_capture.install_ddl_capture(db.dsn)
    db.conn.execute(
        "CREATE OR REPLACE FUNCTION pgwire_cdc.ddl_capture_version() RETURNS integer"
        " LANGUAGE sql IMMUTABLE AS 'SELECT 0';"
        " DROP EVENT TRIGGER pgwire_cdc_ddl_rewrite;"
        " UPDATE pgwire_cdc.ddl_tables SET description = '{}'"
    )
    old = ddl_capture.ddl_capture_status(db.dsn)
    assert (old.installed, old.version, old.current) == (True, 0, False)
    assert old.missing == ("event trigger pgwire_cdc_ddl_rewrite",)

    new = ddl_capture.install_ddl_capture(db.dsn)
    assert (new.version, new.current, new.missing, new.healthy) == (1, True, (), True)
    stored = scalar(db.conn, "SELECT description FROM pgwire_cdc.ddl_tables")
    assert stored["name"] == "a"  # every description refreshed

    # A newer installation is not replaced by an older package.
    db.conn.execute(
        "CREATE OR REPLACE FUNCTION pgwire_cdc.ddl_capture_version() RETURNS integer"
        " LANGUAGE sql IMMUTABLE AS 'SELECT 99'"
    )
    with pytest.raises(ConfigError, match="version 99 is installed"):
        ddl_capture.install_ddl_capture(db.dsn)
    assert ddl_capture.ddl_capture_status(db.dsn).version == 99


def test_install_needs_the_right_to_create_event_triggers(db: Database) -> None:
    # The role may create the schema, so the event trigger is what it lacks.
    with role(db) as (name, dsn):
        db.conn.execute(f"GRANT CREATE ON DATABASE {db.name} TO {name}")
        with pytest.raises(ConfigError) as raised:
            ddl_capture.install_ddl_capture(dsn)
        message = str(raised.value)
        assert "superuser" in message and "event trigger" in message, message
        assert "ddl-capture install" in message and password_of(dsn) not in message
        assert raised.value.sqlstate == "42501"
        # One transaction: nothing was left behind.
        assert scalar(db.conn, "SELECT to_regnamespace('pgwire_cdc')") is None
        ddl_capture.install_ddl_capture(db.dsn)
        with pytest.raises(ConfigError) as removing:
            ddl_capture.remove_ddl_capture(dsn)
        assert "superuser" in str(removing.value) and password_of(dsn) not in str(removing.value)
        # Any role reads the status.
        status = ddl_capture.ddl_capture_status(dsn)
        assert status.installed and status.current and status.healthy


# -- the messages ------------------------------------------------------------------------


def test_add_column_with_a_constant_default(capture: Capture) -> None:
    db = capture.db
    db.conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'x')")
    created = capture.new()
    assert [m["command_tag"] for m in created] == ["CREATE TABLE"]
    assert created[0]["before"] is None and names(created[0]["after"]) == [(1, "id"), (2, "v")]

    m = capture.one("ALTER TABLE t ADD COLUMN c int NOT NULL DEFAULT 7")
    oid = capture.oid("t")
    assert m["version"] == 1 and m["event"] == "ddl_command_end" and m["oid"] == oid
    assert m["command_tag"] == "ALTER TABLE"
    assert m["command"] == "ALTER TABLE t ADD COLUMN c int NOT NULL DEFAULT 7"
    assert (m["rewritten"], m["rewrite_reason"]) == (False, None)
    assert "c" not in columns(m["before"])
    c = columns(m["after"])["c"]
    assert c == {
        "attnum": 3,
        "name": "c",
        "type": "integer",
        "type_oid": 23,
        "typmod": -1,
        "base_type_oid": 23,
        "base_typmod": -1,
        "not_null": True,
        "has_missing": True,
        "missing": "7",
        "default": "7",
        "generated": "",
    }
    assert m["after"]["relfilenode"] == m["before"]["relfilenode"]  # not rewritten
    assert m["after"]["replica_identity"] == "d" and m["after"]["key"] == ["id"]
    assert (m["after"]["schema"], m["after"]["name"]) == ("public", "t")


def test_rewrites_are_flagged_with_their_reason(capture: Capture) -> None:
    capture.run("CREATE TABLE t (id int PRIMARY KEY, n int); INSERT INTO t VALUES (1, 2)")

    volatile = capture.one("ALTER TABLE t ADD COLUMN r float8 DEFAULT random()")
    assert volatile["rewritten"] is True and volatile["rewrite_reason"] & 2
    assert volatile["after"]["relfilenode"] != volatile["before"]["relfilenode"]
    assert columns(volatile["after"])["r"]["has_missing"] is False

    retyped = capture.one("ALTER TABLE t ALTER COLUMN n TYPE text USING n::text")
    assert retyped["rewritten"] is True and retyped["rewrite_reason"] & 4
    assert columns(retyped["before"])["n"]["type"] == "integer"
    assert columns(retyped["after"])["n"]["type"] == "text"
    assert columns(retyped["after"])["n"]["attnum"] == 2

    # The note of a rewrite ends with its command: the next DDL is no rewrite.
    renamed = capture.one("ALTER TABLE t RENAME COLUMN n TO m")
    assert (renamed["rewritten"], renamed["rewrite_reason"]) == (False, None)
    # A binary-coercible change rewrites nothing.
    widened = capture.one("ALTER TABLE t ALTER COLUMN m TYPE varchar")
    assert widened["rewritten"] is False


def test_renamed_dropped_and_added_columns(capture: Capture) -> None:
    capture.run("CREATE TABLE t (id int PRIMARY KEY, a text, b text)")

    renamed = capture.one("ALTER TABLE t RENAME COLUMN a TO aa")
    assert names(renamed["before"]) == [(1, "id"), (2, "a"), (3, "b")]
    assert names(renamed["after"]) == [(1, "id"), (2, "aa"), (3, "b")]
    assert renamed["command_tag"] == "ALTER TABLE"

    dropped = capture.one("ALTER TABLE t DROP COLUMN b")
    assert names(dropped["after"]) == [(1, "id"), (2, "aa")]
    added = capture.one("ALTER TABLE t ADD COLUMN b text")
    # Same name, another column: a new attnum.
    assert names(added["before"]) == [(1, "id"), (2, "aa")]
    assert names(added["after"]) == [(1, "id"), (2, "aa"), (4, "b")]
    assert columns(added["after"])["b"]["has_missing"] is False


def test_renamed_and_moved_tables(capture: Capture) -> None:
    capture.run("CREATE TABLE t (id int PRIMARY KEY); CREATE SCHEMA other")
    oid = capture.oid("t")

    renamed = capture.one("ALTER TABLE t RENAME TO u")
    assert (renamed["before"]["name"], renamed["after"]["name"]) == ("t", "u")
    moved = capture.one("ALTER TABLE u SET SCHEMA other")
    assert (moved["before"]["schema"], moved["after"]["schema"]) == ("public", "other")
    assert moved["after"]["name"] == "u" and moved["oid"] == renamed["oid"] == oid


def test_replica_identity_and_keys(capture: Capture) -> None:
    db = capture.db
    db.conn.execute("CREATE TABLE t (b int NOT NULL, a int NOT NULL, c text)")
    created = capture.new()[0]
    assert (created["after"]["replica_identity"], created["after"]["key"]) == ("d", [])

    pk = capture.one("ALTER TABLE t ADD PRIMARY KEY (a, b)")
    assert (pk["before"]["key"], pk["after"]["key"]) == ([], ["b", "a"])  # attnum order
    full = capture.one("ALTER TABLE t REPLICA IDENTITY FULL")
    assert (full["after"]["replica_identity"], full["after"]["key"]) == ("f", [])
    db.conn.execute("CREATE UNIQUE INDEX t_c ON t (c)")  # an index: no message
    assert capture.new() == []
    capture.run("ALTER TABLE t ALTER COLUMN c SET NOT NULL")
    by_index = capture.one("ALTER TABLE t REPLICA IDENTITY USING INDEX t_c")
    assert (by_index["after"]["replica_identity"], by_index["after"]["key"]) == ("i", ["c"])
    nothing = capture.one("ALTER TABLE t REPLICA IDENTITY NOTHING")
    assert (nothing["after"]["replica_identity"], nothing["after"]["key"]) == ("n", [])


def test_dropped_tables(capture: Capture) -> None:
    db = capture.db
    capture.run("CREATE TABLE t (id int PRIMARY KEY, v text)")
    oid = capture.oid("t")

    m = capture.one("DROP TABLE t")
    assert m["event"] == "sql_drop" and m["command_tag"] == "DROP TABLE"
    assert m["command"] == "DROP TABLE t" and m["oid"] == oid
    assert m["after"] is None and names(m["before"]) == [(1, "id"), (2, "v")]
    assert (m["rewritten"], m["rewrite_reason"]) == (False, None)
    assert scalar(db.conn, STORED, (oid,)) is None

    # Tables dropped along with their schema: one message each.
    capture.run("CREATE SCHEMA s; CREATE TABLE s.x (id int); CREATE TABLE s.y (id int)")
    dropped = capture.run("DROP SCHEMA s CASCADE")
    assert sorted(m["before"]["name"] for m in dropped) == ["x", "y"]
    assert {m["command_tag"] for m in dropped} == {"DROP SCHEMA"}


def test_partitions_and_children_follow_their_parent(capture: Capture) -> None:
    created = capture.run(
        "CREATE TABLE p (id int, k int) PARTITION BY RANGE (id);"
        " CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (10);"
        " INSERT INTO p VALUES (1, 1)"
    )
    assert [m["after"]["name"] for m in created] == ["p", "p1"]

    parent, child = capture.run("ALTER TABLE p ADD COLUMN z int DEFAULT 3")
    assert (parent["after"]["name"], child["after"]["name"]) == ("p", "p1")
    assert parent["after"]["relfilenode"] == 0 and columns(parent["after"])["z"]["missing"] is None
    assert columns(child["after"])["z"]["missing"] == "3"
    assert child["command_tag"] == "ALTER TABLE" and child["before"]["name"] == "p1"

    parent, child = capture.run("ALTER TABLE p ALTER COLUMN k TYPE bigint")
    assert parent["rewritten"] is False  # no storage of its own
    assert child["rewritten"] is True and child["rewrite_reason"] & 4

    # ONLY the parent: a child whose description did not change writes nothing.
    capture.run("CREATE TABLE q (id int); CREATE TABLE q1 () INHERITS (q)")
    only = capture.run("ALTER TABLE ONLY q ALTER COLUMN id SET DEFAULT 5")
    assert [m["after"]["name"] for m in only] == ["q"]


def test_two_ddls_in_one_transaction_sit_among_its_rows(capture: Capture) -> None:
    db = capture.db
    capture.run("CREATE TABLE t (id int PRIMARY KEY)")
    with db.conn.transaction():
        db.conn.execute("INSERT INTO t VALUES (1)")
        db.conn.execute("ALTER TABLE t ADD COLUMN a int DEFAULT 1")
        db.conn.execute("INSERT INTO t VALUES (2, 2)")
        db.conn.execute("ALTER TABLE t RENAME COLUMN a TO b")
        db.conn.execute("INSERT INTO t VALUES (3, 3)")
    last = capture.last_transaction()
    kinds = [e.kind for e in last if e.kind in ("insert", "message")]
    assert kinds == ["insert", "message", "insert", "message", "insert"]
    ordinals = [e.tx_ordinal for e in last if e.kind in ("insert", "message")]
    assert ordinals == sorted(ordinals) and len(set(ordinals)) == 5
    first, second = (json.loads(e.content) for e in last if e.kind == "message")
    assert names(first["after"])[-1] == (2, "a") and names(second["after"])[-1] == (2, "b")
    assert second["before"] == first["after"]

    # The DDL in a released savepoint, the row after it in the transaction itself.
    with db.conn.transaction():
        with db.conn.transaction():
            db.conn.execute("ALTER TABLE t ADD COLUMN c int")
        db.conn.execute("INSERT INTO t VALUES (4, 4, 4)")
    last = capture.last_transaction()
    assert [e.kind for e in last if e.kind in ("insert", "message")] == ["message", "insert"]
    capture.new()

    # A DDL that rolls back writes nothing.
    with contextlib.suppress(psycopg.errors.DivisionByZero), db.conn.transaction():
        db.conn.execute("ALTER TABLE t ADD COLUMN gone int")
        db.conn.execute("SELECT 1 / 0")
    assert capture.new() == []
    assert "gone" not in columns(scalar(db.conn, STORED, (first["oid"],)))


def test_only_ordinary_covered_tables_write(capture: Capture) -> None:
    written = capture.run(
        "CREATE TEMP TABLE scratch (x int); ALTER TABLE scratch ADD COLUMN y int;"
        " CREATE VIEW v AS SELECT 1 AS one; CREATE SEQUENCE seq; CREATE TYPE pair AS (a int);"
        " CREATE UNLOGGED TABLE fast (x int); DROP TABLE scratch"
    )
    assert [m["after"]["name"] for m in written] == ["fast"]
    # The descriptions table is never published, not even FOR ALL TABLES.
    assert not [e for e in capture.events() if e.table and "ddl_tables" in e.table]


def test_ddl_of_a_role_without_rights_of_its_own(capture: Capture) -> None:
    db = capture.db
    with role(db) as (name, dsn):
        db.conn.execute(f"GRANT CREATE ON SCHEMA public TO {name}")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE owned (id int)")
            conn.execute("ALTER TABLE owned ADD COLUMN v text DEFAULT 'x'")
            conn.execute("DROP TABLE owned")
    tags = [m["command_tag"] for m in capture.new()]
    assert tags == ["CREATE TABLE", "ALTER TABLE", "DROP TABLE"]


#: A column type, the default it is added with, and the text existing rows read.
MISSING_VALUES = [
    ("int", "7", "7"),
    ("bigint", "-9000000000", "-9000000000"),
    ("text", "'a \"b\", c'", 'a "b", c'),
    ("text", "E'{x} \\\\ y, ''q'''", "{x} \\ y, 'q'"),
    ("text", "''", ""),
    ("numeric(10,3)", "1.5", "1.500"),
    ("numeric", "-0.000001", "-0.000001"),
    ("timestamptz", "'2026-01-01 00:00:00+00'", "2026-01-01 00:00:00+00"),
    ("timestamp", "'2026-01-01 12:30:00'", "2026-01-01 12:30:00"),
    ("date", "'2026-02-03'", "2026-02-03"),
    ("interval", "'1 day 02:00:00'", "1 day 02:00:00"),
    ("boolean", "true", "t"),
    ("boolean", "false", "f"),
    ("int[]", "'{1,2}'", "{1,2}"),
    ("text[]", "ARRAY['a,b', 'c\"d', NULL]", '{"a,b","c\\"d",NULL}'),
    ("jsonb", '\'{"k": [1, "v"]}\'', '{"k": [1, "v"]}'),
    ("bytea", "'\\x00ff'::bytea", "\\x00ff"),
    ("float8", "0.1", "0.1"),
    ("uuid", "'00000000-0000-0000-0000-00000000000a'", "00000000-0000-0000-0000-00000000000a"),
]


def test_missing_values_read_as_the_existing_rows_read_them(capture: Capture) -> None:
    db = capture.db
    capture.run("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)")
    # The DDL's own session prints dates and times otherwise: the text does not follow it.
    ddl = db.connect()
    ddl.execute("SET TimeZone = 'Asia/Kolkata'; SET DateStyle = 'German'")
    ddl.execute("SET IntervalStyle = 'sql_standard'; SET extra_float_digits = 0")
    for i, (type_, default, expected) in enumerate(MISSING_VALUES):
        ddl.execute(f"ALTER TABLE t ADD COLUMN c{i} {type_} DEFAULT {default}")
        column = columns(capture.new()[0]["after"])[f"c{i}"]
        assert column["has_missing"] is True, (type_, default)
        assert column["missing"] == expected, (type_, default)
        # The oracle: what the existing row reads, printed by the type's output function
        # (format's %s; a cast to text may print otherwise) in a pgwire_cdc session.
        assert scalar(db.conn, f"SELECT format('%s', c{i}) FROM t") == expected, (type_, default)
    ddl.close()
    # A later SET DEFAULT leaves the missing value as it was.
    m = capture.one("ALTER TABLE t ALTER COLUMN c0 SET DEFAULT 8")
    assert (columns(m["after"])["c0"]["missing"], columns(m["after"])["c0"]["default"]) == (
        "7",
        "8",
    )
    # A NULL default stores no missing value.
    n = columns(capture.one("ALTER TABLE t ADD COLUMN n int DEFAULT NULL")["after"])["n"]
    assert (n["has_missing"], n["missing"]) == (False, None)


def test_generated_and_defaulted_columns(capture: Capture) -> None:
    db = capture.db
    db.conn.execute("CREATE TABLE t (id int PRIMARY KEY, n numeric(8,2) DEFAULT 0)")
    created = columns(capture.new()[0]["after"])
    assert created["n"]["default"] == "0" and created["n"]["type"] == "numeric(8,2)"
    assert created["n"]["typmod"] == (8 << 16 | 2) + 4  # numeric's typmod: VARHDRSZ added
    m = capture.one("ALTER TABLE t ADD COLUMN g int GENERATED ALWAYS AS (id * 2) STORED")
    g = columns(m["after"])["g"]
    assert (g["generated"], g["default"]) == ("s", "(id * 2)")
    assert m["rewritten"] is True  # a stored generated column is computed for every row


def test_domains_name_their_base_type(capture: Capture) -> None:
    db = capture.db
    db.conn.execute(
        "CREATE DOMAIN short AS varchar(5); CREATE DOMAIN shorter AS short CHECK (VALUE <> '');"
        " CREATE TABLE t (id int PRIMARY KEY, a short, b shorter)"
    )
    described = columns(capture.new()[0]["after"])
    varchar = scalar(db.conn, "SELECT 'varchar'::regtype::oid")
    # Types outside pg_catalog are named with their schema, whatever the search_path.
    for name, domain in (("a", "public.short"), ("b", "public.shorter")):
        assert described[name]["type"] == domain and described[name]["typmod"] == -1
        assert (described[name]["base_type_oid"], described[name]["base_typmod"]) == (varchar, 9)
    assert (described["id"]["base_type_oid"], described["id"]["base_typmod"]) == (23, -1)


# -- DDL goes on when the triggers fail ----------------------------------------------------


@contextlib.contextmanager
def warnings_of(conn: psycopg.Connection[Any]) -> Iterator[list[str]]:
    seen: list[str] = []

    def note(diag: psycopg.errors.Diagnostic) -> None:
        if diag.severity == "WARNING" and diag.message_primary:
            seen.append(diag.message_primary)

    conn.add_notice_handler(note)
    try:
        yield seen
    finally:
        conn.remove_notice_handler(note)


@pytest.mark.parametrize(
    "breakage",
    [
        "DROP FUNCTION pgwire_cdc.describe_table(oid)",
        "DROP TABLE pgwire_cdc.ddl_tables",
        "ALTER TABLE pgwire_cdc.ddl_tables RENAME COLUMN description TO renamed",
    ],
)
def test_a_failing_trigger_never_fails_the_ddl(capture: Capture, breakage: str) -> None:
    db = capture.db
    capture.run("CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a')")
    db.conn.execute(breakage)
    with warnings_of(db.conn) as warnings:
        db.conn.execute("ALTER TABLE t ADD COLUMN c int DEFAULT 1")
        db.conn.execute("ALTER TABLE t ALTER COLUMN v TYPE varchar(5)")
        db.conn.execute("ALTER TABLE t RENAME TO u")
        db.conn.execute("DROP TABLE u")
    assert warnings and all(w.startswith("pgwire_cdc DDL capture: ") for w in warnings), warnings
    # Nothing but a drop, which needs no description, is written.
    assert all(m["event"] == "sql_drop" for m in capture.new())
    assert scalar(db.conn, "SELECT to_regclass('public.u')") is None  # the DDL all took effect
    status = ddl_capture.ddl_capture_status(db.dsn)
    assert status.installed and status.missing and not status.healthy
    # Installing again mends it.
    assert ddl_capture.install_ddl_capture(db.dsn).healthy
    db.conn.execute("CREATE TABLE w (id int)")
    assert [m["command_tag"] for m in capture.new()] == ["CREATE TABLE"]


def test_an_emptied_descriptions_table_is_reported_and_refilled(capture: Capture) -> None:
    db = capture.db
    capture.run("CREATE TABLE t (id int)")
    db.conn.execute("TRUNCATE pgwire_cdc.ddl_tables")  # as a crash restart leaves it
    status = ddl_capture.ddl_capture_status(db.dsn)
    assert status.tables_undescribed == 1 and not status.healthy
    assert capture.one("ALTER TABLE t ADD COLUMN v int")["before"] is None
    db.conn.execute("TRUNCATE pgwire_cdc.ddl_tables")
    assert ddl_capture.install_ddl_capture(db.dsn).tables_undescribed == 0


# -- the command line ----------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pgwire_cdc.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )


def ddl_finding(db: Database) -> dict[str, Any]:
    proc = run_cli("check", "--dsn", db.dsn, "--json")
    assert proc.returncode in (0, 1), proc.stderr
    (finding,) = [f for f in json.loads(proc.stdout) if f["topic"] == "ddl_capture"]
    assert finding["level"] != "problem"
    return dict(finding)


def test_the_ddl_capture_command_and_the_check_finding(db: Database) -> None:
    help_ = run_cli("ddl-capture", "--help")
    assert help_.returncode == 0 and "install,remove,status" in help_.stdout
    assert "ddl-capture" in run_cli("--help").stdout

    status = run_cli("ddl-capture", "status", "--dsn", db.dsn)
    assert status.returncode == cli.EXIT_FAILED, status.stderr
    assert "installed: no" in status.stdout
    finding = ddl_finding(db)
    assert finding["level"] == "info" and "copy the table again" in finding["message"]
    assert finding["fix"].startswith("pgwire-cdc ddl-capture install --dsn")

    installed = run_cli("ddl-capture", "install", "--dsn", db.dsn)
    assert installed.returncode == 0, installed.stderr
    assert "version 1 installed" in installed.stdout
    status = run_cli("ddl-capture", "status", "--dsn", db.dsn)
    assert status.returncode == 0, status.stderr
    assert "installed: yes" in status.stdout and "version: 1" in status.stdout
    assert "current: yes" in status.stdout
    as_json = json.loads(run_cli("ddl-capture", "status", "--dsn", db.dsn, "--json").stdout)
    assert as_json["installed"] and as_json["version"] == 1 and as_json["current"]
    assert ddl_finding(db)["level"] == "ok"

    db.conn.execute(
        "CREATE OR REPLACE FUNCTION pgwire_cdc.ddl_capture_version() RETURNS integer"
        " LANGUAGE sql IMMUTABLE AS 'SELECT 0'"
    )
    finding = ddl_finding(db)
    assert finding["level"] == "warning" and "install again" in finding["message"]
    text = run_cli("check", "--dsn", db.dsn)
    assert "WARNING [ddl_capture]" in text.stdout, text.stdout
    status = run_cli("ddl-capture", "status", "--dsn", db.dsn)
    assert status.returncode == cli.EXIT_FAILED and "current: no" in status.stdout

    removed = run_cli("ddl-capture", "remove", "--dsn", db.dsn)
    assert removed.returncode == 0 and "removed" in removed.stdout, removed.stderr
    assert ddl_finding(db)["level"] == "info"

    with role(db) as (_, dsn):
        refused = run_cli("ddl-capture", "install", "--dsn", dsn)
        assert refused.returncode == cli.EXIT_ERROR
        assert "superuser" in refused.stderr and password_of(dsn) not in refused.stderr
