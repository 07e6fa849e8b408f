"""A seeded random mix of DDL and DML under a running pipeline, its consumer killed with
SIGKILL once along the way: columns added (with a constant default, a volatile one, none),
renamed, dropped, widened, converted with ``USING``; rows inserted, updated (a key moved
now and then) and deleted, several statements to a transaction. The delta-rs consumer
(``delta_worker.py``, batches of a few rows, so that batches end between a DDL and the rows
around it) is started, killed at a random moment and started again; a last run catches up
with the source. Then the Delta table must equal ``SELECT *`` on the source, every column:
with the DDL capture installed (each DDL applied at its place), and without it (each DDL
learnt from the catalog at the table's next change, or the table read again).

``PGWIRE_CDC_DDL_MIX_SEEDS`` (comma-separated, default ``1``) and
``PGWIRE_CDC_DDL_MIX_STEPS`` (default 24) make longer runs."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import Database
from live.test_stream import current_lsn
from pgwire_cdc import delta
from pgwire_cdc.admin import install_ddl_capture
from support.schema_workload import assert_holds

WORKER = Path(__file__).resolve().parents[1] / "support" / "delta_worker.py"
SEEDS = [int(s) for s in os.environ.get("PGWIRE_CDC_DDL_MIX_SEEDS", "1").split(",")]
STEPS = int(os.environ.get("PGWIRE_CDC_DDL_MIX_STEPS", "24"))


def columns(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """The table's columns but the key, by name: their types."""
    rows = conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = 'm'::regclass AND attnum > 1 AND NOT attisdropped ORDER BY attnum"
    ).fetchall()
    return {name: type_ for name, type_ in rows}


def ddl(rng: random.Random, conn: psycopg.Connection[Any], serial: list[int]) -> str:
    """One random DDL on ``m`` (a statement), given its columns now."""
    cols = columns(conn)
    serial[0] += 1
    new = f"c{serial[0]}"
    ints = [c for c, t in cols.items() if t == "integer"]
    choice = rng.choice(["add", "add_default", "add_volatile", "rename", "drop", "widen", "using"])
    if choice == "add" or (len(cols) < 2 and choice == "drop"):
        return f"ALTER TABLE m ADD COLUMN {new} {rng.choice(['int', 'text'])}"
    if choice == "add_default":
        return f"ALTER TABLE m ADD COLUMN {new} int NOT NULL DEFAULT {rng.randint(1, 9)}"
    if choice == "add_volatile":
        return f"ALTER TABLE m ADD COLUMN {new} int DEFAULT (random() * 1000)::int"
    if choice == "rename":
        return f"ALTER TABLE m RENAME COLUMN {rng.choice(list(cols))} TO {new}"
    if choice == "drop":
        return f"ALTER TABLE m DROP COLUMN {rng.choice(list(cols))}"
    if choice == "widen" and ints:
        return f"ALTER TABLE m ALTER COLUMN {rng.choice(ints)} TYPE bigint"
    if ints:
        column = rng.choice(ints)
        return f"ALTER TABLE m ALTER COLUMN {column} TYPE text USING 'v=' || {column}"
    return f"ALTER TABLE m ADD COLUMN {new} text DEFAULT 'd'"


def dml(rng: random.Random, conn: psycopg.Connection[Any], next_id: list[int]) -> str:
    """One random row change of ``m`` (a statement), given its columns now."""
    cols = columns(conn)
    roll = rng.random()
    next_id[0] += 1
    if roll < 0.4:
        return f"INSERT INTO m (id) VALUES ({next_id[0]})"
    if roll < 0.8 and cols:
        column, type_ = rng.choice(list(cols.items()))
        value = f"'{rng.randint(0, 99)}'" if type_ == "text" else str(rng.randint(0, 99))
        return f"UPDATE m SET {column} = {value} WHERE id % 7 = {rng.randint(0, 6)}"
    if roll < 0.9:
        return f"UPDATE m SET id = {next_id[0]} WHERE id = (SELECT min(id) FROM m)"
    return "DELETE FROM m WHERE id = (SELECT max(id) FROM m)"


def worker(db: Database, path: Path, until: int, *options: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, str(WORKER), db.dsn, str(path), str(until), "--deletion-vectors"]
    return subprocess.Popen(
        [*command, *options], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


@pytest.mark.timeout(600)
@pytest.mark.parametrize("capture", [True, False], ids=["capture", "no-capture"])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_random_mix_of_ddl_and_dml_with_a_kill(
    db: Database, tmp_path: Path, seed: int, capture: bool
) -> None:
    rng = random.Random(seed * 2 + capture)
    if capture:
        install_ddl_capture(db.dsn)
    db.conn.execute(
        "CREATE TABLE m (id int PRIMARY KEY, a int, b text);"
        " INSERT INTO m SELECT g, g, 'b' || g FROM generate_series(1, 40) g;"
        " CREATE PUBLICATION pub FOR TABLE m"
    )
    delta.run(db.dsn, tmp_path, publication="pub", slot="s1", until_lsn=current_lsn(db))
    forever = 2**63 - 1
    running = worker(db, tmp_path, forever, "--max-batch-rows", "7")
    kill_at = rng.randint(STEPS // 4, 3 * STEPS // 4)
    serial, next_id, done = [0], [1000], []
    try:
        for step in range(STEPS):
            # A transaction of a few statements, a DDL among them half the time.
            kinds = ["dml"] * rng.randint(1, 4)
            if rng.random() < 0.5:
                kinds.insert(rng.randint(0, len(kinds)), "ddl")
            with db.conn.transaction():
                for kind in kinds:
                    statement = (
                        ddl(rng, db.conn, serial) if kind == "ddl" else dml(rng, db.conn, next_id)
                    )
                    db.conn.execute(statement)
                    done.append(statement)
            time.sleep(rng.uniform(0, 0.3))
            if step == kill_at:
                running.send_signal(signal.SIGKILL)
                running.wait()
                running = worker(db, tmp_path, forever, "--max-batch-rows", "7")
    finally:
        running.send_signal(signal.SIGKILL)
        running.wait()
    command = [sys.executable, str(WORKER), db.dsn, str(tmp_path), str(current_lsn(db))]
    last = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert last.returncode == 0, last.stderr[-3000:]
    lake = delta.read_table(delta.table_path(tmp_path, "public.m"))
    assert_holds(db.conn, "SELECT * FROM m", lake, f"seed {seed}: " + "; ".join(done)[-1500:])
