"""Synthetic pgoutput streams of the ``bench`` table, with varied values.

The decode benchmarks also run on the capture a real server recorded
(``benches/capture_stream.py``); these streams check that the figures hold for values of
every shape, not just that capture's: float8 values of full precision
(``0.3333333333333333``), timestamptz with microseconds and ``+00``, numeric(12,2) of every
length and sign, names of 1 to 40 characters (some non-ASCII), jsonb documents of several
shapes and uuids. The messages are exactly what pgoutput (protocol 1) sends for
``INSERT``s into

    bench (id bigint primary key, name text, amount numeric(12,2), ts timestamptz,
           flag bool, score float8, doc jsonb, uid uuid)

in text format, or with ``binary 'true'`` in the types' binary send formats; a seeded
random generator makes them reproducible. ``tests/decoder/test_event_values.py`` and
``benches/`` use them.

The ``typed`` table holds the same values less the name and the flag,

    typed (id bigint primary key, amount numeric(12,2), at timestamptz, score float8,
           doc jsonb, uid uuid)

so that a stream of it measures the value parsers and builders of those types rather
than text copying (``benches/synthetic_decode.py``).
"""

from __future__ import annotations

import random
import struct
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

RELATION_OID = 16_400
#: Columns of ``bench``: name, type OID, type modifier.
COLUMNS = (
    ("id", 20, -1),
    ("name", 25, -1),
    ("amount", 1700, ((12 << 16) | 2) + 4),
    ("ts", 1184, -1),
    ("flag", 16, -1),
    ("score", 701, -1),
    ("doc", 3802, -1),
    ("uid", 2950, -1),
)
#: The ``typed`` table: ``bench``'s columns of these indexes, ``ts`` renamed ``at``.
TYPED_RELATION_OID = 16_401
TYPED_INDEXES = (0, 2, 3, 5, 6, 7)
TYPED_COLUMNS = tuple(
    ("at" if COLUMNS[i][0] == "ts" else COLUMNS[i][0], *COLUMNS[i][1:]) for i in TYPED_INDEXES
)
#: Table name -> (relation OID, columns, indexes of ``Row``'s values it holds).
TABLES = {
    "bench": (RELATION_OID, COLUMNS, tuple(range(len(COLUMNS)))),
    "typed": (TYPED_RELATION_OID, TYPED_COLUMNS, TYPED_INDEXES),
}
PG_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
NAMES = ("ada", "grace", "edsger", "barbara", "donald", "żaneta", "jürgen", "李娜", "x")


def relation_message(table: str = "bench") -> bytes:
    relation_oid, columns, _ = TABLES[table]
    out = bytearray(b"R")
    out += struct.pack(">I", relation_oid)
    out += b"public\0" + table.encode() + b"\0" + b"d" + struct.pack(">H", len(columns))
    for i, (name, oid, typmod) in enumerate(columns):
        out += bytes([1 if i == 0 else 0]) + name.encode() + b"\0"
        out += struct.pack(">Ii", oid, typmod)
    return bytes(out)


def begin_message(final_lsn: int, xid: int) -> bytes:
    return b"B" + struct.pack(">QqI", final_lsn, 0, xid)


def commit_message(commit_lsn: int) -> bytes:
    return b"C" + struct.pack(">BQQq", 0, commit_lsn, commit_lsn + 48, 0)


def numeric_binary(cents: int) -> bytes:
    """numeric_send of ``cents / 100`` with dscale 2: base-10000 digits, weight, sign."""
    sign = 0x4000 if cents < 0 else 0
    cents = abs(cents)
    integer, frac = divmod(cents, 100)
    digits: list[int] = []
    while integer:
        integer, d = divmod(integer, 10_000)
        digits.insert(0, d)
    weight = len(digits) - 1
    if frac:
        digits.append(frac * 100)
    # Leading and trailing zero digits are not sent.
    while digits and digits[0] == 0:
        digits.pop(0)
        weight -= 1
    while digits and digits[-1] == 0:
        digits.pop()
    if not digits:
        weight, sign = 0, 0
    return struct.pack(f">hhHH{len(digits)}h", len(digits), weight, sign, 2, *digits)


class Row:
    """One random row: each value in both wire formats."""

    def __init__(self, rng: random.Random, row_id: int) -> None:
        self.id = row_id
        self.name = "".join(rng.choice(NAMES) for _ in range(rng.randint(1, 5)))
        self.cents = rng.randint(-(10**12) + 1, 10**12 - 1) // (10 ** rng.randint(0, 9))
        self.micros = rng.randint(0, 40 * 365 * 86_400 * 10**6)
        self.flag = rng.random() < 0.5
        self.score = rng.choice(
            (rng.random(), 1 / rng.randint(1, 10**6), rng.uniform(-1e12, 1e12), float(row_id))
        )
        self.doc = rng.choice(
            (
                f'{{"a": {row_id}, "b": "{self.name}"}}',
                f'{{"k": [1, 2, {row_id}], "n": null, "t": true}}',
                '{"nested": {"x": 1.5, "y": "z"}}',
            )
        )
        self.uid = uuid.UUID(int=rng.getrandbits(128))

    def text(self) -> list[bytes]:
        ts = PG_EPOCH + timedelta(microseconds=self.micros)
        sign = "-" if self.cents < 0 else ""
        return [
            str(self.id).encode(),
            self.name.encode(),
            f"{sign}{abs(self.cents) // 100}.{abs(self.cents) % 100:02d}".encode(),
            (ts.strftime("%Y-%m-%d %H:%M:%S.%f").rstrip("0").rstrip(".") + "+00").encode(),
            b"t" if self.flag else b"f",
            float8_text(self.score).encode(),
            self.doc.encode(),
            str(self.uid).encode(),
        ]

    def binary(self) -> list[bytes]:
        return [
            struct.pack(">q", self.id),
            self.name.encode(),
            numeric_binary(self.cents),
            struct.pack(">q", self.micros),
            b"\x01" if self.flag else b"\x00",
            struct.pack(">d", self.score),
            b"\x01" + self.doc.encode(),
            self.uid.bytes,
        ]


def float8_text(x: float) -> str:
    """``x`` as float8out prints it (PostgreSQL 12+, extra_float_digits > 0): the shortest
    text that reads back, as Python's ``repr``, but without ``repr``'s ``.0`` on integral
    values, and in exponent form from 1e15 up (``repr``: from 1e16)."""
    text = repr(x)
    if text.endswith(".0"):
        text = text[:-2]
    if 1e15 <= abs(x) < 1e16:
        # repr printed the shortest digits in full: 16 integer digits, no fraction.
        sign, digits = ("-", text[1:]) if x < 0 else ("", text)
        digits = digits.rstrip("0")
        point = "." if len(digits) > 1 else ""
        text = f"{sign}{digits[0]}{point}{digits[1:]}e+15"
    return text


def insert_message(values: list[bytes], binary: bool, relation_oid: int = RELATION_OID) -> bytes:
    kind = b"b" if binary else b"t"
    out = bytearray(b"I")
    out += struct.pack(">I", relation_oid) + b"N" + struct.pack(">H", len(values))
    for v in values:
        out += kind + struct.pack(">i", len(v)) + v
    return bytes(out)


def stream(
    rows: int, binary: bool, seed: int = 1, tx_rows: int = 10_000, table: str = "bench"
) -> Iterator[tuple[bytes, int]]:
    """``(message, lsn)`` pairs: transactions of ``tx_rows`` inserts into ``table`` (a
    key of ``TABLES``), the Relation message in the first; LSNs increase by each
    message's length."""
    rng = random.Random(seed)
    lsn = 0x1_0000_0000
    relation_oid, _, indexes = TABLES[table]
    relation = relation_message(table)
    xid = 1000
    for start in range(0, rows, tx_rows):
        n = min(tx_rows, rows - start)
        inserts = [
            insert_message(_values(rng, start + i + 1, binary, indexes), binary, relation_oid)
            for i in range(n)
        ]
        end = lsn + sum(len(m) for m in inserts) + 64
        yield begin_message(end, xid), lsn
        if start == 0:
            yield relation, lsn
        for m in inserts:
            yield m, lsn
            lsn += len(m)
        yield commit_message(end), end
        lsn = end + 64
        xid += 1


def _values(rng: random.Random, row_id: int, binary: bool, indexes: tuple[int, ...]) -> list[bytes]:
    row = Row(rng, row_id)
    values = row.binary() if binary else row.text()
    return [values[i] for i in indexes]


def messages(
    rows: int, binary: bool, seed: int = 1, table: str = "bench"
) -> tuple[list[bytes], list[int]]:
    pairs = list(stream(rows, binary, seed, table=table))
    return [m for m, _ in pairs], [lsn for _, lsn in pairs]
