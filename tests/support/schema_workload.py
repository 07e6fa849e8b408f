"""The schema-change and odd-name workloads of the lake sinks' tests (``test_delta.py``,
``test_iceberg_schema.py``): the statements run at the source, step by step, and what a
lake table must hold after each step, written as a ``SELECT`` on the source.

- :data:`EVOLVING`: a keyed table ``t`` (its toasted ``big`` column never updated) and a
  keyless REPLICA IDENTITY FULL table ``f``; columns are added, widened (int to bigint,
  real to double precision, a wider numeric) and dropped.
- :data:`ODD`: a table with quotes, spaces, backslashes and mixed case in its column names
  and key values, whose rows then move to new keys with the toasted column unchanged.

A lake table is given as the pyarrow table its reader returns (:func:`assert_holds`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pyarrow as pa

from support.stream_workload import norm


@dataclass(frozen=True)
class Step:
    """Statements run at the source (each its own transaction), then, per lake table,
    the ``SELECT`` on the source it must equal (its columns named as the lake table's,
    no more, no fewer) and the types some of its columns must have."""

    sql: tuple[str, ...]
    want: dict[str, str]
    types: dict[str, dict[str, pa.DataType]] = field(default_factory=dict)

    def run(self, conn: psycopg.Connection[Any]) -> None:
        for statement in self.sql:
            conn.execute(statement)

    def check(self, conn: psycopg.Connection[Any], read: Callable[[str], pa.Table]) -> None:
        """Asserts that each lake table, as ``read(source table name)`` returns it, holds
        what this step wants."""
        for name, select in self.want.items():
            table = read(name)
            assert_holds(conn, select, table, name)
            for column, type_ in self.types.get(name, {}).items():
                assert table.schema.field(column).type == type_, f"{name}.{column}"


def assert_holds(
    conn: psycopg.Connection[Any], select: str, table: pa.Table, label: str = ""
) -> None:
    """``table`` has exactly the columns of ``select`` (in any order) and its rows."""
    cursor = conn.execute(select)
    assert cursor.description is not None
    columns = [d.name for d in cursor.description]
    want = sorted((tuple(norm(v) for v in row) for row in cursor.fetchall()), key=repr)
    assert sorted(table.column_names) == sorted(columns), f"{label}: {table.column_names}"
    got = sorted(
        (tuple(norm(v) for v in row.values()) for row in table.select(columns).to_pylist()),
        key=repr,
    )
    # (No assertion rewriting in this module: the message says what differs.)
    missing = [short(r) for r in want if r not in got]
    unexpected = [short(r) for r in got if r not in want]
    assert got == want, f"{label}: rows missing {missing[:5]}, rows unexpected {unexpected[:5]}"


def short(row: tuple[Any, ...]) -> str:
    return repr(tuple(v[:20] + "..." if isinstance(v, str) and len(v) > 20 else v for v in row))


EVOLVING = (
    Step(
        (
            "CREATE TABLE t (id int PRIMARY KEY, a int, r real, d numeric(10,2), b text, big text)",
            "ALTER TABLE t ALTER COLUMN big SET STORAGE EXTERNAL",
            "CREATE TABLE f (x int, y text, z text)",
            "ALTER TABLE f REPLICA IDENTITY FULL",
            "CREATE PUBLICATION pub FOR TABLE t, f",
            "INSERT INTO t SELECT g, g, g / 4.0, g * 1.25, 'b' || g, repeat('z', 3000)"
            " FROM generate_series(1, 20) g",
            "INSERT INTO f SELECT g % 4, 'y' || g, 'z' || g FROM generate_series(1, 12) g",
        ),
        {"public.t": "SELECT * FROM t", "public.f": "SELECT * FROM f"},
        {"public.t": {"a": pa.int32(), "r": pa.float32(), "d": pa.decimal128(10, 2)}},
    ),
    # ADD COLUMN with a default, which PostgreSQL does not send for the rows it already
    # holds. The first update comes before the ALTER: one batch holds t in two shapes, and
    # without the DDL capture the stream learns of the DDL from the catalog, which by then
    # lists the next one too: t is read again, and equals the source. (Rows of f keep the
    # one column added without a default null, as at the source.)
    Step(
        (
            "UPDATE t SET a = -a WHERE id = 3",
            "ALTER TABLE t ADD COLUMN c numeric(10,2) DEFAULT 1.5",
            "UPDATE t SET c = 2.5, a = a + 1 WHERE id <= 5",
            "INSERT INTO t VALUES (100, 1, 0.5, 1, 'new', 'small', 3.5)",
            "ALTER TABLE f ADD COLUMN w int",
            "UPDATE f SET w = x * 10 WHERE x = 1",
            "INSERT INTO f VALUES (9, 'new', 'z9', 90)",
        ),
        {"public.t": "SELECT * FROM t", "public.f": "SELECT * FROM f"},
    ),
    # Widened types, the key's too; DROP COLUMN, in a run that starts after the ALTER: the
    # keyed table's first change is measured against the source description the lake
    # recorded, so b is dropped and the table, rewritten by the type change, read again;
    # the keyless one (which could not be read again) follows its changes: z is dropped
    # (its rows are matched whole), the types widened.
    Step(
        (
            "ALTER TABLE t ALTER COLUMN id TYPE bigint, ALTER COLUMN a TYPE bigint,"
            " ALTER COLUMN r TYPE float8, ALTER COLUMN d TYPE numeric(14,2), DROP COLUMN b",
            "UPDATE t SET a = 10000000000, r = 1e300, d = 123456789012.25 WHERE id = 2",
            "UPDATE t SET a = a + 1 WHERE id = 4",
            "UPDATE t SET id = 10000000006 WHERE id = 6",
            "INSERT INTO t (id, a) VALUES (101, 7)",
            "ALTER TABLE f ALTER COLUMN x TYPE bigint, DROP COLUMN z",
            "UPDATE f SET x = 10000000000 WHERE x = 2",
            "UPDATE f SET y = y || '!' WHERE x = 1",
            "DELETE FROM f WHERE x = 3",
            "INSERT INTO f VALUES (9, 'new', 91)",
        ),
        {"public.t": "SELECT * FROM t", "public.f": "SELECT * FROM f"},
        {
            "public.t": {
                "id": pa.int64(),
                "a": pa.int64(),
                "r": pa.float64(),
                "d": pa.decimal128(14, 2),
            },
            "public.f": {"x": pa.int64()},
        },
    ),
)

#: Names with a quote, a backslash, spaces, a backtick and mixed case; key values with a
#: quote, a space and a backslash; the toasted column is left unchanged by every update.
ODD = Step(
    (
        """CREATE TABLE "Odd" ("K'ey \\ x" text PRIMARY KEY, "it's `big`" text, "Nr" int)""",
        """ALTER TABLE "Odd" ALTER COLUMN "it's `big`" SET STORAGE EXTERNAL""",
        """CREATE PUBLICATION pub FOR TABLE "Odd" """,
        """INSERT INTO "Odd" SELECT 'k'' ' || g || '\\', repeat(md5(g::text), 200), g
          FROM generate_series(1, 30) g""",
    ),
    {"public.Odd": 'SELECT * FROM "Odd"'},
)

#: Rows move to new keys (their toasted column taken from the old key's row), some move
#: and change again, a row inserted in the same batch moves before the lake has it; a
#: column with an odd name is added.
ODD_MOVES = Step(
    (
        """UPDATE "Odd" SET "K'ey \\ x" = "K'ey \\ x" || ' Moved', "Nr" = -"Nr"
          WHERE "Nr" % 3 = 0""",
        """UPDATE "Odd" SET "Nr" = "Nr" + 100 WHERE "Nr" % 5 = 0""",
        """INSERT INTO "Odd" VALUES ('new \\ ''x''', repeat('n', 5000), 31)""",
        """UPDATE "Odd" SET "K'ey \\ x" = 'new \\ moved' WHERE "Nr" = 31""",
        """ALTER TABLE "Odd" ADD COLUMN "Added `c` 'x' \\" text""",
        """UPDATE "Odd" SET "Added `c` 'x' \\" = 'a\\''b' WHERE "Nr" < 10""",
    ),
    ODD.want,
)

#: The everyday migrations, with the DDL capture installed (``install_ddl_capture``):
#: after each step every lake table equals its source table, all columns. A keyed table
#: ``m`` and a keyless REPLICA IDENTITY FULL table ``k``; DDL and DML share transactions
#: (one string: one transaction), so each DDL must land between the rows around it.
_BOTH = {"public.m": "SELECT * FROM m", "public.k": "SELECT * FROM k"}
MIGRATIONS = (
    Step(
        (
            "CREATE TABLE m (id int PRIMARY KEY, v text, x text, n int)",
            "CREATE TABLE k (a int, b text)",
            "ALTER TABLE k REPLICA IDENTITY FULL",
            "CREATE PUBLICATION pub FOR TABLE m, k",
            "INSERT INTO m SELECT g, 'v' || g, 'x' || g, g FROM generate_series(1, 50) g",
            "INSERT INTO k SELECT g, 'b' || g FROM generate_series(1, 50) g",
        ),
        _BOTH,
    ),
    # ADD COLUMN ... DEFAULT: held rows read the default; a later explicit NULL stays.
    Step(
        (
            "UPDATE m SET v = 'v1-' || id WHERE id <= 3;"
            " ALTER TABLE m ADD COLUMN c int NOT NULL DEFAULT 7;"
            " INSERT INTO m VALUES (101, 'new', 'x', 1, 8);"
            " UPDATE m SET n = n + 1 WHERE id = 4",
            "ALTER TABLE m ADD COLUMN d int DEFAULT 5",
            "INSERT INTO m VALUES (102, 'null d', 'x', 2, 9, NULL)",
        ),
        _BOTH,
        {"public.m": {"c": pa.int32()}},
    ),
    # The same on the keyless table, then updates (rows are matched whole).
    Step(
        (
            "ALTER TABLE k ADD COLUMN c int NOT NULL DEFAULT 7",
            "UPDATE k SET b = b || '!' WHERE a % 5 = 0",
            "DELETE FROM k WHERE a % 7 = 0",
        ),
        _BOTH,
    ),
    # RENAME COLUMN: the values follow the column.
    Step(("ALTER TABLE m RENAME COLUMN v TO w; UPDATE m SET w = 'renamed' WHERE id = 5",), _BOTH),
    # DROP COLUMN, then ADD COLUMN of the same name: never the dropped values.
    Step(
        (
            "ALTER TABLE m DROP COLUMN x",
            "ALTER TABLE m ADD COLUMN x text",
            "UPDATE m SET x = 'again' WHERE id = 6",
        ),
        _BOTH,
    ),
    # ALTER COLUMN ... TYPE ... USING: a rewrite the stream does not carry.
    Step(
        (
            "ALTER TABLE m ALTER COLUMN n TYPE text USING 'n=' || n;"
            " UPDATE m SET w = 'after using' WHERE id = 7",
        ),
        _BOTH,
    ),
    # A volatile default: the table is rewritten with a value per row.
    Step(("ALTER TABLE m ADD COLUMN r int DEFAULT (random() * 1000)::int",), _BOTH),
    # Widening, and TRUNCATE with a reload in one transaction.
    Step(
        (
            "ALTER TABLE m ALTER COLUMN c TYPE bigint",
            "TRUNCATE k; INSERT INTO k SELECT g, 'again' || g, g FROM generate_series(1, 20) g",
        ),
        _BOTH,
        {"public.m": {"c": pa.int64()}},
    ),
)
