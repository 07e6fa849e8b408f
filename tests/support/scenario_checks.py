"""What the decoder must produce for each capture scenario (tests/support/capture/record.py).

Shared by the offline suite (tests/decoder/test_captures.py, over the JSON captures) and the live
suite (tests/decoder/test_decoder_live.py, over captures recorded on the spot from PostgreSQL 15 and
18). Expected values come from the scenario's SQL; LSNs, xids and timestamps come from the
captured bytes, read with the small structure reader in tests/support/capture/wire.py.

`check_capture_events` runs the invariants every capture must satisfy, then the scenario's
own check from `CHECKS`.
"""

from __future__ import annotations

import hashlib
import itertools
import struct
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pgwire_cdc

from support.capture.wire import TAG_KIND, control_fields

PG_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)

DATA_KINDS = frozenset({"insert", "update", "delete", "truncate"})
TERMINAL_KINDS = frozenset({"commit", "stream_commit", "commit_prepared"})
STREAM_CONTROL = frozenset({"stream_start", "stream_stop", "stream_abort"})
SCHEMA_KINDS = frozenset({"relation", "type", "origin"})


def _md5s(numbers: Iterable[int]) -> str:
    return "".join(hashlib.md5(str(i).encode()).hexdigest() for i in numbers)


BIG = _md5s(range(1, 401))
BIG2 = _md5s(i * 7 for i in range(1, 401))
KEYBIG = _md5s(range(1, 70))


# -- decoding ----------------------------------------------------------------------------


@dataclass
class Decoded:
    """A capture and the events the decoder produced for it."""

    capture: dict[str, Any]
    events: list[Any]
    messages: list[bytes] = field(default_factory=list)
    lsns: list[int] = field(default_factory=list)

    @property
    def scenario(self) -> str:
        return str(self.capture["scenario"])

    @property
    def version(self) -> int:
        return int(self.capture["server_version_num"])

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def of_kind(self, *kinds: str) -> list[Any]:
        return [e for e in self.events if e.kind in kinds]

    def data(self) -> list[Any]:
        """Data events (changes and transactional messages) in delivery order."""
        return [e for e in self.events if is_data_event(e)]

    def changes(self) -> list[tuple[Any, ...]]:
        """Data events in the compact comparable form of `summarize`."""
        return [summarize(e) for e in self.data()]

    def wire(self, tag: str) -> list[dict[str, Any]]:
        """Control fields of every message with this tag, in capture order."""
        return [control_fields(m) for m in self.messages if m[:1] == tag.encode()]


def capture_messages(capture: dict[str, Any]) -> tuple[list[bytes], list[int]]:
    messages = [bytes.fromhex(m["data"]) for m in capture["messages"]]
    lsns = [pgwire_cdc.lsn_to_int(m["lsn"]) for m in capture["messages"]]
    return messages, lsns


def decode_capture(capture: dict[str, Any], feed_many: bool = False) -> Decoded:
    """Feed every message of a capture (with its LSN) to a fresh Decoder. The checks read
    the wire form of the values (``wire_*``); captures whose values all have a typed form
    are decoded with typed values too, so every event attribute is built."""

    def decoder() -> pgwire_cdc.Decoder:
        dec = pgwire_cdc.Decoder(proto_version=capture["proto_version"], binary=capture["binary"])
        if feed_many:
            dec.feed_many(messages, lsns)
        else:
            for data, lsn in zip(messages, lsns, strict=True):
                dec.feed(data, lsn)
        return dec

    messages, lsns = capture_messages(capture)
    try:
        events = decoder().events()
    except pgwire_cdc.errors.ColumnValueError:
        # A value no Arrow type holds (infinity dates, numeric NaN in a decimal column).
        events = decoder().events(typed=False)
    return Decoded(capture, events, messages, lsns)


def is_data_event(event: Any) -> bool:
    return event.kind in DATA_KINDS or (event.kind == "message" and bool(event.transactional))


def _t(value: Any) -> Any:
    """Lists -> tuples, recursively, so row images compare independent of container type."""
    if isinstance(value, list | tuple):
        return tuple(_t(v) for v in value)
    return value


def summarize(event: Any) -> tuple[Any, ...]:
    """A data event as a small tuple: what the scenario checks compare against."""
    if event.kind == "insert":
        return ("insert", event.table, _t(event.wire_table_row))
    if event.kind == "update":
        return (
            "update",
            event.table,
            _t(event.wire_updated_table_row),
            _t(event.wire_old_table_row),
        )
    if event.kind == "delete":
        return ("delete", event.table, _t(event.wire_old_table_row))
    if event.kind == "truncate":
        return ("truncate", tuple(sorted(event.tables)), event.options)
    if event.kind == "message":
        return ("message", event.prefix, bytes(event.content), bool(event.transactional))
    raise AssertionError(f"not a data event: {event.kind}")


def ins(table: str, *values: Any) -> tuple[Any, ...]:
    return ("insert", f"public.{table}", values)


def upd(table: str, new: tuple[Any, ...], old: tuple[Any, ...] | None = None) -> tuple[Any, ...]:
    return ("update", f"public.{table}", new, old)


def dele(table: str, old: tuple[Any, ...]) -> tuple[Any, ...]:
    return ("delete", f"public.{table}", old)


def full(*values: Any) -> tuple[Any, ...]:
    return ("full", values)


def key(*values: Any) -> tuple[Any, ...]:
    return ("key", values)


def partial(values: Sequence[Any], missing: Sequence[int]) -> tuple[Any, ...]:
    return ("partial", tuple(values), tuple(missing))


def assert_changes(dec: Decoded, expected: list[tuple[Any, ...]]) -> None:
    actual = dec.changes()
    for i, (a, e) in enumerate(zip(actual, expected, strict=False)):
        assert a == e, f"{dec.scenario}: data event {i}: expected {e!r}, got {a!r}"
    assert len(actual) == len(expected), (
        f"{dec.scenario}: expected {len(expected)} data events, got {len(actual)}: "
        f"{actual[len(expected) :]!r} / missing {expected[len(actual) :]!r}"
    )


def relation_columns(event: Any) -> list[tuple[str, int, int, bool]]:
    return [(str(c[0]), int(c[1]), int(c[2]), bool(c[3])) for c in event.columns]


def ts_from_pg(micros: int) -> datetime:
    return PG_EPOCH + timedelta(microseconds=micros)


# -- invariants every capture satisfies ---------------------------------------------------


def check_invariants(dec: Decoded) -> None:
    """Delivery order, LSNs, commit LSNs, xids and tx_ordinal rules (docs/event-api.md)."""
    fed = [(lsn, TAG_KIND[chr(m[0])]) for m, lsn in zip(dec.messages, dec.lsns, strict=True)]
    got = [(e.start_lsn, e.kind) for e in dec.events]
    for e in dec.events:
        assert e.kind in TAG_KIND.values(), e.kind
        assert isinstance(e.start_lsn, int)
        assert isinstance(e.tx_ordinal, int)

    # Stream Start/Stop/Abort are delivered as fed; every other event is delivered in fed
    # order too, minus what an abort or ROLLBACK PREPARED dropped.
    fed_ctl = [f for f in fed if f[1] in STREAM_CONTROL]
    got_ctl = [g for g in got if g[1] in STREAM_CONTROL]
    assert got_ctl == fed_ctl, f"{dec.scenario}: stream control events differ from the feed"
    missing = Counter(got) - Counter(fed)
    assert not missing, f"{dec.scenario}: events with no message at that LSN: {missing}"
    plain = not any(k in ("stream_start", "begin_prepare", "stream_prepare") for _, k in fed)
    if plain:
        assert got == fed, f"{dec.scenario}: one event per message, in order, with its LSN"
    # Terminal and begin events are never dropped.
    for kind in ("begin", "commit", "stream_commit", "commit_prepared", "rollback_prepared"):
        assert [g for g in got if g[1] == kind] == [f for f in fed if f[1] == kind], kind

    _check_transactions(dec)


def _assert_subsequence(sub: list[Any], seq: list[Any], scenario: str) -> None:
    it = iter(seq)
    for i, item in enumerate(sub):
        for candidate in it:
            if candidate == item:
                break
        else:
            raise AssertionError(
                f"{scenario}: event {i} {item!r} is not in fed order (or has a wrong LSN)"
            )


def _check_transactions(dec: Decoded) -> None:
    terminals = [
        control_fields(m) | {"tag": chr(m[0])} for m in dec.messages if m[:1] in (b"C", b"c", b"K")
    ]
    begins = iter(dec.wire("B"))
    term_iter = iter(terminals)
    group: list[Any] = []
    for e in dec.events:
        if e.kind in STREAM_CONTROL:
            assert e.commit_lsn is None, f"{e.kind} has commit_lsn {e.commit_lsn}"
            continue
        if e.kind == "message" and not e.transactional:
            assert e.commit_lsn is None, "non-transactional message with a commit_lsn"
            assert not group, "non-transactional message delivered inside a transaction"
            continue
        if e.kind == "rollback_prepared":
            assert not group, "rollback_prepared delivered inside a transaction"
            continue
        group.append(e)
        if e.kind not in TERMINAL_KINDS:
            continue
        wire = next(term_iter)
        # held (streamed or prepared) transactions are delivered later, but in fed order
        fed = [(lsn, TAG_KIND[chr(m[0])]) for m, lsn in zip(dec.messages, dec.lsns, strict=True)]
        _assert_subsequence([(e.start_lsn, e.kind) for e in group], fed, dec.scenario)
        _check_group(dec, group, wire, begins)
        group = []
    assert not group, f"{dec.scenario}: events after the last commit: {[e.kind for e in group]}"
    assert next(term_iter, None) is None, f"{dec.scenario}: a commit was not delivered"


def _check_group(dec: Decoded, group: list[Any], wire: dict[str, Any], begins: Any) -> None:
    terminal = group[-1]
    where = f"{dec.scenario}: transaction ending at {terminal.kind}@{terminal.start_lsn}"
    assert terminal.commit_lsn == wire["commit_lsn"], f"{where}: commit_lsn differs from wire"
    assert terminal.end_lsn == wire["end_lsn"], f"{where}: end_lsn"
    assert terminal.commit_ts == ts_from_pg(wire["timestamp"]), f"{where}: commit_ts"
    if "xid" in wire:
        assert terminal.xid == wire["xid"], f"{where}: xid"
    if terminal.kind == "commit":
        begin = group[0]
        assert begin.kind == "begin", f"{where}: does not start with begin"
        bw = next(begins)
        assert begin.xid == bw["xid"], f"{where}: begin xid"
        assert begin.commit_lsn == bw["final_lsn"] == wire["commit_lsn"], f"{where}: final LSN"
        assert begin.timestamp == bw["timestamp"], f"{where}: begin timestamp"
        assert begin.commit_ts == ts_from_pg(bw["timestamp"]), f"{where}: begin commit_ts"
        xid = bw["xid"]
    else:
        xid = wire["xid"]
    if terminal.kind == "commit_prepared":
        assert (
            group[0].kind == "begin_prepare"
            or group[0].kind == "relation"
            or any(e.kind == "stream_prepare" for e in group)
        ), f"{where}: no prepared transaction was held for it"
        prepare = [e for e in group if e.kind in ("prepare", "stream_prepare")]
        assert len(prepare) == 1, f"{where}: expected one prepare, got {len(prepare)}"
        assert prepare[0].gid == terminal.gid == wire["gid"], f"{where}: gid"
    n = 0
    for e in group:
        assert e.commit_lsn == wire["commit_lsn"], (
            f"{where}: {e.kind}@{e.start_lsn} has commit_lsn {e.commit_lsn}, "
            f"expected {wire['commit_lsn']}"
        )
        assert e.xid == xid, f"{where}: {e.kind}@{e.start_lsn} has xid {e.xid}, expected {xid}"
        if is_data_event(e):
            assert e.tx_ordinal == n, f"{where}: {e.kind} has tx_ordinal {e.tx_ordinal}, not {n}"
            n += 1
        elif e.kind in ("begin", "begin_prepare"):
            assert e.tx_ordinal == 0, f"{where}: {e.kind} tx_ordinal {e.tx_ordinal}"
        elif e.kind in SCHEMA_KINDS:
            assert e.tx_ordinal == n, f"{where}: {e.kind} has tx_ordinal {e.tx_ordinal}, not {n}"
        elif e.kind in TERMINAL_KINDS or e.kind in ("prepare", "stream_prepare"):
            assert e.tx_ordinal == n, f"{where}: {e.kind} has tx_ordinal {e.tx_ordinal}, not {n}"


# -- per-scenario checks -----------------------------------------------------------------

CHECKS: dict[str, Callable[[Decoded], None]] = {}


def scenario(name: str) -> Callable[[Callable[[Decoded], None]], Callable[[Decoded], None]]:
    def register(fn: Callable[[Decoded], None]) -> Callable[[Decoded], None]:
        CHECKS[name] = fn
        return fn

    return register


def only_relation(dec: Decoded, table: str) -> Any:
    rels = [e for e in dec.of_kind("relation") if e.table == f"public.{table}"]
    assert rels, f"no relation event for {table}"
    first = rels[0]
    for r in rels[1:]:
        assert relation_columns(r) == relation_columns(first)
    return first


@scenario("ri_default")
def _ri_default(dec: Decoded) -> None:
    rel = only_relation(dec, "ri_default")
    assert rel.replica_identity == "d"
    assert relation_columns(rel) == [
        ("id", 23, -1, True),
        ("name", 25, -1, False),
        ("region", 25, -1, True),
        ("score", 23, -1, False),
    ]
    t = "ri_default"
    assert_changes(
        dec,
        [
            ins(t, "1", "one", "eu", "10"),
            ins(t, "2", "two", "us", "20"),
            ins(t, "3", None, "eu", None),
            # key unchanged: no old image
            upd(t, full("1", "uno", "eu", "11"), None),
            # key changed: K image, only the identity columns (id, region), densely packed
            upd(t, full("20", "twenty", "us", "20"), key("2", "us")),
            dele(t, key("1", "eu")),
        ],
    )
    # The second transaction holds four changes: ordinals 0..3.
    second = [e for e in dec.data() if e.commit_lsn == dec.data()[2].commit_lsn]
    assert [e.tx_ordinal for e in second] == [0, 1, 2, 3]


@scenario("ri_full")
def _ri_full(dec: Decoded) -> None:
    rel = only_relation(dec, "ri_full")
    assert rel.replica_identity == "f"
    # Under FULL every column is flagged as part of the identity.
    assert [c[3] for c in relation_columns(rel)] == [True, True, True]
    t = "ri_full"
    assert_changes(
        dec,
        [
            ins(t, "1", "one", "10"),
            ins(t, "2", None, "20"),
            upd(t, full("1", "uno", "10"), full("1", "one", "10")),
            upd(t, full("3", None, "20"), full("2", None, "20")),
            dele(t, full("1", "uno", "10")),
        ],
    )


@scenario("ri_index")
def _ri_index(dec: Decoded) -> None:
    rel = only_relation(dec, "ri_index")
    assert rel.replica_identity == "i"
    assert [c[3] for c in relation_columns(rel)] == [False, True, False]
    t = "ri_index"
    assert_changes(
        dec,
        [
            ins(t, "1", "a", "one"),
            ins(t, "2", "b", "two"),
            upd(t, full("1", "aa", "one"), key("a")),
            upd(t, full("2", "b", "deux"), None),
            # the PK is not the identity: changing it logs no old key
            upd(t, full("22", "b", "deux"), None),
            dele(t, key("aa")),
        ],
    )


@scenario("ri_nothing")
def _ri_nothing(dec: Decoded) -> None:
    rel = only_relation(dec, "ri_nothing")
    assert rel.replica_identity == "n"
    assert [c[3] for c in relation_columns(rel)] == [False, False]
    t = "ri_nothing"
    assert_changes(dec, [ins(t, "1", "a"), ins(t, "2", "b"), ins(t, "3", "c")])


@scenario("toast_default")
def _toast_default(dec: Decoded) -> None:
    t = "toast_default"
    assert_changes(
        dec,
        [
            ins(t, "1", "a", BIG),
            # 'u' for big, no old image: cannot be reconstructed
            upd(t, partial(("1", "b"), [2]), None),
            upd(t, full("1", "b", BIG2), None),
            dele(t, key("1")),
        ],
    )


@scenario("toast_key")
def _toast_key(dec: Decoded) -> None:
    t = "toast_key"
    rel = only_relation(dec, t)
    assert [c[3] for c in relation_columns(rel)] == [True, False]
    assert_changes(
        dec,
        [
            ins(t, KEYBIG, "a"),
            # the external key forces a K image, which supplies the unchanged key column
            upd(t, full(KEYBIG, "b"), key(KEYBIG)),
            dele(t, key(KEYBIG)),
        ],
    )


@scenario("toast_full")
def _toast_full(dec: Decoded) -> None:
    t = "toast_full"
    assert_changes(
        dec,
        [
            ins(t, "1", "a", BIG),
            # the FULL old image supplies the unchanged TOAST value
            upd(t, full("1", "b", BIG), full("1", "a", BIG)),
            dele(t, full("1", "b", BIG)),
        ],
    )


@scenario("toast_index")
def _toast_index(dec: Decoded) -> None:
    t = "toast_index"
    assert_changes(
        dec,
        [
            ins(t, "1", "100", "a", BIG),
            # K image holds only `code`: big (index 3) stays missing
            upd(t, partial(("1", "101", "a"), [3]), key("100")),
            upd(t, partial(("1", "101", "b"), [3]), None),
            dele(t, key("101")),
        ],
    )


@scenario("truncate")
def _truncate(dec: Decoded) -> None:
    trunc = dec.of_kind("truncate")
    assert len(trunc) == 2
    assert sorted(trunc[0].tables) == ["public.tr_child", "public.tr_other", "public.tr_parent"]
    assert len(trunc[0].tables) == 3
    assert trunc[0].options == 3  # CASCADE | RESTART IDENTITY
    assert trunc[1].tables == ["public.tr_other"]
    assert trunc[1].options == 0
    assert_changes(
        dec,
        [
            ins("tr_parent", "1", "p1"),
            ins("tr_parent", "2", "p2"),
            ins("tr_child", "1", "1", "c1"),
            ins("tr_other", "1", "o1"),
            ("truncate", ("public.tr_child", "public.tr_other", "public.tr_parent"), 3),
            ins("tr_other", "1", "o2"),  # RESTART IDENTITY: the sequence starts over
            ("truncate", ("public.tr_other",), 0),
        ],
    )


@scenario("column_list")
def _column_list(dec: Decoded) -> None:
    rel = only_relation(dec, "cl")
    assert relation_columns(rel) == [("id", 23, -1, True), ("a", 25, -1, False)]
    t = "cl"
    assert_changes(
        dec,
        [
            ins(t, "1", "a1"),
            ins(t, "2", "a2"),
            upd(t, full("1", "a1"), None),
            upd(t, full("10", "a10"), key("1")),
            dele(t, key("2")),
        ],
    )


@scenario("row_filter")
def _row_filter(dec: Decoded) -> None:
    assert_changes(
        dec,
        [
            ins("rf_key", "15", "b"),  # (5, 'a') is filtered out
            ins("rf_key", "25", "a"),  # 5 -> 25 enters the filter: insert
            dele("rf_key", key("15")),  # 15 -> 7 leaves it: delete of the old key
            upd("rf_key", full("25", "c"), None),  # stays inside
            upd("rf_key", full("30", "c"), key("25")),
            # DELETE of 7 is filtered out
            ins("rf_full", "2", "20", "y"),
            ins("rf_full", "1", "15", "x"),  # v 5 -> 15: insert
            dele("rf_full", full("2", "20", "y")),  # v 20 -> 3: delete with the old row
            upd("rf_full", full("1", "15", "z"), full("1", "15", "x")),
            dele("rf_full", full("1", "15", "z")),
        ],
    )


@scenario("schema_change")
def _schema_change(dec: Decoded) -> None:
    rels = dec.of_kind("relation")
    assert [[c[0] for c in relation_columns(r)] for r in rels] == [
        ["id", "a"],
        ["id", "a", "b"],
        ["id", "b"],
        ["id", "c"],
    ]
    assert len({r.relation_id for r in rels}) == 1
    t = "sc"
    assert_changes(
        dec,
        [
            ins(t, "1", "a"),
            ins(t, "2", "b", "2"),
            upd(t, full("1", "aa", "7"), None),
            ins(t, "3", "3"),
            ins(t, "4", "4"),
            dele(t, key("1")),
        ],
    )
    # each relation event comes right before the first row that uses it
    kinds = [e.kind for e in dec.events if e.kind in ("relation", "insert", "update", "delete")]
    assert kinds == [
        "relation",
        "insert",
        "relation",
        "insert",
        "update",
        "relation",
        "insert",
        "relation",
        "insert",
        "delete",
    ]


@scenario("messages")
def _messages(dec: Decoded) -> None:
    msgs = dec.of_kind("message")
    assert [(m.prefix, bytes(m.content), m.transactional) for m in msgs] == [
        ("prefix", b"content", True),
        ("nontx", b"hello", False),
        ("bin", b"\x00\xff\x00\x01", True),
        ("préfixe", b"in a transaction", False),
        ("empty", b"", False),
    ]
    wire = dec.wire("M")
    assert [m.message_lsn for m in msgs] == [w["message_lsn"] for w in wire]
    for m in msgs:
        assert isinstance(m.content, bytes)
        if not m.transactional:
            assert m.commit_lsn is None
    assert_changes(
        dec,
        [
            ins("msg_t", "1", "a"),
            ("message", "prefix", b"content", True),
            ("message", "bin", b"\x00\xff\x00\x01", True),
            ins("msg_t", "2", "b"),
        ],
    )
    # the transactional message takes the next tx_ordinal after the insert
    assert [e.tx_ordinal for e in dec.data()[:2]] == [0, 1]
    assert dec.kinds() == [
        "begin",
        "relation",
        "insert",
        "message",
        "commit",
        "message",
        "begin",
        "message",
        "commit",
        "message",
        "begin",
        "insert",
        "commit",
        "message",
    ]


def _check_stream_blocks(dec: Decoded) -> None:
    starts = dec.of_kind("stream_start")
    wire = dec.wire("S")
    assert [(s.xid, s.first_segment) for s in starts] == [
        (w["xid"], w["first_segment"]) for w in wire
    ]
    aborts = dec.of_kind("stream_abort")
    wire_a = dec.wire("A")
    assert [(a.xid, a.subxid) for a in aborts] == [(w["xid"], w["subxid"]) for w in wire_a]
    for a, w in zip(aborts, wire_a, strict=True):
        if "abort_lsn" in w:
            assert a.abort_lsn == w["abort_lsn"]
            assert a.abort_ts == ts_from_pg(w["abort_timestamp"])
        else:
            assert a.abort_lsn is None
            assert a.abort_ts is None


def _stream_rows(dec: Decoded) -> None:
    _check_stream_blocks(dec)
    committed = (
        [ins("big", str(i), f"r{i}") for i in range(1, 1001)]
        + [("message", "stream", b"inside the stream", True)]
        + [ins("big", str(i), f"t{i}") for i in range(2001, 3001)]
    )
    assert_changes(dec, [*committed, ins("big", "9999", "after")])
    commits = dec.of_kind("stream_commit")
    assert len(commits) == 1
    held = [e for e in dec.data() if e.commit_lsn == commits[0].commit_lsn]
    assert len(held) == 2001
    assert [e.tx_ordinal for e in held] == list(range(2001))
    # the streamed transaction is delivered at its stream commit, as one block
    i = dec.events.index(commits[0])
    assert all(e.kind not in STREAM_CONTROL for e in dec.events[i - 2001 : i])
    aborts = dec.of_kind("stream_abort")
    assert any(a.subxid != a.xid for a in aborts), "the savepoint rollback is a subxact abort"
    if dec.version < 170000:
        assert any(a.subxid == a.xid for a in aborts), "the rolled-back transaction"


@scenario("stream_v2")
def _stream_v2(dec: Decoded) -> None:
    _stream_rows(dec)
    for a in dec.of_kind("stream_abort"):
        assert a.abort_lsn is None


@scenario("stream_v4_parallel")
def _stream_v4(dec: Decoded) -> None:
    _stream_rows(dec)
    for a in dec.of_kind("stream_abort"):
        assert a.abort_lsn is not None and a.abort_ts is not None


@scenario("stream_immediate_v4")
def _stream_immediate(dec: Decoded) -> None:
    _check_stream_blocks(dec)
    aborts = dec.of_kind("stream_abort")
    assert len(aborts) == 2
    assert aborts[0].subxid != aborts[0].xid  # ROLLBACK TO SAVEPOINT
    assert aborts[1].subxid == aborts[1].xid  # ROLLBACK
    assert_changes(
        dec,
        [
            ins("big", "1", "a"),
            ins("big", "2", "b"),
            ins("big", "4", "d"),  # 3 was rolled back to the savepoint
            ins("big", "7", "g"),  # 5 and 6 were rolled back
        ],
    )
    # The scenario's two committed transactions; another transaction of the database (an
    # automatic ANALYZE, say) may be streamed as well, without rows of the publication.
    inserting = {e.xid for e in dec.of_kind("insert")}
    assert len([c for c in dec.of_kind("stream_commit") if c.xid in inserting]) == 2
    assert not dec.of_kind("begin", "commit")


@scenario("two_phase")
def _two_phase(dec: Decoded) -> None:
    assert dec.kinds() == [
        "begin_prepare",
        "relation",
        "insert",
        "insert",
        "update",
        "prepare",
        "commit_prepared",
        "rollback_prepared",
        "begin",
        "insert",
        "commit",
    ]
    bp, prep, cp, rp = dec.of_kind(
        "begin_prepare", "prepare", "commit_prepared", "rollback_prepared"
    )
    assert bp.gid == prep.gid == cp.gid == "g1"
    assert rp.gid == "g2"
    wb, wp, wk, wr = dec.wire("b")[0], dec.wire("P")[0], dec.wire("K")[0], dec.wire("r")[0]
    assert (bp.prepare_lsn, bp.end_lsn) == (wb["prepare_lsn"], wb["end_lsn"])
    assert (prep.prepare_lsn, prep.end_lsn) == (wp["prepare_lsn"], wp["end_lsn"])
    assert prep.prepare_ts == ts_from_pg(wp["timestamp"])
    assert cp.end_lsn == wk["end_lsn"] and cp.commit_lsn == wk["commit_lsn"]
    assert (rp.prepare_end_lsn, rp.rollback_end_lsn) == (
        wr["prepare_end_lsn"],
        wr["rollback_end_lsn"],
    )
    assert rp.prepare_ts == ts_from_pg(wr["prepare_timestamp"])
    assert rp.rollback_ts == ts_from_pg(wr["rollback_timestamp"])
    assert rp.xid == wr["xid"]
    assert_changes(
        dec,
        [
            ins("tp", "1", "a"),
            ins("tp", "2", "b"),
            upd("tp", full("2", "bb"), None),
            ins("tp", "4", "d"),  # g2's insert of 3 was rolled back
        ],
    )


@scenario("stream_prepare")
def _stream_prepare(dec: Decoded) -> None:
    _check_stream_blocks(dec)
    assert_changes(dec, [ins("big", str(i), f"p{i}") for i in range(1, 1501)])
    cps = dec.of_kind("commit_prepared")
    rps = dec.of_kind("rollback_prepared")
    assert [c.gid for c in cps] == ["gs1"]
    assert [r.gid for r in rps] == ["gs2"]
    sp = dec.of_kind("stream_prepare")
    assert [s.gid for s in sp] == ["gs1"]
    wp = dec.wire("p")[0]
    assert (sp[0].prepare_lsn, sp[0].end_lsn, sp[0].xid) == (
        wp["prepare_lsn"],
        wp["end_lsn"],
        wp["xid"],
    )
    # stream_prepare and then commit_prepared close the delivered block
    kinds = dec.kinds()
    i = kinds.index("commit_prepared")
    assert kinds[i - 1] == "stream_prepare"
    assert kinds[-1] == "rollback_prepared"


@scenario("stream_interleaved")
def _stream_interleaved(dec: Decoded) -> None:
    _check_stream_blocks(dec)
    # the second session's transaction commits first and is delivered first, whole
    assert_changes(
        dec,
        [ins("big", str(i), f"b{i}") for i in range(10001, 11401)]
        + [ins("big", str(i), f"a{i}") for i in range(1, 1401)],
    )
    commits = dec.of_kind("stream_commit")
    assert len(commits) == 2 and commits[0].xid != commits[1].xid
    starts = dec.of_kind("stream_start")
    assert {s.xid for s in starts} == {c.xid for c in commits}
    xids = [s.xid for s in starts]
    assert any(a != b for a, b in itertools.pairwise(xids)), "blocks interleave"


@scenario("two_phase_interleaved")
def _two_phase_interleaved(dec: Decoded) -> None:
    assert dec.kinds() == [
        "begin",
        "insert",  # uses the relation sent inside ga, which is still held
        "commit",
        "rollback_prepared",  # gb: its (empty) prepared transaction is dropped
        "begin",
        "relation",
        "insert",
        "commit",
        "begin_prepare",  # ga, delivered at COMMIT PREPARED
        "relation",
        "insert",
        "prepare",
        "commit_prepared",
    ]
    assert [e.gid for e in dec.of_kind("rollback_prepared")] == ["gb"]
    assert [e.gid for e in dec.of_kind("begin_prepare", "prepare", "commit_prepared")] == ["ga"] * 3
    assert_changes(dec, [ins("tp", "2", "b"), ins("tq", "101", "r"), ins("tp", "1", "a")])


def _ws_stream(dec: Decoded) -> None:
    _check_stream_blocks(dec)
    assert_changes(
        dec,
        [ins("big", str(i), f"r{i}") for i in range(1, 601)]
        + [ins("big", str(i), f"t{i}") for i in range(1201, 1801)]
        + [ins("big", "9999", "after")],
    )
    aborts = dec.of_kind("stream_abort")
    top = [a for a in aborts if a.subxid == a.xid]
    assert len(top) == 1, "the rolled-back transaction was streamed, so its abort is sent"
    starts = dec.of_kind("stream_start")
    assert starts[0].xid == top[0].xid and starts[0].first_segment
    commits = dec.of_kind("stream_commit")
    assert len(commits) == 1 and commits[0].xid != top[0].xid
    held = [e for e in dec.data() if e.commit_lsn == commits[0].commit_lsn]
    assert [e.tx_ordinal for e in held] == list(range(1200))


@scenario("ws_stream_abort")
def _ws_stream_abort(dec: Decoded) -> None:
    _ws_stream(dec)
    assert all(a.abort_lsn is None for a in dec.of_kind("stream_abort"))


@scenario("ws_stream_abort_v4")
def _ws_stream_abort_v4(dec: Decoded) -> None:
    _ws_stream(dec)
    assert all(a.abort_lsn is not None for a in dec.of_kind("stream_abort"))


@scenario("ws_prepared_relation")
def _ws_prepared_relation(dec: Decoded) -> None:
    # gb's events (including the only Relation for tq) are dropped at ROLLBACK PREPARED,
    # but the relation stays known: the later insert into tq decodes.
    assert dec.kinds() == ["rollback_prepared", "begin", "insert", "commit"]
    assert dec.of_kind("rollback_prepared")[0].gid == "gb"
    assert_changes(dec, [ins("tq", "101", "r")])


@scenario("origin")
def _origin(dec: Decoded) -> None:
    origins = dec.of_kind("origin")
    assert len(origins) == 1
    assert origins[0].origin_name == "origin_a"
    assert origins[0].origin_lsn == 0xABCDEF
    assert dec.kinds()[:5] == ["begin", "origin", "relation", "insert", "commit"]
    assert_changes(dec, [ins("og", "1", "a"), ins("og", "2", "b")])


def _pg_us(dt: datetime) -> int:
    return (dt - PG_EPOCH) // timedelta(microseconds=1)


def _array_int4(values: Sequence[int | None]) -> bytes:
    out = struct.pack(">iiiii", 1, int(None in values), 23, len(values), 1)
    for v in values:
        out += struct.pack(">i", -1) if v is None else struct.pack(">ii", 4, v)
    return out


TYPES_BINARY_ROW = (
    struct.pack(">i", 1),
    struct.pack(">h", -32768),
    struct.pack(">i", 2147483647),
    struct.pack(">q", -(2**63)),
    "héllo ✓".encode(),
    # numeric 12345.678: ndigits 3, weight 1, sign +, dscale 3; base-10000 digits
    struct.pack(">hhHh", 3, 1, 0, 3) + struct.pack(">hhh", 1, 2345, 6780),
    struct.pack(">q", _pg_us(datetime(2024, 2, 29, 12, 34, 56, 789012, tzinfo=timezone.utc))),
    b"\x01",
    struct.pack(">d", 1.5),
    b'\x01{"a": [1, 2, {"b": null}]}',
    uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11").bytes,
    b"\x00\xff\x10",
    _array_int4([1, None, -3]),
)
TYPES_TEXT_ROW = (
    "1",
    "-32768",
    "2147483647",
    "-9223372036854775808",
    "héllo ✓",
    "12345.678",
    "2024-02-29 12:34:56.789012+00",
    "t",
    "1.5",
    '{"a": [1, 2, {"b": null}]}',
    "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    "\\x00ff10",
    "{1,NULL,-3}",
)


def _types(dec: Decoded, row: tuple[Any, ...], i4_42: Any, false: Any) -> None:
    rel = only_relation(dec, "types")
    assert [c[1] for c in relation_columns(rel)] == [
        23, 21, 23, 20, 25, 1700, 1184, 16, 701, 3802, 2950, 17, 1007
    ]  # fmt: skip
    updated = list(row)
    updated[2], updated[7] = i4_42, false
    two = struct.pack(">i", 2) if isinstance(row[0], bytes) else "2"
    t = "types"
    assert_changes(
        dec,
        [
            ins(t, *row),
            ins(t, two, *[None] * 12),
            upd(t, full(*updated), None),
            dele(t, key(two)),
        ],
    )
    # binary columns arrive as bytes, text columns as str
    for e in dec.of_kind("insert"):
        assert all(v is None or type(v) is type(row[0]) for v in e.wire_table_row)


@scenario("binary_types")
def _binary_types(dec: Decoded) -> None:
    _types(dec, TYPES_BINARY_ROW, struct.pack(">i", 42), b"\x00")


@scenario("text_types")
def _text_types(dec: Decoded) -> None:
    _types(dec, TYPES_TEXT_ROW, "42", "f")


@scenario("types_rich_text")
def _types_rich_text(dec: Decoded) -> None:
    types = dec.of_kind("type")
    rel = only_relation(dec, "rich")
    cols = relation_columns(rel)
    assert [c[0] for c in cols][:4] == ["id", "f4", "f8", "n"]
    # the domain column's type is described by a Type message (with its base type's name)
    dom_oid = cols[-1][1]
    assert [(t.type_oid, t.type_namespace, t.type_name) for t in types] == [
        (dom_oid, "pg_catalog", "int4")
    ]
    assert cols[4][2] == (38 << 16 | 10) + 4  # numeric(38,10) typmod
    assert cols[5][2] == 14 and cols[6][2] == 9  # varchar(10), char(5)
    rows = [e.wire_table_row for e in dec.of_kind("insert")]
    assert len(rows) == 3
    first = rows[0]
    assert first == (
        "1",
        "NaN",
        "Infinity",
        "NaN",
        "1234567890123456789012345678.0123456789",
        "varchar",
        "ab   ",
        "a name",
        'quote\' "dq" back\\slash\nnewline\ttab ünïcødé 🎉',
        "\\xdeadbeef00",
        "2024-02-29",
        "23:59:59.999999",
        "12:00:00+05:30",
        "2000-01-01 00:00:00",
        "1999-12-31 23:59:59.5+00",
        "1 year 2 mons 3 days 04:05:06.789",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        '{"k": "v", "n": 1.50}',
        '{"k": "v", "n": 1.50}',
        "192.168.0.1/24",
        "10.0.0.0/8",
        "08:00:2b:01:02:03",
        "$12.34",
        "[1,10)",
        "'a' 'cat' 'fat'",
        "4294967295",
        "t",
        "{1,NULL,3}",
        '{"a b","c,d",NULL,"e\\"f"}',
        "{}",
        "5",
    )
    second = dict(zip([c[0] for c in cols], rows[1], strict=True))
    assert (second["f4"], second["f8"], second["n"]) == ("-Infinity", "-0", "-0.000001")
    assert (second["d"], second["ts"], second["tstz"]) == ("infinity", "-infinity", "infinity")
    assert second["ia2"] == "{{1,2},{3,4}}"
    third = dict(zip([c[0] for c in cols], rows[2], strict=True))
    assert third["f4"] == "3.4028235e+38" and third["f8"] == "5e-324"
    assert third["n"] == "1" + "0" * 100
    assert third["d"] == "0044-03-15 BC" and third["iv"] == "-1 days +02:00:00"


@scenario("user_types")
def _user_types(dec: Decoded) -> None:
    types = dec.of_kind("type")
    rel = only_relation(dec, "ut")
    cols = relation_columns(rel)
    by_oid = {t.type_oid: (t.type_namespace, t.type_name) for t in types}
    assert [by_oid[c[1]] for c in cols[1:]] == [
        ("public", "mood"),
        ("public", "pair"),
        ("public", "_mood"),
        ("pg_catalog", "int4"),  # a domain is described by its base type
    ]
    # Type messages precede the relation that uses them
    kinds = dec.kinds()
    assert kinds[:6] == ["begin", "type", "type", "type", "type", "relation"]
    assert_changes(
        dec,
        [
            ins("ut", "1", "happy", "(1,one)", "{sad,ok}", "7"),
            upd("ut", full("1", "sad", "(1,one)", "{sad,ok}", "7"), None),
        ],
    )


def check_capture_events(dec: Decoded) -> None:
    """All invariants, then the scenario's own expectations."""
    check_invariants(dec)
    CHECKS[dec.scenario](dec)
