"""Arrow values against PostgreSQL itself, for every type of the type mapping.

Property tests (hypothesis) over both servers (PostgreSQL 15 and 18, the `db` fixture): for
each type a real table (``id`` primary key, REPLICA IDENTITY DEFAULT) gets random rows,
NULLs included; two logical slots (pgoutput), created before the inserts, are read with
``pg_logical_slot_peek_binary_changes`` (proto_version 1), one in text format and one with
``binary`` on; both are decoded with `pgwire_cdc.Decoder` and

1. every column equals what PostgreSQL computes for the same rows (``SELECT ... ORDER BY
   id``), in the representation the type mapping names: integers for dates (days since
   1970-01-01, ``v - date '1970-01-01'``), times and timestamps (microseconds, computed
   exactly in numeric), so years before 1 AD and after 9999 are checked too; the type's
   output function (``format('%s', v)``) for types represented as strings; the interval's
   own months / days / microseconds fields; Decimal for numeric(p, s); and
2. the binary change table holds the same Arrow types and values as the text one.

Each example then deletes its rows and advances both slots past them. The decoding session
and the oracle share the settings that text output depends on (`SESSION_SETTINGS`).

Values Arrow cannot hold (numeric NaN in a decimal column, infinite dates and timestamps,
time 24:00:00, timestamps past Arrow's int64 microseconds, 2-D arrays in a list column,
PostgreSQL 17+'s infinite intervals) raise `pgwire_cdc.errors.ColumnValueError` naming table,
column and LSN, never the value: from ``feed_many`` or, kept until then, from ``take()``
(whose next call gives the other rows).

Domains: pgoutput's Relation message carries the *domain's* OID, and a Type message before
it describes that OID with the base type's name (pg_catalog.int4). The decoder follows it and
types the column as the base type, in both formats;
`test_domain_over_int4_relation_carries_the_domain_oid` pins this down.

``CI`` set in the environment makes the examples deterministic. ``ORACLE_EXAMPLES`` sets
the number of examples per type and server (default 15).
"""

from __future__ import annotations

import ipaddress
import json
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pgwire_cdc
import psycopg
import pyarrow as pa
import pytest
from conftest import Database
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pgwire_cdc import catalog
from pgwire_cdc.errors import ColumnValueError
from psycopg import sql

#: Settings of both the session that runs the peek function (text output of values is
#: produced there) and the oracle's queries.
SESSION_SETTINGS = {
    "TimeZone": "UTC",
    "DateStyle": "ISO, MDY",
    "IntervalStyle": "postgres",
    "extra_float_digits": "3",
    "bytea_output": "hex",
}

CI = bool(os.environ.get("CI"))
EXAMPLES = int(os.environ.get("ORACLE_EXAMPLES", "15"))
MAX_ROWS = 6

HYPOTHESIS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=CI,
    database=None if CI else settings.default.database,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# -- value literals -----------------------------------------------------------------------

US_PER_DAY = 86_400 * 1_000_000
#: 4714-11-24 BC (Julian day 0): PostgreSQL's first date and timestamp.
MIN_DAYS = -2_440_588
#: 5874897-12-31: PostgreSQL's last date.
MAX_DAYS = 2_145_042_905
MIN_TS_US = MIN_DAYS * US_PER_DAY
#: 294247-01-10 04:00:54.775807: the last timestamp[us] (int64 microseconds since 1970).
MAX_ARROW_TS_US = 2**63 - 1
#: 0001-01-01 and 9999-12-31: the days Python's datetime can hold.
PY_MIN_DAYS = -719_162
PY_MAX_DAYS = 2_932_896


def civil_from_days(days: int) -> tuple[int, int, int]:
    """(astronomical year, month, day) of a day number since 1970-01-01, proleptic
    Gregorian calendar (H. Hinnant's algorithm; valid for every integer)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def _date_part(days: int) -> tuple[str, str]:
    year, month, day = civil_from_days(days)
    if year <= 0:
        return f"{1 - year:04d}-{month:02d}-{day:02d}", " BC"
    return f"{year:04d}-{month:02d}-{day:02d}", ""


def date_literal(days: int) -> str:
    text, era = _date_part(days)
    return text + era


def time_literal(micros: int) -> str:
    seconds, frac = divmod(micros, 1_000_000)
    minutes, sec = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    return f"{hours:02d}:{minute:02d}:{sec:02d}.{frac:06d}"


def offset_literal(seconds: int) -> str:
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{sign}{hours:02d}:{minutes:02d}" + (f":{secs:02d}" if secs else "")


def timestamp_literal(micros: int, offset_minutes: int | None = None) -> str:
    """`micros` since 1970-01-01 00:00 (UTC for timestamptz, written in a zone
    `offset_minutes` east of UTC)."""
    if offset_minutes is not None:
        micros += offset_minutes * 60_000_000
    days, rest = divmod(micros, US_PER_DAY)
    text, era = _date_part(days)
    zone = "" if offset_minutes is None else offset_literal(offset_minutes * 60)
    return f"{text} {time_literal(rest)}{zone}{era}"


def array_literal(elements: Sequence[str | None], lower: int | None = None) -> str:
    """A one-dimensional array literal; every element quoted; `lower` bound if given."""

    def quote(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    body = "{" + ",".join("NULL" if e is None else quote(e) for e in elements) + "}"
    if lower is not None and elements:
        return f"[{lower}:{lower + len(elements) - 1}]={body}"
    return body


def float_literal(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def _with_specials(values: st.SearchStrategy[Any], *specials: Any) -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from(specials), values) if specials else values


def _nullable(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """NULL about one time in four."""
    return st.integers(0, 3).flatmap(lambda k: st.none() if k == 0 else values)


# -- strategies (SQL text literals of non-NULL values) ------------------------------------

UNICODE = st.characters(codec="utf-8", exclude_characters="\x00")
TEXT_SPECIALS = (
    "",
    " ",
    "NULL",
    "null",
    '"',
    "\\",
    "'",
    ",",
    "{",
    "}",
    "{}",
    "a,b",
    '"quoted"',
    "back\\slash",
    "  lead and trail  ",
    "\t\n\r\x0b\x0c",
    "ünïcødé ✓",
    "🎉 emoji",
    "日本語テキスト",
    "\x01\x7f",
    "{1,2}",
    "(a)",
)
TEXT = _with_specials(st.text(UNICODE, max_size=30), *TEXT_SPECIALS)


def ints(bits: int) -> st.SearchStrategy[str]:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return _with_specials(st.integers(low, high), low, high, 0, -1, 1).map(str)


FLOAT4 = st.floats(width=32).map(float_literal)
FLOAT8 = _with_specials(
    st.floats(), float("nan"), float("inf"), float("-inf"), -0.0, 5e-324, 1.7976931348623157e308
).map(float_literal)


def decimals(precision: int, scale: int) -> st.SearchStrategy[str]:
    bound = 10**precision - 1
    unscaled = _with_specials(st.integers(-bound, bound), 0, 1, -1, bound, -bound)
    return unscaled.map(lambda u: f"{u}E{-scale}")


DIGITS = "0123456789"
NUMERIC_TEXT = st.one_of(
    st.sampled_from(
        (
            "NaN",
            "Infinity",
            "-Infinity",
            "0",
            "-0",
            "0.000",
            "-0.0000001",
            "1e100",
            "-1e-100",
            "123.4500",
            "1e-1000",
            "-1e1000",
            "1.000000000000000000000000000001e-900",
            "0.0001",
            "10000.0001",
            "99999999999999999999999999999999999999.99",
            "0.00000000000000000000000000000000000000001",
            "10000",
            "100000000",
        )
    ),
    st.builds(
        lambda sign, whole, frac: f"{sign}{whole}" + (f".{frac}" if frac else ""),
        st.sampled_from(("", "-")),
        st.text(DIGITS, min_size=1, max_size=45),
        st.text(DIGITS, max_size=35),
    ),
    st.tuples(st.integers(-(10**30), 10**30), st.integers(-120, 120)).map(
        lambda t: f"{t[0]}e{t[1]}"
    ),
)


def wide_numeric(precision: int, scale: int) -> st.SearchStrategy[str]:
    return st.builds(
        lambda sign, whole, frac: f"{sign}{whole or '0'}.{frac}",
        st.sampled_from(("", "-")),
        st.text(DIGITS, max_size=precision - scale),
        st.text(DIGITS, max_size=scale),
    )


DAYS = _with_specials(
    st.one_of(st.integers(MIN_DAYS, MAX_DAYS), st.integers(PY_MIN_DAYS, PY_MAX_DAYS)),
    MIN_DAYS,
    MAX_DAYS,
    0,
    -1,
    PY_MIN_DAYS,
    PY_MAX_DAYS,
    PY_MIN_DAYS - 1,  # 0001-12-31 BC
    PY_MAX_DAYS + 1,  # 10000-01-01
    -735_160,  # 0044-03-15 BC
    3_789_391,  # 12345-01-01
    11_016,  # 2000-02-29
)
TIME_US = _with_specials(
    st.integers(0, US_PER_DAY - 1), 0, 1, US_PER_DAY - 1, 43_200_000_000, 999_999
)
TIMESTAMP_US = _with_specials(
    st.one_of(
        st.integers(MIN_TS_US, MAX_ARROW_TS_US),
        st.integers(PY_MIN_DAYS * US_PER_DAY, (PY_MAX_DAYS + 1) * US_PER_DAY - 1),
    ),
    MIN_TS_US,
    MAX_ARROW_TS_US,
    0,
    -1,
    1,
    PY_MIN_DAYS * US_PER_DAY,
    (PY_MAX_DAYS + 1) * US_PER_DAY - 1,
    (PY_MAX_DAYS + 1) * US_PER_DAY,
    -735_160 * US_PER_DAY + 1,
    951_782_400_000_000,  # 2000-02-29
)


def _tz_literal(micros: int, offset: int) -> str:
    # Keep the local time inside PostgreSQL's range near its ends.
    if micros < MIN_TS_US + 2 * US_PER_DAY or micros > MAX_ARROW_TS_US - 2 * US_PER_DAY:
        offset = 0
    return timestamp_literal(micros, offset)


TIMESTAMPTZ = st.builds(_tz_literal, TIMESTAMP_US, st.integers(-15 * 60, 15 * 60))
TIMETZ = st.builds(
    lambda us, off: time_literal(us) + offset_literal(off),
    _with_specials(TIME_US, US_PER_DAY),  # 24:00:00 is a valid timetz
    _with_specials(st.integers(-57_599, 57_599), 0, 19_800, -57_599, 57_599, 3723),
)
INT32_MIN, INT32_MAX, INT64_MIN, INT64_MAX = -(2**31), 2**31 - 1, -(2**63), 2**63 - 1
INTERVAL = (
    st.tuples(
        _with_specials(st.integers(INT32_MIN, INT32_MAX), 0, 1, -1, 12, -13, INT32_MIN, INT32_MAX),
        _with_specials(st.integers(INT32_MIN, INT32_MAX), 0, 1, -1, 30, INT32_MIN, INT32_MAX),
        _with_specials(
            st.integers(INT64_MIN, INT64_MAX),
            0,
            1,
            -1,
            US_PER_DAY,
            -7_200_000_001,
            INT64_MIN,
            INT64_MAX,
        ),
    )
    .filter(
        # All three fields at their minimum (maximum) is -infinity (infinity) from 17 on.
        lambda t: t not in ((INT32_MIN, INT32_MIN, INT64_MIN), (INT32_MAX, INT32_MAX, INT64_MAX))
    )
    .map(lambda t: f"{t[0]} mons {t[1]} days {t[2]} microseconds")
)

UUID = st.builds(
    lambda u, form: (str(u), str(u).upper(), "{" + str(u) + "}", u.hex)[form],
    st.uuids(),
    st.integers(0, 3),
)
IPV4 = st.integers(0, 2**32 - 1).map(lambda n: str(ipaddress.IPv4Address(n)))
IPV6 = st.one_of(
    st.lists(st.one_of(st.just(0), st.just(0), st.integers(0, 0xFFFF)), min_size=8, max_size=8).map(
        lambda g: ":".join(f"{x:x}" for x in g)
    ),
    IPV4.map(lambda a: "::ffff:" + a),
    IPV4.map(lambda a: "::" + a),
    st.sampled_from(("::", "::1", "1::", "fe80::1:2", "1:0:0:1:0:0:0:1", "0:0:1::", "ffff::")),
)
INET = st.one_of(
    st.tuples(IPV4, st.one_of(st.none(), st.integers(0, 32))),
    st.tuples(IPV6, st.one_of(st.none(), st.integers(0, 128))),
).map(lambda t: t[0] if t[1] is None else f"{t[0]}/{t[1]}")
CIDR = st.one_of(st.tuples(IPV4, st.integers(0, 32)), st.tuples(IPV6, st.integers(0, 128))).map(
    lambda t: str(ipaddress.ip_network(f"{t[0]}/{t[1]}", strict=False))
)
MACADDR = st.tuples(st.binary(min_size=6, max_size=6), st.integers(0, 3)).map(
    lambda t: (
        ":".join(f"{b:02x}" for b in t[0]),
        "-".join(f"{b:02X}" for b in t[0]),
        t[0][:2].hex() + "." + t[0][2:4].hex() + "." + t[0][4:].hex(),
        t[0].hex(),
    )[t[1]]
)
MACADDR8 = st.one_of(
    st.binary(min_size=8, max_size=8).map(lambda b: ":".join(f"{x:02x}" for x in b)),
    st.binary(min_size=6, max_size=6).map(lambda b: ":".join(f"{x:02X}" for x in b)),
)
MONEY = _with_specials(st.integers(INT64_MIN, INT64_MAX), INT64_MIN, INT64_MAX, 0, -1, 5).map(
    lambda cents: f"{'-' if cents < 0 else ''}{abs(cents) // 100}.{abs(cents) % 100:02d}"
)


def _tsvector_literal(entries: list[tuple[str, list[tuple[int, str]]]]) -> str:
    out = []
    for word, positions in entries:
        lexeme = "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"
        if positions:
            lexeme += ":" + ",".join(f"{p}{w}" for p, w in positions)
        out.append(lexeme)
    return " ".join(out)


TSVECTOR = st.lists(
    st.tuples(
        _with_specials(st.text(UNICODE, min_size=1, max_size=10), "it's", "a\\b", "x:y", " "),
        st.lists(
            st.tuples(
                _with_specials(st.integers(1, 16383), 1, 16383), st.sampled_from("ABCD" + " ")
            ).map(lambda t: (t[0], t[1].strip())),
            max_size=4,
        ),
    ),
    max_size=6,
).map(_tsvector_literal)


def _range(
    bound: st.SearchStrategy[Any], render: Callable[[Any], str], key: Callable[[Any], Any]
) -> st.SearchStrategy[str]:
    def build(lo: Any, hi: Any, lower_inc: bool, upper_inc: bool) -> str:
        if lo is not None and hi is not None and key(lo) > key(hi):
            lo, hi = hi, lo
        return (
            ("[" if lower_inc else "(")
            + ("" if lo is None else render(lo))
            + ","
            + ("" if hi is None else render(hi))
            + ("]" if upper_inc else ")")
        )

    nullable_bound = st.one_of(st.none(), bound)
    return st.one_of(
        st.just("empty"),
        st.builds(build, nullable_bound, nullable_bound, st.booleans(), st.booleans()),
    )


def _inf_key(value: Any) -> Any:
    return {"-infinity": float("-inf"), "infinity": float("inf")}.get(value, value)


def multirange(ranges: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(ranges, max_size=4).map(lambda rs: "{" + ",".join(rs) + "}")


INT4RANGE = _range(st.integers(INT32_MIN, INT32_MAX - 2), str, lambda v: v)
NUMRANGE = _range(
    st.tuples(st.integers(-(10**25), 10**25), st.integers(0, 12)),
    lambda t: str(Decimal(t[0]).scaleb(-t[1])),
    lambda t: Decimal(t[0]).scaleb(-t[1]),
)
INT8RANGE = _range(st.integers(INT64_MIN, INT64_MAX - 2), str, lambda v: v)
TSRANGE = _range(
    st.one_of(st.sampled_from(("infinity", "-infinity")), TIMESTAMP_US),
    lambda v: v if isinstance(v, str) else '"' + timestamp_literal(v) + '"',
    _inf_key,
)
TSTZRANGE = _range(
    st.one_of(st.sampled_from(("infinity", "-infinity")), TIMESTAMP_US),
    lambda v: v if isinstance(v, str) else '"' + timestamp_literal(v, 0) + '"',
    _inf_key,
)
DATERANGE = _range(
    st.one_of(st.sampled_from(("infinity", "-infinity")), st.integers(MIN_DAYS, MAX_DAYS - 2)),
    lambda v: v if isinstance(v, str) else date_literal(v),
    _inf_key,
)

JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(UNICODE, max_size=10),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(UNICODE, max_size=6), children)
    ),
    max_leaves=8,
)
JSON = st.builds(
    lambda v, ascii_only, spaced: json.dumps(
        v, ensure_ascii=ascii_only, separators=(", ", ": ") if spaced else (",", ":")
    ),
    JSON_VALUES,
    st.booleans(),
    st.booleans(),
)
XML_CHARS = st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Zs"))
XML = st.builds(
    lambda attr, text: f'<r a="{_xml_escape(attr)}">{_xml_escape(text)}</r>' + _xml_escape(text),
    st.text(XML_CHARS, max_size=10),
    st.text(XML_CHARS, max_size=20),
)


def _xml_escape(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


BYTEA = st.one_of(
    st.binary(max_size=64),
    st.just(bytes(range(256))),
    st.permutations(list(range(256))).map(bytes),
).map(lambda b: "\\x" + b.hex())

ENUM_LABELS = (
    "sad",
    "ok",
    "with space",
    'dq"uote',
    "ap'os",
    "back\\slash",
    "comma,",
    "{brace}",
    "ünï🎉",
    "NULL",
    " lead",
)

# -- column specifications -----------------------------------------------------------------


def _float_hex(value: float) -> str:
    return float.hex(float(value))


def _float4(value: float) -> str:
    # float4 -> float8 in SQL is exact; make sure the value is a float32 one.
    assert struct.unpack("f", struct.pack("f", value))[0] == value or value != value
    return float.hex(value)


def _interval(fields: str) -> dict[str, int]:
    months, days, micros = (int(x) for x in fields.split(","))
    return {"months": months, "days": days, "microseconds": micros}


#: Microseconds since midnight: extract(epoch) of a time is exact numeric (PostgreSQL 14+).
TIME_US_SQL = "(extract(epoch from {c}) * 1000000)::bigint"
#: Microseconds since 1970-01-01 00:00 (UTC): through the interval ``v - epoch`` (month 0,
#: so its epoch is exact). ``extract(epoch from v)`` itself is not: for timestamps after
#: about 294217 AD it rounds to 4 decimals of a second.
TIMESTAMP_US_SQL = "(extract(epoch from {c} - timestamp '1970-01-01') * 1000000)::bigint"
TIMESTAMPTZ_US_SQL = (
    "(extract(epoch from {c} - timestamptz '1970-01-01 00:00+00') * 1000000)::bigint"
)
DAYS_SINCE_1970 = "({c} - date '1970-01-01')"
#: The type's output function, i.e. the text pgoutput sends (``v::text`` is not always that:
#: inet's cast to text always shows the netmask, bpchar's trims trailing blanks).
AS_TEXT = "CASE WHEN {c} IS NULL THEN NULL ELSE format('%s', {c}) END"
#: An interval's own fields as "months,days,microseconds": months = year * 12 + month, and
#: the time part from hour, minute and microseconds (which carry its sign).
INTERVAL_FIELDS = (
    "CASE WHEN {c} IS NULL THEN NULL ELSE concat_ws(',',"
    " (extract(year from {c}) * 12 + extract(month from {c}))::bigint,"
    " extract(day from {c})::bigint,"
    " (extract(hour from {c}) * 3600000000 + extract(minute from {c}) * 60000000"
    " + extract(microseconds from {c}))::bigint) END"
)
INTERVAL_ARROW = pa.struct(
    [("months", pa.int32()), ("days", pa.int32()), ("microseconds", pa.int64())]
)


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True, repr=False)
class Col:
    """One column: its type, random literals of it, and how PostgreSQL says what it holds."""

    sql_type: str
    arrow: pa.DataType
    values: st.SearchStrategy[str]
    #: SQL (``{c}`` = the column) whose psycopg value `expect` turns into the normalized
    #: Arrow value (see `normalize`).
    oracle: str = "{c}"
    expect: Callable[[Any], Any] = _same
    #: SQL giving a value psycopg loads to what ``to_pylist()`` must give (NULL where
    #: Python cannot hold it); None: no such check.
    python: str | None = None

    def __repr__(self) -> str:
        return f"Col({self.sql_type})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis' reports
        printer.text(repr(self))

    def array(self, sql_type: str | None = None, lower_bounds: bool = False) -> Col:
        """The one-dimensional array of this type (elements may be NULL, arrays empty)."""
        elements = st.lists(_nullable(self.values), max_size=5)
        if lower_bounds:
            values = st.tuples(elements, st.one_of(st.none(), st.integers(-5, 5))).map(
                lambda t: array_literal(t[0], t[1])
            )
        else:
            values = elements.map(array_literal)
        element_oracle = self.oracle.replace("{c}", "e")
        oracle = (
            "CASE WHEN {c} IS NULL THEN NULL ELSE coalesce((SELECT array_agg("
            + element_oracle
            + " ORDER BY o) FROM unnest({c}) WITH ORDINALITY AS u(e, o)), '{}') END"
        )
        expect = self.expect
        return Col(
            sql_type=sql_type or f"{self.sql_type}[]",
            arrow=pa.list_(self.arrow),
            values=values,
            oracle=oracle,
            expect=lambda items: [None if x is None else expect(x) for x in items],
        )


BOOL = Col("bool", pa.bool_(), st.sampled_from(("t", "f", "true", "false", "yes", "off", "1", "0")))
INT4 = Col("int4", pa.int32(), ints(32))
FLOAT8_COL = Col("float8", pa.float64(), FLOAT8, expect=_float_hex)
NUMERIC_10_2 = Col("numeric(10,2)", pa.decimal128(10, 2), decimals(10, 2))
TEXT_COL = Col("text", pa.string(), TEXT)
TIMESTAMPTZ_COL = Col(
    "timestamptz",
    pa.timestamp("us", tz="UTC"),
    TIMESTAMPTZ,
    oracle=TIMESTAMPTZ_US_SQL,
    python="CASE WHEN {c} BETWEEN '0001-01-01 00:00+00' AND '9999-12-31 23:59:59.999999+00'"
    " THEN {c} END",
)
DATE_COL = Col(
    "date",
    pa.date32(),
    DAYS.map(date_literal),
    oracle=DAYS_SINCE_1970,
    python="CASE WHEN {c} BETWEEN '0001-01-01' AND '9999-12-31' THEN {c} END",
)
UUID_COL = Col("uuid", pa.string(), UUID, oracle=AS_TEXT)
BYTEA_COL = Col("bytea", pa.binary(), BYTEA)
INTERVAL_COL = Col("interval", INTERVAL_ARROW, INTERVAL, oracle=INTERVAL_FIELDS, expect=_interval)
NUMERIC_TEXT_COL = Col("numeric", pa.string(), NUMERIC_TEXT, oracle=AS_TEXT)
JSONB_COL = Col("jsonb", pa.string(), JSON, oracle=AS_TEXT)


@dataclass(frozen=True, repr=False)
class Spec:
    """One table of the oracle tests: columns ``v0, v1, ...`` of these types."""

    name: str
    columns: tuple[Col, ...]
    setup: tuple[str, ...] = ()
    #: a query that must succeed for the type to exist on the server (else: skip)
    requires: str | None = None

    @property
    def table(self) -> str:
        return f"t_{self.name}"

    def __repr__(self) -> str:
        return f"Spec({self.name})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis' reports
        printer.text(repr(self))

    def label(self, i: int) -> str:
        return f"{self.columns[i].sql_type} (column v{i} of {self.table})"


def _spec(name: str, *columns: Col, **kwargs: Any) -> Spec:
    return Spec(name, columns, **kwargs)


SPECS: tuple[Spec, ...] = (
    _spec("bool", BOOL),
    _spec(
        "ints",
        Col("int2", pa.int16(), ints(16)),
        INT4,
        Col("int8", pa.int64(), ints(64)),
    ),
    _spec(
        "oid",
        Col(
            "oid",
            pa.int64(),
            _with_specials(st.integers(0, 2**32 - 1), 0, 2**32 - 1, 2**31).map(str),
            oracle="{c}::int8",
        ),
    ),
    _spec("float4", Col("float4", pa.float32(), FLOAT4, oracle="{c}::float8", expect=_float4)),
    _spec("float8", FLOAT8_COL),
    _spec(
        "numeric_p38",
        Col("numeric(38,0)", pa.decimal128(38, 0), decimals(38, 0)),
        Col("numeric(38,10)", pa.decimal128(38, 10), decimals(38, 10)),
        Col("numeric(38,38)", pa.decimal128(38, 38), decimals(38, 38)),
    ),
    _spec(
        "numeric_small",
        NUMERIC_10_2,
        Col("numeric(1,0)", pa.decimal128(1, 0), decimals(1, 0)),
        Col("numeric(18,18)", pa.decimal128(18, 18), decimals(18, 18)),
        Col("numeric(5,-2)", pa.decimal128(5, -2), decimals(5, -2)),
    ),
    _spec("numeric", NUMERIC_TEXT_COL),
    _spec(
        "numeric_wide",
        Col("numeric(60,20)", pa.string(), wide_numeric(60, 20), oracle=AS_TEXT),
    ),
    _spec("text", TEXT_COL),
    _spec("varchar", Col("varchar(12)", pa.string(), TEXT)),
    _spec("bpchar", Col("bpchar(8)", pa.string(), TEXT)),
    _spec("name", Col("name", pa.string(), TEXT, oracle=AS_TEXT)),
    _spec(
        "citext",
        Col("citext", pa.string(), TEXT, oracle=AS_TEXT),
        setup=("CREATE EXTENSION IF NOT EXISTS citext",),
    ),
    _spec(
        "xml",
        Col("xml", pa.string(), XML, oracle=AS_TEXT),
        requires="SELECT '<a/>'::xml",
    ),
    _spec("json", Col("json", pa.string(), JSON, oracle=AS_TEXT)),
    _spec("jsonb", JSONB_COL),
    _spec("bytea", BYTEA_COL),
    _spec("date", DATE_COL),
    _spec(
        "time",
        Col(
            "time",
            pa.time64("us"),
            TIME_US.map(time_literal),
            oracle=TIME_US_SQL,
            python="{c}",
        ),
    ),
    _spec("timetz", Col("timetz", pa.string(), TIMETZ, oracle=AS_TEXT)),
    _spec(
        "timestamp",
        Col(
            "timestamp",
            pa.timestamp("us"),
            TIMESTAMP_US.map(timestamp_literal),
            oracle=TIMESTAMP_US_SQL,
            python="CASE WHEN {c} BETWEEN '0001-01-01' AND '9999-12-31 23:59:59.999999'"
            " THEN {c} END",
        ),
    ),
    _spec("timestamptz", TIMESTAMPTZ_COL),
    _spec("interval", INTERVAL_COL),
    _spec("uuid", UUID_COL),
    _spec("inet", Col("inet", pa.string(), INET, oracle=AS_TEXT)),
    _spec("cidr", Col("cidr", pa.string(), CIDR, oracle=AS_TEXT)),
    _spec(
        "macaddr",
        Col("macaddr", pa.string(), MACADDR, oracle=AS_TEXT),
        Col("macaddr8", pa.string(), MACADDR8, oracle=AS_TEXT),
    ),
    _spec("money", Col("money", pa.string(), MONEY, oracle=AS_TEXT)),
    _spec("tsvector", Col("tsvector", pa.string(), TSVECTOR, oracle=AS_TEXT)),
    _spec("int4range", Col("int4range", pa.string(), INT4RANGE, oracle=AS_TEXT)),
    _spec("numrange", Col("numrange", pa.string(), NUMRANGE, oracle=AS_TEXT)),
    _spec("tstzrange", Col("tstzrange", pa.string(), TSTZRANGE, oracle=AS_TEXT)),
    _spec("daterange", Col("daterange", pa.string(), DATERANGE, oracle=AS_TEXT)),
    _spec(
        "more_ranges",
        Col("int8range", pa.string(), INT8RANGE, oracle=AS_TEXT),
        Col("tsrange", pa.string(), TSRANGE, oracle=AS_TEXT),
    ),
    _spec(
        "multiranges",
        Col("int4multirange", pa.string(), multirange(INT4RANGE), oracle=AS_TEXT),
        Col("tstzmultirange", pa.string(), multirange(TSTZRANGE), oracle=AS_TEXT),
    ),
    _spec(
        "enum",
        Col("mood", pa.string(), st.sampled_from(ENUM_LABELS), oracle=AS_TEXT),
        setup=(
            sql.SQL("CREATE TYPE mood AS ENUM ({})")
            .format(sql.SQL(", ").join(sql.Literal(x) for x in ENUM_LABELS))
            .as_string(None),
        ),
    ),
    # A domain column is typed as its base type (see the module docstring).
    _spec(
        "domain",
        Col("dint", pa.int32(), ints(32)),
        setup=("CREATE DOMAIN dint AS int4",),
    ),
    _spec("int4_array", INT4.array(lower_bounds=True)),
    _spec("text_array", TEXT_COL.array()),
    _spec("numeric_array", NUMERIC_10_2.array("numeric(10,2)[]")),
    _spec("timestamptz_array", TIMESTAMPTZ_COL.array()),
    _spec("uuid_array", UUID_COL.array()),
    _spec("bool_array", BOOL.array()),
    _spec("float8_array", FLOAT8_COL.array()),
    _spec("date_array", DATE_COL.array()),
    _spec("jsonb_array", JSONB_COL.array()),
    _spec("bytea_array", BYTEA_COL.array()),
    _spec("interval_array", INTERVAL_COL.array()),
    _spec("numeric_text_array", NUMERIC_TEXT_COL.array()),
    _spec(
        "more_arrays",
        Col("int2", pa.int16(), ints(16)).array(),
        Col("int8", pa.int64(), ints(64)).array(),
        Col("float4", pa.float32(), FLOAT4, oracle="{c}::float8", expect=_float4).array(),
        Col("time", pa.time64("us"), TIME_US.map(time_literal), oracle=TIME_US_SQL).array(),
        Col(
            "timestamp",
            pa.timestamp("us"),
            TIMESTAMP_US.map(timestamp_literal),
            oracle=TIMESTAMP_US_SQL,
        ).array(),
        Col("varchar(5)", pa.string(), TEXT).array("varchar(5)[]"),
        Col("bpchar(3)", pa.string(), TEXT, oracle=AS_TEXT).array("bpchar(3)[]"),
        Col("inet", pa.string(), INET, oracle=AS_TEXT).array(),
        Col("money", pa.string(), MONEY, oracle=AS_TEXT).array(),
    ),
)

# -- normalized Arrow values ----------------------------------------------------------------


def normalize(array: pa.Array | pa.ChunkedArray) -> list[Any]:
    """Python values of an Arrow array, comparable with `Col.expect` results: integers for
    date32 (days), time64 and timestamps (microseconds), float.hex() for floats (so NaN
    equals NaN and -0.0 differs from 0.0), lists recursively."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    t = array.type
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        flat = normalize(array.flatten())
        out: list[Any] = []
        pos = 0
        for valid, n in zip(
            array.is_valid().to_pylist(), array.value_lengths().to_pylist(), strict=True
        ):
            if not valid:
                out.append(None)
                continue
            out.append(flat[pos : pos + n])
            pos += n
        return out
    if pa.types.is_floating(t):
        return [None if v is None else _float_hex(v) for v in array.to_pylist()]
    if pa.types.is_date32(t):
        return array.cast(pa.int32()).to_pylist()
    if pa.types.is_time64(t) or pa.types.is_timestamp(t):
        return array.cast(pa.int64()).to_pylist()
    return array.to_pylist()


def type_signature(t: pa.DataType) -> Any:
    """An Arrow type without field names of list items, nullability or metadata."""
    if pa.types.is_list(t):
        return ("list", type_signature(t.value_type))
    if pa.types.is_struct(t):
        return ("struct", tuple((f.name, type_signature(f.type)) for f in t))
    return str(t)


# -- the harness -------------------------------------------------------------------------------


def apply_session_settings(conn: psycopg.Connection[Any]) -> None:
    for name, value in SESSION_SETTINGS.items():
        conn.execute("SELECT set_config(%s, %s, false)", (name, value))


def peek(
    conn: psycopg.Connection[Any], slot: str, publication: str, binary: bool
) -> tuple[list[bytes], list[int]]:
    options = "'proto_version', '1', 'publication_names', %s"
    if binary:
        options += ", 'binary', 'true'"
    rows = conn.execute(
        "SELECT lsn::text, data"
        f" FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, {options})",
        (slot, publication),
    ).fetchall()
    return [bytes(data) for _, data in rows], [pgwire_cdc.lsn_to_int(lsn) for lsn, _ in rows]


def decode(
    messages: list[bytes],
    lsns: list[int],
    binary: bool,
    type_map: dict[int, tuple[int, int]] | None = None,
) -> dict[str, pa.Table]:
    dec = pgwire_cdc.Decoder(proto_version=1, binary=binary)
    if type_map:
        dec.set_type_map(type_map)
    dec.feed_many(messages, lsns)
    tables = dec.take()
    check_event_values(dec, tables)
    return tables


def _same_value(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to NaN (inside lists and dicts too)."""
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)


def check_event_values(dec: pgwire_cdc.Decoder, tables: dict[str, pa.Table]) -> None:
    """The typed values of the events are the Python values of the
    change tables' columns, `to_pylist()`'s, value for value and type for type; a value
    Python cannot hold fails both."""
    try:
        events = dec.events()
    except ColumnValueError:
        with pytest.raises((ValueError, OverflowError)):
            for table in tables.values():
                table.to_pylist()
        return
    rows: dict[str, list[tuple[Any, ...]]] = {}
    for e in events:
        if e.kind == "insert":
            rows.setdefault(e.table, []).append(e.table_row)
    assert set(rows) == {name for name, t in tables.items() if t.num_rows}
    for name, table in tables.items():
        data = [c for c in table.column_names if not c.startswith("_")]
        expected = [tuple(r[c] for c in data) for r in table.select(data).to_pylist()]
        got = rows.get(name, [])
        assert len(got) == len(expected)
        for g, x in zip(got, expected, strict=True):
            assert all(_same_value(a, b) for a, b in zip(g, x, strict=True)), (g, x)


@dataclass(repr=False)
class Harness:
    """A spec's table, publication and two slots (text, binary) in a fresh database."""

    db: Database
    spec: Spec
    conn: psycopg.Connection[Any] = field(init=False)

    def __post_init__(self) -> None:
        self.conn = self.db.conn
        apply_session_settings(self.conn)
        spec = self.spec
        if spec.requires:
            try:
                self.conn.execute(spec.requires)
            except psycopg.Error as exc:
                pytest.skip(f"{spec.name} not available on this server: {exc}".splitlines()[0])
        for statement in spec.setup:
            try:
                self.conn.execute(statement)
            except psycopg.errors.FeatureNotSupported as exc:
                pytest.skip(f"{spec.name}: {exc}".splitlines()[0])
            except psycopg.errors.UndefinedFile as exc:  # extension not installed
                pytest.skip(f"{spec.name}: {exc}".splitlines()[0])
        columns = ", ".join(f"v{i} {c.sql_type}" for i, c in enumerate(spec.columns))
        self.conn.execute(f"CREATE TABLE {spec.table} (id int PRIMARY KEY, {columns})")
        self.conn.execute(f"CREATE PUBLICATION pub_{spec.name} FOR TABLE {spec.table}")
        for slot in self.slots:
            self.conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))

    def __repr__(self) -> str:
        return f"Harness({self.spec.name} on {self.db.cluster.name})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis' reports
        printer.text(repr(self))

    @property
    def slots(self) -> tuple[str, str]:
        return (f"s_{self.spec.name}_text", f"s_{self.spec.name}_binary")

    def decode(self, binary: bool) -> pa.Table:
        slot = self.slots[1 if binary else 0]
        publication = f"pub_{self.spec.name}"
        messages, lsns = peek(self.conn, slot, publication, binary)
        # What the live stream does: user types (enums, citext, domains) from pg_type.
        user_types = {
            c.type_oid
            for t in catalog.published_tables(self.conn, publication)
            for c in t.columns
            if c.type_oid >= 16384
        }
        tables = decode(messages, lsns, binary, catalog.type_map(self.conn, user_types))
        assert list(tables) == [f"public.{self.spec.table}"], list(tables)
        return tables[f"public.{self.spec.table}"]

    def insert(self, rows: Sequence[Sequence[str | None]]) -> None:
        spec = self.spec
        names = ", ".join(f"v{i}" for i in range(len(spec.columns)))
        params = ", ".join(f"%s::{c.sql_type}" for c in spec.columns)
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {spec.table} (id, {names}) VALUES (%s, {params})",
                [(i + 1, *row) for i, row in enumerate(rows)],
            )

    def reset(self) -> None:
        """Forget this example's rows: delete them and move both slots past it all."""
        self.conn.execute(f"DELETE FROM {self.spec.table}")
        for slot in self.slots:
            self.conn.execute(
                "SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", (slot,)
            )

    def check(self, rows: Sequence[Sequence[str | None]]) -> None:
        """Insert `rows` (SQL literals per column, None = NULL), decode both formats, compare
        the text one with PostgreSQL, then the binary one with both."""
        self.insert(rows)
        try:
            oracle = self.oracle()
            text = self.decode(binary=False)
            self.compare(rows, oracle, text, "text")
            binary = self.decode(binary=True)
            self.compare(rows, oracle, binary, "binary", text)
        finally:
            self.reset()

    def oracle(self) -> list[tuple[Any, ...]]:
        """Per row: each column's `oracle` expression, then each column's `python` one."""
        spec = self.spec
        selects = [c.oracle.replace("{c}", f"v{i}") for i, c in enumerate(spec.columns)]
        pythons = [
            c.python.replace("{c}", f"v{i}") if c.python else "NULL"
            for i, c in enumerate(spec.columns)
        ]
        return self.conn.execute(
            f"SELECT {', '.join(selects + pythons)} FROM {spec.table} ORDER BY id"
        ).fetchall()

    def compare(
        self,
        rows: Sequence[Sequence[str | None]],
        oracle: list[tuple[Any, ...]],
        table: pa.Table,
        fmt: str,
        text: pa.Table | None = None,
        change_type: str = "insert",
    ) -> None:
        spec = self.spec
        n = len(rows)
        assert table.num_rows == n, fmt
        assert table.column("id").to_pylist() == list(range(1, n + 1)), fmt
        assert table.column("_change_type").to_pylist() == [change_type] * n, fmt
        assert table.column("_before").null_count == n, fmt
        width = len(spec.columns)
        for i, col in enumerate(spec.columns):
            name = f"v{i}"
            what = f"{spec.label(i)}, {fmt} format"
            arr = table.column(name)
            assert type_signature(arr.type) == type_signature(col.arrow), (
                f"{what}: Arrow type {arr.type}, the contract says {col.arrow}"
            )
            expected = [None if r[i] is None else col.expect(r[i]) for r in oracle]
            got = normalize(arr)
            from_text = normalize(text.column(name)) if text is not None else got
            for row, (lit, exp, value, t) in enumerate(
                zip([r[i] for r in rows], expected, got, from_text, strict=True)
            ):
                assert value == exp, (
                    f"{what}, row {row + 1}: literal {lit!r}: decoded {value!r},"
                    f" PostgreSQL says {exp!r}"
                )
                assert value == t, (
                    f"{what}, row {row + 1}: literal {lit!r}: {fmt} {value!r} != text {t!r}"
                )
            if col.python:
                for row, r in enumerate(oracle):
                    value = r[width + i]
                    if value is None:
                        continue
                    got_py = arr[row].as_py()
                    assert got_py == value, (
                        f"{what}, row {row + 1}: {got_py!r} != psycopg's {value!r}"
                    )
                    if getattr(value, "tzinfo", None) is not None:
                        assert got_py.utcoffset() is not None and not got_py.utcoffset()


@pytest.fixture
def harness(db: Database, spec: Spec) -> Harness:
    return Harness(db, spec)


def _rows(spec: Spec) -> st.SearchStrategy[list[tuple[str | None, ...]]]:
    row = st.tuples(*(_nullable(c.values) for c in spec.columns))
    return st.lists(row, min_size=1, max_size=MAX_ROWS)


# -- the property tests -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [s for s in SPECS],
    ids=[s.name for s in SPECS],
)
@HYPOTHESIS
@given(data=st.data())
def test_values_match_postgresql(harness: Harness, spec: Spec, data: st.DataObject) -> None:
    rows = data.draw(_rows(spec), label="rows")
    harness.check(rows)


EXTREMES = _spec(
    "extremes",
    DATE_COL,
    Col(
        "timestamp",
        pa.timestamp("us"),
        st.nothing(),
        oracle=TIMESTAMP_US_SQL,
        python="CASE WHEN {c} BETWEEN '0001-01-01' AND '9999-12-31 23:59:59.999999' THEN {c} END",
    ),
    TIMESTAMPTZ_COL,
    Col("time", pa.time64("us"), st.nothing(), oracle=TIME_US_SQL, python="{c}"),
)


@pytest.mark.parametrize("spec", [EXTREMES], ids=["extremes"])
def test_years_outside_python_are_exact(harness: Harness) -> None:
    """Dates and timestamps before 1 AD and after 9999 are representable in date32 and
    timestamp[us]: the integers equal PostgreSQL's own."""
    rows = [
        ("12345-01-01", "12345-06-07 08:09:10.111213", "12345-06-07 08:09:10.111213+00", "00:00"),
        (
            "0044-03-15 BC",
            "0044-03-15 12:00:00.000001 BC",
            "0044-03-15 12:00:00+00 BC",
            "23:59:59.999999",
        ),
        ("4714-11-24 BC", "4714-11-24 00:00:00 BC", "4714-11-24 00:00:00+00 BC", "00:00:00.000001"),
        (
            "5874897-12-31",
            "294247-01-10 04:00:54.775807",
            "294247-01-10 04:00:54.775807+00",
            "12:00",
        ),
        ("0001-01-01", "0001-01-01 00:00:00", "0001-01-01 00:00:00+00", "12:34:56.5"),
        (
            "0001-12-31 BC",
            "0001-12-31 23:59:59.999999 BC",
            "0001-12-31 23:59:59.999999+00 BC",
            None,
        ),
        ("9999-12-31", "9999-12-31 23:59:59.999999", "9999-12-31 23:59:59.999999+00", None),
        ("10000-01-01", "10000-01-01 00:00:00", "10000-01-01 00:00:00-15:00", None),
        ("1969-12-31", "1969-12-31 23:59:59.999999", "1970-01-01 00:00:00.5+00:00", None),
    ]
    harness.check(rows)


# -- unrepresentable values ------------------------------------------------------------------

#: (case id, column type, literal, minimum server_version_num, fragments of the value that
#: must not appear in the error message)
UNREPRESENTABLE: tuple[tuple[str, str, str, int, tuple[str, ...]], ...] = (
    ("numeric_nan", "numeric(10,2)", "NaN", 0, ("NaN",)),
    ("numeric_array_nan", "numeric(10,2)[]", "{1.50,NaN}", 0, ("NaN", "1.50")),
    ("date_infinity", "date", "infinity", 0, ("infinity",)),
    ("date_minus_infinity", "date", "-infinity", 0, ("infinity",)),
    ("timestamp_infinity", "timestamp", "infinity", 0, ("infinity",)),
    ("timestamp_minus_infinity", "timestamp", "-infinity", 0, ("infinity",)),
    ("timestamptz_infinity", "timestamptz", "infinity", 0, ("infinity",)),
    ("timestamptz_minus_infinity", "timestamptz", "-infinity", 0, ("infinity",)),
    (
        "timestamp_past_int64",
        "timestamp",
        "294247-01-10 04:00:54.775808",
        0,
        ("294247", "54.775808"),
    ),
    (
        "timestamptz_last",
        "timestamptz",
        "294276-12-31 23:59:59.999999+00",
        0,
        ("294276", "59.999999"),
    ),
    ("time_24h", "time", "24:00:00", 0, ("24:00",)),
    ("int4_array_2d", "int4[]", "{{1,2},{3,4}}", 0, ("{{", "3,4")),
    ("text_array_2d", "text[]", '{{"a","b"},{"c","d"}}', 0, ("{{", '"c"')),
    ("date_array_infinity", "date[]", "{2020-01-01,infinity}", 0, ("infinity", "2020-01-01")),
    ("timestamptz_array_infinity", "timestamptz[]", "{-infinity}", 0, ("infinity",)),
    ("interval_infinity", "interval", "infinity", 170000, ("infinity",)),
    ("interval_minus_infinity", "interval", "-infinity", 170000, ("infinity",)),
)


@pytest.mark.parametrize("case", UNREPRESENTABLE, ids=[c[0] for c in UNREPRESENTABLE])
def test_unrepresentable_values_raise_column_value_error(
    db: Database, case: tuple[str, str, str, int, tuple[str, ...]]
) -> None:
    _, sql_type, literal, min_version, secret = case
    if db.cluster.version < min_version:
        pytest.skip(f"{sql_type} {literal!r} needs PostgreSQL {min_version // 10000}+")
    conn = db.conn
    apply_session_settings(conn)
    # Names that share nothing with the values (the message must name them, not the value).
    table, column = f"unrep_{UNREPRESENTABLE.index(case)}", "bad"
    conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, ok int4, {column} {sql_type})")
    conn.execute(f"CREATE PUBLICATION pub FOR TABLE {table}")
    for slot in ("s_text", "s_binary"):
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    conn.execute(f"INSERT INTO {table} VALUES (1, 7, %s::{sql_type})", (literal,))
    conn.execute(f"INSERT INTO {table} VALUES (2, 8, NULL)")
    problems: list[str] = []
    for slot, binary in (("s_text", False), ("s_binary", True)):
        messages, lsns = peek(conn, slot, "pub", binary)
        fmt = "binary" if binary else "text"
        # The row's error comes from feed_many, or (kept until then) from take().
        dec = pgwire_cdc.Decoder(proto_version=1, binary=binary, keep_events=False)
        try:
            dec.feed_many(messages, lsns)
            tables = dec.take()
        except ColumnValueError as exc:
            err = exc
        else:
            problems.append(f"{fmt}: no ColumnValueError; decoded {tables}")
            continue
        insert_at = next(i for i, m in enumerate(messages) if m[:1] == b"I")
        found = (err.table, err.column, err.lsn)
        if found != (f"public.{table}", column, lsns[insert_at]):
            problems.append(f"{fmt}: (table, column, lsn) = {found}, expected the first insert")
        if err.index not in (None, insert_at):
            problems.append(f"{fmt}: index {err.index}, the insert is message {insert_at}")
        message = str(err)
        if f"public.{table}" not in message or f'"{column}"' not in message:
            problems.append(f"{fmt}: table or column not named in {message!r}")
        leaks = sorted({f for f in (*secret, literal) if f in message})
        if leaks:
            problems.append(f"{fmt}: the value ({leaks}) is in the message {message!r}")
        if err.index is None:  # raised by take(): the other row comes with the next take()
            rest = dec.take()[f"public.{table}"]
            if rest.select(["id", "ok", column]).to_pylist() != [{"id": 2, "ok": 8, column: None}]:
                problems.append(f"{fmt}: the next take() gives {rest.to_pylist()}")
    assert not problems, "\n".join(problems)


def test_infinite_numeric_cannot_be_stored_in_a_constrained_column(db: Database) -> None:
    """PostgreSQL itself refuses ±Infinity in numeric(p, s) ("numeric field overflow"), so
    pgoutput never carries one there; the unconstrained column keeps it (as text)."""
    for literal in ("Infinity", "-Infinity"):
        with pytest.raises(psycopg.errors.NumericValueOutOfRange):
            db.conn.execute("SELECT %s::numeric(10,2)", (literal,))


DOMAIN = _spec("dom", Col("dint", pa.string(), ints(32)), setup=("CREATE DOMAIN dint AS int4",))


@pytest.mark.parametrize("spec", [DOMAIN], ids=["domain"])
def test_domain_over_int4_relation_carries_the_domain_oid(harness: Harness) -> None:
    """What pgoutput sends for a domain column: the Relation message has the domain's OID
    (not int4's 23), and a Type message before it describes that OID with the base type's
    name, pg_catalog.int4. The decoder follows it: the column is int32, as the type mapping
    says for a domain over int4."""
    harness.insert([("42",), ("-7",)])
    try:
        domain_oid = harness.conn.execute("SELECT 'dint'::regtype::oid::int8").fetchone()[0]
        messages, lsns = peek(harness.conn, harness.slots[0], "pub_dom", False)
        dec = pgwire_cdc.Decoder(proto_version=1, binary=False, keep_tables=False)
        dec.feed_many(messages, lsns)
        events = dec.events()
        (relation,) = [e for e in events if e.kind == "relation"]
        column_oids = {str(c[0]): int(c[1]) for c in relation.columns}
        assert column_oids["v0"] == domain_oid != 23
        types = [(e.type_oid, e.type_namespace, e.type_name) for e in events if e.kind == "type"]
        assert types == [(domain_oid, "pg_catalog", "int4")]
        table = harness.decode(binary=False)
        assert table.column("v0").type == pa.int32()
        assert table.column("v0").to_pylist() == [42, -7]
        field = table.schema.field("v0")
        assert field.metadata[b"pg_type_oid"] == str(domain_oid).encode()
        assert field.metadata[b"pg_base_type_oid"] == b"23"
    finally:
        harness.reset()
