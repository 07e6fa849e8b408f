"""Malformed pgoutput bytes raise DecodeError, never anything else.

The inputs are real captured messages (tests/fixtures/captures), cut short or corrupted in
the ways a broken stream or a bug upstream would: truncation at every length, impossible
TupleData lengths, unknown tags, unknown relation OIDs, column counts that disagree with the
relation, invalid UTF-8 in names, and random mutations (hypothesis). A DecodeError names the
message kind and the byte offset, and a failed message leaves the decoder's state unchanged.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import pgwire_cdc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pgwire_cdc.errors import DecodeError
from support.capture.record import all_capture_paths, load_capture
from support.capture.wire import TAG_KIND, layouts
from support.scenario_checks import capture_messages

KIND_NAME = {
    "B": "Begin",
    "C": "Commit",
    "O": "Origin",
    "R": "Relation",
    "Y": "Type",
    "I": "Insert",
    "U": "Update",
    "D": "Delete",
    "T": "Truncate",
    "M": "Message",
    "S": "Stream Start",
    "E": "Stream Stop",
    "c": "Stream Commit",
    "A": "Stream Abort",
    "b": "Begin Prepare",
    "P": "Prepare",
    "K": "Commit Prepared",
    "r": "Rollback Prepared",
    "p": "Stream Prepare",
}
VALID_TAGS = frozenset(ord(t) for t in TAG_KIND)


@dataclass(frozen=True)
class Sample:
    """One real message with everything fed before it in its capture."""

    name: str
    proto_version: int
    binary: bool
    context: tuple[bytes, ...]
    message: bytes
    in_stream: bool
    v4_abort: bool

    @property
    def tag(self) -> str:
        return chr(self.message[0])

    def decoder(self) -> pgwire_cdc.Decoder:
        dec = pgwire_cdc.Decoder(proto_version=self.proto_version, binary=self.binary)
        dec.feed_many(list(self.context))
        dec.events(typed=False)
        return dec

    def layout(self) -> Any:
        return layouts([*self.context, self.message], v4_abort=self.v4_abort)[-1]


@cache
def samples() -> tuple[Sample, ...]:
    """The first message of each structure label in every capture."""
    out = []
    for path in all_capture_paths():
        capture = load_capture(path)
        messages, _ = capture_messages(capture)
        v4_abort = capture["options"].get("streaming") == "parallel"
        seen: set[tuple[str, bool]] = set()
        in_stream = False
        for i, layout in enumerate(layouts(messages, v4_abort=v4_abort)):
            label = (layout.label, in_stream)
            if label not in seen:
                seen.add(label)
                out.append(
                    Sample(
                        name=f"{path.parent.name}/{path.stem}#{i}:{layout.label}",
                        proto_version=capture["proto_version"],
                        binary=capture["binary"],
                        context=tuple(messages[:i]),
                        message=messages[i],
                        in_stream=in_stream,
                        v4_abort=v4_abort,
                    )
                )
            if layout.tag == "S":
                in_stream = True
            elif layout.tag == "E":
                in_stream = False
    return tuple(out)


def small_samples() -> list[Sample]:
    return [s for s in samples() if len(s.context) <= 80]


def tuple_samples() -> list[Sample]:
    return [s for s in samples() if s.tag in "IUD"]


def _norm(kind: str) -> str:
    return kind.replace(" ", "").replace("_", "").lower()


def assert_decode_error(err: DecodeError, data: bytes, tag: str | None = None) -> None:
    """A DecodeError names the message kind and a byte offset inside the message."""
    assert isinstance(err, pgwire_cdc.Error)
    assert isinstance(err.offset, int), err
    assert 0 <= err.offset <= len(data), (err.offset, len(data), str(err))
    assert isinstance(err.message_kind, str) and err.message_kind, err
    assert err.reason, err
    text = str(err)
    assert err.message_kind in text, text
    assert str(err.offset) in text, text
    if tag is not None:
        assert _norm(err.message_kind) == _norm(KIND_NAME[tag]), (err.message_kind, tag)


def expect_error(dec: pgwire_cdc.Decoder, data: bytes, tag: str | None = None) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        dec.feed(data, 1)
    assert type(info.value) is DecodeError
    assert_decode_error(info.value, data, tag)
    return info.value


def clean_events(sample: Sample) -> list[dict[str, Any]]:
    dec = sample.decoder()
    dec.feed(sample.message, 1)
    return [e.to_dict() for e in dec.events(typed=False)]


def _prefix_lengths(n: int) -> Iterator[int]:
    if n <= 1024:
        yield from range(n)
        return
    yield from range(64)
    yield from range(64, n - 64, 101)
    yield from range(n - 64, n)


@pytest.mark.parametrize("sample", samples(), ids=lambda s: s.name)
def test_every_truncation_is_a_decode_error(sample: Sample) -> None:
    dec = sample.decoder()
    for n in _prefix_lengths(len(sample.message)):
        prefix = sample.message[:n]
        if sample.tag == "A" and n == 9:
            # xid + subxid is a complete Stream Abort unless parallel streaming is on, which
            # the decoder is not told: both readings are acceptable.
            continue
        err = expect_error(dec, prefix, sample.tag if n else None)
        assert err.offset is not None and err.offset <= n
    # the failures left no trace: the real message still decodes to the same events
    dec.feed(sample.message, 1)
    assert [e.to_dict() for e in dec.events(typed=False)] == clean_events(sample)


BAD_LENGTHS = (-1, -2, -(2**31), 2**31 - 1, 2**24)


@pytest.mark.parametrize("sample", tuple_samples(), ids=lambda s: s.name)
def test_impossible_tupledata_lengths(sample: Sample) -> None:
    offsets = [o for t in sample.layout().tuples for o in t.length_offsets]
    if not offsets:
        pytest.skip("no value with a length in this tuple")
    dec = sample.decoder()
    for offset in offsets:
        for bad in (*BAD_LENGTHS, len(sample.message)):
            data = bytearray(sample.message)
            data[offset : offset + 4] = struct.pack(">i", bad)
            err = expect_error(dec, bytes(data), sample.tag)
            assert err.offset >= offset
    dec.feed(sample.message, 1)
    assert [e.to_dict() for e in dec.events(typed=False)] == clean_events(sample)


@pytest.mark.parametrize("sample", tuple_samples(), ids=lambda s: s.name)
def test_column_count_disagreeing_with_relation(sample: Sample) -> None:
    layout = sample.layout()
    tup = layout.tuples[-1]
    dec = sample.decoder()
    ncols = struct.unpack(">h", sample.message[tup.ncols_offset : tup.ncols_offset + 2])[0]
    # one more column than the relation has: append a NULL
    more = bytearray(sample.message)
    more[tup.ncols_offset : tup.ncols_offset + 2] = struct.pack(">h", ncols + 1)
    more += b"n"
    expect_error(dec, bytes(more), sample.tag)
    # one fewer: cut the last column off (only the last tuple, which ends the message)
    if tup.kinds[-1] in "nu":
        fewer = bytearray(sample.message[:-1])
    else:
        fewer = bytearray(sample.message[: tup.length_offsets[-1] - 1])
    fewer[tup.ncols_offset : tup.ncols_offset + 2] = struct.pack(">h", ncols - 1)
    expect_error(dec, bytes(fewer), sample.tag)
    for bad in (-1, 0x7FFF):
        data = bytearray(sample.message)
        data[tup.ncols_offset : tup.ncols_offset + 2] = struct.pack(">h", bad)
        expect_error(dec, bytes(data), sample.tag)
    dec.feed(sample.message, 1)
    assert [e.to_dict() for e in dec.events(typed=False)] == clean_events(sample)


@pytest.mark.parametrize("sample", tuple_samples(), ids=lambda s: s.name)
def test_unknown_tuple_kind_and_marker(sample: Sample) -> None:
    dec = sample.decoder()
    tup = sample.layout().tuples[-1]
    first_kind = tup.ncols_offset + 2
    data = bytearray(sample.message)
    data[first_kind] = ord("x")
    expect_error(dec, bytes(data), sample.tag)
    marker_at = tup.ncols_offset - 1  # 'N' (or K/O) right before the column count
    data = bytearray(sample.message)
    data[marker_at] = ord("Q")
    expect_error(dec, bytes(data), sample.tag)


def test_unknown_tag() -> None:
    dec = pgwire_cdc.Decoder(proto_version=4)
    for tag in range(256):
        if tag in VALID_TAGS:
            continue
        for payload in (b"", b"\x00" * 8, b"\xff" * 40):
            err = expect_error(dec, bytes([tag]) + payload)
            assert err.offset == 0
            assert f"{tag:02x}" in str(err).lower() or repr(chr(tag)) in str(err), str(err)


def _first(tag: str, in_stream: bool = False) -> Sample:
    return next(s for s in samples() if s.tag == tag and s.in_stream == in_stream)


@pytest.mark.parametrize("tag", ["I", "U", "D", "T"])
def test_unknown_relation_oid(tag: str) -> None:
    sample = _first(tag)
    dec = pgwire_cdc.Decoder(proto_version=sample.proto_version, binary=sample.binary)
    begin = next(m for m in sample.context if m[:1] == b"B")
    dec.feed(begin, 1)
    err = expect_error(dec, sample.message, tag)
    reason = str(err.reason).lower()
    assert "relation" in reason or "oid" in reason, reason


def test_unknown_relation_after_known_one() -> None:
    sample = _first("I")
    dec = sample.decoder()
    data = bytearray(sample.message)
    oid = struct.unpack(">I", data[1:5])[0]
    data[1:5] = struct.pack(">I", oid + 1)
    err = expect_error(dec, bytes(data), "I")
    assert err.offset == 1


def _relation_sample() -> Sample:
    return next(s for s in samples() if s.tag == "R" and not s.in_stream)


@pytest.mark.parametrize("bad", [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf"])
def test_invalid_utf8_in_relation_name(bad: bytes) -> None:
    sample = _relation_sample()
    layout = sample.layout()
    at = layout.relation_name_offset
    data = bytearray(sample.message)
    data[at : at + len(bad)] = bad
    dec = sample.decoder()
    err = expect_error(dec, bytes(data), "R")
    assert err.offset >= at - 1
    # nor in the namespace ("public" starts right after the OID)
    data = bytearray(sample.message)
    data[5 : 5 + len(bad)] = bad
    expect_error(dec, bytes(data), "R")
    dec.feed(sample.message, 1)
    assert [e.to_dict() for e in dec.events(typed=False)] == clean_events(sample)


def test_invalid_utf8_in_column_name() -> None:
    sample = _relation_sample()
    layout = sample.layout()
    # first column: flags byte, then the name
    at = layout.relation_ncols_offset + 3
    data = bytearray(sample.message)
    data[at] = 0xFF
    expect_error(sample.decoder(), bytes(data), "R")


def test_feed_many_reports_the_failing_index() -> None:
    sample = _first("I")
    dec = pgwire_cdc.Decoder(proto_version=sample.proto_version, binary=sample.binary)
    good = list(sample.context)
    with pytest.raises(DecodeError) as info:
        dec.feed_many([*good, sample.message[:-1], sample.message])
    assert info.value.index == len(good)
    assert_decode_error(info.value, sample.message[:-1], "I")


def test_errors_do_not_leak_row_values() -> None:
    for sample in tuple_samples():
        values = [
            sample.message[o + 4 : o + 4 + struct.unpack(">i", sample.message[o : o + 4])[0]]
            for t in sample.layout().tuples
            for o in t.length_offsets
        ]
        secrets = [v.decode("utf-8", "replace") for v in values if len(v) >= 4]
        for n in (len(sample.message) - 1, len(sample.message) // 2):
            try:
                sample.decoder().feed(sample.message[:n], 1)
            except DecodeError as err:
                for secret in secrets:
                    assert secret not in str(err), f"{sample.name}: error shows a row value"


# -- random mutations (hypothesis) -------------------------------------------------------


@st.composite
def mutated(draw: st.DrawFn) -> tuple[Sample, bytes]:
    sample = draw(st.sampled_from(small_samples()))
    data = bytearray(sample.message)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "int32"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and data:
            del data[pos : pos + draw(st.integers(1, 8))]
        elif op == "truncate":
            del data[pos:]
        elif op == "int32":
            value = draw(st.sampled_from([-1, 0, 1, 2**31 - 1, -(2**31), 2**16, 255]))
            data[pos : pos + 4] = struct.pack(">i", value)
    return sample, bytes(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_messages_decode_or_raise_decode_error(case: tuple[Sample, bytes]) -> None:
    sample, data = case
    dec = sample.decoder()
    try:
        dec.feed(data, 1)
    except DecodeError as err:
        assert_decode_error(err, data)
        # state unchanged: the real message still decodes as it would have
        dec.feed(sample.message, 1)
        assert [e.to_dict() for e in dec.events(typed=False)] == clean_events(sample)
        return
    for e in dec.events(typed=False):
        e.to_dict()


@st.composite
def shuffled_streams(draw: st.DrawFn) -> tuple[Sample, list[bytes]]:
    sample = draw(st.sampled_from(small_samples()))
    messages = [*sample.context, sample.message]
    order = draw(st.permutations(range(len(messages))))
    keep = draw(st.integers(1, len(messages)))
    return sample, [messages[i] for i in order[:keep]]


@settings(max_examples=200, deadline=None)
@given(shuffled_streams())
def test_out_of_order_messages_decode_or_raise_decode_error(
    case: tuple[Sample, list[bytes]],
) -> None:
    sample, messages = case
    dec = pgwire_cdc.Decoder(proto_version=sample.proto_version, binary=sample.binary)
    for i, data in enumerate(messages):
        try:
            dec.feed(data, i)
        except DecodeError as err:
            assert_decode_error(err, data)
    for e in dec.events(typed=False):
        e.to_dict()


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(sorted(TAG_KIND)),
    st.binary(max_size=64),
    st.integers(1, 4),
    st.booleans(),
)
def test_random_payloads_decode_or_raise_decode_error(
    tag: str, payload: bytes, proto: int, after_begin: bool
) -> None:
    dec = pgwire_cdc.Decoder(proto_version=proto)
    if after_begin:
        dec.feed(b"B" + bytes(20), 1)
    data = tag.encode() + payload
    try:
        dec.feed(data, 2)
    except DecodeError as err:
        assert_decode_error(err, data)
    for e in dec.events(typed=False):
        e.to_dict()


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(tuple_samples()), st.binary(min_size=1, max_size=6))
def test_non_utf8_text_values_decode_or_raise_decode_error(sample: Sample, junk: bytes) -> None:
    layout = sample.layout()
    offsets = [o for t in layout.tuples for o in t.length_offsets]
    if not offsets:
        return
    data = bytearray(sample.message)
    o = offsets[-1]
    n = struct.unpack(">i", data[o : o + 4])[0]
    data[o : o + 4 + n] = struct.pack(">i", len(junk)) + junk
    dec = sample.decoder()
    try:
        dec.feed(bytes(data), 1)
    except DecodeError as err:
        assert_decode_error(err, bytes(data), sample.tag)
        return
    for e in dec.events(typed=False):
        e.to_dict()


def _timestamp_offsets(sample: Sample) -> list[int]:
    """Byte offsets of the Int64 timestamps in a control message."""
    return {
        "B": [9],
        "C": [18],
        "c": [22],
        "b": [17],
        "P": [18],
        "p": [18],
        "K": [18],
        "r": [18, 26],
        "A": [17] if len(sample.message) == 25 else [],
    }.get(sample.tag, [])


def _one_per_tag(tags: str) -> list[Sample]:
    """The first small-context sample of each tag (A: the v4 form, which has a timestamp)."""
    chosen: dict[str, Sample] = {}
    for s in small_samples():
        if s.tag in tags and s.tag not in chosen and (s.tag != "A" or len(s.message) == 25):
            chosen[s.tag] = s
    return list(chosen.values())


@pytest.mark.parametrize("sample", _one_per_tag("BCcbPpKrA"), ids=lambda s: s.name)
@pytest.mark.parametrize("value", [2**63 - 1, -(2**63), 2**62], ids=["max", "min", "2^62"])
def test_out_of_range_timestamps(sample: Sample, value: int) -> None:
    """A timestamp no datetime can hold is a DecodeError or is kept as the raw integer."""
    offsets = _timestamp_offsets(sample)
    if not offsets:
        pytest.skip("no timestamp in this message")
    for at in offsets:
        data = bytearray(sample.message)
        data[at : at + 8] = struct.pack(">q", value)
        dec = sample.decoder()
        try:
            dec.feed(bytes(data), 1)
        except DecodeError as err:
            assert_decode_error(err, bytes(data), sample.tag)
            continue
        for e in dec.events(typed=False):  # must not raise (OverflowError was seen here)
            e.to_dict()


# -- out-of-sequence messages --------------------------------------------------------------


def _plain(capture: str) -> list[bytes]:
    path = next(p for p in all_capture_paths() if p.parent.name == "pg15" and p.stem == capture)
    return capture_messages(load_capture(path))[0]


def _after_transaction_of(capture: str, tag: str) -> tuple[pgwire_cdc.Decoder, bytes]:
    """A decoder that has seen everything up to the Commit of the first transaction holding
    a `tag` message (so every relation it names is known), and that message."""
    messages = _plain(capture)
    at = next(i for i, m in enumerate(messages) if m[:1] == tag.encode())
    end = next(i for i in range(at, len(messages)) if messages[i][:1] == b"C")
    dec = pgwire_cdc.Decoder(proto_version=1)
    dec.feed_many(messages[: end + 1])
    dec.events(typed=False)
    return dec, messages[at]


@pytest.mark.parametrize(
    ("capture", "tag"),
    [("ri_default", "I"), ("ri_default", "U"), ("ri_default", "D"), ("truncate", "T")],
)
def test_change_outside_a_transaction(capture: str, tag: str) -> None:
    """PostgreSQL sends changes only between Begin and Commit; anything else is
    out of sequence (a data event needs a commit LSN: (commit_lsn, tx_ordinal) is its key)."""
    dec, change = _after_transaction_of(capture, tag)
    expect_error(dec, change, tag)
    assert dec.events(typed=False) == []


def test_transactional_message_outside_a_transaction() -> None:
    messages = _plain("messages")
    tx = next(m for m in messages if m[:1] == b"M" and m[1] & 1)
    dec = pgwire_cdc.Decoder(proto_version=1)
    expect_error(dec, tx, "M")
    nontx = next(m for m in messages if m[:1] == b"M" and not m[1] & 1)
    dec.feed(nontx, 1)  # a non-transactional one is fine anywhere
    assert [e.kind for e in dec.events(typed=False)] == ["message"]


def test_commit_without_begin() -> None:
    dec, commit = _after_transaction_of("ri_default", "C")
    expect_error(dec, commit, "C")
    assert dec.events(typed=False) == []


def test_begin_inside_a_transaction() -> None:
    messages = _plain("ri_default")
    dec = pgwire_cdc.Decoder(proto_version=1)
    dec.feed(messages[0], 1)
    expect_error(dec, messages[0], "B")
