"""pgwire_cdc.admin and pgwire_cdc.catalog against real PostgreSQL 15 and 18.

Server checks (wal_level, free slots, free WAL senders, REPLICATION) run on extra clusters
started with the settings under test; everything else on a fresh database per test (the
``db`` fixture). The replica-identity check is compared with PostgreSQL itself: for each
scenario, the check must raise exactly when the server rejects an UPDATE or DELETE.
"""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from conftest import Database
from pgwire_cdc import admin, catalog, lsn_to_int
from pgwire_cdc.errors import ConfigError, SlotError
from psycopg import pq, sql
from support.server import SERVERS, PgCluster


def q(conn: psycopg.Connection[Any], *parts: str) -> str:
    """A quoted identifier, as the messages spell it."""
    return sql.Identifier(*parts).as_string(conn)


def scalar(conn: psycopg.Connection[Any], query: Any, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def _special_cluster(server: str, settings: dict[str, str]) -> Iterator[PgCluster]:
    cluster = PgCluster.for_server(server, settings=settings)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module", params=SERVERS, ids=SERVERS)
def replica_cluster(request: pytest.FixtureRequest) -> Iterator[PgCluster]:
    """wal_level = replica, one replication slot, one WAL sender."""
    yield from _special_cluster(
        request.param,
        {"wal_level": "replica", "max_replication_slots": "1", "max_wal_senders": "1"},
    )


@pytest.fixture(scope="module", params=SERVERS, ids=SERVERS)
def lossy_cluster(request: pytest.FixtureRequest) -> Iterator[PgCluster]:
    """Slots may hold back at most 1 MB of WAL: a slot left behind gets invalidated."""
    yield from _special_cluster(request.param, {"max_slot_wal_keep_size": "1MB"})


@pytest.fixture
def role(db: Database) -> Iterator[str]:
    """A fresh login role (no superuser, no REPLICATION) with an awkward name."""
    name = f'cdc "user" é {uuid.uuid4().hex[:6]}'
    db.conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        db.conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        db.conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def connect_as(db: Database, user: str) -> psycopg.Connection[Any]:
    return psycopg.connect(db.dsn, user=user, autocommit=True)


# -- check_server ---------------------------------------------------------------------------


def test_check_server_ready(db: Database) -> None:
    conn = db.conn
    before = admin.check_server(conn)
    assert before.version_num == conn.info.server_version
    assert before.wal_level == "logical"
    assert before.max_replication_slots == int(scalar(conn, "SHOW max_replication_slots"))
    assert before.max_wal_senders == int(scalar(conn, "SHOW max_wal_senders"))
    assert before.is_superuser and before.user == "postgres" and before.database == db.name
    assert not before.in_recovery
    conn.execute("SELECT pg_create_logical_replication_slot('ready_slot', 'pgoutput')")
    after = admin.check_server(conn)
    assert after.slots_used == before.slots_used + 1
    assert after.free_slots == before.free_slots - 1


@pytest.mark.server
def test_check_server_wal_level_replica(replica_cluster: PgCluster) -> None:
    with replica_cluster.connect() as conn, pytest.raises(ConfigError) as err:
        admin.check_server(conn)
    message = str(err.value)
    assert (
        "wal_level is 'replica'; set wal_level = logical in postgresql.conf"
        " (or run ALTER SYSTEM SET wal_level = logical) and restart the server" in message
    )
    # Only the problem that is there.
    assert "replication slot" not in message and "WAL sender" not in message
    assert "REPLICATION attribute" not in message


@pytest.mark.server
def test_check_server_no_free_slot(replica_cluster: PgCluster) -> None:
    with replica_cluster.connect() as conn:
        conn.execute("SELECT pg_create_physical_replication_slot('filler')")
        try:
            with pytest.raises(ConfigError) as err:
                admin.check_server(conn)
            message = str(err.value)
            assert "no free replication slot: 1 of max_replication_slots = 1 are in use" in message
            assert "or raise max_replication_slots in postgresql.conf and restart" in message
            # An existing slot is reused: no new one needed.
            with pytest.raises(ConfigError) as err:
                admin.check_server(conn, new_slot=False)
            assert "replication slot" not in str(err.value)
            assert "wal_level is 'replica'" in str(err.value)
        finally:
            conn.execute("SELECT pg_drop_replication_slot('filler')")


@pytest.mark.server
def test_check_server_no_free_wal_sender(replica_cluster: PgCluster) -> None:
    walsender = pq.PGconn.connect(f"{replica_cluster.dsn} replication=true".encode())
    assert walsender.status == pq.ConnStatus.OK, walsender.get_error_message()
    try:
        with replica_cluster.connect() as conn:
            with pytest.raises(ConfigError) as err:
                admin.check_server(conn)
            message = str(err.value)
            assert "no free WAL sender: 1 of max_wal_senders = 1 are in use" in message
            assert "stop another replication client" in message
            assert "raise max_wal_senders in postgresql.conf and restart the server" in message
            with pytest.raises(ConfigError) as err:
                admin.check_server(conn, need_wal_sender=False)
            assert "WAL sender" not in str(err.value)
    finally:
        walsender.finish()


def test_check_server_role_without_replication(db: Database, role: str) -> None:
    with connect_as(db, role) as conn:
        with pytest.raises(ConfigError) as err:
            admin.check_server(conn)
        message = str(err.value)
        quoted = q(conn, role)
        assert quoted.startswith('"cdc ""user"" é')
        assert f"role {quoted} has neither the REPLICATION attribute nor superuser" in message
        assert f"as a superuser run ALTER ROLE {quoted} REPLICATION" in message
        assert "wal_level" not in message
    db.conn.execute(sql.SQL("ALTER ROLE {} REPLICATION").format(sql.Identifier(role)))
    with connect_as(db, role) as conn:
        info = admin.check_server(conn)
    assert info.has_replication and not info.is_superuser and info.user == role


# -- table names ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("public.t", ("public", "t")),
        ("Orders", (None, "Orders")),
        ("My Schema.Tab le", ("My Schema", "Tab le")),
        ('"my.schema"."a""b"', ("my.schema", 'a"b')),
        ('s."a.b"', ("s", "a.b")),
        ('"x"', (None, "x")),
        ("ünï.ÇÖDÉ", ("ünï", "ÇÖDÉ")),
        (("a.b", 'c"d'), ("a.b", 'c"d')),
    ],
)
def test_parse_table_name(spec: admin.TableSpec, parsed: tuple[str | None, str]) -> None:
    assert admin.parse_table_name(spec) == parsed


@pytest.mark.parametrize(
    "spec", ["a.b.c", "", "a.", ".a", '"a', 'a"b', '"a"b', '"a".', ("a",), ("a", "")]
)
def test_parse_table_name_rejects(spec: Any) -> None:
    with pytest.raises(ValueError):
        admin.parse_table_name(spec)


# -- ensure_publication ---------------------------------------------------------------------

ODD_SCHEMA = 'Sch.ema "x" ü'


def _create_odd_tables(conn: psycopg.Connection[Any]) -> None:
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(ODD_SCHEMA)))
    for schema, name in [
        (ODD_SCHEMA, "Tab le"),
        (ODD_SCHEMA, 'a.b"c'),
        ("public", "ÜNÏ"),
        ("public", "UPPER"),
        ("public", "upper"),
    ]:
        conn.execute(
            sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(
                sql.Identifier(schema, name)
            )
        )


def _explicit_members(conn: psycopg.Connection[Any], publication: str) -> set[str]:
    return {
        f"{s}.{t}"
        for s, t in conn.execute(
            "SELECT n.nspname, c.relname FROM pg_publication_rel pr"
            " JOIN pg_publication p ON p.oid = pr.prpubid"
            " JOIN pg_class c ON c.oid = pr.prrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE p.pubname = %s",
            (publication,),
        ).fetchall()
    }


def test_create_publication_with_odd_identifiers(db: Database) -> None:
    conn = db.conn
    _create_odd_tables(conn)
    pub = 'pub "x".y É'
    tables = admin.ensure_publication(
        conn,
        pub,
        ['"Sch.ema ""x"" ü"."Tab le"', (ODD_SCHEMA, 'a.b"c'), "ÜNÏ", "public.UPPER"],
    )
    expected = [f"{ODD_SCHEMA}.Tab le", f'{ODD_SCHEMA}.a.b"c', "public.UPPER", "public.ÜNÏ"]
    assert tables == sorted(expected)
    assert _explicit_members(conn, pub) == set(expected)  # "upper" (lower case) not added
    assert scalar(conn, "SELECT pubname FROM pg_publication") == pub


def test_bare_name_follows_search_path(db: Database) -> None:
    conn = db.conn
    conn.execute("CREATE SCHEMA first; CREATE SCHEMA second")
    conn.execute("CREATE TABLE second.t (id int PRIMARY KEY)")
    conn.execute("CREATE TABLE first.t (id int PRIMARY KEY)")
    conn.execute("SET search_path = second, first")
    assert admin.ensure_publication(conn, "p", ["t"]) == ["second.t"]
    conn.execute("SET search_path = first, second")
    assert admin.ensure_publication(conn, "p", ["t"]) == ["first.t", "second.t"]


def test_extend_publication_never_drops(db: Database) -> None:
    conn = db.conn
    conn.execute("CREATE TABLE t1 (id int PRIMARY KEY); CREATE TABLE t2 (id int PRIMARY KEY)")
    conn.execute("CREATE TABLE t3 (id int PRIMARY KEY)")
    assert admin.ensure_publication(conn, "p", ["public.t1"]) == ["public.t1"]
    assert admin.ensure_publication(conn, "p", ["public.t2"]) == ["public.t1", "public.t2"]
    # Already there: nothing to do, no "already member" error.
    assert admin.ensure_publication(conn, "p", ["public.t1", "t2"]) == ["public.t1", "public.t2"]
    assert admin.ensure_publication(conn, "p", None) == ["public.t1", "public.t2"]
    assert admin.ensure_publication(conn, "p", []) == ["public.t1", "public.t2"]
    assert _explicit_members(conn, "p") == {"public.t1", "public.t2"}
    conn.execute("ALTER PUBLICATION p ADD TABLE t3")
    assert admin.ensure_publication(conn, "p", ["t1"]) == ["public.t1", "public.t2", "public.t3"]


def test_missing_publication_without_tables(db: Database) -> None:
    for tables in (None, []):
        with pytest.raises(ConfigError) as err:
            admin.ensure_publication(db.conn, "Nope", tables)
        message = str(err.value)
        assert 'publication "Nope" does not exist; pass tables=[...]' in message
        assert 'CREATE PUBLICATION "Nope" FOR TABLE' in message
    assert scalar(db.conn, "SELECT count(*) FROM pg_publication") == 0
    with pytest.raises(ConfigError, match='publication "Nope" does not exist'):
        admin.publication_tables(db.conn, "Nope")


def test_missing_tables_are_named_and_nothing_changes(db: Database) -> None:
    conn = db.conn
    conn.execute("CREATE TABLE t1 (id int PRIMARY KEY); CREATE TABLE t2 (id int PRIMARY KEY)")
    conn.execute('CREATE TABLE "Mixed" (id int PRIMARY KEY)')
    with pytest.raises(ConfigError) as err:
        admin.ensure_publication(conn, "p", ["t1", "public.nope", ("ghost schema", "x.y")])
    message = str(err.value)
    assert 'tables not found: "public"."nope", "ghost schema"."x.y";' in message
    assert '"t1"' not in message
    assert scalar(conn, "SELECT count(*) FROM pg_publication") == 0
    # Exact names: "public.mixed" is not the table "Mixed".
    with pytest.raises(ConfigError, match=re.escape('tables not found: "public"."mixed"')):
        admin.ensure_publication(conn, "p", ["public.mixed"])
    admin.ensure_publication(conn, "p", ["t1"])
    with pytest.raises(ConfigError, match=r'tables not found: "nope"'):
        admin.ensure_publication(conn, "p", ["t2", "nope"])
    assert admin.publication_tables(conn, "p") == ["public.t1"]  # t2 not added either


def test_only_tables_can_be_published(db: Database) -> None:
    conn = db.conn
    conn.execute("CREATE TABLE t (id int PRIMARY KEY); CREATE VIEW v AS SELECT * FROM t")
    conn.execute("CREATE SEQUENCE s")
    with pytest.raises(ConfigError) as err:
        admin.ensure_publication(conn, "p", ["t", "v", "public.s"])
    assert 'not tables: "public"."v" (view), "public"."s" (sequence)' in str(err.value)
    assert scalar(conn, "SELECT count(*) FROM pg_publication") == 0


def test_for_all_tables_publication(db: Database) -> None:
    conn = db.conn
    conn.execute("CREATE TABLE t1 (id int PRIMARY KEY); CREATE TABLE t2 (id int PRIMARY KEY)")
    conn.execute("CREATE PUBLICATION everything FOR ALL TABLES")
    assert admin.ensure_publication(conn, "everything", ["t1"]) == ["public.t1", "public.t2"]
    assert admin.ensure_publication(conn, "everything", None) == ["public.t1", "public.t2"]
    assert _explicit_members(conn, "everything") == set()
    with pytest.raises(ConfigError, match='tables not found: "gone"'):
        admin.ensure_publication(conn, "everything", ["gone"])


def test_tables_in_schema_publication(db: Database) -> None:
    conn = db.conn
    conn.execute('CREATE SCHEMA "S 1"')
    conn.execute('CREATE TABLE "S 1".a (id int PRIMARY KEY); CREATE TABLE b (id int PRIMARY KEY)')
    conn.execute('CREATE PUBLICATION sp FOR TABLES IN SCHEMA "S 1"')
    assert admin.ensure_publication(conn, "sp", ['"S 1".a']) == ["S 1.a"]
    assert _explicit_members(conn, "sp") == set()  # covered by the schema: not added
    assert admin.ensure_publication(conn, "sp", ['"S 1".a', "b"]) == ["S 1.a", "public.b"]
    assert _explicit_members(conn, "sp") == {"public.b"}


def test_partitioned_tables_and_publish_via_root(db: Database) -> None:
    conn = db.conn
    conn.execute("CREATE TABLE pt (id int PRIMARY KEY, v int) PARTITION BY RANGE (id)")
    conn.execute("CREATE TABLE pt_1 PARTITION OF pt FOR VALUES FROM (0) TO (10)")
    conn.execute("CREATE TABLE pt_2 PARTITION OF pt FOR VALUES FROM (10) TO (20)")
    conn.execute("CREATE TABLE other (id int PRIMARY KEY)")
    # Without publish_via_partition_root the leaves are what pgoutput names.
    assert admin.ensure_publication(conn, "leaves", ["pt"]) == ["public.pt_1", "public.pt_2"]
    # A partition of a published partitioned table is already published.
    assert admin.ensure_publication(conn, "leaves", ["pt_2"]) == ["public.pt_1", "public.pt_2"]
    assert _explicit_members(conn, "leaves") == {"public.pt"}
    conn.execute("CREATE PUBLICATION root FOR TABLE other WITH (publish_via_partition_root)")
    assert admin.ensure_publication(conn, "root", ["pt"]) == ["public.other", "public.pt"]


def test_publication_privilege_errors(db: Database, role: str) -> None:
    conn = db.conn
    conn.execute("CREATE TABLE owned_by_postgres (id int PRIMARY KEY)")
    role_q = q(conn, role)
    db_q = q(conn, db.name)
    with connect_as(db, role) as rconn:
        with pytest.raises(ConfigError) as err:
            admin.ensure_publication(rconn, "rp", ["owned_by_postgres"])
        message = str(err.value)
        assert message.startswith('permission denied to create publication "rp": ')
        assert f"GRANT CREATE ON DATABASE {db_q} TO {role_q}" in message
        assert 'CREATE PUBLICATION "rp" FOR TABLE "public"."owned_by_postgres"' in message

        conn.execute(
            sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
                sql.Identifier(db.name), sql.Identifier(role)
            )
        )
        with pytest.raises(ConfigError) as err:
            admin.ensure_publication(rconn, "rp", ["owned_by_postgres"])
        assert "must be owner of table owned_by_postgres" in str(err.value)
        assert scalar(conn, "SELECT count(*) FROM pg_publication") == 0

        # Its own table: fine.
        conn.execute(sql.SQL("CREATE TABLE mine (id int PRIMARY KEY)"))
        conn.execute(sql.SQL("ALTER TABLE mine OWNER TO {}").format(sql.Identifier(role)))
        assert admin.ensure_publication(rconn, "rp", ["mine"]) == ["public.mine"]

        # Someone else's publication.
        conn.execute("CREATE PUBLICATION theirs FOR TABLE owned_by_postgres")
        with pytest.raises(ConfigError) as err:
            admin.ensure_publication(rconn, "theirs", ["mine"])
        message = str(err.value)
        assert message.startswith('permission denied to add tables to publication "theirs": ')
        assert "must be owner of publication theirs" in message
        assert 'ALTER PUBLICATION "theirs" ADD TABLE "public"."mine"' in message
    assert admin.publication_tables(conn, "theirs") == ["public.owned_by_postgres"]


def test_publication_ddl_errors_become_config_errors(db: Database) -> None:
    db.conn.execute("CREATE UNLOGGED TABLE scratch (id int PRIMARY KEY)")
    with pytest.raises(ConfigError) as err:
        admin.ensure_publication(db.conn, "p", ["scratch"])
    assert 'could not create publication "p"' in str(err.value)
    assert "unlogged" in str(err.value).lower()


# -- replica identity -----------------------------------------------------------------------


def test_replica_identities(db: Database) -> None:
    conn = db.conn
    conn.execute("CREATE TABLE pk (b int, a int, c text, PRIMARY KEY (b, a))")
    conn.execute("CREATE TABLE nopk (a int, c text)")
    conn.execute("CREATE TABLE idx (a int, u int NOT NULL, c text)")
    conn.execute('CREATE UNIQUE INDEX "idx U" ON idx (u)')
    conn.execute('ALTER TABLE idx REPLICA IDENTITY USING INDEX "idx U"')
    conn.execute("CREATE TABLE full_t (a int PRIMARY KEY, c text, d int)")
    conn.execute("ALTER TABLE full_t DROP COLUMN d, REPLICA IDENTITY FULL")
    conn.execute("CREATE TABLE nothing (a int PRIMARY KEY, c text)")
    conn.execute("ALTER TABLE nothing REPLICA IDENTITY NOTHING")
    conn.execute("CREATE TABLE gone (a int, u int NOT NULL)")
    conn.execute("CREATE UNIQUE INDEX gone_u ON gone (u)")
    conn.execute("ALTER TABLE gone REPLICA IDENTITY USING INDEX gone_u")
    conn.execute("DROP INDEX gone_u")
    conn.execute('CREATE TABLE "Odd.Name" ("Key Col" int PRIMARY KEY)')

    got = {
        r.table: r
        for r in admin.replica_identities(
            conn, ["pk", "nopk", "idx", "full_t", "nothing", "gone", '"Odd.Name"']
        )
    }
    assert list(got) == [
        "public.pk",
        "public.nopk",
        "public.idx",
        "public.full_t",
        "public.nothing",
        "public.gone",
        "public.Odd.Name",
    ]
    pk = got["public.pk"]
    assert (pk.identity, pk.key_columns, pk.has_primary_key) == ("default", ["b", "a"], True)
    assert pk.index_name == "pk_pkey" and pk.supports_update_delete
    assert "primary key (b, a)" in pk.meaning
    assert "carries them only when it changes a key column" in pk.meaning

    nopk = got["public.nopk"]
    assert (nopk.identity, nopk.key_columns, nopk.has_primary_key) == ("default", [], False)
    assert not nopk.supports_update_delete and nopk.index_name is None
    assert "without a primary key" in nopk.meaning and "rejects UPDATE and DELETE" in nopk.meaning

    idx = got["public.idx"]
    assert (idx.identity, idx.key_columns, idx.has_primary_key) == ("index", ["u"], False)
    assert idx.index_name == "idx U" and "replica identity index idx U (u)" in idx.meaning

    full = got["public.full_t"]
    assert (full.identity, full.key_columns) == ("full", ["a", "c"])  # dropped column gone
    assert full.supports_update_delete and "full old row" in full.meaning

    nothing = got["public.nothing"]
    assert (nothing.identity, nothing.key_columns, nothing.has_primary_key) == (
        "nothing",
        [],
        True,
    )
    assert not nothing.supports_update_delete and "NOTHING" in nothing.meaning

    gone = got["public.gone"]
    assert (gone.identity, gone.key_columns, gone.supports_update_delete) == ("index", [], False)
    assert "index no longer exists" in gone.meaning

    odd = got["public.Odd.Name"]
    assert (odd.schema, odd.name, odd.key_columns) == ("public", "Odd.Name", ["Key Col"])


@dataclass
class IdentityScenario:
    name: str
    setup: list[str]  # {t}, {t1}, {t2}, {idx} are quoted identifiers
    publication: str  # {p}, {t}
    min_version: int = 150000
    culprit: str | None = None  # the table PostgreSQL names (default: the scenario table)
    partitioned: bool = False
    extra: dict[str, str] = field(default_factory=dict)


_BASIC = "CREATE TABLE {t} (id int PRIMARY KEY, v int, w int)"
_NOPK = "CREATE TABLE {t} (id int, v int, w int)"
_INDEX = [
    "CREATE TABLE {t} (id int NOT NULL, v int, w int)",
    "CREATE UNIQUE INDEX {idx} ON {t} (id)",
    "ALTER TABLE {t} REPLICA IDENTITY USING INDEX {idx}",
]
_PARTITIONED = [
    "CREATE TABLE {t} (id int PRIMARY KEY, v int, w int) PARTITION BY RANGE (id)",
    "CREATE TABLE {t1} PARTITION OF {t} FOR VALUES FROM (0) TO (10)",
    "CREATE TABLE {t2} PARTITION OF {t} FOR VALUES FROM (10) TO (20)",
]
_FOR = "CREATE PUBLICATION {p} FOR TABLE {t}"

IDENTITY_SCENARIOS = [
    IdentityScenario("pk", [_BASIC], _FOR),
    IdentityScenario("nothing", [_BASIC, "ALTER TABLE {t} REPLICA IDENTITY NOTHING"], _FOR),
    IdentityScenario("no pk", [_NOPK], _FOR),
    IdentityScenario("no pk, insert only", [_NOPK], _FOR + " WITH (publish = 'insert')"),
    IdentityScenario("no pk, delete only", [_NOPK], _FOR + " WITH (publish = 'delete')"),
    IdentityScenario(
        "nothing, update+truncate",
        [_BASIC, "ALTER TABLE {t} REPLICA IDENTITY NOTHING"],
        _FOR + " WITH (publish = 'update, truncate')",
    ),
    IdentityScenario("index", _INDEX, _FOR),
    IdentityScenario("index dropped", [*_INDEX, "DROP INDEX {idx}"], _FOR),
    IdentityScenario("full", [_BASIC, "ALTER TABLE {t} REPLICA IDENTITY FULL"], _FOR),
    IdentityScenario("full no pk", [_NOPK, "ALTER TABLE {t} REPLICA IDENTITY FULL"], _FOR),
    IdentityScenario("column list without key", [_BASIC], _FOR + " (v, w)"),
    IdentityScenario("column list with key", [_BASIC], _FOR + " (id, v)"),
    IdentityScenario("index, list without it", _INDEX, _FOR + " (v, w)"),
    IdentityScenario("row filter on non-key", [_BASIC], _FOR + " WHERE (v > 0)"),
    IdentityScenario("row filter on key", [_BASIC], _FOR + " (id, w) WHERE (id > 0)"),
    IdentityScenario(
        "full + column list",
        [_BASIC, "ALTER TABLE {t} REPLICA IDENTITY FULL"],
        _FOR + " (id, v)",
    ),
    IdentityScenario(
        "full + complete column list",
        [_BASIC, "ALTER TABLE {t} REPLICA IDENTITY FULL"],
        _FOR + " (id, v, w)",
    ),
    IdentityScenario(
        "full + row filter",
        [_NOPK, "ALTER TABLE {t} REPLICA IDENTITY FULL"],
        _FOR + " WHERE (v > 0 AND w IS NULL)",
    ),
    IdentityScenario(
        "full + generated",
        [
            "CREATE TABLE {t} (id int PRIMARY KEY, v int,"
            " w int GENERATED ALWAYS AS (v * 2) STORED)",
            "ALTER TABLE {t} REPLICA IDENTITY FULL",
        ],
        _FOR,
    ),
    IdentityScenario(
        "full + generated, published",
        [
            "CREATE TABLE {t} (id int PRIMARY KEY, v int,"
            " w int GENERATED ALWAYS AS (v * 2) STORED)",
            "ALTER TABLE {t} REPLICA IDENTITY FULL",
        ],
        _FOR + " WITH (publish_generated_columns = stored)",
        min_version=180000,
    ),
    IdentityScenario(
        "generated primary key",
        ["CREATE TABLE {t} (id int, v int, w int GENERATED ALWAYS AS (id * 2) STORED PRIMARY KEY)"],
        _FOR,
    ),
    IdentityScenario(
        "generated primary key in column list",
        ["CREATE TABLE {t} (id int, v int, w int GENERATED ALWAYS AS (id * 2) STORED PRIMARY KEY)"],
        _FOR + " (w, v)",
        min_version=180000,
    ),
    IdentityScenario(
        "full + virtual generated",
        [
            "CREATE TABLE {t} (id int PRIMARY KEY, v int,"
            " w int GENERATED ALWAYS AS (v * 2) VIRTUAL)",
            "ALTER TABLE {t} REPLICA IDENTITY FULL",
        ],
        _FOR + " WITH (publish_generated_columns = stored)",
        min_version=180000,
    ),
    IdentityScenario("partitions", _PARTITIONED, _FOR, partitioned=True),
    IdentityScenario(
        "partition NOTHING via root",
        [*_PARTITIONED, "ALTER TABLE {t2} REPLICA IDENTITY NOTHING"],
        _FOR + " WITH (publish_via_partition_root)",
        culprit="t2",
        partitioned=True,
    ),
    IdentityScenario(
        "partition NOTHING, leaves",
        [*_PARTITIONED, "ALTER TABLE {t1} REPLICA IDENTITY NOTHING"],
        _FOR,
        culprit="t1",
        partitioned=True,
    ),
    IdentityScenario(
        "root row filter on non-key via root",
        _PARTITIONED,
        _FOR + " WHERE (v > 0) WITH (publish_via_partition_root)",
        culprit="t1",
        partitioned=True,
    ),
    IdentityScenario(
        "root column list without key via root",
        _PARTITIONED,
        _FOR + " (v, w) WITH (publish_via_partition_root)",
        culprit="t1",
        partitioned=True,
    ),
]


def _rejected(conn: psycopg.Connection[Any], table: sql.Identifier) -> dict[str, str]:
    """The actions PostgreSQL refuses on the table, with its message."""
    out = {}
    for action, statement in (
        ("UPDATE", sql.SQL("UPDATE {} SET v = v + 1").format(table)),
        ("DELETE", sql.SQL("DELETE FROM {}").format(table)),
    ):
        try:
            with conn.transaction(force_rollback=True):
                conn.execute(statement)
        except (
            psycopg.errors.ObjectNotInPrerequisiteState,
            psycopg.errors.InvalidColumnReference,
        ) as exc:
            out[action] = str(exc)
    return out


@pytest.mark.parametrize("scenario", IDENTITY_SCENARIOS, ids=[s.name for s in IDENTITY_SCENARIOS])
def test_check_replica_identity_agrees_with_postgresql(
    db: Database, scenario: IdentityScenario
) -> None:
    conn = db.conn
    if conn.info.server_version < scenario.min_version:
        pytest.skip(f"needs PostgreSQL >= {scenario.min_version // 10000}")
    names = {"t": "RI Tab", "t1": "RI Tab_1", "t2": "RI Tab_2", "idx": "RI idx", "p": "ri pub"}
    quoted = {k: q(conn, "public", v) for k, v in names.items() if k not in ("idx", "p")}
    quoted["idx"] = q(conn, names["idx"])
    quoted["p"] = q(conn, names["p"])
    for statement in scenario.setup:
        conn.execute(statement.format(**quoted))
    conn.execute(
        sql.SQL("INSERT INTO {} (id, v) VALUES (1, 1), (15, 2)").format(
            sql.Identifier("public", names["t"])
        )
    )
    conn.execute(scenario.publication.format(**quoted))

    try:
        identities = admin.check_replica_identity(conn, names["p"])
        raised = None
    except ConfigError as exc:
        raised = str(exc)
    rejected = _rejected(conn, sql.Identifier("public", names["t"]))

    if not rejected:
        assert raised is None, f"check raised, but PostgreSQL accepts UPDATE and DELETE: {raised}"
        expected = (
            {"public.RI Tab_1", "public.RI Tab_2"} if scenario.partitioned else {"public.RI Tab"}
        )
        assert {ri.table for ri in identities} == expected
        return
    assert raised is not None, f"PostgreSQL rejects {sorted(rejected)} but the check passed"
    culprit = quoted[scenario.culprit or "t"]
    assert culprit in raised
    assert raised.startswith('updates and deletes of publication "ri pub" cannot be replicated')
    actions = " and ".join(a for a in ("UPDATE", "DELETE") if a in rejected)
    assert f"rejects {actions} on it" in raised
    assert "fix: " in raised


def test_check_replica_identity_fix_advice(db: Database) -> None:
    conn = db.conn
    conn.execute('CREATE TABLE "No Key" (a int, b text); CREATE TABLE "Void" (a int PRIMARY KEY)')
    conn.execute('ALTER TABLE "Void" REPLICA IDENTITY NOTHING')
    conn.execute("CREATE TABLE fine (a int PRIMARY KEY)")
    conn.execute('CREATE PUBLICATION p FOR TABLE "No Key", "Void", fine')
    with pytest.raises(ConfigError) as err:
        admin.check_replica_identity(conn, "p")
    lines = str(err.value).splitlines()
    assert len(lines) == 3  # header + one line per offending table
    assert lines[1] == (
        '- "public"."No Key" has no primary key (REPLICA IDENTITY DEFAULT), so PostgreSQL'
        ' rejects UPDATE and DELETE on it while publication "p" publishes UPDATE and DELETE;'
        ' fix: ALTER TABLE "public"."No Key" ADD PRIMARY KEY (...), or ALTER TABLE'
        ' "public"."No Key" REPLICA IDENTITY FULL'
    )
    assert lines[2].startswith('- "public"."Void" has REPLICA IDENTITY NOTHING')
    assert 'ALTER TABLE "public"."Void" REPLICA IDENTITY FULL' in lines[2]
    # The fix works.
    conn.execute('ALTER TABLE "No Key" REPLICA IDENTITY FULL')
    conn.execute('ALTER TABLE "Void" REPLICA IDENTITY DEFAULT')
    identities = admin.check_replica_identity(conn, "p")
    assert [r.identity for r in sorted(identities, key=lambda r: r.table)] == [
        "full",
        "default",
        "default",
    ]


def test_check_replica_identity_for_all_tables(db: Database) -> None:
    conn = db.conn
    conn.execute("CREATE TABLE keyed (a int PRIMARY KEY); CREATE TABLE loose (a int)")
    conn.execute("CREATE PUBLICATION everything FOR ALL TABLES")
    with pytest.raises(ConfigError) as err:
        admin.check_replica_identity(conn, "everything")
    assert '"public"."loose" has no primary key' in str(err.value)
    assert "keyed" not in str(err.value)
    with pytest.raises(ConfigError, match='publication "missing" does not exist'):
        admin.check_replica_identity(conn, "missing")


# -- published tables -----------------------------------------------------------------------


def test_published_tables_columns_and_keys(db: Database) -> None:
    conn = db.conn
    conn.execute("CREATE TABLE pk (c text, b int, gone int, a numeric(10,2), PRIMARY KEY (a, b))")
    conn.execute("ALTER TABLE pk DROP COLUMN gone")
    conn.execute("CREATE TABLE idx (a int, u int NOT NULL, c varchar(20))")
    conn.execute("CREATE UNIQUE INDEX idx_u ON idx (u)")
    conn.execute("ALTER TABLE idx REPLICA IDENTITY USING INDEX idx_u")
    conn.execute("CREATE TABLE full_t (a int PRIMARY KEY, c text)")
    conn.execute("ALTER TABLE full_t REPLICA IDENTITY FULL")
    conn.execute("CREATE TABLE nothing (a int PRIMARY KEY, c text)")
    conn.execute("ALTER TABLE nothing REPLICA IDENTITY NOTHING")
    conn.execute("CREATE PUBLICATION p FOR TABLE pk, idx, full_t, nothing")
    tables = {t.name: t for t in catalog.published_tables(conn, "p")}
    assert list(tables) == ["full_t", "idx", "nothing", "pk"]

    pk = tables["pk"]
    assert (pk.schema, pk.qualified, pk.relkind, pk.replica_identity) == (
        "public",
        "public.pk",
        "r",
        "d",
    )
    assert pk.oid == scalar(conn, "SELECT 'pk'::regclass::oid")
    assert not pk.is_partitioned and pk.row_filter is None
    assert [(c.name, c.attnum, c.is_key) for c in pk.columns] == [
        ("c", 1, False),
        ("b", 2, True),
        ("a", 4, True),
    ]
    numeric = pk.columns[2]
    assert (numeric.type_oid, numeric.type_name) == (1700, "numeric(10,2)")
    assert numeric.type_modifier == scalar(
        conn, "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'pk'::regclass AND attname = 'a'"
    )
    assert (numeric.base_type_oid, numeric.base_type_modifier) == (1700, numeric.type_modifier)

    idx = tables["idx"]
    assert idx.replica_identity == "i"
    assert [(c.name, c.is_key) for c in idx.columns] == [("a", False), ("u", True), ("c", False)]
    assert (idx.columns[2].type_oid, idx.columns[2].type_modifier) == (1043, 24)
    assert [c.is_key for c in tables["full_t"].columns] == [True, True]
    assert tables["full_t"].replica_identity == "f"
    assert [c.is_key for c in tables["nothing"].columns] == [False, False]
    assert tables["nothing"].replica_identity == "n"

    with pytest.raises(ConfigError, match='publication "nope" does not exist'):
        catalog.published_tables(conn, "nope")


def test_published_tables_column_list_and_row_filter(db: Database) -> None:
    conn = db.conn
    conn.execute('CREATE TABLE t (id int PRIMARY KEY, "Sec ret" text, v int, "W" int)')
    conn.execute('CREATE PUBLICATION p FOR TABLE t (id, v, "W") WHERE (v > 5 AND "W" IS NULL)')
    (table,) = catalog.published_tables(conn, "p")
    assert [c.name for c in table.columns] == ["id", "v", "W"]
    assert table.row_filter == '((v > 5) AND ("W" IS NULL))'


def test_published_tables_generated_columns(db: Database) -> None:
    conn = db.conn
    pg18 = conn.info.server_version >= 180000
    conn.execute(
        "CREATE TABLE g (id int PRIMARY KEY, s int GENERATED ALWAYS AS (id * 2) STORED, c text)"
    )
    conn.execute("CREATE PUBLICATION plain FOR TABLE g")
    (table,) = catalog.published_tables(conn, "plain")
    assert [c.name for c in table.columns] == ["id", "c"]
    if not pg18:
        return
    conn.execute("CREATE PUBLICATION gen FOR TABLE g WITH (publish_generated_columns = stored)")
    (table,) = catalog.published_tables(conn, "gen")
    assert [c.name for c in table.columns] == ["id", "s", "c"]
    conn.execute("CREATE PUBLICATION listed FOR TABLE g (id, s)")
    (table,) = catalog.published_tables(conn, "listed")
    assert [c.name for c in table.columns] == ["id", "s"]
    conn.execute("CREATE TABLE v (id int PRIMARY KEY, x int GENERATED ALWAYS AS (id * 3) VIRTUAL)")
    conn.execute("CREATE PUBLICATION virt FOR TABLE v WITH (publish_generated_columns = stored)")
    (table,) = catalog.published_tables(conn, "virt")
    assert [c.name for c in table.columns] == ["id"]


def test_published_tables_partitions_and_odd_names(db: Database) -> None:
    conn = db.conn
    _create_odd_tables(conn)
    conn.execute(
        sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text) PARTITION BY RANGE (id)").format(
            sql.Identifier(ODD_SCHEMA, "Parted")
        )
    )
    conn.execute(
        sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES FROM (0) TO (100)").format(
            sql.Identifier(ODD_SCHEMA, "Parted 1"), sql.Identifier(ODD_SCHEMA, "Parted")
        )
    )
    admin.ensure_publication(conn, "leaves", [(ODD_SCHEMA, "Parted"), (ODD_SCHEMA, 'a.b"c')])
    leaves = catalog.published_tables(conn, "leaves")
    assert [(t.qualified, t.relkind, t.is_partitioned) for t in leaves] == [
        (f"{ODD_SCHEMA}.Parted 1", "r", False),
        (f'{ODD_SCHEMA}.a.b"c', "r", False),
    ]
    conn.execute(
        sql.SQL("CREATE PUBLICATION root FOR TABLE {} WITH (publish_via_partition_root)").format(
            sql.Identifier(ODD_SCHEMA, "Parted")
        )
    )
    (root,) = catalog.published_tables(conn, "root")
    assert (root.schema, root.name, root.relkind, root.is_partitioned) == (
        ODD_SCHEMA,
        "Parted",
        "p",
        True,
    )
    assert [(c.name, c.is_key) for c in root.columns] == [("id", True), ("v", False)]


# -- types ----------------------------------------------------------------------------------


def _typmod(conn: psycopg.Connection[Any], type_text: str) -> int:
    """The typmod PostgreSQL gives a column declared with ``type_text``."""
    conn.execute(f"CREATE TEMP TABLE typmod_probe (x {type_text})")
    try:
        return int(
            scalar(
                conn,
                "SELECT atttypmod FROM pg_attribute"
                " WHERE attrelid = 'typmod_probe'::regclass AND attname = 'x'",
            )
        )
    finally:
        conn.execute("DROP TABLE typmod_probe")


def _oid(conn: psycopg.Connection[Any], type_text: str) -> int:
    return int(scalar(conn, "SELECT %s::regtype::oid", (type_text,)))


def test_base_type_resolution(db: Database) -> None:
    conn = db.conn
    conn.execute('CREATE SCHEMA "Ty pes"')
    conn.execute('CREATE DOMAIN "Ty pes"."Money" AS numeric(10,2)')
    conn.execute('CREATE DOMAIN "Ty pes".money_again AS "Ty pes"."Money" CHECK (VALUE > 0)')
    conn.execute("CREATE TYPE \"Ty pes\".mood AS ENUM ('sad', 'ok')")
    conn.execute('CREATE DOMAIN "Ty pes".mood_d AS "Ty pes".mood')
    conn.execute('CREATE DOMAIN "Ty pes".short AS varchar(20)')
    conn.execute('CREATE DOMAIN "Ty pes".ints AS int[]')
    conn.execute('CREATE TYPE "Ty pes".pair AS (a int, b text)')
    conn.execute('CREATE TYPE "Ty pes".floatrange AS RANGE (subtype = float8)')
    conn.execute(
        'CREATE TABLE t (id int PRIMARY KEY, m "Ty pes"."Money", mm "Ty pes".money_again,'
        ' e "Ty pes".mood, ea "Ty pes".mood[], ed "Ty pes".mood_d, da "Ty pes"."Money"[],'
        ' s "Ty pes".short, sa "Ty pes".short[], i "Ty pes".ints, p "Ty pes".pair,'
        ' pa "Ty pes".pair[], r "Ty pes".floatrange, n numeric(12,3)[], plain_t text)'
    )
    conn.execute("CREATE PUBLICATION p FOR TABLE t")
    (table,) = catalog.published_tables(conn, "p")
    got = {c.name: (c.base_type_oid, c.base_type_modifier) for c in table.columns}
    money_mod = _typmod(conn, "numeric(10,2)")
    assert money_mod == ((10 << 16) | 2) + 4
    pair = _oid(conn, '"Ty pes".pair')
    assert got == {
        "id": (23, -1),
        "m": (1700, money_mod),
        "mm": (1700, money_mod),
        "e": (25, -1),
        "ea": (1009, -1),
        "ed": (25, -1),
        "da": (1231, money_mod),
        "s": (1043, _typmod(conn, "varchar(20)")),
        "sa": (1015, _typmod(conn, "varchar(20)")),
        "i": (1007, -1),
        "p": (pair, -1),
        "pa": (_oid(conn, '"Ty pes".pair[]'), -1),
        "r": (_oid(conn, '"Ty pes".floatrange'), -1),
        "n": (1231, _typmod(conn, "numeric(12,3)")),
        "plain_t": (25, -1),
    }
    by_name = {c.name: c for c in table.columns}
    assert by_name["m"].type_oid == _oid(conn, '"Ty pes"."Money"')
    assert by_name["m"].type_modifier == -1
    assert by_name["m"].type_name == '"Ty pes"."Money"'

    # type_map: the same resolution for bare OIDs (typmod -1 in).
    oids = [
        _oid(conn, name)
        for name in (
            '"Ty pes"."Money"',
            '"Ty pes".money_again',
            '"Ty pes".mood',
            '"Ty pes".mood[]',
            '"Ty pes"."Money"[]',
            '"Ty pes".pair',
            "int4",
            "numeric",
        )
    ]
    assert catalog.type_map(conn, [*oids, 4_000_000_000]) == {
        oids[0]: (1700, money_mod),
        oids[1]: (1700, money_mod),
        oids[2]: (25, -1),
        oids[3]: (1009, -1),
        oids[4]: (1231, money_mod),
        oids[5]: (pair, -1),
        23: (23, -1),
        1700: (1700, -1),
        4_000_000_000: (4_000_000_000, -1),
    }


def test_citext_resolves_to_text(db: Database) -> None:
    conn = db.conn
    if not scalar(conn, "SELECT count(*) FROM pg_available_extensions WHERE name = 'citext'"):
        pytest.skip("the citext contrib extension is not installed on this server")
    conn.execute("CREATE EXTENSION citext")
    conn.execute("CREATE DOMAIN email AS citext")
    conn.execute("CREATE TABLE t (id int PRIMARY KEY, c citext, ca citext[], e email)")
    conn.execute("CREATE PUBLICATION p FOR TABLE t")
    (table,) = catalog.published_tables(conn, "p")
    got = {c.name: (c.base_type_oid, c.base_type_modifier) for c in table.columns}
    assert got == {"id": (23, -1), "c": (25, -1), "ca": (1009, -1), "e": (25, -1)}
    citext = _oid(conn, "citext")
    assert citext >= catalog.FIRST_NORMAL_OID
    assert catalog.type_map(conn, [citext]) == {citext: (25, -1)}


# -- snapshot -------------------------------------------------------------------------------


def _copy_rows(conn: psycopg.Connection[Any], statement: str, types: list[str]) -> list[Any]:
    rows: list[Any] = []
    with conn.cursor() as cur, cur.copy(statement) as copy:
        copy.set_types(types)
        rows.extend(copy.rows())
    return rows


def test_table_blocks(db: Database) -> None:
    conn = db.conn
    conn.execute("CREATE TABLE t (id int, pad text)")
    oid = scalar(conn, "SELECT 't'::regclass::oid")
    assert catalog.table_blocks(conn, oid) == 0
    conn.execute("INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(1, 3000) g")
    conn.execute("VACUUM t")
    blocks = catalog.table_blocks(conn, oid)
    assert blocks == scalar(conn, "SELECT relpages FROM pg_class WHERE oid = %s", (oid,))
    assert blocks > 50
    with pytest.raises(ConfigError, match="no table with OID 4000000000"):
        catalog.table_blocks(conn, 4_000_000_000)


def test_snapshot_ranges_cover_the_table_exactly_once(db: Database) -> None:
    conn = db.conn
    conn.execute(
        'CREATE TABLE "Snap Shot" (id bigint PRIMARY KEY, "Pad ""x""" text, hidden text)'
        " WITH (fillfactor = 100)"
    )
    conn.execute(
        "INSERT INTO \"Snap Shot\" SELECT g, repeat('x', 150), 'h' FROM generate_series(1, 4000) g"
    )
    conn.execute('DELETE FROM "Snap Shot" WHERE id % 7 = 0')
    conn.execute('CREATE PUBLICATION p FOR TABLE "Snap Shot" (id, "Pad ""x""")')
    (table,) = catalog.published_tables(conn, "p")
    blocks = catalog.table_blocks(conn, table.oid)
    assert blocks >= 40

    statements = catalog.snapshot_queries(table, 4, blocks, min_blocks_per_range=1)
    assert len(statements) == 4
    assert statements[0].startswith(
        'COPY (SELECT "id", "Pad ""x""" FROM ONLY "public"."Snap Shot" WHERE ctid < \'('
    )
    assert statements[-1].endswith("::tid) TO STDOUT (FORMAT BINARY)")
    assert "ctid <" not in statements[-1] and "ctid >=" not in statements[0]

    # Rows written after the size was read land in new blocks: the open last range has them.
    conn.execute(
        'INSERT INTO "Snap Shot"'
        " SELECT g, repeat('y', 150), 'h' FROM generate_series(5001, 5500) g"
    )
    assert scalar(conn, 'SELECT max((ctid::text::point)[0]) FROM "Snap Shot"') >= blocks

    per_range = [_copy_rows(conn, s, ["int8", "text"]) for s in statements]
    assert all(len(rows) > 0 for rows in per_range)
    assert all(len(row) == 2 for rows in per_range for row in rows)  # only published columns
    copied = Counter(row for rows in per_range for row in rows)
    expected = Counter(conn.execute('SELECT id, "Pad ""x""" FROM "Snap Shot"').fetchall())
    assert copied == expected
    assert max(copied.values()) == 1
    assert any(row[0] > 5000 for row in per_range[-1])

    # The whole table in one statement gives the same rows.
    (single,) = catalog.snapshot_queries(table, 1, blocks)
    assert "ctid" not in single
    assert Counter(_copy_rows(conn, single, ["int8", "text"])) == expected


def test_snapshot_ranges_split_evenly_and_respect_minimum(db: Database) -> None:
    conn = db.conn
    conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    conn.execute("CREATE PUBLICATION p FOR TABLE t")
    (table,) = catalog.published_tables(conn, "p")
    statements = catalog.snapshot_queries(table, 3, 10, min_blocks_per_range=1)
    assert [
        s.split(" WHERE ")[1].removesuffix(") TO STDOUT (FORMAT BINARY)") for s in statements
    ] == [
        "ctid < '(3,0)'::tid",
        "ctid >= '(3,0)'::tid AND ctid < '(6,0)'::tid",
        "ctid >= '(6,0)'::tid",
    ]
    # Ranges of fewer than min_blocks_per_range blocks are merged; small tables: one COPY.
    assert len(catalog.snapshot_queries(table, 8, 4096)) == 4
    assert len(catalog.snapshot_queries(table, 8, 10 * 1024)) == 8
    assert len(catalog.snapshot_queries(table, 8, 1023)) == 1
    assert len(catalog.snapshot_queries(table, 8, 10, min_blocks_per_range=5)) == 2
    with pytest.raises(ValueError):
        catalog.snapshot_queries(table, 0, 10)
    with pytest.raises(ValueError):
        catalog.snapshot_queries(table, 2, -1)


def test_snapshot_row_filter_ranges(db: Database) -> None:
    conn = db.conn
    conn.execute("CREATE TABLE f (id int PRIMARY KEY, v int, pad text)")
    conn.execute("INSERT INTO f SELECT g, g % 3, repeat('p', 300) FROM generate_series(1, 2000) g")
    conn.execute("CREATE PUBLICATION p FOR TABLE f (id, v) WHERE (v = 0 OR id < 10)")
    (table,) = catalog.published_tables(conn, "p")
    statements = catalog.snapshot_queries(
        table, 5, catalog.table_blocks(conn, table.oid), min_blocks_per_range=1
    )
    assert len(statements) == 5
    assert table.row_filter == "((v = 0) OR (id < 10))"
    assert all(" WHERE (((v = 0) OR (id < 10)))" in s for s in statements)
    copied = Counter(row for s in statements for row in _copy_rows(conn, s, ["int4", "int4"]))
    expected = Counter(conn.execute("SELECT id, v FROM f WHERE v = 0 OR id < 10").fetchall())
    assert copied == expected and max(copied.values()) == 1
    assert len(expected) == 666 + 6


def test_snapshot_partitioned_and_inherited(db: Database) -> None:
    conn = db.conn
    conn.execute("CREATE TABLE pt (id int PRIMARY KEY, v text) PARTITION BY RANGE (id)")
    conn.execute("CREATE TABLE pt_1 PARTITION OF pt FOR VALUES FROM (0) TO (1000)")
    conn.execute("CREATE TABLE pt_2 PARTITION OF pt FOR VALUES FROM (1000) TO (3000)")
    conn.execute("INSERT INTO pt SELECT g, repeat('v', 100) FROM generate_series(1, 2500) g")
    conn.execute("CREATE PUBLICATION root FOR TABLE pt WITH (publish_via_partition_root)")
    (root,) = catalog.published_tables(conn, "root")
    assert catalog.table_blocks(conn, root.oid) == 0
    leaf_blocks = catalog.table_blocks(conn, scalar(conn, "SELECT 'pt_2'::regclass::oid"))
    (statement,) = catalog.snapshot_queries(root, 4, leaf_blocks, min_blocks_per_range=1)
    assert statement == 'COPY (SELECT "id", "v" FROM "public"."pt") TO STDOUT (FORMAT BINARY)'
    assert len(_copy_rows(conn, statement, ["int4", "text"])) == 2500

    # Plain inheritance: the parent's copy reads the parent only (ONLY), children separately.
    conn.execute("CREATE TABLE parent (id int, v text)")
    conn.execute("CREATE TABLE child () INHERITS (parent)")
    conn.execute("INSERT INTO parent VALUES (1, 'p'); INSERT INTO child VALUES (2, 'c')")
    conn.execute("CREATE PUBLICATION inh FOR TABLE ONLY parent")
    (parent,) = catalog.published_tables(conn, "inh")
    (statement,) = catalog.snapshot_queries(parent, 2, 1, min_blocks_per_range=1)
    assert "FROM ONLY " in statement
    assert _copy_rows(conn, statement, ["int4", "text"]) == [(1, "p")]


# -- slots ----------------------------------------------------------------------------------


def test_list_slots_and_lag(db: Database) -> None:
    conn = db.conn
    pg18 = conn.info.server_version >= 180000
    conn.execute("SELECT pg_create_logical_replication_slot('cdc_lag', 'pgoutput')")
    conn.execute("CREATE TABLE t (id int PRIMARY KEY, pad text)")
    conn.execute("INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series(1, 500) g")
    written_to = lsn_to_int(scalar(conn, "SELECT pg_current_wal_lsn()::text"))
    slots = [s for s in admin.list_slots(conn) if s.slot_name == "cdc_lag"]
    assert len(slots) == 1
    slot = slots[0]
    confirmed = lsn_to_int(
        scalar(
            conn,
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            ("cdc_lag",),
        )
    )
    assert slot.confirmed_flush_lsn == confirmed
    assert slot.lag_bytes is not None and slot.lag_bytes >= written_to - confirmed > 10_000
    assert (slot.plugin, slot.slot_type, slot.database) == ("pgoutput", "logical", db.name)
    assert (slot.temporary, slot.active, slot.active_pid) == (False, False, None)
    assert isinstance(slot.restart_lsn, int) and slot.restart_lsn <= confirmed
    assert slot.wal_status == "reserved" and slot.two_phase is False
    assert slot.safe_wal_size is None  # max_slot_wal_keep_size = -1
    assert (slot.conflicting, slot.invalidation_reason, slot.failover) == (
        (False, None, False) if pg18 else (None, None, None)
    )
    assert not slot.invalidated
    again = admin.get_slot(conn, "cdc_lag")
    assert again is not None
    assert (again.slot_name, again.confirmed_flush_lsn) == ("cdc_lag", confirmed)
    assert admin.get_slot(conn, "no_such_slot") is None
    admin.check_slot_usable(slot)


def test_drop_slot(db: Database) -> None:
    conn = db.conn
    conn.execute("SELECT pg_create_logical_replication_slot('to_drop', 'pgoutput')")
    admin.drop_slot(conn, "to_drop")
    assert admin.get_slot(conn, "to_drop") is None
    with pytest.raises(SlotError, match="replication slot 'to_drop' does not exist"):
        admin.drop_slot(conn, "to_drop")

    # A temporary slot is held by the session that created it: in use.
    with db.connect() as holder:
        holder.execute("SELECT pg_create_logical_replication_slot('held', 'pgoutput', true)")
        pid = holder.info.backend_pid
        with pytest.raises(SlotError) as err:
            admin.drop_slot(conn, "held")
        message = str(err.value)
        assert f"replication slot 'held' is in use by the process with PID {pid}" in message
        assert f"SELECT pg_terminate_backend({pid})" in message
        assert "stop that consumer first" in message
        held = admin.get_slot(conn, "held")
        assert held is not None and held.active and held.temporary and held.active_pid == pid
    # Gone with its session (the backend cleans up just after the client disconnects).
    deadline = time.monotonic() + 10
    while admin.get_slot(conn, "held") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert admin.get_slot(conn, "held") is None


def test_copy_slot(db: Database) -> None:
    conn = db.conn
    conn.execute("SELECT pg_create_logical_replication_slot('origin', 'pgoutput')")
    conn.execute("CREATE TABLE t (id int)")
    conn.execute("INSERT INTO t VALUES (1)")
    source = admin.get_slot(conn, "origin")
    assert source is not None
    copy = admin.copy_slot(conn, "origin", "copy")
    assert (copy.slot_name, copy.plugin, copy.database, copy.temporary) == (
        "copy",
        "pgoutput",
        db.name,
        False,
    )
    assert copy.confirmed_flush_lsn == source.confirmed_flush_lsn
    assert copy.restart_lsn == source.restart_lsn
    temp = admin.copy_slot(conn, "origin", "temp_copy", temporary=True)
    assert temp.temporary and temp.active_pid == conn.info.backend_pid
    # This session holds its temporary copy; it may drop it.
    admin.drop_slot(conn, "temp_copy")
    assert admin.get_slot(conn, "temp_copy") is None

    with pytest.raises(SlotError, match="replication slot 'copy' already exists"):
        admin.copy_slot(conn, "origin", "copy")
    with pytest.raises(SlotError, match="replication slot 'nope' does not exist"):
        admin.copy_slot(conn, "nope", "other")
    conn.execute("SELECT pg_create_physical_replication_slot('phys_copy', true, true)")
    with pytest.raises(SlotError, match="'phys_copy' is a physical slot"):
        admin.copy_slot(conn, "phys_copy", "other")

    other_db = db.cluster.create_database()
    try:
        with db.cluster.connect(other_db) as other:
            other.execute("SELECT pg_create_logical_replication_slot('elsewhere', 'pgoutput')")
        with pytest.raises(SlotError) as err:
            admin.copy_slot(conn, "elsewhere", "other")
        assert f"belongs to database '{other_db}'" in str(err.value)
        assert admin.get_slot(conn, "other") is None
    finally:
        db.cluster.drop_database(other_db)


def test_check_slot_usable(db: Database) -> None:
    conn = db.conn
    conn.execute("SELECT pg_create_logical_replication_slot('good', 'pgoutput')")
    conn.execute("SELECT pg_create_logical_replication_slot('td', 'test_decoding')")
    conn.execute("SELECT pg_create_physical_replication_slot('phys_usable', false, true)")

    def slot(name: str) -> admin.SlotInfo:
        info = admin.get_slot(conn, name)
        assert info is not None
        return info

    admin.check_slot_usable(slot("good"))
    with pytest.raises(SlotError) as err:
        admin.check_slot_usable(slot("td"))
    assert "uses the output plugin 'test_decoding', not 'pgoutput'" in str(err.value)
    with pytest.raises(SlotError, match="'phys_usable' is a physical slot"):
        admin.check_slot_usable(slot("phys_usable"))
    with pytest.raises(SlotError) as err:
        admin.check_slot_usable(slot("good"), database="another")
    assert f"belongs to database '{db.name}', not 'another'" in str(err.value)

    other_db = db.cluster.create_database()
    try:
        with db.cluster.connect(other_db) as other:
            other.execute("SELECT pg_create_logical_replication_slot('theirs', 'pgoutput')")
            admin.check_slot_usable(slot("theirs"), database=other_db)
            with pytest.raises(SlotError) as err:
                admin.check_slot_usable(slot("theirs"))
            assert f"belongs to database '{other_db}', not '{db.name}'" in str(err.value)
            assert f"connect to '{other_db}'" in str(err.value)
            # Read through a connection to its own database: usable.
            mine = admin.get_slot(other, "theirs")
            assert mine is not None
            admin.check_slot_usable(mine)
    finally:
        db.cluster.drop_database(other_db)


@pytest.mark.server
def test_lost_slot_is_unusable(lossy_cluster: PgCluster) -> None:
    with lossy_cluster.connect() as conn:
        conn.execute("SELECT pg_create_logical_replication_slot('behind', 'pgoutput')")
        conn.execute("CREATE TABLE IF NOT EXISTS w (id int, pad text)")
        try:
            info = admin.get_slot(conn, "behind")
            assert info is not None and not info.invalidated
            admin.check_slot_usable(info)
            for _ in range(20):
                conn.execute(
                    "INSERT INTO w SELECT g, repeat('w', 200) FROM generate_series(1, 2000) g"
                )
                conn.execute("SELECT pg_switch_wal()")
                conn.execute("CHECKPOINT")
                info = admin.get_slot(conn, "behind")
                assert info is not None
                if info.wal_status == "lost":
                    break
            assert info.wal_status == "lost" and info.invalidated
            if conn.info.server_version >= 170000:
                assert info.invalidation_reason == "wal_removed"
            with pytest.raises(SlotError) as err:
                admin.check_slot_usable(info)
            message = str(err.value)
            assert message.startswith("replication slot 'behind' is invalidated (")
            assert "start again with a new slot and a fresh initial snapshot" in message
            with pytest.raises(SlotError, match="'behind' is invalidated"):
                admin.copy_slot(conn, "behind", "behind_copy")
        finally:
            admin.drop_slot(conn, "behind")
