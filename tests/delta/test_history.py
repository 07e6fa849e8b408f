"""History tables and soft deletes against PostgreSQL, with an oracle of the source's own:
an audit trigger records every row version (and every ``TRUNCATE``) with its transaction
id, in commit order. A random workload (updates that leave the toasted ``doc`` unchanged,
key changes, deletes, truncates) runs while a delta-rs consumer with ``history="scd2"``
and ``deletes="soft"`` is SIGKILLed once and started again; a last run catches up. Then:

* the history table's versions are exactly the audit's: per transaction and key, the row
  as the transaction left it (the initial snapshot's rows as versions without a
  transaction id);
* each key's versions follow one another: each ends where the next change of its key
  (a version or a tombstone) or a truncate starts, and only the last can be current;
* the current versions, and the live rows of the soft-delete table, are ``SELECT *``.
"""

from __future__ import annotations

import itertools
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.compute as pc
import pytest
from conftest import Database
from live.test_stream import current_lsn
from pgwire_cdc import delta

WORKER = Path(__file__).resolve().parents[1] / "support" / "delta_worker.py"
COLUMNS = ["id", "name", "doc", "n"]

SCHEMA = """
CREATE TABLE acct (id int PRIMARY KEY, name text, doc text, n int);
ALTER TABLE acct ALTER COLUMN doc SET STORAGE EXTERNAL;
CREATE TABLE audit (seq bigserial PRIMARY KEY, xid bigint NOT NULL, op text NOT NULL,
                    id int, name text, doc text, n int);
CREATE FUNCTION audit_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND NEW.id <> OLD.id) THEN
    INSERT INTO audit (xid, op, id) VALUES (txid_current(), 'delete', OLD.id);
  END IF;
  IF TG_OP <> 'DELETE' THEN
    INSERT INTO audit (xid, op, id, name, doc, n)
      VALUES (txid_current(), 'row', NEW.id, NEW.name, NEW.doc, NEW.n);
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER acct_audit AFTER INSERT OR UPDATE OR DELETE ON acct
  FOR EACH ROW EXECUTE FUNCTION audit_row();
CREATE FUNCTION audit_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO audit (xid, op) VALUES (txid_current(), 'truncate');
  RETURN NULL;
END $$;
CREATE TRIGGER acct_truncate AFTER TRUNCATE ON acct
  FOR EACH STATEMENT EXECUTE FUNCTION audit_truncate();
CREATE PUBLICATION pub FOR TABLE acct;
"""


def statement(rng: random.Random, conn: psycopg.Connection[Any], next_id: list[int]) -> str:
    ids = [r[0] for r in conn.execute("SELECT id FROM acct").fetchall()]
    roll = rng.random()
    if roll < 0.03:
        return "TRUNCATE acct"
    if roll < 0.3 or not ids:
        next_id[0] += 1
        i = next_id[0]
        return f"INSERT INTO acct VALUES ({i}, 'n{i}', repeat('d{i}', 1500), {rng.randint(0, 9)})"
    victim = rng.choice(ids)
    if roll < 0.65:
        return f"UPDATE acct SET n = {rng.randint(0, 99)} WHERE id = {victim}"
    if roll < 0.75:
        next_id[0] += 1
        return f"UPDATE acct SET id = {next_id[0]}, n = n + 1 WHERE id = {victim}"
    if roll < 0.85:
        return f"UPDATE acct SET name = name || '!', doc = doc || '.' WHERE id = {victim}"
    return f"DELETE FROM acct WHERE id = {victim}"


def expected(
    audit: list[tuple[Any, ...]], snapshot_seq: int
) -> tuple[set[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """From the audit (seq, xid, op, id, name, doc, n, in commit order): the versions the
    history must hold (xid, *row; None for the snapshot's), and per transaction after the
    snapshot its events (xid, [(op, id)...]) in order."""
    state: dict[int, tuple[Any, ...]] = {}
    for seq, _xid, op, key, *row in audit:
        if seq > snapshot_seq:
            break
        if op == "truncate":
            state.clear()
        elif op == "delete":
            state.pop(key, None)
        else:
            state[key] = (key, *row)
    versions = {(None, *row) for row in state.values()}
    by_txn: dict[int, dict[int, tuple[Any, ...] | None]] = defaultdict(dict)
    order: list[int] = []
    for seq, xid, op, key, *row in audit:
        if seq <= snapshot_seq:
            continue
        if xid not in by_txn:
            order.append(xid)
        if op == "truncate":
            by_txn[xid].clear()
        else:
            by_txn[xid][key] = None if op == "delete" else (key, *row)
    for xid in order:
        versions |= {(xid, *row) for row in by_txn[xid].values() if row is not None}
    return versions, [(xid, list(by_txn[xid])) for xid in order]


def worker(db: Database, path: Path, until: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, str(WORKER), db.dsn, str(path), str(until), "--deletion-vectors"]
    options = ["--max-batch-rows", "7", "--history", "scd2", "--deletes", "soft"]
    return subprocess.Popen([*command, *options], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.timeout(600)
def test_history_and_soft_deletes_match_an_audit_trigger_through_a_kill(
    db: Database, tmp_path: Path
) -> None:
    rng = random.Random(7)
    db.conn.execute(SCHEMA)
    db.conn.execute(
        "INSERT INTO acct SELECT g, 'n' || g, repeat('s' || g, 1500), g"
        " FROM generate_series(1, 12) g"
    )
    delta.run(
        db.dsn,
        tmp_path,
        publication="pub",
        slot="s1",
        until_lsn=current_lsn(db),
        history="scd2",
        deletes="soft",
    )
    snapshot_seq = db.conn.execute("SELECT coalesce(max(seq), 0) FROM audit").fetchone()[0]
    running = worker(db, tmp_path, 2**63 - 1)
    next_id = [100]
    try:
        for step in range(40):
            with db.conn.transaction():
                for _ in range(rng.randint(1, 4)):
                    db.conn.execute(statement(rng, db.conn, next_id))
            time.sleep(rng.uniform(0, 0.2))
            if step == 17:
                running.send_signal(signal.SIGKILL)
                running.wait()
                running = worker(db, tmp_path, 2**63 - 1)
    finally:
        running.send_signal(signal.SIGKILL)
        running.wait()
    last = subprocess.run(
        [
            sys.executable,
            str(WORKER),
            db.dsn,
            str(tmp_path),
            str(current_lsn(db)),
            "--history",
            "scd2",
            "--deletes",
            "soft",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert last.returncode == 0, last.stderr[-3000:]

    audit = db.conn.execute(
        "SELECT seq, xid, op, id, name, doc, n FROM audit ORDER BY seq"
    ).fetchall()
    want, transactions = expected(audit, snapshot_seq)
    table = delta.read_table(delta.history_path(tmp_path, "public.acct"))
    rows = table.to_pylist()
    got = {(r["_xid"], *(r[c] for c in COLUMNS)) for r in rows if not r["_deleted"]}
    assert len(got) == sum(1 for r in rows if not r["_deleted"]), "a version twice"
    assert got == want
    # Each key's versions follow one another, in the order of their changes.
    by_key: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_key[r["id"]].append(r)
    for key, versions in by_key.items():
        versions.sort(key=lambda r: r["_valid_from_lsn"])
        for earlier, later in itertools.pairwise(versions):
            assert earlier["_valid_to_lsn"] is not None, key
            assert earlier["_valid_to_lsn"] <= later["_valid_from_lsn"], key
            assert not earlier["_is_current"], key
    source = sorted(db.conn.execute("SELECT id, name, doc, n FROM acct").fetchall())
    current = sorted(tuple(r[c] for c in COLUMNS) for r in rows if r["_is_current"])
    assert current == source
    lake = delta.read_table(delta.table_path(tmp_path, "public.acct"))
    live = lake.filter(pc.invert(lake["_deleted"]))
    assert sorted(tuple(r[c] for c in COLUMNS) for r in live.to_pylist()) == source
    # Every key the lake held that the source has no more is kept, marked.
    dead = lake.filter(lake["_deleted"])
    assert pc.all(pc.is_valid(dead["_deleted_lsn"])).as_py() in (True, None)
    assert not set(dead["id"].to_pylist()) & {r[0] for r in source}
    assert len(transactions) >= 40
