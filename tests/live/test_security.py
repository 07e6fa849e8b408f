"""Secrets and names under `pgwire_cdc.stream()`, against real PostgreSQL 15 and 18.

- The password of a password-authenticated DSN (key=value and URI forms) appears in no log
  record (every logger, DEBUG), no exception (str, repr, args, notes, the whole chain, the
  formatted traceback) and no repr, on the way through a snapshot, live changes, a
  reconnect, a wrong password, an unreachable server and a server stopped mid-stream.
- No row value appears in a ColumnValueError, from the snapshot or from the stream.
- Publication, schema, table and column names with quotes, spaces, upper case and
  non-ASCII letters work end to end (snapshot and changes, text and binary).
- The least-privilege role of docs/server-setup.md (its SQL block, run as it is) is enough
  to stream.
"""

from __future__ import annotations

import logging
import re
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pgwire_cdc
import pytest
from conftest import Database, fresh_database
from pgwire_cdc.errors import ColumnValueError, ConnectionError, Error
from psycopg import sql
from support.fault_support import (
    PASSWORD,
    PASSWORD_ROLE,
    mark,
    mirror_until,
    password_cluster,
)
from support.server import SERVERS, PgCluster
from support.stream_workload import SCHEMA, Mirror, Workload

pytestmark = pytest.mark.server

SERVER_SETUP = Path(__file__).resolve().parents[2] / "docs" / "server-setup.md"

#: Forms of the password that must never show (as given, percent-encoded, a distinctive
#: fragment).
SECRETS = (PASSWORD, quote(PASSWORD, safe=""), "Sw0rd-fish", "%secret", "25secret")


@pytest.fixture(scope="module", params=SERVERS, ids=SERVERS)
def sec_cluster(request: pytest.FixtureRequest) -> Iterator[PgCluster]:
    with password_cluster(request.param) as cluster:
        yield cluster


@pytest.fixture
def sec_db(sec_cluster: PgCluster) -> Iterator[Database]:
    with fresh_database(sec_cluster) as db:
        db.conn.execute(SCHEMA)
        db.conn.execute("CREATE PUBLICATION pub FOR TABLE items, codes, notes")
        grant = sql.SQL("GRANT SELECT ON items, codes, notes TO {}")
        db.conn.execute(grant.format(sql.Identifier(PASSWORD_ROLE)))
        yield db


def kv_dsn(port: int, dbname: str, password: str = PASSWORD) -> str:
    escaped = password.replace("\\", "\\\\").replace("'", "\\'")
    return f"host=127.0.0.1 port={port} dbname={dbname} user={PASSWORD_ROLE} password='{escaped}'"


def uri_dsn(port: int, dbname: str, password: str = PASSWORD) -> str:
    return f"postgresql://{PASSWORD_ROLE}:{quote(password, safe='')}@127.0.0.1:{port}/{dbname}"


DSN_FORMS = {"key-value": kv_dsn, "uri": uri_dsn}


def exception_texts(error: BaseException) -> list[str]:
    """Everything an exception can show: its chain's str, repr, args, notes, traceback."""
    texts = ["".join(traceback.format_exception(error))]
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        texts += [str(e), repr(e), repr(e.args), *getattr(e, "__notes__", [])]
        e = e.__cause__ or e.__context__
    return texts


def assert_no_secret(texts: list[str], secrets: tuple[str, ...] = SECRETS) -> None:
    assert texts
    for text in texts:
        for secret in secrets:
            assert secret not in text, f"{secret!r} leaked into: {text[:300]}"


def log_texts(caplog: pytest.LogCaptureFixture) -> list[str]:
    texts = [caplog.text]
    for record in caplog.records:
        texts += [record.getMessage(), repr(record.args), record.exc_text or ""]
    return texts


@pytest.mark.parametrize("form", sorted(DSN_FORMS))
def test_password_never_shows(
    sec_db: Database, form: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, psycopg's too
    make_dsn = DSN_FORMS[form]
    cluster, db = sec_db.cluster, sec_db
    texts: list[str] = []
    workload = Workload(db.conn, seed=11)
    workload.run(10)

    # Snapshot, changes and a reconnect (the walsender is terminated).
    mirror = Mirror()
    stream = pgwire_cdc.stream(
        make_dsn(cluster.port, db.name), publication="pub", slot="s1", idle_timeout=20,
        max_batch_ms=100, reconnect_delay=0.05, reconnect_attempts=2, reconnect_max_delay=0.1,
    )  # fmt: skip
    texts.append(repr(stream))
    batches = mirror_until(stream, mirror, 0)
    workload.run(10)
    batches += mirror_until(stream, mirror, mark(db.conn))
    db.conn.execute(
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
        " WHERE slot_name = 's1' AND active_pid IS NOT NULL"
    )
    workload.run(10)
    batches += mirror_until(stream, mirror, mark(db.conn))
    texts += [repr(b) for b in batches] + [str(b) for b in batches]
    assert "replication connection re-established" in caplog.text

    # The server stops for good while streaming: the give-up error.
    db.conn.close()
    cluster.shutdown("fast")
    with pytest.raises(ConnectionError) as lost:
        next(stream)
    texts += exception_texts(lost.value)
    stream.close()  # type: ignore[attr-defined]
    cluster.start()  # on a new port

    # A wrong password, and a port where nothing listens.
    wrong = "Wr0ng-" + PASSWORD[::-1]
    for dsn in (make_dsn(cluster.port, db.name, password=wrong), make_dsn(1, db.name)):
        with pytest.raises(Error) as failed:
            next(pgwire_cdc.stream(dsn, publication="pub", slot="s2"))
        assert isinstance(failed.value, ConnectionError)
        texts += exception_texts(failed.value)
    assert "password authentication failed" in "\n".join(texts)
    texts += log_texts(caplog)
    assert_no_secret(texts)
    assert_no_secret(texts, (wrong, quote(wrong, safe=""), "Wr0ng"))  # the wrong one neither


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "text"])
def test_row_values_stay_out_of_errors(db: Database, binary: bool) -> None:
    db.conn.execute(
        "CREATE TABLE v (id int PRIMARY KEY, secret text, amount numeric(10,2));"
        "CREATE PUBLICATION pub FOR TABLE v;"
        "INSERT INTO v VALUES (1, 'row-secret-4711', 'NaN')"
    )
    with pytest.raises(ColumnValueError) as snap:
        next(pgwire_cdc.stream(db.dsn, publication="pub", slot="s1", binary=binary))
    # A slot without a snapshot, then a change it streams.
    options: dict[str, Any] = {"publication": "pub", "slot": "s2", "binary": binary}
    # No rows yet; a batch of no tables may still move the position on (WAL that other
    # databases of the cluster write).
    quiet = list(pgwire_cdc.stream(db.dsn, snapshot=False, idle_timeout=0.2, **options))
    assert [batch.tables for batch in quiet if batch.tables] == []
    db.conn.execute("INSERT INTO v VALUES (2, 'row-secret-4712', 'NaN')")
    with pytest.raises(ColumnValueError) as live:
        next(pgwire_cdc.stream(db.dsn, idle_timeout=10, **options))
    for error in (snap.value, live.value):
        assert error.table == "public.v" and error.column == "amount"
        for text in exception_texts(error):
            assert "row-secret" not in text and "4711" not in text and "4712" not in text


ODD_SCHEMA = 'Sch "q" ü'
ODD_TABLE = 'Tab le "x" Ä.b'
ODD_COLUMNS = ('Id "k"', "ÜBER Col", "text")


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "text"])
def test_odd_names_end_to_end(db: Database, binary: bool) -> None:
    ident = sql.Identifier
    key, word, plain = (ident(c) for c in ODD_COLUMNS)
    table = ident(ODD_SCHEMA, ODD_TABLE)
    db.conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident(ODD_SCHEMA)))
    db.conn.execute(
        sql.SQL("CREATE TABLE {} ({} int PRIMARY KEY, {} text, {} int)").format(
            table, key, word, plain
        )
    )
    db.conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'eins', 10)").format(table))
    publication = 'Pub "p" ö'
    stream = pgwire_cdc.stream(
        db.dsn,
        publication=publication,
        slot="s1",
        tables=[(ODD_SCHEMA, ODD_TABLE)],
        binary=binary,
        idle_timeout=10,
        max_batch_ms=100,
    )
    name = f"{ODD_SCHEMA}.{ODD_TABLE}"
    snapshot = next(stream)
    snapshot.ack()
    assert list(snapshot.tables) == [name]
    assert snapshot.tables[name].column_names[:3] == list(ODD_COLUMNS)
    assert snapshot.tables[name].select(list(ODD_COLUMNS)).to_pylist() == [
        {'Id "k"': 1, "ÜBER Col": "eins", "text": 10}
    ]
    db.conn.execute(sql.SQL("INSERT INTO {} VALUES (2, 'zwei', 20)").format(table))
    db.conn.execute(sql.SQL("UPDATE {} SET {} = 'drei' WHERE {} = 1").format(table, word, key))
    db.conn.execute(sql.SQL("DELETE FROM {} WHERE {} = 2").format(table, key))
    rows = []
    end = mark(db.conn)
    for batch in stream:
        batch.ack()
        if name in batch.tables:
            rows += batch.tables[name].select([*ODD_COLUMNS, "_change_type"]).to_pylist()
        if batch.lsn >= end:
            break
    stream.close()  # type: ignore[attr-defined]
    assert [(r["_change_type"], r['Id "k"'], r["ÜBER Col"]) for r in rows] == [
        ("insert", 2, "zwei"),
        ("update", 1, "drei"),
        ("delete", 2, None),
    ]
    row = db.conn.execute(
        "SELECT count(*) FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s"
        " AND tablename = %s",
        (publication, ODD_SCHEMA, ODD_TABLE),
    ).fetchone()
    assert row == (1,)


def least_privilege_sql() -> str:
    """The SQL block of docs/server-setup.md's "Least-privilege role" section."""
    text = SERVER_SETUP.read_text(encoding="utf-8")
    section = text.split("## Least-privilege role", 1)[1]
    match = re.search(r"```sql\n(.*?)```", section, re.S)
    assert match, "the least-privilege section has no sql block"
    return match.group(1)


def test_least_privilege_role_from_the_readme(sec_cluster: PgCluster) -> None:
    if not sec_cluster.running:
        sec_cluster.start()
    name = sec_cluster.create_database()
    try:
        with sec_cluster.connect(name) as owner:
            owner.execute(
                "CREATE TABLE orders (id bigint PRIMARY KEY, total numeric(12,2));"
                "CREATE TABLE order_lines (order_id bigint, line int, sku text,"
                " PRIMARY KEY (order_id, line));"
                "INSERT INTO orders VALUES (1, 9.99);"
                "INSERT INTO order_lines VALUES (1, 1, 'a'), (1, 2, 'b');"
            )
            exists = owner.execute("SELECT 1 FROM pg_roles WHERE rolname = 'cdc_reader'")
            script = least_privilege_sql()
            if exists.fetchone():  # the other database of this cluster ran it already
                script = script.split(";", 1)[1]
            owner.execute(script)  # type: ignore[arg-type]
            role = owner.execute(
                "SELECT rolsuper, rolreplication, rolcreatedb, rolcreaterole FROM pg_roles"
                " WHERE rolname = 'cdc_reader'"
            ).fetchone()
            assert role == (False, True, False, False)
        sec_cluster.add_hba_lines(["host all cdc_reader 127.0.0.1/32 scram-sha-256"])
        dsn = (
            f"host=127.0.0.1 port={sec_cluster.port} dbname={name} user=cdc_reader"
            " password=change-me"
        )
        stream = pgwire_cdc.stream(dsn, publication="cdc_pub", slot="cdc_slot", idle_timeout=10)
        rows: dict[str, int] = {}
        while sum(rows.values()) < 3:  # the snapshot: one batch per table
            batch = next(stream)
            assert batch.snapshot
            rows.update({n: rows.get(n, 0) + t.num_rows for n, t in batch.tables.items()})
            batch.ack()
        assert rows == {"public.orders": 1, "public.order_lines": 2}
        with sec_cluster.connect(name) as owner:
            owner.execute("INSERT INTO order_lines VALUES (1, 3, 'c')")
        changes = next(stream)
        changes.ack()
        stream.close()  # type: ignore[attr-defined]
        assert changes.tables["public.order_lines"].column("sku").to_pylist() == ["c"]
    finally:
        sec_cluster.drop_database(name)
