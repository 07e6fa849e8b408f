"""The change-table schema over the golden captures (no server needed).

Every table of every capture (tests/fixtures/captures) has its data columns first, then the
metadata columns with their documented types; its rows agree, one for one, with the events a
second Decoder gives for the same capture (change type, LSNs, tx ordinal, commit time, xid,
new values, old image, unchanged-TOAST columns); and the scenarios that exercise the
row-image rules (replica identity DEFAULT / FULL / USING INDEX, TRUNCATE, unchanged TOAST)
give exactly the rows the rules say. Text and binary
captures of the same workload give the same data columns; a schema change merges in
`take()` and stays split in `take_segments()`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, time, timezone
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

import pgwire_cdc
import pyarrow as pa
import pytest
from pgwire_cdc.errors import ColumnValueError
from pgwire_cdc.tables import METADATA_COLUMNS
from support.capture.record import all_capture_paths, load_capture
from support.scenario_checks import BIG, BIG2, KEYBIG

CAPTURES = all_capture_paths()
IDS = [f"{p.parent.name}-{p.stem}" for p in CAPTURES]
SERVERS = ("pg15", "pg18")

METADATA_TYPES = {
    "_lsn": pa.int64(),
    "_commit_lsn": pa.int64(),
    "_tx_ordinal": pa.int64(),
    "_commit_ts": pa.timestamp("us", tz="UTC"),
    "_xid": pa.int64(),
    "_before_kind": pa.string(),
}

#: Arrow types of the built-in type OIDs the captures use (the type mapping of
#: docs/change-tables.md); a numeric's type depends on its modifier.
OID_TYPES: dict[int, pa.DataType] = {
    16: pa.bool_(),
    17: pa.binary(),
    19: pa.string(),
    20: pa.int64(),
    21: pa.int16(),
    23: pa.int32(),
    25: pa.string(),
    26: pa.int64(),
    114: pa.string(),
    650: pa.string(),
    700: pa.float32(),
    701: pa.float64(),
    790: pa.string(),
    829: pa.string(),
    869: pa.string(),
    1007: pa.list_(pa.int32()),
    1009: pa.list_(pa.string()),
    1042: pa.string(),
    1043: pa.string(),
    1082: pa.date32(),
    1083: pa.time64("us"),
    1114: pa.timestamp("us"),
    1184: pa.timestamp("us", tz="UTC"),
    1186: pa.struct([("months", pa.int32()), ("days", pa.int32()), ("microseconds", pa.int64())]),
    1266: pa.string(),
    2950: pa.string(),
    3614: pa.string(),
    3802: pa.string(),
    3904: pa.string(),
}
FIRST_USER_OID = 16384


def column_type(oid: int, typmod: int) -> pa.DataType:
    if oid == 1700:
        if typmod < 4:
            return pa.string()
        precision, scale = (typmod - 4) >> 16, (typmod - 4) & 0xFFFF
        return pa.decimal128(precision, scale) if precision <= 38 else pa.string()
    if oid >= FIRST_USER_OID:
        return pa.string()  # enums, composites, domains, arrays of them
    return OID_TYPES[oid]


#: Built-in types a Type message may name as a domain's base type (pgoutput describes a
#: domain column's type with its base type's namespace and name).
BUILTIN_NAMES = {
    "bool": 16,
    "int2": 21,
    "int4": 23,
    "int8": 20,
    "float4": 700,
    "float8": 701,
    "numeric": 1700,
    "text": 25,
    "varchar": 1043,
    "date": 1082,
    "timestamp": 1114,
    "timestamptz": 1184,
    "uuid": 2950,
    "jsonb": 3802,
}


def base_types(events: list[Any]) -> dict[int, int]:
    """Domain OID -> base type OID, from the Type messages of a stream."""
    return {
        e.type_oid: BUILTIN_NAMES[e.type_name]
        for e in events
        if e.kind == "type" and e.type_namespace == "pg_catalog" and e.type_name in BUILTIN_NAMES
    }


def signature(t: pa.DataType) -> Any:
    """An Arrow type without list item names, nullability or metadata."""
    if pa.types.is_list(t):
        return ("list", signature(t.value_type))
    if pa.types.is_struct(t):
        return ("struct", tuple((f.name, signature(f.type)) for f in t))
    return str(t)


# -- decoding -------------------------------------------------------------------------------


@dataclass
class Decoded:
    capture: dict[str, Any]
    tables: dict[str, pa.Table]
    segments: list[tuple[str, pa.Table]]
    events: list[Any]
    #: ColumnValueErrors take() raised (their rows are not in the tables)
    errors: list[ColumnValueError]
    relations: dict[str, list[list[tuple[str, int, int, bool]]]]


def _cstring(data: bytes, pos: int) -> tuple[str, int]:
    end = data.index(b"\0", pos)
    return data[pos:end].decode(), end + 1


def _relation(data: bytes, in_stream: bool) -> tuple[str, list[tuple[str, int, int, bool]]]:
    """("schema.table", [(column, type OID, type modifier, is key), ...]) of an 'R'."""
    pos = 1 + (4 if in_stream else 0) + 4  # tag, xid in a stream block, relation OID
    namespace, pos = _cstring(data, pos)
    name, pos = _cstring(data, pos)
    pos += 1  # replica identity
    (ncols,) = struct.unpack_from(">h", data, pos)
    pos += 2
    columns = []
    for _ in range(ncols):
        flags = data[pos]
        column, pos = _cstring(data, pos + 1)
        oid, typmod = struct.unpack_from(">Ii", data, pos)
        pos += 8
        columns.append((column, oid, typmod, bool(flags & 1)))
    assert pos == len(data)
    return f"{namespace or 'pg_catalog'}.{name}", columns


def relations_on_wire(messages: list[bytes]) -> dict[str, list[list[tuple[str, int, int, bool]]]]:
    """Every version of every relation, read from the Relation messages themselves:
    "schema.table" -> [[(column, type OID, type modifier, is key), ...], ...]. (Events
    cannot always say: a Relation sent inside a rolled-back prepared transaction is dropped
    with it, yet describes the table's later changes.)"""
    out: dict[str, list[list[tuple[str, int, int, bool]]]] = {}
    in_stream = False
    for data in messages:
        tag = data[:1]
        if tag in (b"S", b"E"):
            in_stream = tag == b"S"
        elif tag == b"R":
            table, columns = _relation(data, in_stream)
            versions = out.setdefault(table, [])
            if not versions or versions[-1] != columns:
                versions.append(columns)
    return out


def messages_of(capture: dict[str, Any]) -> tuple[list[bytes], list[int]]:
    messages = [bytes.fromhex(m["data"]) for m in capture["messages"]]
    lsns = [pgwire_cdc.lsn_to_int(m["lsn"]) for m in capture["messages"]]
    return messages, lsns


def _decoder(capture: dict[str, Any], **kwargs: bool) -> pgwire_cdc.Decoder:
    dec = pgwire_cdc.Decoder(
        proto_version=capture["proto_version"], binary=capture["binary"], **kwargs
    )
    dec.feed_many(*messages_of(capture))
    return dec


def take_all(dec: pgwire_cdc.Decoder, segments: bool = False) -> tuple[Any, list[Any]]:
    """take() (or take_segments()), again after each ColumnValueError (the rows it names
    are left out; the others come with the next call)."""
    errors: list[ColumnValueError] = []
    for _ in range(100):
        try:
            return (dec.take_segments() if segments else dec.take()), errors
        except ColumnValueError as exc:
            errors.append(exc)
    raise AssertionError("take() keeps raising")


@cache
def decode(path: Path) -> Decoded:
    capture = load_capture(path)
    tables, errors = take_all(_decoder(capture, keep_events=False))
    segments, segment_errors = take_all(_decoder(capture, keep_events=False), segments=True)
    assert [(e.table, e.column, e.lsn) for e in errors] == [
        (e.table, e.column, e.lsn) for e in segment_errors
    ]
    events = _decoder(capture, keep_tables=False).events(typed=False)
    relations = relations_on_wire(messages_of(capture)[0])
    return Decoded(capture, tables, segments, events, errors, relations)


def capture_path(server: str, scenario: str) -> Path:
    (path,) = [p for p in CAPTURES if p.parent.name == server and p.stem == scenario]
    return path


@pytest.fixture(params=CAPTURES, ids=IDS)
def decoded(request: pytest.FixtureRequest) -> Decoded:
    return decode(request.param)


# -- rows as the events describe them --------------------------------------------------------


@dataclass
class Row:
    """What one change-table row must hold, from one event."""

    table: str
    change_type: str
    lsn: int
    commit_lsn: int
    tx_ordinal: int
    commit_ts: datetime | None
    xid: int | None
    data: dict[str, Any] | None  # column name -> the event's value; None: all null
    before: dict[str, Any] | None
    before_kind: str | None
    unchanged: list[str]


def _old_image(
    old: Any, columns: list[tuple[str, bool]]
) -> tuple[dict[str, Any] | None, str | None]:
    if old is None:
        return None, None
    kind, values = old
    names = [name for name, _ in columns]
    if kind == "full":
        return dict(zip(names, values, strict=True)), "full"
    assert kind == "key", kind
    keys = [name for name, is_key in columns if is_key]
    image = dict.fromkeys(names)
    image.update(zip(keys, values, strict=True))
    return image, "key"


def rows_from_events(
    events: list[Any], wire: dict[str, list[list[tuple[str, int, int, bool]]]]
) -> list[Row]:
    """One row per insert / update / delete, one per table of a truncate, by the rules of
    the change-table schema, in commit order and then tx ordinal. Columns: those of the last
    relation event of the table, else (none delivered yet) its first version on the wire."""
    relations: dict[str, list[tuple[str, bool]]] = {
        table: [(c[0], c[3]) for c in versions[0]] for table, versions in wire.items()
    }
    rows: list[Row] = []
    for e in events:
        if e.kind == "relation":
            relations[e.table] = [(str(c[0]), bool(c[3])) for c in e.columns]
            continue
        if e.kind not in ("insert", "update", "delete", "truncate"):
            continue
        common = (e.start_lsn, e.commit_lsn, e.tx_ordinal, e.commit_ts, e.xid)
        if e.kind == "truncate":
            for table in e.tables:
                rows.append(Row(table, "truncate", *common, None, None, None, []))
            continue
        columns = relations[e.table]
        names = [name for name, _ in columns]
        if e.kind == "insert":
            data = dict(zip(names, e.wire_table_row, strict=True))
            rows.append(Row(e.table, "insert", *common, data, None, None, []))
        elif e.kind == "update":
            before, before_kind = _old_image(e.wire_old_table_row, columns)
            if e.wire_updated_table_row[0] == "full":
                data = dict(zip(names, e.wire_updated_table_row[1], strict=True))
                unchanged: list[str] = []
            else:
                _, values, missing = e.wire_updated_table_row
                present = [n for i, n in enumerate(names) if i not in missing]
                data = dict(zip(present, values, strict=True))
                unchanged = [names[i] for i in missing]
                data.update(dict.fromkeys(unchanged))
            rows.append(Row(e.table, "update", *common, data, before, before_kind, unchanged))
        else:
            before, before_kind = _old_image(e.wire_old_table_row, columns)
            assert before is not None, "PostgreSQL sends an old image with every delete"
            rows.append(Row(e.table, "delete", *common, before, before, before_kind, []))
    return sorted(rows, key=lambda r: (r.commit_lsn, r.tx_ordinal))


SKIP = object()


def as_event_value(value: Any, t: pa.DataType, binary: bool) -> Any:
    """An Arrow value as the event carries it (text format: PostgreSQL's text), or SKIP
    where only NULL-ness is compared (binary captures, types with other text forms)."""
    if value is None:
        return None
    if binary:
        return SKIP
    if pa.types.is_integer(t):
        return str(value)
    if pa.types.is_string(t):
        return value
    if pa.types.is_boolean(t):
        return "t" if value else "f"
    return SKIP


def _cell(array: pa.Array, i: int, binary: bool) -> Any:
    scalar = array[i]
    if not scalar.is_valid:
        return None
    t = array.type
    if pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_boolean(t):
        return as_event_value(scalar.as_py(), t, binary)
    return SKIP


def _same(actual: Any, expected: Any) -> bool:
    if actual is SKIP:
        return expected is not None
    if expected is pgwire_cdc.UNCHANGED_TOAST:
        return False
    return bool(actual == expected)


# -- schema ---------------------------------------------------------------------------------


def check_schema(table: pa.Table, where: str) -> None:
    names = table.column_names
    data = names[: len(names) - len(METADATA_COLUMNS)]
    assert tuple(names[len(data) :]) == METADATA_COLUMNS, f"{where}: {names}"
    assert data and not any(n in METADATA_COLUMNS for n in data), where
    schema = table.schema
    change_type = schema.field("_change_type").type
    assert change_type == pa.string() or (
        pa.types.is_dictionary(change_type) and change_type.value_type == pa.string()
    ), f"{where}: _change_type {change_type}"
    for name, t in METADATA_TYPES.items():
        assert schema.field(name).type == t, f"{where}: {name} is {schema.field(name).type}"
    unchanged = schema.field("_unchanged").type
    assert pa.types.is_list(unchanged) and unchanged.value_type == pa.string(), where
    before = schema.field("_before").type
    assert pa.types.is_struct(before), f"{where}: _before is {before}"
    assert [(f.name, signature(f.type)) for f in before] == [
        (n, signature(schema.field(n).type)) for n in data
    ], f"{where}: _before {before} does not hold the data columns"
    for name in data:
        assert schema.field(name).nullable, f"{where}: {name} not nullable"
    assert schema.field("_before").nullable and schema.field("_before_kind").nullable


def test_every_capture_is_checked() -> None:
    assert len(CAPTURES) >= 50, CAPTURES
    assert {p.parent.name for p in CAPTURES} == set(SERVERS)


def test_metadata_columns_and_types(decoded: Decoded) -> None:
    assert decoded.tables or not rows_from_events(decoded.events, decoded.relations)
    for name, table in decoded.tables.items():
        check_schema(table, f"{decoded.capture['scenario']} {name}")
    for name, table in decoded.segments:
        check_schema(table, f"{decoded.capture['scenario']} segment {name}")
    assert {name for name, _ in decoded.segments} == set(decoded.tables)


def test_data_column_types_follow_the_relation(decoded: Decoded) -> None:
    """Each segment's data columns: the Relation message's columns, in its order, typed by
    the type mapping."""
    bases = base_types(decoded.events)
    versions = {
        table: [
            [(c[0], signature(column_type(bases.get(c[1], c[1]), c[2]))) for c in v] for v in found
        ]
        for table, found in decoded.relations.items()
    }
    for name, table in decoded.segments:
        data = table.column_names[: table.num_columns - len(METADATA_COLUMNS)]
        got = [(n, signature(table.schema.field(n).type)) for n in data]
        assert got in versions[name], (name, got, versions[name])


def test_rows_agree_with_events(decoded: Decoded) -> None:
    binary = bool(decoded.capture["binary"])
    left_out = {(e.table, e.lsn) for e in decoded.errors}
    expected = [
        r
        for r in rows_from_events(decoded.events, decoded.relations)
        if (r.table, r.lsn) not in left_out
    ]
    assert len(left_out) == len(decoded.errors)
    by_table: dict[str, list[Row]] = {}
    for row in expected:
        by_table.setdefault(row.table, []).append(row)
    assert set(decoded.tables) == set(by_table), (set(decoded.tables), set(by_table))
    for name, table in decoded.tables.items():
        rows = by_table[name]
        where = f"{decoded.capture['scenario']} {name}"
        assert table.num_rows == len(rows), f"{where}: {table.num_rows} rows, {len(rows)} events"
        meta = table.select(
            ["_change_type", "_lsn", "_commit_lsn", "_tx_ordinal", "_commit_ts", "_xid"]
        ).to_pylist()
        kinds = table.column("_before_kind").to_pylist()
        unchanged = table.column("_unchanged").to_pylist()
        before = table.column("_before").combine_chunks()
        data_names = table.column_names[: table.num_columns - len(METADATA_COLUMNS)]
        data = {n: table.column(n).combine_chunks() for n in data_names}
        for i, row in enumerate(rows):
            at = f"{where} row {i} ({row.change_type} at {row.lsn})"
            assert meta[i] == {
                "_change_type": row.change_type,
                "_lsn": row.lsn,
                "_commit_lsn": row.commit_lsn,
                "_tx_ordinal": row.tx_ordinal,
                "_commit_ts": row.commit_ts,
                "_xid": row.xid,
            }, at
            assert kinds[i] == row.before_kind, at
            # Columns of the merged table this change did not carry (another segment's)
            # are named in _unchanged after the row's own (tables.mark_unchanged).
            uncarried = []
            if row.change_type in ("read", "insert", "update") and row.data is not None:
                uncarried = [n for n in data_names if n not in row.data]
            assert unchanged[i] == row.unchanged + uncarried, at
            for n in data_names:
                got = _cell(data[n], i, binary)
                want = None if row.data is None else row.data.get(n)
                assert got is None if want is None else _same(got, want), (at, n, got, want)
            if row.before is None:
                assert not before[i].is_valid, at
                continue
            assert before[i].is_valid, at
            for n in data_names:
                got = _cell(before.field(n), i, binary)
                want = row.before.get(n)
                assert got is None if want is None else _same(got, want), (at, n, got, want)


def test_rows_are_in_commit_order(decoded: Decoded) -> None:
    commits = [
        e.commit_lsn
        for e in decoded.events
        if e.kind in ("commit", "stream_commit", "commit_prepared")
    ]
    assert commits == sorted(commits), "commit order is commit-LSN order"
    for name, table in decoded.tables.items():
        keys = list(
            zip(
                table.column("_commit_lsn").to_pylist(),
                table.column("_tx_ordinal").to_pylist(),
                strict=True,
            )
        )
        assert keys == sorted(keys) and len(set(keys)) == len(keys), name
        assert set(keys) <= {(e.commit_lsn, e.tx_ordinal) for e in decoded.events}


def test_types_rich_text_leaves_out_the_unrepresentable_row() -> None:
    """Row 2 of types_rich_text holds infinite dates and timestamps and a 2-D array: the
    first take() raises ColumnValueError for it (naming table, column and LSN); the other
    rows come with the next take()."""
    for server in SERVERS:
        d = decode(capture_path(server, "types_rich_text"))
        inserts = [e for e in d.events if e.kind == "insert"]
        assert len(inserts) == 3
        (error,) = d.errors
        assert (error.table, error.column, error.lsn) == ("public.rich", "d", inserts[1].start_lsn)
        table = d.tables["public.rich"]
        assert table.column("id").to_pylist() == [1, 3]
        assert table.column("d").cast(pa.int32()).to_pylist() == [19_782, -735_160]


def test_types_rich_text_values() -> None:
    """The representable rows of types_rich_text, as the type mapping maps them."""
    for server in SERVERS:
        table = decode(capture_path(server, "types_rich_text")).tables["public.rich"]
        one = {n: table.column(n)[0].as_py() for n in table.column_names}
        three = {n: table.column(n)[1] for n in table.column_names}
        assert one["f4"] != one["f4"] and one["f8"] == float("inf") and one["n"] == "NaN"
        assert one["n2"] == Decimal("1234567890123456789012345678.0123456789")
        assert (one["vc"], one["ch"], one["nm"]) == ("varchar", "ab   ", "a name")
        assert one["t"] == 'quote\' "dq" back\\slash\nnewline\ttab ünïcødé 🎉'
        assert one["by"] == b"\xde\xad\xbe\xef\x00"
        assert one["d"] == date(2024, 2, 29)
        assert one["tm"] == time(23, 59, 59, 999_999)
        assert one["ttz"] == "12:00:00+05:30"
        assert one["ts"] == datetime(2000, 1, 1)
        assert one["tstz"] == datetime(1999, 12, 31, 23, 59, 59, 500_000, tzinfo=timezone.utc)
        assert one["iv"] == {"months": 14, "days": 3, "microseconds": 14_706_789_000}
        assert one["u"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
        assert one["js"] == one["jb"] == '{"k": "v", "n": 1.50}'
        assert (one["ip"], one["cidr_"], one["mac"]) == (
            "192.168.0.1/24",
            "10.0.0.0/8",
            "08:00:2b:01:02:03",
        )
        assert (one["m"], one["r"], one["tv"]) == ("$12.34", "[1,10)", "'a' 'cat' 'fat'")
        assert (one["o"], one["bo"], one["dom"]) == (4_294_967_295, True, 5)
        assert one["ia"] == [1, None, 3]
        assert one["ta"] == ["a b", "c,d", None, 'e"f']
        assert one["ia2"] == []
        assert three["f4"].as_py() == struct.unpack("f", struct.pack("f", 3.4028235e38))[0]
        assert three["f8"].as_py() == 5e-324
        assert three["n"].as_py() == "1" + "0" * 100
        assert three["iv"].as_py() == {"months": 0, "days": -1, "microseconds": 7_200_000_000}


# -- the seed's row-image rules, scenario by scenario --------------------------------------------


def summary(table: pa.Table) -> list[tuple[Any, ...]]:
    """(change type, data values, _before as a dict or None, _before_kind, _unchanged)."""
    data = table.column_names[: table.num_columns - len(METADATA_COLUMNS)]
    values = table.select(data).to_pylist()
    return [
        (kind, tuple(v.values()), before, before_kind, unchanged)
        for kind, v, before, before_kind, unchanged in zip(
            table.column("_change_type").to_pylist(),
            values,
            table.column("_before").to_pylist(),
            table.column("_before_kind").to_pylist(),
            table.column("_unchanged").to_pylist(),
            strict=True,
        )
    ]


def tables_of(server: str, scenario: str) -> dict[str, pa.Table]:
    d = decode(capture_path(server, scenario))
    assert not d.errors
    return d.tables


def _image(names: str, *values: Any) -> dict[str, Any]:
    return dict(zip(names.split(), values, strict=True))


RULES: dict[str, dict[str, list[tuple[Any, ...]]]] = {
    # PK (region, id): the old key is logged only when it changes; a delete's data columns
    # hold the key image.
    "ri_default": {
        "public.ri_default": [
            ("insert", (1, "one", "eu", 10), None, None, []),
            ("insert", (2, "two", "us", 20), None, None, []),
            ("insert", (3, None, "eu", None), None, None, []),
            ("update", (1, "uno", "eu", 11), None, None, []),
            (
                "update",
                (20, "twenty", "us", 20),
                _image("id name region score", 2, None, "us", None),
                "key",
                [],
            ),
            (
                "delete",
                (1, None, "eu", None),
                _image("id name region score", 1, None, "eu", None),
                "key",
                [],
            ),
        ]
    },
    # FULL: every update and delete carries the whole old row (NULLs included).
    "ri_full": {
        "public.ri_full": [
            ("insert", (1, "one", 10), None, None, []),
            ("insert", (2, None, 20), None, None, []),
            ("update", (1, "uno", 10), _image("id name score", 1, "one", 10), "full", []),
            ("update", (3, None, 20), _image("id name score", 2, None, 20), "full", []),
            ("delete", (1, "uno", 10), _image("id name score", 1, "uno", 10), "full", []),
        ]
    },
    # USING INDEX (code): the key image holds `code` only; changing the primary key alone
    # logs no old key.
    "ri_index": {
        "public.ri_index": [
            ("insert", (1, "a", "one"), None, None, []),
            ("insert", (2, "b", "two"), None, None, []),
            ("update", (1, "aa", "one"), _image("id code name", None, "a", None), "key", []),
            ("update", (2, "b", "deux"), None, None, []),
            ("update", (22, "b", "deux"), None, None, []),
            ("delete", (None, "aa", None), _image("id code name", None, "aa", None), "key", []),
        ]
    },
    # One TRUNCATE of three tables (one cascaded): a truncate row in each, data all NULL.
    "truncate": {
        "public.tr_parent": [
            ("insert", (1, "p1"), None, None, []),
            ("insert", (2, "p2"), None, None, []),
            ("truncate", (None, None), None, None, []),
        ],
        "public.tr_child": [
            ("insert", (1, 1, "c1"), None, None, []),
            ("truncate", (None, None, None), None, None, []),
        ],
        "public.tr_other": [
            ("insert", (1, "o1"), None, None, []),
            ("truncate", (None, None), None, None, []),
            ("insert", (1, "o2"), None, None, []),
            ("truncate", (None, None), None, None, []),
        ],
    },
    # No old image: the unchanged TOAST value is unknown -> NULL and listed.
    "toast_default": {
        "public.toast_default": [
            ("insert", (1, "a", BIG), None, None, []),
            ("update", (1, "b", None), None, None, ["big"]),
            ("update", (1, "b", BIG2), None, None, []),
            ("delete", (1, None, None), _image("id note big", 1, None, None), "key", []),
        ]
    },
    # The toasted primary key: the K image supplies it.
    "toast_key": {
        "public.toast_key": [
            ("insert", (KEYBIG, "a"), None, None, []),
            ("update", (KEYBIG, "b"), _image("k note", KEYBIG, None), "key", []),
            ("delete", (KEYBIG, None), _image("k note", KEYBIG, None), "key", []),
        ]
    },
    # FULL: the O image supplies the unchanged TOAST value.
    "toast_full": {
        "public.toast_full": [
            ("insert", (1, "a", BIG), None, None, []),
            ("update", (1, "b", BIG), _image("id note big", 1, "a", BIG), "full", []),
            ("delete", (1, "b", BIG), _image("id note big", 1, "b", BIG), "full", []),
        ]
    },
    # The K image (code) cannot supply `big`: NULL and listed, with or without a key image.
    "toast_index": {
        "public.toast_index": [
            ("insert", (1, 100, "a", BIG), None, None, []),
            (
                "update",
                (1, 101, "a", None),
                _image("id code note big", None, 100, None, None),
                "key",
                ["big"],
            ),
            ("update", (1, 101, "b", None), None, None, ["big"]),
            (
                "delete",
                (None, 101, None, None),
                _image("id code note big", None, 101, None, None),
                "key",
                [],
            ),
        ]
    },
}


def _rule_cases() -> Iterator[Any]:
    for scenario in RULES:
        for server in SERVERS:
            yield pytest.param(server, scenario, id=f"{server}-{scenario}")


@pytest.mark.parametrize(("server", "scenario"), list(_rule_cases()))
def test_row_images_follow_the_seed_rules(server: str, scenario: str) -> None:
    tables = tables_of(server, scenario)
    assert {name: summary(t) for name, t in tables.items()} == RULES[scenario]


def test_one_truncate_row_per_table_shares_the_change_position() -> None:
    for server in SERVERS:
        tables = tables_of(server, "truncate")
        first = []
        for table in tables.values():
            rows = table.select(["_change_type", "_lsn", "_commit_lsn", "_tx_ordinal"]).to_pylist()
            first.append(next(r for r in rows if r["_change_type"] == "truncate"))
        assert len(first) == 3 and all(r == first[0] for r in first)


# -- text vs binary, schema changes -----------------------------------------------------------


def _comparable(table: pa.Table) -> dict[str, list[Any]]:
    names = table.column_names[: table.num_columns - len(METADATA_COLUMNS)]
    names += ["_change_type", "_before", "_before_kind", "_unchanged"]
    return {n: table.column(n).to_pylist() for n in names}


@pytest.mark.parametrize("server", SERVERS)
def test_text_and_binary_captures_give_the_same_values(server: str) -> None:
    text = tables_of(server, "text_types")
    binary = tables_of(server, "binary_types")
    assert list(text) == list(binary) == ["public.types"]
    t, b = text["public.types"], binary["public.types"]
    assert [(f.name, signature(f.type)) for f in t.schema] == [
        (f.name, signature(f.type)) for f in b.schema
    ]
    assert _comparable(t) == _comparable(b)
    assert t.num_rows == 4
    assert t.column("_change_type").to_pylist() == ["insert", "insert", "update", "delete"]


@pytest.mark.parametrize("server", SERVERS)
def test_schema_change_merges_in_take_and_splits_in_take_segments(server: str) -> None:
    d = decode(capture_path(server, "schema_change"))
    assert list(d.tables) == ["public.sc"]
    merged = d.tables["public.sc"]
    assert merged.column_names == ["id", "a", "b", "c", *METADATA_COLUMNS]
    assert [signature(merged.schema.field(n).type) for n in ("id", "a", "b", "c")] == [
        "int32",
        "string",
        "int32",
        "int32",
    ]
    # Columns a change's version of the table did not have are named in _unchanged.
    assert summary(merged) == [
        ("insert", (1, "a", None, None), None, None, ["b", "c"]),
        ("insert", (2, "b", 2, None), None, None, ["c"]),
        ("update", (1, "aa", 7, None), None, None, ["c"]),
        ("insert", (3, None, 3, None), None, None, ["a", "c"]),
        ("insert", (4, None, None, 4), None, None, ["a", "b"]),
        ("delete", (1, None, None, None), _image("id a b c", 1, None, None, None), "key", []),
    ]
    segments = d.segments
    assert [name for name, _ in segments] == ["public.sc"] * 4
    assert [t.column_names[: t.num_columns - len(METADATA_COLUMNS)] for _, t in segments] == [
        ["id", "a"],
        ["id", "a", "b"],
        ["id", "b"],
        ["id", "c"],
    ]
    assert [t.num_rows for _, t in segments] == [1, 2, 1, 2]
    assert [summary(t) for _, t in segments] == [
        [("insert", (1, "a"), None, None, [])],
        [
            ("insert", (2, "b", 2), None, None, []),
            ("update", (1, "aa", 7), None, None, []),
        ],
        [("insert", (3, 3), None, None, [])],
        [
            ("insert", (4, 4), None, None, []),
            ("delete", (1, None), {"id": 1, "c": None}, "key", []),
        ],
    ]
    # The merged rows are the segments' rows, in order, with NULL in the absent columns,
    # which rows with a new image name in _unchanged.
    columns = ["id", "a", "b", "c"]
    flat = []
    for _, t in segments:
        for row in t.to_pylist():
            absent = [c for c in columns if c not in row]
            if row["_change_type"] != "delete":
                row["_unchanged"] = row["_unchanged"] + absent
            flat.append({**dict.fromkeys(absent), **row})
    got = merged.to_pylist()
    for row, want in zip(got, flat, strict=True):
        assert {k: v for k, v in row.items() if k != "_before"} == {
            k: v for k, v in want.items() if k != "_before"
        }
    keys = list(
        zip(
            merged.column("_commit_lsn").to_pylist(),
            merged.column("_tx_ordinal").to_pylist(),
            strict=True,
        )
    )
    assert keys == sorted(keys)
