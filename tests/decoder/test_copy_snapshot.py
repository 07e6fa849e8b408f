"""The initial snapshot's COPY BINARY data, decoded by `_native.CopyDecoder`, against the
streaming path and PostgreSQL itself (both servers, the `db` fixture).

For every table of `test_arrow_oracle` (every mapped type, arrays with NULL elements and
empty arrays, numeric edge cases, bytea of every byte value, time edge cases, domains,
NULLs) hypothesis inserts random rows; the test then reads

* the raw bytes of ``COPY (SELECT <select_list> FROM t ORDER BY id) TO STDOUT (FORMAT
  BINARY)`` with psycopg 3, one chunk per CopyData message, the relation described from the
  catalog as the snapshot will describe it (`catalog_decoder`), and decodes them;
* the same inserts from a pgoutput slot (``pg_logical_slot_peek_binary_changes``, binary
  tuples; text tuples for enum and citext, whose binary form the stream cannot read) with
  `pgwire_cdc.Decoder`;

and checks that

1. the snapshot table has exactly the streamed table's schema (every field, its type and
   its metadata, the metadata columns, the schema metadata);
2. its data columns equal the streamed rows' values and what PostgreSQL computes and
   psycopg reads back for the same rows (`Harness.compare`); the metadata columns hold
   `read`, the consistent point, consecutive ordinals from ``first_ordinal`` and nulls;
3. the same bytes re-split at random boundaries (hypothesis), fed one at a time or with
   ``feed_many``, and taken in several batches, give identical tables.

Then: malformed streams raise `DecodeError` (truncated, wrong signature, wrong field count,
trailing bytes, OIDs flag), and a value Arrow cannot hold follows the documented policy
exactly as the streaming decoder does (`ColumnValueError` naming table, column and LSN, the
row left out, the other rows with the next ``take()``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pgwire_cdc
import psycopg
import pyarrow as pa
import pytest
from conftest import Database
from hypothesis import given
from hypothesis import strategies as st
from pgwire_cdc import _native, catalog
from pgwire_cdc.errors import ColumnValueError, DecodeError

from decoder.test_arrow_oracle import (
    AS_TEXT,
    ENUM_LABELS,
    HYPOTHESIS,
    SPECS,
    UNREPRESENTABLE,
    Col,
    Harness,
    Spec,
    _rows,
    _spec,
    apply_session_settings,
    normalize,
    peek,
)

#: Specs whose types the streaming decoder reads in text format only (no binary parser,
#: even with the catalog): the snapshot selects them as ::text, and matches the
#: text-format stream. Enums, citext and their arrays resolve through `catalog.type_map`
#: (to text and text[]), so none are left among the oracle's types.
TEXT_ONLY: frozenset[str] = frozenset()

ENUM_SPEC = next(s for s in SPECS if s.name == "enum")
ENUM_ARRAY = _spec(
    "enum_array",
    # An array of an enum is text[] to the decoder once the catalog resolves it.
    Col("mood", pa.string(), st.sampled_from(ENUM_LABELS), oracle=AS_TEXT).array("mood[]"),
    setup=ENUM_SPEC.setup,
)
COPY_SPECS = (*SPECS, ENUM_ARRAY)

METADATA = ("_change_type", "_lsn", "_commit_lsn", "_tx_ordinal", "_commit_ts", "_xid")

# -- the snapshot side -------------------------------------------------------------------


def base_type(conn: psycopg.Connection[Any], type_oid: int, typmod: int) -> tuple[int, int]:
    """The type and modifier the live stream resolves a column to (`catalog.type_map`,
    which it hands to the decoder): a domain's base type with the domain's modifier, text
    for enums and citext, else the type itself with the column's modifier."""
    if type_oid < 16384:
        return type_oid, typmod
    base, base_typmod = catalog.type_map(conn, [type_oid]).get(type_oid, (type_oid, -1))
    return base, typmod if typmod != -1 else base_typmod


#: Published columns in attnum order, with the replica-identity flag pgoutput sets.
CATALOG_COLUMNS = """
SELECT a.attname::text, a.atttypid::int8, a.atttypmod,
       CASE c.relreplident
           WHEN 'f' THEN true
           WHEN 'd' THEN a.attnum = ANY(coalesce((SELECT i.indkey::int2[] FROM pg_index i
                                                  WHERE i.indrelid = c.oid AND i.indisprimary),
                                                 '{}'))
           WHEN 'i' THEN a.attnum = ANY(coalesce((SELECT i.indkey::int2[] FROM pg_index i
                                                  WHERE i.indrelid = c.oid AND i.indisreplident),
                                                 '{}'))
           ELSE false
       END
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


def catalog_decoder(
    conn: psycopg.Connection[Any],
    table: str,
    consistent_point: int,
    first_ordinal: int = 0,
    drop_last_column: bool = False,
) -> _native.CopyDecoder:
    """A CopyDecoder for `table`, described from the catalog."""
    oid, namespace, name, identity = conn.execute(
        "SELECT c.oid::int8, n.nspname::text, c.relname::text, c.relreplident::text"
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE c.oid = %s::regclass",
        (table,),
    ).fetchone()  # type: ignore[misc]
    columns = [
        (name_, type_oid, base, typmod, base_typmod, is_key)
        for name_, type_oid, typmod, is_key in conn.execute(CATALOG_COLUMNS, (table,))
        for base, base_typmod in [base_type(conn, type_oid, typmod)]
    ]
    if drop_last_column:
        columns.pop()
    return _native.CopyDecoder(
        oid, namespace, name, identity, columns, consistent_point, first_ordinal
    )


def copy_chunks(conn: psycopg.Connection[Any], query: str) -> list[bytes]:
    """The raw COPY BINARY data of `query`, one chunk per CopyData message."""
    conn.execute("SET client_encoding TO 'UTF8'")
    chunks = []
    with conn.cursor() as cur, cur.copy(f"COPY ({query}) TO STDOUT (FORMAT BINARY)") as copy:
        for data in copy:
            chunks.append(bytes(data))
    return chunks


def snapshot_query(dec: _native.CopyDecoder, table: str) -> str:
    return f"SELECT {dec.select_list} FROM {table} ORDER BY id"


def current_lsn(conn: psycopg.Connection[Any]) -> int:
    return pgwire_cdc.lsn_to_int(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])  # type: ignore[index]


def resplit(data: bytes, cuts: Sequence[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def same_table(a: pa.Table, b: pa.Table) -> None:
    """Equal schemas (with metadata) and values (NaN equal to NaN, -0.0 unequal to 0.0)."""
    assert a.schema.equals(b.schema, check_metadata=True), f"{a.schema}\n!=\n{b.schema}"
    for name in a.column_names:
        assert normalize(a.column(name)) == normalize(b.column(name)), name


# -- 1-3: the property test ----------------------------------------------------------------


@pytest.fixture
def harness(db: Database, spec: Spec) -> Harness:
    return Harness(db, spec)


@pytest.mark.parametrize("spec", COPY_SPECS, ids=[s.name for s in COPY_SPECS])
@HYPOTHESIS
@given(data=st.data())
def test_snapshot_equals_stream_and_postgresql(
    harness: Harness, spec: Spec, data: st.DataObject
) -> None:
    rows = data.draw(_rows(spec), label="rows")
    first_ordinal = data.draw(st.integers(0, 2**40), label="first_ordinal")
    conn, table = harness.conn, spec.table
    harness.insert(rows)
    try:
        oracle = harness.oracle()
        streamed = harness.decode(binary=spec.name not in TEXT_ONLY)
        lsn = current_lsn(conn)
        dec = catalog_decoder(conn, table, lsn, first_ordinal)
        chunks = copy_chunks(conn, snapshot_query(dec, table))
        dec.feed_many(chunks)
        assert dec.rows == len(rows) and dec.complete
        snap = pa.table(dec.finish())
        n = len(rows)

        # 1. The streamed table's schema, field metadata and all.
        assert snap.schema.equals(streamed.schema, check_metadata=True), (
            f"{snap.schema}\n!=\n{streamed.schema}"
        )
        # 2. Values: PostgreSQL, psycopg and the streamed rows; then the metadata columns.
        harness.compare(rows, oracle, snap, "copy", streamed, change_type="read")
        assert snap.column("_lsn").to_pylist() == [lsn] * n
        assert snap.column("_commit_lsn").to_pylist() == [lsn] * n
        assert snap.column("_tx_ordinal").to_pylist() == list(
            range(first_ordinal, first_ordinal + n)
        )
        assert snap.column("_commit_ts").to_pylist() == [None] * n
        assert snap.column("_xid").to_pylist() == [None] * n
        for name in snap.column_names:
            if name not in METADATA:  # data, _before, _before_kind, _unchanged
                assert normalize(snap.column(name)) == normalize(streamed.column(name)), name
        assert snap.column("_before_kind").to_pylist() == [None] * n
        assert snap.column("_unchanged").to_pylist() == [[]] * n

        # 3. Re-split anywhere, fed one by one, taken in several batches: the same table.
        stream = b"".join(chunks)
        cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12), label="cuts")
        again = catalog_decoder(conn, table, lsn, first_ordinal)
        batches = []
        for i, piece in enumerate(resplit(stream, cuts)):
            again.feed(piece)
            if i % 3 == 2:
                batches.append(pa.table(again.take()))
        batches.append(pa.table(again.finish()))
        same_table(pa.concat_tables(batches), snap)
    finally:
        harness.reset()


# -- 4: malformed streams ----------------------------------------------------------------


@pytest.fixture
def small(db: Database) -> tuple[Database, list[bytes]]:
    """A three-row table `small` and its COPY BINARY chunks."""
    db.conn.execute("CREATE TABLE small (id int8 PRIMARY KEY, note text, amount numeric(8,2))")
    db.conn.execute("INSERT INTO small VALUES (1, 'a', 1.50), (2, NULL, NULL), (3, 'ccc', -2)")
    return db, copy_chunks(db.conn, "SELECT id, note, amount FROM small ORDER BY id")


def _decode(db: Database, stream: Sequence[bytes], drop_last_column: bool = False) -> pa.Table:
    dec = catalog_decoder(db.conn, "small", 42, drop_last_column=drop_last_column)
    for chunk in stream:
        dec.feed(chunk)
    return pa.table(dec.finish())


def test_real_chunks_are_one_tuple_each(small: tuple[Database, list[bytes]]) -> None:
    """What the malformed cases below start from: header + first tuple, one chunk per
    further tuple, the trailer alone; and it decodes."""
    db, chunks = small
    assert len(chunks) == 4 and chunks[0].startswith(b"PGCOPY\n\xff\r\n\x00")
    assert chunks[-1] == b"\xff\xff"
    table = _decode(db, chunks)
    assert table.select(["id", "note"]).to_pylist() == [
        {"id": 1, "note": "a"},
        {"id": 2, "note": None},
        {"id": 3, "note": "ccc"},
    ]


def _check(err: DecodeError, offset: int, words: str) -> None:
    message = str(err)
    assert err.message_kind == "CopyData", message
    assert err.offset == offset, message
    assert "public.small" in message and words in message, message
    assert not isinstance(err, ColumnValueError)


def test_truncated_streams_raise(small: tuple[Database, list[bytes]]) -> None:
    db, chunks = small
    stream = b"".join(chunks)
    for cut in range(len(stream)):
        with pytest.raises(DecodeError) as info:
            _decode(db, [stream[:cut]])
        _check(info.value, cut, "stream ends")


def test_wrong_signature_raises(small: tuple[Database, list[bytes]]) -> None:
    db, chunks = small
    bad = bytearray(chunks[0])
    bad[7] = 0xFE  # the \xff of the signature, as a 7-bit transfer would leave it
    with pytest.raises(DecodeError) as info:
        _decode(db, [bytes(bad), *chunks[1:]])
    _check(info.value, 0, "signature")
    # A text-format COPY of the same rows.
    text = copy_text(db)
    with pytest.raises(DecodeError) as info:
        _decode(db, [text])
    _check(info.value, 0, "signature")


def copy_text(db: Database) -> bytes:
    with db.conn.cursor() as cur, cur.copy("COPY small TO STDOUT") as copy:
        return b"".join(bytes(d) for d in copy)


def test_oids_flag_raises(small: tuple[Database, list[bytes]]) -> None:
    db, chunks = small
    first = bytearray(chunks[0])
    first[11:15] = (1 << 16).to_bytes(4, "big")
    with pytest.raises(DecodeError) as info:
        _decode(db, [bytes(first), *chunks[1:]])
    _check(info.value, 11, "OIDs")


def test_wrong_field_count_raises(small: tuple[Database, list[bytes]]) -> None:
    """The decoder expects the relation's column count: here one column fewer than the
    query selects (a catalog description that disagrees with the query)."""
    db, chunks = small
    with pytest.raises(DecodeError) as info:
        _decode(db, chunks, drop_last_column=True)
    _check(info.value, 19, "3 fields, the table has 2 columns")


def test_trailing_bytes_raise(small: tuple[Database, list[bytes]]) -> None:
    db, chunks = small
    with pytest.raises(DecodeError) as info:
        _decode(db, [*chunks, b"\x00"])
    _check(info.value, sum(map(len, chunks)), "after the trailer")
    # A second stream appended to the first.
    with pytest.raises(DecodeError) as info:
        _decode(db, [*chunks, *chunks])
    _check(info.value, sum(map(len, chunks)), "after the trailer")


def test_feed_many_names_the_failing_chunk_and_the_error_is_final(
    small: tuple[Database, list[bytes]],
) -> None:
    db, chunks = small
    dec = catalog_decoder(db.conn, "small", 42)
    with pytest.raises(DecodeError) as info:
        dec.feed_many([*chunks, b"xy", b"z"])
    assert info.value.index == len(chunks)
    assert dec.tuples == 3
    with pytest.raises(DecodeError):
        dec.feed(b"")
    with pytest.raises(DecodeError):
        dec.finish()


def test_unexpected_argument_values(db: Database) -> None:
    with pytest.raises(ValueError, match="replica_identity"):
        _native.CopyDecoder(1, "public", "t", "x", [], 0)
    with pytest.raises(OverflowError):
        _native.CopyDecoder(1, "public", "t", "d", [("a", -1, 23, -1, -1, False)], 0)


# -- 5: values Arrow cannot hold ---------------------------------------------------------


@pytest.mark.parametrize("case", UNREPRESENTABLE, ids=[c[0] for c in UNREPRESENTABLE])
def test_unrepresentable_values_follow_the_policy(
    db: Database, case: tuple[str, str, str, int, tuple[str, ...]]
) -> None:
    """As in the streaming decoder: the row is left out, ``take()`` raises
    ColumnValueError naming table, column and LSN (the consistent point), never the value;
    the next ``take()`` gives the other rows. The streaming decoder rejects the same
    column of the same row."""
    _, sql_type, literal, min_version, secret = case
    if db.cluster.version < min_version:
        pytest.skip(f"{sql_type} {literal!r} needs PostgreSQL {min_version // 10000}+")
    conn = db.conn
    apply_session_settings(conn)
    table, column = f"unrep_{UNREPRESENTABLE.index(case)}", "bad"
    conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, ok int4, {column} {sql_type})")
    conn.execute(f"CREATE PUBLICATION pub FOR TABLE {table}")
    conn.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
    conn.execute(f"INSERT INTO {table} VALUES (1, 7, %s::{sql_type})", (literal,))
    conn.execute(f"INSERT INTO {table} VALUES (2, 8, NULL)")
    conn.execute(f"INSERT INTO {table} VALUES (3, 9, NULL)")

    messages, lsns = peek(conn, "s", "pub", binary=True)
    streaming = pgwire_cdc.Decoder(proto_version=1, binary=True, keep_events=False)
    with pytest.raises(ColumnValueError) as streamed:
        streaming.feed_many(messages, lsns)
        streaming.take()

    dec = catalog_decoder(conn, table, 4242, first_ordinal=10)
    dec.feed_many(copy_chunks(conn, snapshot_query(dec, table)))
    assert dec.rows == 2
    with pytest.raises(ColumnValueError) as info:
        dec.take()
    err = info.value
    assert (err.table, err.column, err.lsn) == (f"public.{table}", column, 4242)
    assert (err.table, err.column) == (streamed.value.table, streamed.value.column)
    assert err.message_kind == "CopyData"
    message = str(err)
    assert f"public.{table}" in message and f'"{column}"' in message, message
    leaks = sorted({f for f in (*secret, literal) if f in message})
    assert not leaks, f"the value ({leaks}) is in the message {message!r}"
    rest = pa.table(dec.finish())
    assert rest.select(["id", "ok", column, "_tx_ordinal"]).to_pylist() == [
        {"id": 2, "ok": 8, column: None, "_tx_ordinal": 11},
        {"id": 3, "ok": 9, column: None, "_tx_ordinal": 12},
    ]
    assert pa.table(dec.take()).num_rows == 0


# -- parallel decoding ---------------------------------------------------------------------


def test_parallel_decoders_in_threads(db: Database) -> None:
    """Snapshot connections decode in parallel threads (feed_many runs without the GIL):
    each decoder gets its own stream's rows, whatever the interleaving."""
    conn = db.conn
    conn.execute("CREATE TABLE big (id int8 PRIMARY KEY, payload text, n numeric(12,2))")
    conn.execute(
        "INSERT INTO big SELECT g, repeat(md5(g::text), 3), g / 7.0"
        " FROM generate_series(1, 20000) g"
    )
    ranges = [(1, 5000), (5001, 10000), (10001, 15000), (15001, 20000)]
    decoders = [catalog_decoder(conn, "big", 1, first_ordinal=lo) for lo, _ in ranges]
    streams = [
        copy_chunks(
            conn, f"SELECT id, payload, n FROM big WHERE id BETWEEN {lo} AND {hi} ORDER BY id"
        )
        for lo, hi in ranges
    ]
    errors: list[BaseException] = []

    def run(dec: _native.CopyDecoder, chunks: list[bytes]) -> None:
        try:
            for i in range(0, len(chunks), 1000):
                dec.feed_many(chunks[i : i + 1000])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [
        threading.Thread(target=run, args=job) for job in zip(decoders, streams, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for dec, (lo, hi) in zip(decoders, ranges, strict=True):
        table = pa.table(dec.finish())
        assert table.column("id").to_pylist() == list(range(lo, hi + 1))
        assert table.column("_tx_ordinal").to_pylist() == list(range(lo, hi + 1))
