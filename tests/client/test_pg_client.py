"""The Rust PostgreSQL client (rust/src/pg) against real PostgreSQL 15 and 18.

Logins (trust, cleartext password, md5, SCRAM-SHA-256, SCRAM-SHA-256-PLUS), TLS modes with
a CA and server certificate made here with the openssl CLI, libpq-style settings (Unix
socket, password file, environment), errors mapped to `pgwire_cdc.errors`, and the
replication connection: IDENTIFY_SYSTEM, slots with exported and used snapshots, a live
pgoutput stream decoded by `pgwire_cdc.Decoder`, status updates moving the slot, and a
terminated walsender.

The TLS and login tests run on their own clusters (module scope) so that turning on TLS
and editing pg_hba.conf does not change the clusters the other suites share.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pgwire_cdc
import pytest
from pgwire_cdc.errors import ConfigError, ConnectionError, SlotError
from support.server import SERVERS, PgCluster

try:
    # Test-only classes: in the extension of `make build` (Cargo feature `test-client`),
    # not in the shipped wheel.
    from pgwire_cdc._native import PgConnection, PgReplicationStream
except ImportError:
    pytest.skip(
        "pgwire_cdc._native was built without the Cargo feature `test-client`"
        " (PgConnection, PgReplicationStream): build it with `make build`",
        allow_module_level=True,
    )

OPENSSL = "/usr/bin/openssl"
PASSWORD = "Sw0rdfish-p4ss"  # what no error message may contain
ROLES = {"u_password": "password", "u_md5": "md5", "u_scram": "scram-sha-256"}


# -- certificates -----------------------------------------------------------------------


@dataclass
class Certs:
    ca: Path
    other_ca: Path
    server_crt: Path
    server_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True)


def _make_ca(directory: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", f"{name}.key", "-out", f"{name}.crt", "-subj", f"/CN=pgwire_cdc {name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A test CA, a server certificate it signed for localhost / 127.0.0.1, and an
    unrelated CA."""
    if not os.access(OPENSSL, os.X_OK):
        pytest.skip("the openssl CLI is needed to make test certificates")
    d = tmp_path_factory.mktemp("certs")
    _make_ca(d, "ca")
    _make_ca(d, "other_ca")
    (d / "server.ext").write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
        "-out", "server.csr", "-subj", "/CN=localhost",
        cwd=d,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "server.ext",
        cwd=d,
    )  # fmt: skip
    return Certs(d / "ca.crt", d / "other_ca.crt", d / "server.crt", d / "server.key")


@pytest.fixture(scope="module", params=SERVERS, ids=SERVERS)
def tls_pg(request: pytest.FixtureRequest, certs: Certs) -> Iterator[PgCluster]:
    """A cluster serving TLS (when its build can), with one password role per
    authentication method."""
    cluster = PgCluster.for_server(request.param)
    cluster.init()
    if cluster.supports_ssl:
        cluster.enable_ssl(certs.server_crt, certs.server_key)
    cluster.start()
    try:
        for role, method in ROLES.items():
            encryption = "md5" if method == "md5" else "scram-sha-256"
            cluster.set_password(role, PASSWORD, encryption)
        cluster.add_hba_lines(
            [f"host all {role} 127.0.0.1/32 {method}" for role, method in ROLES.items()]
        )
        if cluster.supports_ssl:
            # Roles that pg_hba.conf refuses without TLS / with TLS (trust otherwise).
            cluster.set_password("u_tls_only", PASSWORD)
            cluster.set_password("u_plain_only", PASSWORD)
            cluster.add_hba_lines(
                [
                    "hostnossl all u_tls_only 127.0.0.1/32 reject",
                    "hostssl all u_plain_only 127.0.0.1/32 reject",
                ]
            )
        with cluster.connect() as conn:
            # The md5 method only runs MD5 (not SCRAM) for an MD5-stored password.
            row = conn.execute("SELECT rolpassword FROM pg_authid WHERE rolname = 'u_md5'")
            assert str(row.fetchone()[0]).startswith("md5")  # type: ignore[index]
        yield cluster
    finally:
        cluster.stop()


def need_tls(cluster: PgCluster) -> None:
    if not cluster.supports_ssl:
        pytest.skip(f"the {cluster.name} server binaries are built without SSL")


def dsn(cluster: PgCluster, extra: str = "", *, dbname: str = "postgres") -> str:
    return f"host=127.0.0.1 port={cluster.port} dbname={dbname} {extra}"


def connect(cluster: PgCluster, extra: str = "user=postgres", **kwargs: Any) -> PgConnection:
    return PgConnection(dsn(cluster, extra), **kwargs)


# -- logins -----------------------------------------------------------------------------


def test_trust_login_reports_the_session(tls_pg: PgCluster) -> None:
    conn = connect(tls_pg, "user=postgres sslmode=disable application_name=pgclient_test")
    try:
        assert conn.server_version == tls_pg.version
        assert not conn.ssl_in_use
        (row,) = conn.query(
            "SELECT pg_backend_pid(), current_setting('application_name'),"
            " current_setting('client_encoding'), NULL::text"
        )
        assert row == (str(conn.backend_pid), "pgclient_test", "UTF8", None)
        assert conn.parameter("server_encoding") == "UTF8"
        assert conn.parameter("no_such_parameter") is None
        conn.query("SET TimeZone = 'Asia/Tokyo'")
        assert conn.parameter("TimeZone") == "Asia/Tokyo"  # ParameterStatus followed
    finally:
        conn.close()
    with pytest.raises(RuntimeError, match="closed"):
        conn.query("SELECT 1")


def test_options_and_startup_settings(tls_pg: PgCluster) -> None:
    conn = connect(tls_pg, "user=postgres options='-c statement_timeout=1234 -c DateStyle=SQL'")
    try:
        assert conn.query("SHOW statement_timeout") == [("1234ms",)]
        assert conn.parameter("DateStyle") == "SQL, MDY"
    finally:
        conn.close()


@pytest.mark.parametrize("sslmode", ["disable", "prefer"])
def test_connect_timeout_on_a_silent_server(sslmode: str) -> None:
    """A peer that accepts TCP but never answers: connect_timeout ends the wait."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)  # the kernel completes the handshake; nobody ever reads
        port = silent.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(ConnectionError, match="timed out"):
            PgConnection(f"host=127.0.0.1 port={port} user=x sslmode={sslmode} connect_timeout=2")
        assert 1.5 < time.monotonic() - started < 10


@pytest.mark.parametrize("role", sorted(ROLES))
@pytest.mark.parametrize("sslmode", ["disable", "require"])
def test_password_logins(tls_pg: PgCluster, role: str, sslmode: str) -> None:
    if sslmode != "disable":
        need_tls(tls_pg)
    conn = connect(tls_pg, f"user={role} password={PASSWORD} sslmode={sslmode}")
    try:
        assert conn.ssl_in_use == (sslmode == "require")
        assert conn.query("SELECT current_user") == [(role,)]
    finally:
        conn.close()


@pytest.mark.parametrize("role", sorted(ROLES))
def test_wrong_password_is_a_connection_error_without_the_password(
    tls_pg: PgCluster, role: str
) -> None:
    wrong = PASSWORD + "-wrong"
    with pytest.raises(ConnectionError) as info:
        connect(tls_pg, f"user={role} password='{wrong}' sslmode=disable")
    assert info.value.sqlstate == "28P01"
    assert "password authentication failed" in str(info.value)
    assert PASSWORD not in str(info.value) and wrong not in repr(info.value)


def test_no_password_supplied(tls_pg: PgCluster, tmp_path: Path) -> None:
    with pytest.raises(ConnectionError, match="no password was supplied"):
        connect(tls_pg, f"user=u_scram sslmode=disable passfile={tmp_path / 'none'}")


def test_scram_plus_channel_binding(tls_pg: PgCluster, certs: Certs) -> None:
    need_tls(tls_pg)
    # require succeeds only if SCRAM-SHA-256-PLUS ran and the server accepted our
    # tls-server-end-point hash of its certificate.
    for mode in ("require", "verify-full"):
        conn = connect(
            tls_pg,
            f"host=localhost user=u_scram password={PASSWORD} sslmode={mode} "
            f"sslrootcert={certs.ca} channel_binding=require",
        )
        assert conn.ssl_in_use
        conn.close()
    conn = connect(
        tls_pg, f"user=u_scram password={PASSWORD} sslmode=require channel_binding=disable"
    )
    conn.close()
    refused = [
        # no TLS, so nothing to bind to
        f"user=u_scram password={PASSWORD} sslmode=disable channel_binding=require",
        # md5 and trust cannot bind
        f"user=u_md5 password={PASSWORD} sslmode=require channel_binding=require",
        "user=postgres sslmode=require channel_binding=require",
    ]
    for extra in refused:
        with pytest.raises(ConnectionError, match="channel binding") as info:
            connect(tls_pg, extra)
        assert PASSWORD not in str(info.value)


def test_password_file_and_environment(
    tls_pg: PgCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"# test\n127.0.0.1:{tls_pg.port}:postgres:u_scram:{PASSWORD}\n")
    passfile.chmod(0o600)
    conn = connect(tls_pg, f"user=u_scram sslmode=disable passfile={passfile}")
    assert conn.query("SELECT current_user") == [("u_scram",)]
    conn.close()
    # Readable by others: ignored, as libpq does.
    passfile.chmod(0o644)
    with pytest.raises(ConnectionError, match="no password"):
        connect(tls_pg, f"user=u_scram sslmode=disable passfile={passfile}")
    # Environment variables fill in what the DSN leaves out; the DSN wins.
    monkeypatch.setenv("PGUSER", "u_md5")
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    monkeypatch.setenv("PGSSLMODE", "disable")
    conn = PgConnection(f"host=127.0.0.1 port={tls_pg.port} dbname=postgres")
    assert conn.query("SELECT current_user") == [("u_md5",)]
    assert not conn.ssl_in_use
    conn.close()
    conn = PgConnection(
        f"host=127.0.0.1 port={tls_pg.port} dbname=postgres user=u_scram sslmode=prefer"
    )
    assert conn.query("SELECT current_user") == [("u_scram",)]
    assert conn.ssl_in_use is tls_pg.supports_ssl
    conn.close()


def test_unix_socket_and_uri(tls_pg: PgCluster) -> None:
    assert tls_pg.basedir is not None
    conn = PgConnection(f"host={tls_pg.basedir} port={tls_pg.port} user=postgres")
    assert conn.query("SELECT inet_server_addr() IS NULL") == [("t",)]  # a Unix socket
    conn.close()
    socket_dir = str(tls_pg.basedir).replace("/", "%2F")
    uri = f"postgresql://u_scram:{PASSWORD}@{socket_dir}:{tls_pg.port}/postgres?sslmode=disable"
    # u_scram has no pg_hba line for local sockets: trust via the local line.
    conn = PgConnection(uri)
    assert conn.query("SELECT current_user") == [("u_scram",)]
    conn.close()
    conn = PgConnection(
        f"postgresql://u_md5:{PASSWORD}@127.0.0.1:{tls_pg.port}/postgres?sslmode=disable"
    )
    assert conn.query("SELECT current_user") == [("u_md5",)]
    conn.close()


def test_connection_failures(tls_pg: PgCluster) -> None:
    with pytest.raises(ConnectionError, match=r"database .* does not exist") as info:
        PgConnection(f"host=127.0.0.1 port={tls_pg.port} user=postgres dbname=nope_db")
    assert info.value.sqlstate == "3D000"
    with pytest.raises(ConnectionError, match="refused"):
        PgConnection("host=127.0.0.1 port=1 user=postgres connect_timeout=5")
    with pytest.raises(ConfigError):
        PgConnection(f"host=127.0.0.1 port={tls_pg.port} sslmode=sometimes")
    with pytest.raises(ConfigError) as config:
        PgConnection(f"password='{PASSWORD}")
    assert PASSWORD not in str(config.value)
    # A second host is tried when the first cannot be reached.
    conn = PgConnection(
        f"host=127.0.0.1,127.0.0.1 port=1,{tls_pg.port} user=postgres sslmode=disable"
    )
    assert conn.query("SELECT 1") == [("1",)]
    conn.close()


# -- TLS --------------------------------------------------------------------------------


def _ssl_in_use_on_server(conn: PgConnection) -> bool:
    ((ssl,),) = conn.query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
    return ssl == "t"


def test_tls_modes(tls_pg: PgCluster, certs: Certs, tmp_path: Path) -> None:
    need_tls(tls_pg)
    missing = tmp_path / "missing.crt"
    good = [
        # (settings, TLS expected)
        (f"host=localhost sslmode=verify-full sslrootcert={certs.ca}", True),
        (f"host=127.0.0.1 sslmode=verify-full sslrootcert={certs.ca}", True),
        (f"hostaddr=127.0.0.1 host=wronghost sslmode=verify-ca sslrootcert={certs.ca}", True),
        (f"sslmode=require sslrootcert={missing}", True),
        (f"sslmode=require sslrootcert={certs.ca}", True),
        (f"sslmode=prefer sslrootcert={missing}", True),
        (f"sslmode=allow sslrootcert={missing}", False),
        ("sslmode=disable", False),
    ]
    for extra, tls in good:
        conn = PgConnection(f"host=127.0.0.1 {extra} port={tls_pg.port} user=postgres")
        try:
            assert conn.ssl_in_use is tls, extra
            assert _ssl_in_use_on_server(conn) is tls, extra
        finally:
            conn.close()

    bad = [
        # the certificate does not name this host
        f"hostaddr=127.0.0.1 host=wronghost sslmode=verify-full sslrootcert={certs.ca}",
        # a chain to another CA; require behaves as verify-ca when a root file exists
        f"host=localhost sslmode=verify-full sslrootcert={certs.other_ca}",
        f"host=localhost sslmode=verify-ca sslrootcert={certs.other_ca}",
        f"host=localhost sslmode=require sslrootcert={certs.other_ca}",
    ]
    for extra in bad:
        with pytest.raises(ConnectionError, match=r"TLS|certificate") as info:
            PgConnection(f"{extra} port={tls_pg.port} user=postgres")
        assert info.value.sqlstate is None, extra

    for mode in ("verify-ca", "verify-full"):
        with pytest.raises(ConfigError, match="root certificate file"):
            PgConnection(
                f"host=localhost port={tls_pg.port} user=postgres sslmode={mode} "
                f"sslrootcert={missing}"
            )


def test_stream_over_verify_full(tls_pg: PgCluster, certs: Certs) -> None:
    """``stream()`` itself over TLS verified against the test's CA: psycopg for the
    catalog, the Rust client for the snapshot and the replication stream, as a role that
    pg_hba.conf refuses without TLS; the same DSN with another CA is refused, without the
    password in the error."""
    need_tls(tls_pg)
    name = tls_pg.create_database("tls")
    try:
        with tls_pg.connect(name) as conn:
            conn.execute(
                "CREATE TABLE t (id int PRIMARY KEY, v text);"
                "INSERT INTO t VALUES (1, 'a');"
                "CREATE PUBLICATION p FOR TABLE t;"
                "GRANT SELECT ON t TO u_tls_only"
            )
            base = (
                f"host=localhost port={tls_pg.port} dbname={name} user=u_tls_only"
                f" password={PASSWORD} sslmode=verify-full"
            )
            batches = pgwire_cdc.stream(
                f"{base} sslrootcert={certs.ca}", publication="p", slot="s_tls", idle_timeout=10
            )
            snapshot = next(batches)
            assert snapshot.tables["public.t"].column("id").to_pylist() == [1]
            snapshot.ack()
            conn.execute("INSERT INTO t VALUES (2, 'b')")
            ids: list[int] = []
            while not ids:
                batch = next(batches)
                if "public.t" in batch.tables:
                    ids = batch.tables["public.t"].column("id").to_pylist()
                batch.ack()
            assert ids == [2]
            walsenders = conn.execute(
                "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_replication r USING (pid)"
                " WHERE r.usename = 'u_tls_only'"
            ).fetchall()
            assert walsenders == [(True,)]
            batches.close()
            with pytest.raises(ConnectionError) as info:
                next(pgwire_cdc.stream(f"{base} sslrootcert={certs.other_ca}", slot="s_tls2"))
            assert PASSWORD not in repr(info.value) and PASSWORD not in str(info.value)
    finally:
        tls_pg.drop_database(name)


def test_allow_and_prefer_retry_like_libpq(tls_pg: PgCluster, tmp_path: Path) -> None:
    """allow: plain first, TLS when the server refuses plain; prefer: TLS first, plain when
    the server refuses the TLS login."""
    need_tls(tls_pg)
    base = f"host=127.0.0.1 port={tls_pg.port} dbname=postgres sslrootcert={tmp_path / 'none'}"
    conn = PgConnection(f"{base} user=u_tls_only sslmode=allow")
    assert conn.ssl_in_use
    conn.close()
    conn = PgConnection(f"{base} user=u_plain_only sslmode=prefer")
    assert not conn.ssl_in_use
    conn.close()
    with pytest.raises(ConnectionError, match=r"pg_hba\.conf rejects") as info:
        PgConnection(f"{base} user=u_tls_only sslmode=disable")
    assert info.value.sqlstate == "28000"
    with pytest.raises(ConnectionError, match=r"pg_hba\.conf rejects"):
        PgConnection(f"{base} user=u_plain_only sslmode=require")


def test_tls_against_a_server_without_tls(pg: PgCluster, tmp_path: Path) -> None:
    base = f"host=127.0.0.1 port={pg.port} user=postgres sslrootcert={tmp_path / 'none'}"
    with pytest.raises(ConnectionError, match="does not support TLS"):
        PgConnection(f"{base} sslmode=require")
    conn = PgConnection(f"{base} sslmode=prefer")
    assert not conn.ssl_in_use
    assert conn.query("SELECT 1") == [("1",)]
    conn.close()


# -- queries and COPY -------------------------------------------------------------------


def test_query_errors_keep_the_connection_usable(db: Any) -> None:
    conn = PgConnection(db.dsn)
    try:
        with pytest.raises(ConfigError) as info:
            conn.query("SELEC 1")
        assert info.value.sqlstate == "42601"
        db.conn.execute("CREATE TABLE uniq (id int PRIMARY KEY)")
        conn.query("INSERT INTO uniq VALUES (424242)")
        with pytest.raises(ConnectionError) as dup:
            conn.query("INSERT INTO uniq VALUES (424242)")
        assert dup.value.sqlstate == "23505"
        assert "424242" not in str(dup.value)  # DETAIL holds the key value: left out
        # Several statements: the rows of the last result set.
        assert conn.query("SELECT 1; SELECT 2, 'x' UNION ALL SELECT 3, NULL") == [
            ("2", "x"),
            ("3", None),
        ]
        assert conn.query("") == []
    finally:
        conn.close()


def test_copy_out(db: Any) -> None:
    db.conn.execute("CREATE TABLE c (id int, t text)")
    db.conn.execute("INSERT INTO c SELECT g, 'row ' || g FROM generate_series(1, 50000) g")
    conn = PgConnection(db.dsn)
    try:
        count, data = conn.copy_out("COPY c TO STDOUT")
        assert count == 50000
        lines = data.decode().splitlines()
        assert len(lines) == 50000
        assert lines[0] == "1\trow 1" and lines[-1] == "50000\trow 50000"
        count, data = conn.copy_out("COPY (SELECT id FROM c WHERE id <= 3) TO STDOUT (FORMAT csv)")
        assert (count, data) == (3, b"1\n2\n3\n")
        with pytest.raises(ConfigError):
            conn.copy_out("COPY nope TO STDOUT")
        with pytest.raises(ConfigError, match="COPY"):
            conn.copy_out("SELECT 1")
        assert conn.query("SELECT count(*) FROM c") == [("50000",)]
    finally:
        conn.close()


# -- replication ------------------------------------------------------------------------


def test_identify_system(db: Any) -> None:
    conn = PgConnection(db.dsn, replication=True)
    try:
        system_id, timeline, xlogpos, dbname = conn.identify_system()
        row = db.conn.execute(
            "SELECT system_identifier::text, pg_current_wal_lsn() FROM pg_control_system()"
        ).fetchone()
        assert row is not None
        assert system_id == row[0]
        assert timeline >= 1
        assert 0 < xlogpos <= pgwire_cdc.lsn_to_int(str(row[1]))
        assert dbname == db.name
        # SQL works on a logical replication connection too.
        assert conn.query("SELECT current_database()") == [(db.name,)]
    finally:
        conn.close()


def _slot_name() -> str:
    return f"s_{uuid.uuid4().hex[:12]}"


def test_exported_snapshot_is_importable(db: Any) -> None:
    db.conn.execute("CREATE TABLE t (id int)")
    db.conn.execute("INSERT INTO t VALUES (1), (2)")
    repl = PgConnection(db.dsn, replication=True)
    slot = _slot_name()
    name, consistent_point, snapshot, plugin = repl.create_slot(slot, temporary=True)
    assert (name, plugin) == (slot, "pgoutput")
    assert snapshot
    assert consistent_point > 0
    db.conn.execute("INSERT INTO t VALUES (3)")
    with db.connect() as other:
        other.autocommit = False
        other.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        other.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
        row = other.execute("SELECT count(*) FROM t").fetchone()
        assert row == (2,)  # the row inserted after the slot is not in the snapshot
        other.rollback()
    row = db.conn.execute(
        "SELECT temporary, confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    assert row is not None and row[0] is True
    assert pgwire_cdc.lsn_to_int(str(row[1])) == consistent_point
    repl.close()
    # A temporary slot goes with its connection.
    deadline = time.monotonic() + 10
    while db.conn.execute(
        "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    ).fetchone():
        assert time.monotonic() < deadline, "temporary slot survived its connection"
        time.sleep(0.05)


def test_used_snapshot_copies_the_slot_start(db: Any) -> None:
    db.conn.execute("CREATE TABLE t (id int, v text)")
    db.conn.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    repl = PgConnection(db.dsn, replication=True)
    try:
        # What the server requires for SNAPSHOT 'use' (PostgreSQL 18 insists on READ ONLY).
        repl.query("BEGIN READ ONLY ISOLATION LEVEL REPEATABLE READ")
        _, _, snapshot, _ = repl.create_slot(_slot_name(), temporary=True, snapshot="use")
        assert snapshot is None
        db.conn.execute("INSERT INTO t VALUES (3, 'c')")
        count, data = repl.copy_out("COPY t TO STDOUT")
        assert (count, data) == (2, b"1\ta\n2\tb\n")
        repl.query("COMMIT")
    finally:
        repl.close()


def _decode_until(
    stream: PgReplicationStream,
    decoder: pgwire_cdc.Decoder,
    inserts: int,
    timeout: float = 0.2,
    deadline_s: float = 60.0,
) -> tuple[list[Any], int]:
    """Receive and decode until `inserts` Insert events have committed; answer keepalives.
    Returns the events and the last wal_end seen."""
    events: list[Any] = []
    seen = 0
    last_end = 0
    deadline = time.monotonic() + deadline_s
    polls = 0
    while seen < inserts or not events or events[-1].kind != "commit":
        assert time.monotonic() < deadline, f"only {seen} of {inserts} inserts arrived"
        # Every other call polls (zero time-out): it must still read what has arrived.
        polls += 1
        message = stream.recv(timeout if polls % 2 else 0.0)
        if message is None:
            continue
        if message[0] == "k":
            _, wal_end, _clock, reply = message
            last_end = max(last_end, int(wal_end))
            if reply:
                stream.send_status(last_end, 0, 0)
            continue
        _, wal_start, wal_end, _clock, data = message
        assert isinstance(data, bytes)
        last_end = max(last_end, int(wal_end))
        decoder.feed(data, int(wal_start))
        batch = decoder.events()
        seen += sum(1 for e in batch if e.kind == "insert")
        events.extend(batch)
    return events, last_end


@pytest.mark.parametrize("sslmode", ["disable", "require"])
def test_stream_decodes_and_status_moves_the_slot(tls_pg: PgCluster, sslmode: str) -> None:
    if sslmode != "disable":
        need_tls(tls_pg)
    dbname = tls_pg.create_database()
    try:
        _stream_scenario(tls_pg, dbname, sslmode)
    finally:
        tls_pg.drop_database(dbname)


def _stream_scenario(cluster: PgCluster, dbname: str, sslmode: str) -> None:
    admin = cluster.connect(dbname)
    admin.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    admin.execute("CREATE PUBLICATION p FOR ALL TABLES")
    repl_dsn = dsn(cluster, f"user=postgres sslmode={sslmode}", dbname=dbname)
    repl = PgConnection(repl_dsn, replication=True)
    assert repl.ssl_in_use == (sslmode == "require")
    slot = _slot_name()
    _, start, _, _ = repl.create_slot(slot, snapshot="nothing")
    stream = repl.start_replication(
        slot, start, [("proto_version", "1"), ("publication_names", '"p"')]
    )
    assert stream.server_version == cluster.version
    with pytest.raises(RuntimeError, match="closed"):
        repl.query("SELECT 1")  # the connection now belongs to the stream

    # Many rows, read with very short time-outs: partial frames (and partial TLS
    # records) must survive every time-out.
    rows = 20000
    admin.execute(
        "INSERT INTO t SELECT g, repeat(md5(g::text), 8) FROM generate_series(1, %s) g",
        (rows,),
    )
    decoder = pgwire_cdc.Decoder(proto_version=1, binary=False)
    events, last_end = _decode_until(stream, decoder, rows, timeout=0.0005)
    inserts = [e for e in events if e.kind == "insert"]
    assert [e.table_row[0] for e in inserts] == list(range(1, rows + 1))
    assert inserts[0].table == "public.t"
    assert (
        inserts[-1].table_row[1]
        == admin.execute("SELECT repeat(md5(%s::text), 8)", (rows,)).fetchone()[0]
    )  # type: ignore[index]
    commit = events[-1]
    assert commit.kind == "commit" and commit.commit_lsn is not None

    # Acknowledge the commit: the slot's confirmed_flush_lsn follows.
    flush = int(commit.end_lsn) if commit.end_lsn else last_end
    stream.send_status(flush, flush, flush)
    deadline = time.monotonic() + 20
    while True:
        (confirmed,) = admin.execute(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        ).fetchone()  # type: ignore[misc]
        if pgwire_cdc.lsn_to_int(str(confirmed)) >= flush:
            break
        assert time.monotonic() < deadline, f"confirmed_flush_lsn stuck at {confirmed}"
        stream.recv(0.1)  # keep reading so the walsender is never blocked on us
    assert pgwire_cdc.lsn_to_int(str(confirmed)) == flush

    # Back to a command connection.
    conn = stream.finish()
    with pytest.raises(RuntimeError, match="closed"):
        stream.recv(0.1)
    assert conn.identify_system()[3] == dbname
    conn.drop_slot(slot)
    conn.close()
    admin.close()


def test_terminated_walsender_is_a_connection_error(db: Any) -> None:
    db.conn.execute("CREATE TABLE t (id int)")
    db.conn.execute("CREATE PUBLICATION p FOR ALL TABLES")
    repl = PgConnection(db.dsn, replication=True)
    pid = repl.backend_pid
    slot = _slot_name()
    repl.create_slot(slot, temporary=True, snapshot="nothing")
    stream = repl.start_replication(slot, 0, [("proto_version", "1"), ("publication_names", '"p"')])
    db.conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    started = time.monotonic()
    with pytest.raises(ConnectionError) as info:
        while time.monotonic() - started < 30:
            stream.recv(0.5)
    assert time.monotonic() - started < 30
    assert info.value.sqlstate in ("57P01", None)
    with pytest.raises(pgwire_cdc.errors.Error):
        stream.recv(0.1)  # stays failed, does not hang


def test_slot_errors(db: Any) -> None:
    db.conn.execute("CREATE PUBLICATION p FOR ALL TABLES")
    repl = PgConnection(db.dsn, replication=True)
    other = PgConnection(db.dsn, replication=True)
    slot = _slot_name()
    try:
        repl.create_slot(slot, snapshot="nothing")
        with pytest.raises(SlotError) as exists:
            other.create_slot(slot, snapshot="nothing")
        assert exists.value.sqlstate == "42710"
        with pytest.raises(SlotError) as missing:
            other.drop_slot("no_such_slot")
        assert missing.value.sqlstate == "42704"
        # START_REPLICATION hands the connection to the stream, also when it fails.
        with pytest.raises(SlotError) as missing_start:
            other.start_replication("no_such_slot", 0, [("proto_version", "1")])
        assert missing_start.value.sqlstate == "42704"

        stream = repl.start_replication(
            slot, 0, [("proto_version", "1"), ("publication_names", '"p"')]
        )
        third = PgConnection(db.dsn, replication=True)
        with pytest.raises(SlotError) as active:
            third.start_replication(slot, 0, [("proto_version", "1"), ("publication_names", '"p"')])
        assert active.value.sqlstate == "55006"
        stream.close()
    finally:
        other.close()
    drop = PgConnection(db.dsn, replication=True)
    drop.drop_slot(slot, wait=True)
    drop.close()
    assert (
        db.conn.execute(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
        is None
    )
