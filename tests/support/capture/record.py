"""Record golden pgoutput captures from real PostgreSQL 15 and 18 servers.

For every scenario in `SCENARIOS` and every server that supports it, this creates a fresh
database, the scenario's tables and publication, a logical replication slot with the
``pgoutput`` plugin, runs the workload, and reads the raw messages back with
``pg_logical_slot_peek_binary_changes``. Each result is written to
``tests/fixtures/captures/<server>/<scenario>.json``::

    {"scenario": ..., "description": ..., "server": "pg15", "server_version_num": 150018,
     "proto_version": 1, "binary": false, "transport": "sql" | "walsender",
     "options": {...the exact pgoutput options...},
     "decode_settings": {...settings of the decoding session...},
     "setup": [...DDL run before the slot was created...],
     "sql": [...workload statements ("@2 ..." = second session, "@wait X" = read until X)...],
     "messages": [{"lsn": "0/16B3748", "xid": 734, "data": "<hex>"}, ...]}

`xid` is the SQL interface's xid column (null for walsender captures, where `lsn` is the
XLogData frame's walStart).

Run it with ``make captures`` (or ``python tests/support/capture/record.py [scenario ...]``). The
test suites import `record_scenario` to record the same scenarios live.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

TESTS_DIR = Path(__file__).resolve().parents[2]
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

from support.capture.walsender import LogicalStream  # noqa: E402
from support.capture.wire import compress_labels, labels  # noqa: E402
from support.server import SERVERS, PgCluster  # noqa: E402

CAPTURE_DIR = TESTS_DIR / "fixtures" / "captures"
SLOT = "capture_slot"
#: A workload statement starting with this runs in a second session (interleaved
#: transactions); all others run in the first.
SECOND_SESSION = "@2 "
#: In a walsender scenario, "@wait X" reads the stream until a message with tag X arrives
#: (after the one the previous wait found).
WAIT = "@wait "
PUB = "pub"

#: Settings of the session that runs the peek function (text output of values depends on
#: them, so they are pinned).
BASE_DECODE_SETTINGS: dict[str, str] = {
    "TimeZone": "UTC",
    "DateStyle": "ISO, MDY",
    "IntervalStyle": "postgres",
    "extra_float_digits": "1",
    "bytea_output": "hex",
}

#: 12,800 bytes of hex: incompressible enough, and stored out of line with STORAGE EXTERNAL.
BIG = "(SELECT string_agg(md5(i::text), '') FROM generate_series(1, 400) i)"
BIG2 = "(SELECT string_agg(md5((i * 7)::text), '') FROM generate_series(1, 400) i)"
#: 2,208 bytes: toasted out of line (EXTERNAL) yet small enough for a btree key.
KEYBIG = "(SELECT string_agg(md5(i::text), '') FROM generate_series(1, 69) i)"


@dataclass(frozen=True)
class Scenario:
    """One workload and the plugin options to capture it with."""

    name: str
    description: str
    setup: tuple[str, ...]
    sql: tuple[str, ...]
    proto_version: int = 1
    binary: bool = False
    messages: bool = False
    streaming: str | None = None  # None, "on" or "parallel"
    two_phase: bool = False
    origin: str | None = None  # pgoutput 'origin' option (PG16+)
    min_version: int = 150000
    small_work_mem: bool = False  # logical_decoding_work_mem = 64kB in the decoding session
    #: more settings for the decoding session (e.g. debug_logical_replication_streaming)
    extra_decode_settings: tuple[tuple[str, str], ...] = ()
    teardown: tuple[str, ...] = ()
    #: labels (see capture.wire) that must appear in the capture
    must_contain: tuple[str, ...] = ()
    #: labels that must appear on servers before PostgreSQL 17 only. From 17 on, a
    #: transaction already known to be aborted when decoding reaches the memory limit is
    #: discarded instead of streamed, so the SQL interface (which decodes after the fact)
    #: never sees its Stream Abort.
    must_contain_before_pg17: tuple[str, ...] = ()
    #: labels that must not appear
    must_not_contain: tuple[str, ...] = ()
    extra_check: Callable[[list[str]], None] | None = field(default=None, compare=False)
    #: "sql": pg_logical_slot_peek_binary_changes after the workload; "walsender": a
    #: replication connection reads while the workload runs ("@wait X" steps in `sql`
    #: read until a message with tag X arrives)
    transport: str = "sql"

    def options(self, server_version: int) -> dict[str, str]:
        """The exact pgoutput options passed to the peek function."""
        opts = {"proto_version": str(self.proto_version), "publication_names": PUB}
        if self.binary:
            opts["binary"] = "true"
        if self.messages:
            opts["messages"] = "true"
        if self.streaming:
            opts["streaming"] = self.streaming
        if self.two_phase:
            opts["two_phase"] = "on"
        if self.origin and server_version >= 160000:
            opts["origin"] = self.origin
        return opts

    def decode_settings(self) -> dict[str, str]:
        settings = dict(BASE_DECODE_SETTINGS)
        if self.small_work_mem:
            settings["logical_decoding_work_mem"] = "64kB"
        settings.update(self.extra_decode_settings)
        return settings

    def supported_by(self, server_version: int) -> bool:
        return server_version >= self.min_version


def _pub(tables: str, extra: str = "") -> str:
    return f"CREATE PUBLICATION {PUB} FOR TABLE {tables}{extra}"


def _stream_workload(table: str) -> tuple[str, ...]:
    return (
        "BEGIN",
        f"INSERT INTO {table} SELECT i, 'r' || i FROM generate_series(1, 1000) i",
        "SELECT pg_logical_emit_message(true, 'stream', 'inside the stream')",
        "SAVEPOINT s1",
        f"INSERT INTO {table} SELECT i, 's' || i FROM generate_series(1001, 2000) i",
        "ROLLBACK TO SAVEPOINT s1",
        f"INSERT INTO {table} SELECT i, 't' || i FROM generate_series(2001, 3000) i",
        "COMMIT",
        "BEGIN",
        f"INSERT INTO {table} SELECT i, 'x' || i FROM generate_series(5001, 6000) i",
        "ROLLBACK",
        f"INSERT INTO {table} VALUES (9999, 'after')",
    )


def _ws_stream_workload() -> tuple[str, ...]:
    return (
        "BEGIN",
        "INSERT INTO big SELECT i, 'x' || i FROM generate_series(1, 1000) i",
        "@wait S",  # streamed while still in progress
        "ROLLBACK",
        "@wait A",
        "BEGIN",
        "INSERT INTO big SELECT i, 'r' || i FROM generate_series(1, 600) i",
        "SAVEPOINT s1",
        "INSERT INTO big SELECT i, 's' || i FROM generate_series(601, 1200) i",
        "@wait S",
        "ROLLBACK TO SAVEPOINT s1",
        "INSERT INTO big SELECT i, 't' || i FROM generate_series(1201, 1800) i",
        "COMMIT",
        "@wait c",
        "INSERT INTO big VALUES (9999, 'after')",
        "@wait C",
    )


TYPES_TABLE = (
    "CREATE TABLE types (id int PRIMARY KEY, i2 int2, i4 int4, i8 int8, t text,"
    " n numeric(10,3), ts timestamptz, b bool, f8 float8, j jsonb, u uuid, by bytea,"
    " arr int4[])"
)
TYPES_SQL = (
    "INSERT INTO types VALUES (1, -32768, 2147483647, -9223372036854775808, 'héllo ✓',"
    " 12345.678, '2024-02-29 12:34:56.789012+00', true, 1.5,"
    " '{\"a\": [1, 2, {\"b\": null}]}', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11',"
    " '\\x00ff10', '{1,NULL,-3}')",
    "INSERT INTO types (id) VALUES (2)",
    "UPDATE types SET i4 = 42, b = false WHERE id = 1",
    "DELETE FROM types WHERE id = 2",
)

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="ri_default",
        description="REPLICA IDENTITY DEFAULT (composite PK (region, id) on columns 0 and 2):"
        " insert, update not changing the key, update changing the key, delete",
        setup=(
            "CREATE TABLE ri_default (id int, name text, region text, score int,"
            " PRIMARY KEY (region, id))",
            _pub("ri_default"),
        ),
        sql=(
            "INSERT INTO ri_default VALUES (1, 'one', 'eu', 10), (2, 'two', 'us', 20)",
            "BEGIN",
            "INSERT INTO ri_default VALUES (3, NULL, 'eu', NULL)",
            "UPDATE ri_default SET name = 'uno', score = 11 WHERE id = 1",
            "UPDATE ri_default SET id = 20, name = 'twenty' WHERE id = 2",
            "DELETE FROM ri_default WHERE id = 1",
            "COMMIT",
        ),
        must_contain=("U", "U:K", "D:K"),
    ),
    Scenario(
        name="ri_full",
        description="REPLICA IDENTITY FULL: insert, updates (non-key and key), delete",
        setup=(
            "CREATE TABLE ri_full (id int PRIMARY KEY, name text, score int)",
            "ALTER TABLE ri_full REPLICA IDENTITY FULL",
            _pub("ri_full"),
        ),
        sql=(
            "INSERT INTO ri_full VALUES (1, 'one', 10), (2, NULL, 20)",
            "UPDATE ri_full SET name = 'uno' WHERE id = 1",
            "UPDATE ri_full SET id = 3 WHERE id = 2",
            "DELETE FROM ri_full WHERE id = 1",
        ),
        must_contain=("U:O", "D:O"),
        must_not_contain=("U", "U:K", "D:K"),
    ),
    Scenario(
        name="ri_index",
        description="REPLICA IDENTITY USING INDEX on unique not-null `code` (column 1):"
        " update changing code, update not changing it (also one changing only the PK),"
        " delete",
        setup=(
            "CREATE TABLE ri_index (id int PRIMARY KEY, code text NOT NULL, name text)",
            "CREATE UNIQUE INDEX ri_index_code ON ri_index (code)",
            "ALTER TABLE ri_index REPLICA IDENTITY USING INDEX ri_index_code",
            _pub("ri_index"),
        ),
        sql=(
            "INSERT INTO ri_index VALUES (1, 'a', 'one'), (2, 'b', 'two')",
            "UPDATE ri_index SET code = 'aa' WHERE id = 1",
            "UPDATE ri_index SET name = 'deux' WHERE id = 2",
            "UPDATE ri_index SET id = 22 WHERE id = 2",
            "DELETE FROM ri_index WHERE id = 1",
        ),
        must_contain=("U:K", "U", "D:K"),
    ),
    Scenario(
        name="ri_nothing",
        description="REPLICA IDENTITY NOTHING with a publication of inserts only:"
        " inserts, an update and a delete (neither published)",
        setup=(
            "CREATE TABLE ri_nothing (id int, v text)",
            "ALTER TABLE ri_nothing REPLICA IDENTITY NOTHING",
            _pub("ri_nothing", " WITH (publish = 'insert')"),
        ),
        sql=(
            "INSERT INTO ri_nothing VALUES (1, 'a'), (2, 'b')",
            "UPDATE ri_nothing SET v = 'bb' WHERE id = 2",
            "DELETE FROM ri_nothing WHERE id = 1",
            "INSERT INTO ri_nothing VALUES (3, 'c')",
        ),
        must_contain=("I",),
        must_not_contain=("U", "D:K", "D:O"),
    ),
    Scenario(
        name="toast_default",
        description="Unchanged TOAST under REPLICA IDENTITY DEFAULT: an update of another"
        " column sends 'u' with no old image (partial), then an update of the big column"
        " itself, then a delete",
        setup=(
            "CREATE TABLE toast_default (id int PRIMARY KEY, note text, big text)",
            "ALTER TABLE toast_default ALTER COLUMN big SET STORAGE EXTERNAL",
            _pub("toast_default"),
        ),
        sql=(
            f"INSERT INTO toast_default VALUES (1, 'a', {BIG})",
            "UPDATE toast_default SET note = 'b' WHERE id = 1",
            f"UPDATE toast_default SET big = {BIG2} WHERE id = 1",
            "DELETE FROM toast_default WHERE id = 1",
        ),
        must_contain=("U+u", "D:K"),
    ),
    Scenario(
        name="toast_key",
        description="Unchanged TOAST in a replica-identity column: DEFAULT with the toasted"
        " column as primary key; the old key is logged because it is external, so the 'u'"
        " is filled from the K image (full)",
        setup=(
            "CREATE TABLE toast_key (k text PRIMARY KEY, note text)",
            "ALTER TABLE toast_key ALTER COLUMN k SET STORAGE EXTERNAL",
            _pub("toast_key"),
        ),
        sql=(
            f"INSERT INTO toast_key VALUES ({KEYBIG}, 'a')",
            "UPDATE toast_key SET note = 'b'",
            "DELETE FROM toast_key",
        ),
        must_contain=("U:K+u", "D:K"),
    ),
    Scenario(
        name="toast_full",
        description="Unchanged TOAST under REPLICA IDENTITY FULL: the O image supplies the"
        " value (full)",
        setup=(
            "CREATE TABLE toast_full (id int PRIMARY KEY, note text, big text)",
            "ALTER TABLE toast_full ALTER COLUMN big SET STORAGE EXTERNAL",
            "ALTER TABLE toast_full REPLICA IDENTITY FULL",
            _pub("toast_full"),
        ),
        sql=(
            f"INSERT INTO toast_full VALUES (1, 'a', {BIG})",
            "UPDATE toast_full SET note = 'b' WHERE id = 1",
            "DELETE FROM toast_full WHERE id = 1",
        ),
        must_contain=("U:O+u", "D:O"),
    ),
    Scenario(
        name="toast_index",
        description="Unchanged TOAST under REPLICA IDENTITY USING INDEX (code): an update"
        " changing the key sends a K image without the toasted column (partial), an update"
        " of another column sends no old image (partial), then a delete",
        setup=(
            "CREATE TABLE toast_index (id int PRIMARY KEY, code int NOT NULL, note text, big text)",
            "CREATE UNIQUE INDEX toast_index_code ON toast_index (code)",
            "ALTER TABLE toast_index REPLICA IDENTITY USING INDEX toast_index_code",
            "ALTER TABLE toast_index ALTER COLUMN big SET STORAGE EXTERNAL",
            _pub("toast_index"),
        ),
        sql=(
            f"INSERT INTO toast_index VALUES (1, 100, 'a', {BIG})",
            "UPDATE toast_index SET code = 101 WHERE id = 1",
            "UPDATE toast_index SET note = 'b' WHERE id = 1",
            "DELETE FROM toast_index WHERE id = 1",
        ),
        must_contain=("U:K+u", "U+u", "D:K"),
    ),
    Scenario(
        name="truncate",
        description="TRUNCATE parent, other RESTART IDENTITY CASCADE (child cascaded through"
        " its FK), then a plain TRUNCATE",
        setup=(
            "CREATE TABLE tr_parent (id serial PRIMARY KEY, v text)",
            "CREATE TABLE tr_child (id serial PRIMARY KEY,"
            " parent_id int REFERENCES tr_parent (id), v text)",
            "CREATE TABLE tr_other (id serial PRIMARY KEY, v text)",
            _pub("tr_parent, tr_child, tr_other"),
        ),
        sql=(
            "INSERT INTO tr_parent (v) VALUES ('p1'), ('p2')",
            "INSERT INTO tr_child (parent_id, v) VALUES (1, 'c1')",
            "INSERT INTO tr_other (v) VALUES ('o1')",
            "TRUNCATE tr_parent, tr_other RESTART IDENTITY CASCADE",
            "INSERT INTO tr_other (v) VALUES ('o2')",
            "TRUNCATE tr_other",
        ),
        must_contain=("T:3rels,opt3", "T:1rels,opt0"),
    ),
    Scenario(
        name="column_list",
        description="Publication with a column list (id, a) on a table (id, a, b, c)",
        setup=(
            "CREATE TABLE cl (id int PRIMARY KEY, a text, b text, c int)",
            _pub("cl (id, a)"),
        ),
        sql=(
            "INSERT INTO cl VALUES (1, 'a1', 'b1', 1), (2, 'a2', 'b2', 2)",
            "UPDATE cl SET b = 'bb' WHERE id = 1",
            "UPDATE cl SET id = 10, a = 'a10' WHERE id = 1",
            "DELETE FROM cl WHERE id = 2",
        ),
        must_contain=("I", "U", "U:K", "D:K"),
    ),
    Scenario(
        name="row_filter",
        description="Row filters: rf_key WHERE (id > 10) under DEFAULT and rf_full WHERE"
        " (v > 10) under FULL; updates moving a row into the filter become inserts, out of"
        " it deletes, within it stay updates",
        setup=(
            "CREATE TABLE rf_key (id int PRIMARY KEY, v text)",
            "CREATE TABLE rf_full (id int PRIMARY KEY, v int, note text)",
            "ALTER TABLE rf_full REPLICA IDENTITY FULL",
            _pub("rf_key WHERE (id > 10), rf_full WHERE (v > 10)"),
        ),
        sql=(
            "INSERT INTO rf_key VALUES (5, 'a'), (15, 'b')",
            "UPDATE rf_key SET id = 25 WHERE id = 5",
            "UPDATE rf_key SET id = 7 WHERE id = 15",
            "UPDATE rf_key SET v = 'c' WHERE id = 25",
            "UPDATE rf_key SET id = 30 WHERE id = 25",
            "DELETE FROM rf_key WHERE id = 7",
            "INSERT INTO rf_full VALUES (1, 5, 'x'), (2, 20, 'y')",
            "UPDATE rf_full SET v = 15 WHERE id = 1",
            "UPDATE rf_full SET v = 3 WHERE id = 2",
            "UPDATE rf_full SET note = 'z' WHERE id = 1",
            "DELETE FROM rf_full WHERE id = 2",
            "DELETE FROM rf_full WHERE id = 1",
        ),
        must_contain=("I", "D:K", "U", "U:K", "D:O", "U:O"),
    ),
    Scenario(
        name="schema_change",
        description="Relation re-sent after ADD COLUMN, DROP COLUMN and RENAME COLUMN",
        setup=("CREATE TABLE sc (id int PRIMARY KEY, a text)", _pub("sc")),
        sql=(
            "INSERT INTO sc VALUES (1, 'a')",
            "ALTER TABLE sc ADD COLUMN b int DEFAULT 7",
            "INSERT INTO sc VALUES (2, 'b', 2)",
            "UPDATE sc SET a = 'aa' WHERE id = 1",
            "ALTER TABLE sc DROP COLUMN a",
            "INSERT INTO sc VALUES (3, 3)",
            "ALTER TABLE sc RENAME COLUMN b TO c",
            "INSERT INTO sc VALUES (4, 4)",
            "DELETE FROM sc WHERE id = 1",
        ),
        extra_check=lambda labs: _expect(labs.count("R") == 4, "relation sent 4 times"),
    ),
    Scenario(
        name="messages",
        description="Logical decoding messages: transactional with a change, non-transactional"
        " (alone and inside a transaction), bytea content with zero bytes, empty content,"
        " a rolled-back transactional one",
        setup=("CREATE TABLE msg_t (id int PRIMARY KEY, v text)", _pub("msg_t")),
        sql=(
            "BEGIN",
            "INSERT INTO msg_t VALUES (1, 'a')",
            "SELECT pg_logical_emit_message(true, 'prefix', 'content')",
            "COMMIT",
            "SELECT pg_logical_emit_message(false, 'nontx', 'hello')",
            "SELECT pg_logical_emit_message(true, 'bin', '\\x00ff0001'::bytea)",
            "BEGIN",
            "SELECT pg_logical_emit_message(false, 'préfixe', 'in a transaction')",
            "INSERT INTO msg_t VALUES (2, 'b')",
            "COMMIT",
            "SELECT pg_logical_emit_message(false, 'empty', '')",
            "BEGIN",
            "SELECT pg_logical_emit_message(true, 'rolledback', 'never')",
            "ROLLBACK",
        ),
        messages=True,
        must_contain=("M:tx", "M:nontx"),
    ),
    Scenario(
        name="stream_v2",
        description="Streamed large transactions (proto 2, streaming on,"
        " logical_decoding_work_mem 64kB): one committed with a rolled-back savepoint in"
        " the middle and a transactional message, one rolled back entirely, then a small"
        " plain transaction",
        setup=("CREATE TABLE big (id int PRIMARY KEY, v text)", _pub("big")),
        sql=_stream_workload("big"),
        proto_version=2,
        streaming="on",
        messages=True,
        small_work_mem=True,
        must_contain=("S", "E", "A:sub", "c", "M:tx", "B", "C"),
        must_contain_before_pg17=("A:top",),
    ),
    Scenario(
        name="stream_v4_parallel",
        description="The stream_v2 workload with proto 4 and streaming 'parallel' (Stream"
        " Abort carries abort LSN and timestamp)",
        setup=("CREATE TABLE big (id int PRIMARY KEY, v text)", _pub("big")),
        sql=_stream_workload("big"),
        proto_version=4,
        streaming="parallel",
        messages=True,
        small_work_mem=True,
        min_version=160000,
        must_contain=("S", "E", "A:sub", "c", "M:tx", "B", "C"),
    ),
    Scenario(
        name="stream_immediate_v4",
        description="Streaming with debug_logical_replication_streaming = immediate (PG16+,"
        " every change streamed on its own), proto 4 parallel: a committed transaction with"
        " a rolled-back savepoint, and a rolled-back transaction that is streamed before its"
        " abort is decoded (so PG17+ also sends the top-level Stream Abort)",
        setup=("CREATE TABLE big (id int PRIMARY KEY, v text)", _pub("big")),
        sql=(
            "BEGIN",
            "INSERT INTO big VALUES (1, 'a'), (2, 'b')",
            "SAVEPOINT s1",
            "INSERT INTO big VALUES (3, 'c')",
            "ROLLBACK TO SAVEPOINT s1",
            "INSERT INTO big VALUES (4, 'd')",
            "COMMIT",
            "BEGIN",
            "INSERT INTO big VALUES (5, 'e'), (6, 'f')",
            "ROLLBACK",
            "INSERT INTO big VALUES (7, 'g')",
        ),
        proto_version=4,
        streaming="parallel",
        extra_decode_settings=(("debug_logical_replication_streaming", "immediate"),),
        min_version=160000,
        must_contain=("S", "E", "A:sub", "A:top", "c"),
        must_not_contain=("B", "C"),
    ),
    Scenario(
        name="two_phase",
        description="Two-phase (proto 3, two_phase slot): PREPARE + COMMIT PREPARED,"
        " PREPARE + ROLLBACK PREPARED, then a plain transaction",
        setup=("CREATE TABLE tp (id int PRIMARY KEY, v text)", _pub("tp")),
        sql=(
            "BEGIN",
            "INSERT INTO tp VALUES (1, 'a'), (2, 'b')",
            "UPDATE tp SET v = 'bb' WHERE id = 2",
            "PREPARE TRANSACTION 'g1'",
            "COMMIT PREPARED 'g1'",
            "BEGIN",
            "INSERT INTO tp VALUES (3, 'c')",
            "PREPARE TRANSACTION 'g2'",
            "ROLLBACK PREPARED 'g2'",
            "INSERT INTO tp VALUES (4, 'd')",
        ),
        proto_version=3,
        two_phase=True,
        must_contain=("b", "P", "K", "r", "B", "C"),
    ),
    Scenario(
        name="stream_prepare",
        description="Streamed + prepared (proto 3, streaming on, two_phase on, 64kB"
        " work mem): a big prepared transaction committed, another rolled back",
        setup=("CREATE TABLE big (id int PRIMARY KEY, v text)", _pub("big")),
        sql=(
            "BEGIN",
            "INSERT INTO big SELECT i, 'p' || i FROM generate_series(1, 1500) i",
            "PREPARE TRANSACTION 'gs1'",
            "COMMIT PREPARED 'gs1'",
            "BEGIN",
            "INSERT INTO big SELECT i, 'q' || i FROM generate_series(2001, 3500) i",
            "PREPARE TRANSACTION 'gs2'",
            "ROLLBACK PREPARED 'gs2'",
        ),
        proto_version=3,
        streaming="on",
        two_phase=True,
        small_work_mem=True,
        must_contain=("S", "E", "p", "K", "r"),
    ),
    Scenario(
        name="stream_interleaved",
        description="Two streamed transactions from two sessions, interleaved (proto 2,"
        " streaming on, 64kB): the one that started second commits first",
        setup=("CREATE TABLE big (id int PRIMARY KEY, v text)", _pub("big")),
        sql=(
            "BEGIN",
            "INSERT INTO big SELECT i, 'a' || i FROM generate_series(1, 700) i",
            "@2 BEGIN",
            "@2 INSERT INTO big SELECT i, 'b' || i FROM generate_series(10001, 10700) i",
            "INSERT INTO big SELECT i, 'a' || i FROM generate_series(701, 1400) i",
            "@2 INSERT INTO big SELECT i, 'b' || i FROM generate_series(10701, 11400) i",
            "@2 COMMIT",
            "COMMIT",
        ),
        proto_version=2,
        streaming="on",
        small_work_mem=True,
        must_contain=("S", "E", "c"),
    ),
    Scenario(
        name="two_phase_interleaved",
        description="Two prepared transactions from two sessions (proto 3). ga (first to"
        " touch tp) is decoded at its PREPARE with the Relation for tp, a later plain insert"
        " into tp comes without a Relation, and ga is committed last. gb is rolled back"
        " before the SQL interface decodes it, so PostgreSQL detects the concurrent abort"
        " and sends an empty Begin Prepare/Prepare, then Rollback Prepared",
        setup=(
            "CREATE TABLE tp (id int PRIMARY KEY, v text)",
            "CREATE TABLE tq (id int PRIMARY KEY, v text)",
            _pub("tp, tq"),
        ),
        sql=(
            "BEGIN",
            "INSERT INTO tp VALUES (1, 'a')",
            "@2 BEGIN",
            "@2 INSERT INTO tq VALUES (100, 'q')",
            "@2 PREPARE TRANSACTION 'gb'",
            "PREPARE TRANSACTION 'ga'",
            "INSERT INTO tp VALUES (2, 'b')",
            "ROLLBACK PREPARED 'gb'",
            "INSERT INTO tq VALUES (101, 'r')",
            "COMMIT PREPARED 'ga'",
        ),
        proto_version=3,
        two_phase=True,
        must_contain=("b", "P", "K", "r", "B", "C"),
    ),
    Scenario(
        name="ws_stream_abort",
        description="Walsender, proto 2, streaming on, 64kB: a large transaction streamed"
        " while in progress and then rolled back (Stream Abort on every server version),"
        " a streamed one with a rolled-back savepoint that commits, then a plain one",
        setup=("CREATE TABLE big (id int PRIMARY KEY, v text)", _pub("big")),
        sql=_ws_stream_workload(),
        proto_version=2,
        streaming="on",
        small_work_mem=True,
        transport="walsender",
        must_contain=("S", "E", "A:top", "c", "B", "C"),
    ),
    Scenario(
        name="ws_stream_abort_v4",
        description="The ws_stream_abort workload with proto 4, streaming parallel",
        setup=("CREATE TABLE big (id int PRIMARY KEY, v text)", _pub("big")),
        sql=_ws_stream_workload(),
        proto_version=4,
        streaming="parallel",
        small_work_mem=True,
        min_version=160000,
        transport="walsender",
        must_contain=("S", "E", "A:top", "c", "B", "C"),
    ),
    Scenario(
        name="ws_prepared_relation",
        description="Walsender, proto 3, two_phase: gb is the first transaction to touch tq,"
        " so its Relation is sent inside gb, decoded at PREPARE; gb is then rolled back, and a"
        " later plain insert into tq comes without a Relation",
        setup=(
            "CREATE TABLE tp (id int PRIMARY KEY, v text)",
            "CREATE TABLE tq (id int PRIMARY KEY, v text)",
            _pub("tp, tq"),
        ),
        sql=(
            "@2 BEGIN",
            "@2 INSERT INTO tq VALUES (100, 'q')",
            "@2 PREPARE TRANSACTION 'gb'",
            "@wait P",
            "ROLLBACK PREPARED 'gb'",
            "@wait r",
            "INSERT INTO tq VALUES (101, 'r')",
            "@wait C",
        ),
        proto_version=3,
        two_phase=True,
        transport="walsender",
        must_contain=("b", "P", "r", "B", "C"),
        extra_check=lambda labs: _expect(
            labs == ["b", "R", "I", "P", "r", "B", "I", "C"], "relation only inside gb"
        ),
    ),
    Scenario(
        name="origin",
        description="A transaction replayed under replication origin 'origin_a' at origin"
        " LSN 0/ABCDEF, then one without origin",
        setup=("CREATE TABLE og (id int PRIMARY KEY, v text)", _pub("og")),
        sql=(
            "SELECT pg_replication_origin_create('origin_a')",
            "SELECT pg_replication_origin_session_setup('origin_a')",
            "BEGIN",
            "SELECT pg_replication_origin_xact_setup('0/ABCDEF', now())",
            "INSERT INTO og VALUES (1, 'a')",
            "COMMIT",
            "SELECT pg_replication_origin_session_reset()",
            "INSERT INTO og VALUES (2, 'b')",
        ),
        origin="any",
        teardown=("SELECT pg_replication_origin_drop('origin_a')",),
        must_contain=("O",),
    ),
    Scenario(
        name="binary_types",
        description="Binary tuple format (binary true): int2/4/8, text, numeric, timestamptz,"
        " bool, float8, jsonb, uuid, bytea, int4[]",
        setup=(TYPES_TABLE, _pub("types")),
        sql=TYPES_SQL,
        binary=True,
    ),
    Scenario(
        name="text_types",
        description="The binary_types workload in text format",
        setup=(TYPES_TABLE, _pub("types")),
        sql=TYPES_SQL,
    ),
    Scenario(
        name="types_rich_text",
        description="Many types in text format, including special values",
        setup=(
            "CREATE DOMAIN posint AS int CHECK (VALUE > 0)",
            "CREATE TABLE rich (id int PRIMARY KEY, f4 float4, f8 float8, n numeric,"
            " n2 numeric(38,10), vc varchar(10), ch char(5), nm name, t text, by bytea,"
            " d date, tm time, ttz timetz, ts timestamp, tstz timestamptz, iv interval,"
            " u uuid, js json, jb jsonb, ip inet, cidr_ cidr, mac macaddr, m money,"
            " r int4range, tv tsvector, o oid, bo bool, ia int4[], ta text[], ia2 int4[],"
            " dom posint)",
            _pub("rich"),
        ),
        sql=(
            "INSERT INTO rich VALUES (1, 'NaN', 'Infinity', 'NaN',"
            " 1234567890123456789012345678.0123456789, 'varchar', 'ab', 'a name',"
            " E'quote\\' \"dq\" back\\\\slash\\nnewline\\ttab ünïcødé 🎉', '\\xdeadbeef00',"
            " '2024-02-29', '23:59:59.999999', '12:00:00+05:30',"
            " '2000-01-01 00:00:00', '1999-12-31 23:59:59.5+00',"
            " '1 year 2 mons 3 days 04:05:06.789', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',"
            ' \'{"k": "v", "n": 1.50}\', \'{"k": "v", "n": 1.50}\', \'192.168.0.1/24\','
            " '10.0.0.0/8', '08:00:2b:01:02:03', 12.34, '[1,10)', 'a fat cat', 4294967295,"
            ' true, \'{1,NULL,3}\', \'{"a b","c,d",NULL,"e\\"f"}\', \'{}\', 5)',
            "INSERT INTO rich (id, f4, f8, n, d, ts, tstz, ia2) VALUES (2, '-Infinity',"
            " '-0', '-0.000001', 'infinity', '-infinity', 'infinity', '{{1,2},{3,4}}')",
            "INSERT INTO rich (id, f4, f8, n, d, iv) VALUES (3, 3.4028235e38, 5e-324,"
            " 1e100, '0044-03-15 BC', '-1 days +02:00:00')",
        ),
    ),
    Scenario(
        name="user_types",
        description="User-defined types (enum, composite, enum array, domain) give Type"
        " messages before the Relation",
        setup=(
            "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
            "CREATE TYPE pair AS (x int, y text)",
            "CREATE DOMAIN posint AS int CHECK (VALUE > 0)",
            "CREATE TABLE ut (id int PRIMARY KEY, m mood, p pair, ms mood[], d posint)",
            _pub("ut"),
        ),
        sql=(
            "INSERT INTO ut VALUES (1, 'happy', ROW(1, 'one'), '{sad,ok}', 7)",
            "UPDATE ut SET m = 'sad' WHERE id = 1",
        ),
        must_contain=("Y", "R", "I"),
    ),
)

SCENARIO_BY_NAME = {s.name: s for s in SCENARIOS}


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def int_to_lsn(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def wait_for_wal_flush(conn: psycopg.Connection[Any], timeout: float = 30.0) -> None:
    """Wait until all WAL written so far is flushed.

    The peek function decodes only up to the flush position. A non-transactional message or
    an abort record at the very end of a workload is not flushed by a commit; the WAL writer
    flushes it within wal_writer_delay.
    """
    row = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
    assert row is not None
    target = row[0]
    deadline = time.monotonic() + timeout
    while True:
        row = conn.execute("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (target,)).fetchone()
        if row is not None and row[0]:
            return
        if time.monotonic() > deadline:
            raise CaptureError(f"WAL not flushed up to {target} after {timeout}s")
        time.sleep(0.05)


class CaptureError(RuntimeError):
    """A capture does not contain what its scenario must produce."""


def record_scenario(
    cluster: PgCluster, scenario: Scenario, dbname: str | None = None
) -> dict[str, Any]:
    """Run `scenario` against `cluster` in a fresh database; return the capture dict.

    The database is dropped afterwards unless `dbname` was given (then it must exist and be
    empty; the caller owns it).
    """
    if not scenario.supported_by(cluster.version):
        raise ValueError(f"{scenario.name} needs server version >= {scenario.min_version}")
    own_db = dbname is None
    name = dbname or cluster.create_database(f"cap_{scenario.name}")
    options = scenario.options(cluster.version)
    settings = scenario.decode_settings()
    try:
        if scenario.transport == "walsender":
            messages = _record_walsender(cluster, name, scenario, options, settings)
        else:
            messages = _record_sql(cluster, name, scenario, options, settings)
    finally:
        if own_db:
            cluster.drop_database(name)
    capture: dict[str, Any] = {
        "scenario": scenario.name,
        "description": scenario.description,
        "server": cluster.name,
        "server_version_num": cluster.version,
        "proto_version": scenario.proto_version,
        "binary": scenario.binary,
        "transport": scenario.transport,
        "options": options,
        "decode_settings": settings,
        "setup": list(scenario.setup),
        "sql": list(scenario.sql),
        "messages": messages,
    }
    check_capture(scenario, capture)
    return capture


def _run_statement(
    stmt: str, conn: psycopg.Connection[Any], conn2: psycopg.Connection[Any]
) -> None:
    if stmt.startswith(SECOND_SESSION):
        conn2.execute(stmt.removeprefix(SECOND_SESSION))
    else:
        conn.execute(stmt)


def _setup_and_create_slot(conn: psycopg.Connection[Any], scenario: Scenario) -> None:
    """Runs the scenario's setup, then creates the pgoutput slot (before the workload)."""
    for stmt in scenario.setup:
        conn.execute(stmt)
    conn.execute(
        "SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, %s)",
        (SLOT, scenario.two_phase),
    )


def _record_walsender(
    cluster: PgCluster,
    name: str,
    scenario: Scenario,
    options: dict[str, str],
    settings: dict[str, str],
) -> list[dict[str, Any]]:
    with cluster.connect(name) as conn, cluster.connect(name) as conn2:
        _setup_and_create_slot(conn, scenario)
        stream = LogicalStream(cluster.dsn_for(name), SLOT, options, settings)
        try:
            pos = 0
            for stmt in scenario.sql:
                if stmt.startswith(WAIT):
                    pos = stream.wait_for(stmt.removeprefix(WAIT).strip(), pos) + 1
                else:
                    _run_statement(stmt, conn, conn2)
        finally:
            stream.close()
        deadline = time.monotonic() + 30
        while conn.execute(
            "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (SLOT,)
        ).fetchone() != (False,):
            if time.monotonic() > deadline:
                raise CaptureError("replication slot still active after the stream closed")
            time.sleep(0.05)
        conn.execute("SELECT pg_drop_replication_slot(%s)", (SLOT,))
    return [{"lsn": int_to_lsn(f.lsn), "xid": None, "data": f.data.hex()} for f in stream.frames]


def _record_sql(
    cluster: PgCluster,
    name: str,
    scenario: Scenario,
    options: dict[str, str],
    settings: dict[str, str],
) -> list[dict[str, Any]]:
    with cluster.connect(name) as conn, cluster.connect(name) as conn2:
        _setup_and_create_slot(conn, scenario)
        for stmt in scenario.sql:
            _run_statement(stmt, conn, conn2)
        wait_for_wal_flush(conn)
    with cluster.connect(name) as dec:
        for key, value in settings.items():
            dec.execute("SELECT set_config(%s, %s, false)", (key, value))
        flat = [item for pair in options.items() for item in pair]
        rows = dec.execute(
            "SELECT lsn::text, xid::text::bigint, data"
            " FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, VARIADIC %s)",
            (SLOT, flat),
        ).fetchall()
        for stmt in scenario.teardown:
            dec.execute(stmt)
        dec.execute("SELECT pg_drop_replication_slot(%s)", (SLOT,))
    return [{"lsn": lsn, "xid": xid, "data": bytes(data).hex()} for lsn, xid, data in rows]


def capture_labels(capture: dict[str, Any]) -> list[str]:
    """Structure labels (see capture.wire) of a capture's messages."""
    v4_abort = capture["options"].get("streaming") == "parallel"
    return labels([bytes.fromhex(m["data"]) for m in capture["messages"]], v4_abort=v4_abort)


def check_capture(scenario: Scenario, capture: dict[str, Any]) -> None:
    """Sanity-check a capture: parseable structure, required message shapes present."""
    if not capture["messages"]:
        raise CaptureError(f"{scenario.name}: no messages captured")
    labs = capture_labels(capture)
    required = list(scenario.must_contain)
    if capture["server_version_num"] < 170000:
        required += scenario.must_contain_before_pg17
    for label in required:
        if label not in labs:
            raise CaptureError(
                f"{scenario.name} on {capture['server']}: expected a {label!r} message, got "
                + compress_labels(labs)
            )
    for label in scenario.must_not_contain:
        if label in labs:
            raise CaptureError(
                f"{scenario.name} on {capture['server']}: unexpected {label!r} message in "
                + compress_labels(labs)
            )
    if scenario.extra_check is not None:
        try:
            scenario.extra_check(labs)
        except AssertionError as exc:
            raise CaptureError(f"{scenario.name}: {exc}: {compress_labels(labs)}") from exc


def capture_path(server: str, scenario: str) -> Path:
    return CAPTURE_DIR / server / f"{scenario}.json"


def write_capture(capture: dict[str, Any]) -> Path:
    path = capture_path(capture["server"], capture["scenario"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_capture(capture), encoding="utf-8")
    return path


def dump_capture(capture: dict[str, Any]) -> str:
    """JSON text of a capture: readable header, one message per line (small diffs)."""
    lines = ["{"]
    items = list(capture.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if key == "messages":
            lines.append(f"{json.dumps(key)}: [")
            for j, msg in enumerate(value):
                sep = "," if j < len(value) - 1 else ""
                lines.append("  " + json.dumps(msg, ensure_ascii=False) + sep)
            lines.append("]" + comma)
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def load_capture(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def all_capture_paths() -> list[Path]:
    return sorted(CAPTURE_DIR.glob("*/*.json"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("scenarios", nargs="*", help="scenario names (default: all)")
    parser.add_argument("--server", choices=SERVERS, action="append", help="default: both")
    args = parser.parse_args(argv)
    unknown = [n for n in args.scenarios if n not in SCENARIO_BY_NAME]
    if unknown:
        parser.error(f"unknown scenarios {unknown}; known: {sorted(SCENARIO_BY_NAME)}")
    chosen = [SCENARIO_BY_NAME[n] for n in args.scenarios] or list(SCENARIOS)
    for server in args.server or SERVERS:
        with PgCluster.for_server(server) as cluster:
            print(f"== {server} ({cluster.version})")
            for scenario in chosen:
                if not scenario.supported_by(cluster.version):
                    print(f"   {scenario.name}: skipped (needs {scenario.min_version})")
                    continue
                capture = record_scenario(cluster, scenario)
                path = write_capture(capture)
                size = path.stat().st_size
                print(
                    f"   {scenario.name}: {len(capture['messages'])} messages, {size} bytes: "
                    + compress_labels(capture_labels(capture))
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
