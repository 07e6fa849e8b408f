"""Money moving between two tables, for as-of reads: ``checking`` and ``savings`` hold 40
accounts of 1,000 each; every transaction makes one to four transfers, each an UPDATE of
the giver, an UPDATE of the taker (in either table) and a row in ``ledger``. Whatever
moment of the source one looks at, the balances sum to :data:`TOTAL` and each account's
balance is 1,000 plus what the ledger moved to it, less what it moved away: a read that
saw half a transaction, or two tables at different moments, breaks one or the other."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from typing import Any

import psycopg

ACCOUNTS = 40
TOTAL = 2 * ACCOUNTS * 1000
TABLES = ("public.checking", "public.ledger", "public.savings")

SCHEMA = f"""
CREATE TABLE checking (id int PRIMARY KEY, balance bigint NOT NULL);
CREATE TABLE savings (id int PRIMARY KEY, balance bigint NOT NULL);
CREATE TABLE ledger (n bigserial PRIMARY KEY, giver text NOT NULL, giver_id int NOT NULL,
                     taker text NOT NULL, taker_id int NOT NULL, amount bigint NOT NULL);
INSERT INTO checking SELECT g, 1000 FROM generate_series(1, {ACCOUNTS}) g;
INSERT INTO savings SELECT g, 1000 FROM generate_series(1, {ACCOUNTS}) g;
CREATE PUBLICATION pub FOR TABLE checking, savings, ledger;
"""


class Transfers(threading.Thread):
    """Transactions of transfers on their own connection until :attr:`stop` is set or
    ``count`` of them committed."""

    def __init__(self, dsn: str, seed: int, count: int | None = None, pause: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.dsn, self.rng, self.count, self.pause = dsn, random.Random(seed), count, pause
        self.stop = threading.Event()
        self.done = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stop.is_set() and (self.count is None or self.done < self.count):
                    with conn.transaction():
                        for _ in range(self.rng.randint(1, 4)):
                            self._transfer(conn)
                    self.done += 1
                    if self.pause:
                        time.sleep(self.pause)
        except BaseException as e:  # the test reports it
            self.error = e

    def _transfer(self, conn: psycopg.Connection[Any]) -> None:
        giver, taker = (
            self.rng.choice(["checking", "savings"]),
            self.rng.choice(["checking", "savings"]),
        )
        g, t = self.rng.randint(1, ACCOUNTS), self.rng.randint(1, ACCOUNTS)
        amount = self.rng.randint(1, 90)
        conn.execute(f"UPDATE {giver} SET balance = balance - %s WHERE id = %s", (amount, g))
        conn.execute(f"UPDATE {taker} SET balance = balance + %s WHERE id = %s", (amount, t))
        conn.execute(
            "INSERT INTO ledger (giver, giver_id, taker, taker_id, amount)"
            " VALUES (%s, %s, %s, %s, %s)",
            (giver, g, taker, t, amount),
        )


def balanced(tables: dict[str, list[dict[str, Any]]]) -> None:
    """Asserts the invariants of one moment: the sum, and every balance as the ledger
    has it (``tables``: each table's rows, by source table name)."""
    accounts = {
        (name, r["id"]): r["balance"]
        for name in ("checking", "savings")
        for r in tables[f"public.{name}"]
    }
    assert len(accounts) == 2 * ACCOUNTS
    assert sum(accounts.values()) == TOTAL
    moved: Counter[tuple[str, int]] = Counter()
    for row in tables["public.ledger"]:
        moved[(row["giver"], row["giver_id"])] -= row["amount"]
        moved[(row["taker"], row["taker_id"])] += row["amount"]
    for account, balance in accounts.items():
        assert balance == 1000 + moved[account], account


def source_rows(conn: psycopg.Connection[Any]) -> dict[str, list[dict[str, Any]]]:
    """The source's three tables now."""
    out = {}
    for name in TABLES:
        cur = conn.execute(f"SELECT * FROM {name}")
        columns = [c.name for c in cur.description or ()]
        out[name] = [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]
    return out
