"""Pipeline files (``pgwire-cdc run PIPELINE.toml``, :mod:`pgwire_cdc.pipeline_file`) and
column policies (:mod:`pgwire_cdc.policies`): malformed files each get one line naming
the file's line, never a traceback; the JSON Schema shipped is the one the keys make; and
against PostgreSQL 15 and 18, a file with a hashed and a dropped column keeps Delta tables
that hold no clear value of either (every file under the lake scanned byte by byte), with
the same hash for a value in the snapshot, the stream and a table copied later."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import Database
from pgwire_cdc import delta, pipeline_file
from pgwire_cdc.errors import ConfigError

from cli.test_cli import pgwire_lsn, run_cli

GOOD = """\
[source]
dsn = "${PGWIRE_CDC_TEST_DSN}"
publication = "pub"
slot = "s1"

[sink]
kind = "delta"
path = "lake"

[run]
idle_timeout = 1
"""

#: (file, the line its message names, a piece of the message).
MALFORMED = [
    ("[source]\ndsn = 'x'\n[sink]\nkind = 'delta'\npath = 'l'\n[runn]\n", 6, "no section [runn]"),
    (
        "[source]\ndsn = 'x'\npublicaton = 'p'\n[sink]\nkind = 'delta'\npath = 'l'\n",
        3,
        "no key 'publicaton'",
    ),
    (
        "[source]\ndsn = 'x'\n[sink]\nkind = 'lake'\npath = 'l'\n",
        4,
        "one of delta, iceberg, parquet",
    ),
    ("[source]\nslot = 's'\n[sink]\nkind = 'delta'\npath = 'l'\n", 1, "needs dsn"),
    ("[source]\ndsn = 'x'\n[sink]\nkind = 'delta'\n\n", 3, "needs path"),
    (
        "[source]\ndsn = 'x'\n[sink]\nkind = 'delta'\npath = 'l'\n[run]\nmax_batch_rows = 'ten'\n",
        7,
        "max_batch_rows is",
    ),
    (
        "[source]\ndsn = 'x'\n[sink]\nkind = 'delta'\npath = 'l'\n"
        "[run]\nidle_timeout = 30\n  oops\n",
        8,
        "not TOML",
    ),
    (
        "[source]\ndsn = '${NOT_SET_ANYWHERE_42}'\n[sink]\nkind = 'delta'\npath = 'l'\n",
        2,
        "${NOT_SET_ANYWHERE_42} is not set",
    ),
    (
        '[source]\ndsn = "x"\n[sink]\nkind = "delta"\npath = "l"\n\n'
        '[tables."public.c".columns]\nemail = "sha"\n',
        8,
        "no policy 'sha'",
    ),
    (
        '[source]\ndsn = "x"\n[sink]\nkind = "iceberg"\ncatalog = "lake"\n',
        3,
        "needs catalog and namespace",
    ),
    (
        '[source]\ndsn = "x"\n[sink]\nkind = "delta"\npath = "l"\n'
        '[tables."public.c"]\nkey = ["id"]\n',
        7,
        "no key 'key'",
    ),
    (
        '[source]\ndsn = "x"\n[sink]\nkind = "iceberg"\ncatalog = "c"\nnamespace = "n"\n'
        'writer = "delta-rs"\n',
        7,
        "the iceberg sink takes spark",
    ),
]


@pytest.mark.parametrize(("text", "line", "piece"), MALFORMED, ids=[m[2] for m in MALFORMED])
def test_a_malformed_file_gets_one_line_naming_its_line(
    tmp_path: Path, text: str, line: int, piece: str
) -> None:
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        pipeline_file.load(path)
    message = str(raised.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert piece in message and "\n" not in message
    # The command line prints that one line and exits with the usage code, no traceback.
    proc = run_cli("run", str(path))
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert f"{path}:{line}: " in proc.stderr


def test_python_m_pgwire_cdc_is_the_command_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pgwire_cdc", "run", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "PIPELINE.toml" in proc.stdout


def test_a_secret_from_the_environment_is_never_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGWIRE_CDC_TEST_DSN", "host=h password=hunter2")
    path = tmp_path / "pipeline.toml"
    path.write_text(GOOD.replace("idle_timeout = 1", 'idle_timeout = "soon"'))
    with pytest.raises(ConfigError) as raised:
        pipeline_file.load(path)
    assert "hunter2" not in str(raised.value)
    path.write_text(GOOD)
    assert pipeline_file.load(path).source["dsn"] == "host=h password=hunter2"


def test_the_shipped_json_schema_is_the_one_the_keys_make() -> None:
    shipped = Path(pipeline_file.__file__).with_name("pipeline.schema.json")
    assert json.loads(shipped.read_text()) == pipeline_file.json_schema()


def test_hash_and_hmac_need_their_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pgwire_cdc.policies import Policies

    monkeypatch.delenv("PGWIRE_CDC_HASH_SALT", raising=False)
    with pytest.raises(ConfigError, match="PGWIRE_CDC_HASH_SALT"):
        Policies({"public.c": {"email": "hash"}})
    monkeypatch.setenv("PGWIRE_CDC_HASH_SALT", "s")
    assert Policies({"public.c": {"email": "hash", "note": {"policy": "mask", "keep": 2}}})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: A pipeline's source and sink (the lake's path and the rest to format in).
HEAD = """\
[source]
dsn = "${{PGWIRE_CDC_TEST_DSN}}"
publication = "pub"
slot = "s1"

[sink]
kind = "delta"
path = "{lake}"
"""

PIPELINE = (
    HEAD
    + """
[run]
until_lsn = "{until}"
max_batch_rows = 7
metrics_port = {port}

[tables."public.customers".columns]
email = "hash"
ssn = "drop"
name = {{ policy = "mask", keep = 2 }}

[tables."public.contacts".columns]
email = "hash"
"""
)


@pytest.mark.server
@pytest.mark.parametrize("pg", ["pg15", "pg18"], indirect=True)
def test_a_pipeline_file_keeps_governed_columns_out_of_the_lake(
    db: Database, tmp_path: Path
) -> None:
    salt = "pepper"
    emails = [f"person{i}@example.org" for i in range(1, 9)]
    ssns = [f"{i:03d}-55-{i:04d}" for i in range(1, 9)]
    db.conn.execute(
        "CREATE TABLE customers (id int PRIMARY KEY, email text, ssn text, name text);"
        "CREATE TABLE orders (id int PRIMARY KEY, customer int, note text);"
        "CREATE TABLE contacts (id int PRIMARY KEY, email text);"
        "CREATE PUBLICATION pub FOR TABLE customers, orders"
    )
    for i in range(1, 5):
        db.conn.execute(
            "INSERT INTO customers VALUES (%s, %s, %s, %s)",
            (i, emails[i - 1], ssns[i - 1], f"Name{i:02d}"),
        )
    lake = tmp_path / "lake"
    env = {"PGWIRE_CDC_TEST_DSN": db.dsn, "PGWIRE_CDC_HASH_SALT": salt}

    def run() -> None:
        path = tmp_path / "pipeline.toml"
        path.write_text(PIPELINE.format(lake=lake, until=pgwire_lsn(db), port=free_port()))
        proc = run_cli("run", str(path), "--json", env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]

    run()  # the snapshot
    for i in range(5, 9):
        db.conn.execute(
            "INSERT INTO customers VALUES (%s, %s, %s, %s)",
            (i, emails[i - 1], ssns[i - 1], f"Name{i:02d}"),
        )
    db.conn.execute("UPDATE customers SET email = %s WHERE id = 1", (emails[7],))
    db.conn.execute("INSERT INTO orders VALUES (1, 1, 'first')")
    # A table the publication gains later: copied while streaming, its email hashed alike.
    db.conn.execute("INSERT INTO contacts VALUES (1, %s)", (emails[0],))
    db.conn.execute("ALTER PUBLICATION pub ADD TABLE contacts")
    run()
    run()  # the copy of contacts may complete in a later run

    def hashed(value: str) -> str:
        return hashlib.sha256((salt + value).encode()).hexdigest()

    customers = delta.read_table(delta.table_path(lake, "public.customers")).to_pylist()
    assert sorted(customers[0]) == ["email", "id", "name"]
    source = dict(db.conn.execute("SELECT id, email FROM customers").fetchall())
    assert {r["id"]: r["email"] for r in customers} == {k: hashed(v) for k, v in source.items()}
    assert all(r["name"].startswith("*") and r["name"][-2:].isdigit() for r in customers)
    contacts = delta.read_table(delta.table_path(lake, "public.contacts")).to_pylist()
    assert contacts == [{"id": 1, "email": hashed(emails[0])}]
    # No clear value in any file of the lake: data files, logs, statistics.
    clear = [*emails, *ssns, "Name01"]
    for file in lake.rglob("*"):
        if file.is_file():
            data = file.read_bytes()
            found = [v for v in clear if v.encode() in data]
            assert not found, f"{file.relative_to(lake)} holds {found}"


SERVICE = (
    HEAD
    + """
[run]
max_batch_rows = 20000
{until}
"""
)

PROBES = """\
metrics_port = {port}
ready_max_lag_mb = 1000
"""


def probe(port: int, path: str) -> tuple[int, str]:
    """An HTTP GET of the service's ``path``: status and body."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.mark.server
def test_sigterm_ends_the_run_after_the_batch_in_flight(db: Database, tmp_path: Path) -> None:
    """A service manager's stop: SIGTERM while a large transaction streams ends the run
    with exit 0 once the batch in flight is committed and acked; a later run goes on from
    there, and the table equals the source (nothing lost, nothing twice)."""
    db.conn.execute(
        "CREATE TABLE big (id int PRIMARY KEY, v text);"
        " INSERT INTO big SELECT g, 'v' || g FROM generate_series(1, 1000) g;"
        " CREATE PUBLICATION pub FOR TABLE big"
    )
    lake = tmp_path / "lake"
    env = {**os.environ, "PGWIRE_CDC_TEST_DSN": db.dsn}
    path = tmp_path / "pipeline.toml"
    port = free_port()
    path.write_text(SERVICE.format(lake=lake, until=PROBES.format(port=port)))
    command = [sys.executable, "-m", "pgwire_cdc.cli", "run", str(path), "-v", "--log-json"]
    service = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        table = Path(delta.table_path(lake, "public.big")) / "_delta_log"
        deadline = time.monotonic() + 120
        while not table.is_dir():
            assert service.poll() is None, service.stderr.read() if service.stderr else ""
            assert time.monotonic() < deadline, "the snapshot did not reach the lake"
            time.sleep(0.2)
        # The probes a service manager asks: alive, and ready once changes stream.
        assert probe(port, "/healthz") == (200, "ok\n")
        while probe(port, "/readyz")[0] != 200:
            assert time.monotonic() < deadline, probe(port, "/readyz")
            time.sleep(0.2)
        status, text = probe(port, "/metrics")
        assert status == 200 and "pgwire_cdc_batches_total" in text
        db.conn.execute("INSERT INTO big SELECT g, 'w' || g FROM generate_series(1001, 121000) g")
        db.conn.execute("UPDATE big SET v = 'again' WHERE id % 7 = 0")
        time.sleep(1.5)
        stopped = time.monotonic()
        service.send_signal(signal.SIGTERM)
        _, err = service.communicate(timeout=120)
    finally:
        if service.poll() is None:
            service.kill()
    assert service.returncode == 0, err[-3000:]
    assert "stopped by SIGTERM" in err
    # Its log: one JSON object per line (the last line is the command's own message).
    logged = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert logged and {"time", "level", "logger", "message"} <= set(logged[0])
    assert all(line.startswith("{") for line in err.splitlines()[:-1]), err[-2000:]
    assert time.monotonic() - stopped < 90
    path.write_text(SERVICE.format(lake=lake, until=f'until_lsn = "{pgwire_lsn(db)}"'))
    proc = run_cli("run", str(path), env={"PGWIRE_CDC_TEST_DSN": db.dsn})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = delta.read_table(delta.table_path(lake, "public.big"))
    source = db.conn.execute(
        "SELECT count(*), sum(id), count(*) FILTER (WHERE v = 'again') FROM big"
    ).fetchone()
    again = sum(1 for v in rows["v"].to_pylist() if v == "again")
    assert (rows.num_rows, sum(rows["id"].to_pylist()), again) == tuple(source)


def test_strict_mode_stops_at_a_column_without_a_rule() -> None:
    import pyarrow as pa
    from pgwire_cdc.policies import Policies

    rules = {"public.c": {"id": "keep", "email": "null"}}
    table = pa.table({"id": [1], "email": ["a@x.org"]})
    assert Policies(rules, ["public.c"]).apply("public.c", table)["email"].null_count == 1
    added = table.append_column("phone", pa.array(["555"]))
    with pytest.raises(ConfigError, match="'phone' has no rule"):
        Policies(rules, ["public.c"]).apply("public.c@2", added)
    # Not strict: a column without a rule passes as it is.
    assert Policies(rules).apply("public.c", added)["phone"].to_pylist() == ["555"]


STRICT = (
    HEAD
    + """
[run]
until_lsn = "{until}"

[tables."public.people"]
strict = true

[tables."public.people".columns]
id = "keep"
email = "hash"
"""
)


@pytest.mark.server
def test_a_strict_pipeline_stops_before_a_new_columns_values_are_written(
    db: Database, tmp_path: Path
) -> None:
    db.conn.execute(
        "CREATE TABLE people (id int PRIMARY KEY, email text);"
        " INSERT INTO people VALUES (1, 'a@example.org');"
        " CREATE PUBLICATION pub FOR TABLE people"
    )
    lake = tmp_path / "lake"
    env = {"PGWIRE_CDC_TEST_DSN": db.dsn, "PGWIRE_CDC_HASH_SALT": "s"}
    path = tmp_path / "pipeline.toml"
    path.write_text(STRICT.format(lake=lake, until=pgwire_lsn(db)))
    assert run_cli("run", str(path), env=env).returncode == 0
    db.conn.execute("ALTER TABLE people ADD COLUMN phone text")
    db.conn.execute("INSERT INTO people VALUES (2, 'b@example.org', '555-0100')")
    path.write_text(STRICT.format(lake=lake, until=pgwire_lsn(db)))
    proc = run_cli("run", str(path), env=env)
    assert proc.returncode == 3 and "'phone' has no rule" in proc.stderr, proc.stderr[-2000:]
    table = delta.read_table(delta.table_path(lake, "public.people"))
    assert table.column_names == ["id", "email"] and table.num_rows == 1
    assert not any(b"555-0100" in f.read_bytes() for f in lake.rglob("*") if f.is_file())


def test_pauses_keep_the_first_pause_not_resumed_in_the_same_poll() -> None:
    from pgwire_cdc.signals import Pauses, Signal, in_order, parse

    pause, resume = Signal("pause", ()), Signal("resume", ())
    pauses = Pauses()
    assert pauses.pause_in([(10, pause), (20, resume)]) is None  # resumed at once
    assert pauses.pause_in([(10, pause)]) is None  # read again after that: no new pause
    assert pauses.pause_in([(30, pause), (40, pause)]) == 30
    pauses.paused_at = 30
    assert not pauses.resume_in([(25, resume)])  # an older resume is not this pause's
    assert pauses.resume_in([(45, resume)])
    assert pauses.resumed() == 29  # the stream goes back to just before the pause
    assert pauses.paused_at is None
    assert pauses.pause_in([(30, pause)]) is None  # read again: resumed already
    assert pauses.pause_in([(40, pause)]) == 40
    # Notes: another slot's signal and other prefixes are left out; a transactional
    # message counts by its transaction's commit LSN.
    mine = b'{"signal": "pause", "slot": "s1"}'
    theirs = b'{"signal": "pause", "slot": "s2"}'
    notes = [
        (5, mine, "pgwire_cdc.signal", (9, 0)),
        (6, theirs, "pgwire_cdc.signal", (9, 1)),
        (7, b"{}", "pgwire_cdc.ddl", (9, 2)),
    ]
    assert in_order(notes, "s1") == [(9, parse(mine))]
