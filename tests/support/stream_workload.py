"""A seeded random workload and a pyarrow applier, for the end-to-end `stream()` tests.

Three tables with different replica identities:

- ``items``: primary key (DEFAULT identity), many types, a toasted ``big`` column that most
  updates leave alone (so pgoutput sends it as unchanged TOAST), primary-key changes;
- ``codes``: REPLICA IDENTITY USING INDEX on a unique ``code``, toasted ``big``, key changes;
- ``notes``: no key at all, REPLICA IDENTITY FULL (rows matched as a multiset).

`Mirror` applies change tables the way a consumer would (last change wins, unchanged-TOAST
columns filled from the row it already holds, truncates clear the table) and is compared
with ``SELECT`` on the source.
"""

from __future__ import annotations

import math
import random
import string
from collections import Counter
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID

import psycopg
import pyarrow as pa
from pgwire_cdc.tables import parse_segment_key
from psycopg.types.json import Jsonb

SCHEMA = """
CREATE TABLE items (
    id bigint PRIMARY KEY,
    name text,
    qty int,
    price numeric(12,2),
    ratio float8,
    flag bool,
    born date,
    seen timestamp,
    seen_tz timestamptz,
    tags text[],
    nums int[],
    payload jsonb,
    uid uuid,
    blob bytea,
    span interval,
    big text
);
ALTER TABLE items ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE codes (code text NOT NULL, val int, big text);
CREATE UNIQUE INDEX codes_code ON codes (code);
ALTER TABLE codes REPLICA IDENTITY USING INDEX codes_code;
ALTER TABLE codes ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE notes (body text, n int, at timestamptz);
ALTER TABLE notes REPLICA IDENTITY FULL;
"""

TABLES = ("public.items", "public.codes", "public.notes")

#: Key columns per table (None: no key, rows are a multiset).
KEYS: dict[str, tuple[str, ...] | None] = {
    "public.items": ("id",),
    "public.codes": ("code",),
    "public.notes": None,
}

#: SELECT lists giving values comparable with the change tables.
SELECTS = {
    "public.items": "SELECT id, name, qty, price, ratio, flag, born, seen, seen_tz, tags, "
    "nums, payload::text, uid::text, blob, span, big FROM items",
    "public.codes": "SELECT code, val, big FROM codes",
    "public.notes": "SELECT body, n, at FROM notes",
}

ALPHABET = string.ascii_letters + "äöü€日本 '\"\\,{}"


class Workload:
    """Random inserts, updates (with and without key changes, with and without touching
    the toasted column), deletes and truncates, reproducible from the seed."""

    def __init__(self, conn: psycopg.Connection[Any], seed: int) -> None:
        self.conn = conn
        self.rng = random.Random(seed)
        self.item_ids: set[int] = set()
        self.codes: set[str] = set()
        self.next_id = 1

    # -- values ------------------------------------------------------------------

    def text(self, n: int = 8) -> str | None:
        if self.rng.random() < 0.1:
            return None
        return "".join(self.rng.choice(ALPHABET) for _ in range(self.rng.randint(0, n)))

    def big(self) -> str:
        # Random letters do not compress: stored out of line (TOAST) above ~2 kB.
        return "".join(self.rng.choice(string.ascii_letters) for _ in range(4000))

    def item_values(self) -> list[Any]:
        r = self.rng

        def maybe(v: Any) -> Any:
            return None if r.random() < 0.1 else v

        return [
            self.text(),
            maybe(r.randint(-(2**31), 2**31 - 1)),
            maybe(Decimal(r.randint(-(10**11), 10**11)) / 100),
            maybe(r.choice([0.0, -1.5, 1e300, r.uniform(-1e6, 1e6)])),
            maybe(r.random() < 0.5),
            maybe(datetime(2000, 1, 1).date() + timedelta(days=r.randint(-40000, 40000))),
            maybe(datetime(2020, 1, 1) + timedelta(microseconds=r.randint(-(10**15), 10**15))),
            maybe(
                datetime(2020, 1, 1, tzinfo=timezone.utc)
                + timedelta(microseconds=r.randint(-(10**15), 10**15))
            ),
            maybe([self.text(4) for _ in range(r.randint(0, 3))]),
            maybe([None if r.random() < 0.2 else r.randint(-1000, 1000) for _ in range(3)]),
            maybe(Jsonb({"k": self.text(3), "n": r.randint(0, 9)})),
            maybe(UUID(int=r.getrandbits(128))),
            maybe(bytes(r.getrandbits(8) for _ in range(r.randint(0, 16)))),
            maybe(timedelta(days=r.randint(0, 400), microseconds=r.randint(0, 86_399_999_999))),
            self.big() if r.random() < 0.5 else self.text(),
        ]

    # -- operations --------------------------------------------------------------

    def insert_item(self, cur: psycopg.Cursor[Any]) -> None:
        i = self.next_id
        self.next_id += 1
        cur.execute("INSERT INTO items VALUES (%s" + ", %s" * 15 + ")", [i, *self.item_values()])
        self.item_ids.add(i)

    def insert_code(self, cur: psycopg.Cursor[Any]) -> None:
        code = f"c{self.next_id}-{self.text(3) or ''}"
        self.next_id += 1
        cur.execute(
            "INSERT INTO codes VALUES (%s, %s, %s)",
            (code, self.rng.randint(0, 100), self.big() if self.rng.random() < 0.6 else None),
        )
        self.codes.add(code)

    def insert_note(self, cur: psycopg.Cursor[Any]) -> None:
        cur.execute(
            "INSERT INTO notes VALUES (%s, %s, %s)",
            (
                self.rng.choice(["a", "b", "c", None]),
                self.rng.randint(0, 3),
                datetime(2024, 1, 1, tzinfo=timezone.utc),
            ),
        )

    def step(self, cur: psycopg.Cursor[Any]) -> None:
        r = self.rng
        op = r.random()
        if op < 0.3 or not self.item_ids:
            self.insert_item(cur)
        elif op < 0.4:
            self.insert_code(cur)
        elif op < 0.5:
            self.insert_note(cur)
        elif op < 0.62:
            # No key change, toasted column untouched: unchanged TOAST.
            i = r.choice(sorted(self.item_ids))
            cur.execute(
                "UPDATE items SET qty = %s, name = %s WHERE id = %s",
                (r.randint(0, 9), self.text(), i),
            )
        elif op < 0.68:
            # Primary-key change (the old key travels in the old image).
            i = r.choice(sorted(self.item_ids))
            new_id = self.next_id
            self.next_id += 1
            cur.execute("UPDATE items SET id = %s WHERE id = %s", (new_id, i))
            self.item_ids.discard(i)
            self.item_ids.add(new_id)
        elif op < 0.74:
            i = r.choice(sorted(self.item_ids))
            values = self.item_values()
            cur.execute(
                "UPDATE items SET name=%s, qty=%s, price=%s, ratio=%s, flag=%s, born=%s, "
                "seen=%s, seen_tz=%s, tags=%s, nums=%s, payload=%s, uid=%s, blob=%s, span=%s, "
                "big=%s WHERE id = %s",
                [*values, i],
            )
        elif op < 0.8 and self.codes:
            code = r.choice(sorted(self.codes))
            if r.random() < 0.5:
                new = f"k{self.next_id}"
                self.next_id += 1
                cur.execute("UPDATE codes SET code = %s WHERE code = %s", (new, code))
                self.codes.discard(code)
                self.codes.add(new)
            else:
                cur.execute("UPDATE codes SET val = val + 1 WHERE code = %s", (code,))
        elif op < 0.86:
            cur.execute(
                "UPDATE notes SET n = n + 1 "
                "WHERE ctid = (SELECT ctid FROM notes WHERE n = %s LIMIT 1)",
                (r.randint(0, 3),),
            )
        elif op < 0.95:
            i = r.choice(sorted(self.item_ids))
            cur.execute("DELETE FROM items WHERE id = %s", (i,))
            self.item_ids.discard(i)
        elif op < 0.97 and self.codes:
            code = r.choice(sorted(self.codes))
            cur.execute("DELETE FROM codes WHERE code = %s", (code,))
            self.codes.discard(code)
        elif op < 0.985:
            cur.execute(
                "DELETE FROM notes WHERE ctid = (SELECT ctid FROM notes WHERE n = %s LIMIT 1)",
                (r.randint(0, 3),),
            )
        else:
            if r.random() < 0.5:
                cur.execute("TRUNCATE notes")
            else:
                cur.execute("TRUNCATE codes")
                self.codes.clear()

    def run(self, transactions: int, max_ops: int = 8) -> None:
        for _ in range(transactions):
            with self.conn.transaction(), self.conn.cursor() as cur:
                for _ in range(self.rng.randint(1, max_ops)):
                    self.step(cur)


# -- comparison ------------------------------------------------------------------


def norm(value: Any) -> Any:
    """One comparable form for a value from a change table or from psycopg."""
    if isinstance(value, dict) and set(value) == {"months", "days", "microseconds"}:
        return ("interval", value["months"], value["days"], value["microseconds"])
    if isinstance(value, timedelta):
        return ("interval", 0, value.days, value.seconds * 1_000_000 + value.microseconds)
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, list | tuple):
        return tuple(norm(v) for v in value)
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(timezone.utc)
    if isinstance(value, memoryview):
        return bytes(value)
    return value


class Mirror:
    """What a consumer holds after applying the change tables in order."""

    def __init__(self) -> None:
        self.keyed: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {}
        self.multisets: dict[str, Counter[tuple[Any, ...]]] = {}
        self.columns: dict[str, list[str]] = {}
        self.changes: list[tuple[str, int, int]] = []

    def apply(self, tables: dict[str, pa.Table]) -> None:
        for name, table in tables.items():
            base = parse_segment_key(name)[0]
            data_columns = [c for c in table.column_names if not c.startswith("_")]
            self.columns.setdefault(base, data_columns)
            for row in table.to_pylist():
                self.changes.append((base, row["_commit_lsn"], row["_tx_ordinal"]))
                if KEYS[base] is None:
                    self._apply_multiset(base, data_columns, row)
                else:
                    self._apply_keyed(base, data_columns, row)

    def _apply_keyed(self, name: str, columns: list[str], row: dict[str, Any]) -> None:
        keys = KEYS[name]
        assert keys is not None
        state = self.keyed.setdefault(name, {})
        kind = row["_change_type"]
        values = {c: row[c] for c in columns}
        if kind == "truncate":
            state.clear()
        elif kind in ("read", "insert"):
            state[tuple(values[k] for k in keys)] = values
        elif kind == "update":
            before = row["_before"]
            source = before if before is not None else values
            old_key = tuple(source[k] for k in keys)
            old = state.pop(old_key, None)
            for column in row["_unchanged"]:
                assert old is not None, f"{name}: unchanged {column} for a row never seen"
                values[column] = old[column]
            state[tuple(values[k] for k in keys)] = values
        elif kind == "delete":
            state.pop(tuple(values[k] for k in keys), None)
        else:
            raise AssertionError(kind)

    def _apply_multiset(self, name: str, columns: list[str], row: dict[str, Any]) -> None:
        state = self.multisets.setdefault(name, Counter())
        kind = row["_change_type"]
        values = tuple(norm(row[c]) for c in columns)
        if kind == "truncate":
            state.clear()
        elif kind in ("read", "insert"):
            state[values] += 1
        elif kind == "update":
            assert row["_before_kind"] == "full"
            old = tuple(norm(row["_before"][c]) for c in columns)
            assert state[old] > 0, f"{name}: update of a row never seen"
            state[old] -= 1
            state[values] += 1
        elif kind == "delete":
            assert state[values] > 0, f"{name}: delete of a row never seen"
            state[values] -= 1
        state += Counter()  # drop zero counts

    def rows(self, name: str) -> list[tuple[Any, ...]]:
        if KEYS[name] is None:
            return sorted(self.multisets.get(name, Counter()).elements(), key=repr)
        return sorted(
            (tuple(norm(v) for v in row.values()) for row in self.keyed.get(name, {}).values()),
            key=repr,
        )


def source_rows(conn: psycopg.Connection[Any], name: str) -> list[tuple[Any, ...]]:
    return sorted(
        (tuple(norm(v) for v in row) for row in conn.execute(SELECTS[name]).fetchall()),
        key=repr,
    )
