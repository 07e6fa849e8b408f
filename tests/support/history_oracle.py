"""An oracle of history tables of the source's own (``history="scd2"``,
``deletes="soft"``; docs/history.md): an audit trigger records every row version (and every
``TRUNCATE``) with its transaction id, in commit order; :func:`check` compares a history
table and a soft-delete table, as read back, with it and with ``SELECT *``.

* the history's versions are exactly the audit's: per transaction and key, the row as the
  transaction left it (the initial snapshot's rows as versions without a transaction id);
* each key's versions follow one another: each ends where the next starts or before, and
  only the last can be current;
* the current versions, and the live rows of the soft-delete table, are ``SELECT *``; its
  other rows are keys the source has no more, each with the LSN that removed it.
"""

from __future__ import annotations

import itertools
import random
import signal
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc

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


def create(conn: psycopg.Connection[Any]) -> None:
    """The table ``acct`` (its ``doc`` toasted), its audit, the publication ``pub``, and
    twelve rows for the initial snapshot."""
    conn.execute(SCHEMA)
    conn.execute(
        "INSERT INTO acct SELECT g, 'n' || g, repeat('s' || g, 1500), g"
        " FROM generate_series(1, 12) g"
    )


def snapshot_seq(conn: psycopg.Connection[Any]) -> int:
    """The audit's last entry now (the initial snapshot's rows are the source's here)."""
    row = conn.execute("SELECT coalesce(max(seq), 0) FROM audit").fetchone()
    assert row is not None
    return int(row[0])


def workload(conn: psycopg.Connection[Any], rng: random.Random, next_id: list[int]) -> None:
    """One transaction of one to four random statements."""
    with conn.transaction():
        for _ in range(rng.randint(1, 4)):
            conn.execute(statement(rng, conn, next_id))


def workload_with_a_kill(
    conn: psycopg.Connection[Any],
    rng: random.Random,
    start: Callable[[], subprocess.Popen[bytes]],
    steps: int,
    kill_at: int,
    pause: float,
) -> None:
    """``steps`` :func:`workload` transactions (up to ``pause`` seconds apart) while a
    consumer ``start()`` made runs; it is SIGKILLed after transaction ``kill_at`` and
    started again, and killed at the end."""
    running = start()
    next_id = [100]
    try:
        for step in range(steps):
            workload(conn, rng, next_id)
            time.sleep(rng.uniform(0, pause))
            if step == kill_at:
                running.send_signal(signal.SIGKILL)
                running.wait()
                running = start()
    finally:
        running.send_signal(signal.SIGKILL)
        running.wait()


def check(
    conn: psycopg.Connection[Any],
    since: int,
    history: pa.Table,
    lake: pa.Table,
    deleted: str = "_deleted",
) -> int:
    """Asserts the history table ``history`` and the soft-delete table ``lake`` hold what
    the audit after entry ``since`` and the source say (``_deleted`` named ``deleted``,
    as Iceberg tables have it); the transactions checked."""
    if deleted != "_deleted":
        history = history.rename_columns(
            ["_deleted" if n == deleted else n for n in history.column_names]
        )
        lake = lake.rename_columns(["_deleted" if n == deleted else n for n in lake.column_names])
    audit = conn.execute("SELECT seq, xid, op, id, name, doc, n FROM audit ORDER BY seq").fetchall()
    want, transactions = expected(audit, since)
    rows = history.to_pylist()
    got = [(r["_xid"], *(r[c] for c in COLUMNS)) for r in rows if not r["_deleted"]]
    assert len(set(got)) == len(got), "a version twice"
    assert set(got) == want
    by_key: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_key[r["id"]].append(r)
    for key, versions in by_key.items():
        versions.sort(key=lambda r: r["_valid_from_lsn"])
        for earlier, later in itertools.pairwise(versions):
            assert earlier["_valid_to_lsn"] is not None, key
            assert earlier["_valid_to_lsn"] <= later["_valid_from_lsn"], key
            assert not earlier["_is_current"], key
    source = sorted(conn.execute("SELECT id, name, doc, n FROM acct").fetchall())
    assert sorted(tuple(r[c] for c in COLUMNS) for r in rows if r["_is_current"]) == source
    live = lake.filter(pc.invert(lake["_deleted"]))
    assert sorted(tuple(r[c] for c in COLUMNS) for r in live.to_pylist()) == source
    dead = lake.filter(lake["_deleted"])
    assert pc.all(pc.is_valid(dead["_deleted_lsn"])).as_py() in (True, None)
    assert not set(dead["id"].to_pylist()) & {r[0] for r in source}
    return len(transactions)
