"""The decoder against the golden pgoutput captures (no server needed).

The captures in tests/fixtures/captures were recorded from real PostgreSQL 15 and 18 servers
by tests/support/capture/record.py; tests/support/scenario_checks.py says what each must decode to.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pgwire_cdc
import pytest
from support.capture.record import SCENARIOS, all_capture_paths, capture_labels, load_capture
from support.capture.wire import TAG_KIND, layouts
from support.scenario_checks import CHECKS, check_capture_events, decode_capture

CAPTURES = all_capture_paths()
IDS = [f"{p.parent.name}-{p.stem}" for p in CAPTURES]


@pytest.fixture(params=CAPTURES, ids=IDS)
def capture(request: pytest.FixtureRequest) -> dict[str, Any]:
    return load_capture(request.param)


def test_every_scenario_was_captured() -> None:
    assert CAPTURES, "no captures: run `make captures`"
    have = {(p.parent.name, p.stem) for p in CAPTURES}
    versions = {"pg15": 150000, "pg18": 180000}
    for scenario in SCENARIOS:
        for server, version in versions.items():
            if scenario.supported_by(version):
                assert (server, scenario.name) in have, f"missing capture {server}/{scenario.name}"
    assert {name for _, name in have} <= set(CHECKS)


def test_capture_file_shape(capture: dict[str, Any]) -> None:
    keys = {"scenario", "server", "server_version_num", "proto_version", "binary", "options"}
    assert keys | {"sql", "messages"} <= set(capture)
    assert capture["options"]["proto_version"] == str(capture["proto_version"])
    assert capture["server"] in ("pg15", "pg18")
    assert capture["server_version_num"] // 10000 == int(capture["server"][2:])
    for m in capture["messages"]:
        assert chr(bytes.fromhex(m["data"])[0]) in TAG_KIND
        assert pgwire_cdc.int_to_lsn(pgwire_cdc.lsn_to_int(m["lsn"])) == m["lsn"]
    capture_labels(capture)  # the structure reader walks every message to its end


def test_capture_files_are_small() -> None:
    for path in CAPTURES:
        assert path.stat().st_size < 2 * 1024 * 1024, path


def test_scenario(capture: dict[str, Any]) -> None:
    check_capture_events(decode_capture(capture))


def test_feed_many_matches_feed(capture: dict[str, Any]) -> None:
    one = decode_capture(capture)
    many = decode_capture(capture, feed_many=True)
    assert [e.to_dict() for e in one.events] == [e.to_dict() for e in many.events]


def test_feed_many_accepts_any_sequence_of_buffers() -> None:
    """Lists take a fast path (items read in place); tuples, generators and lists
    mixing bytes and bytearray decode to the same events."""
    capture = load_capture(next(p for p in CAPTURES if p.stem == "toast_default"))
    data = [bytes.fromhex(m["data"]) for m in capture["messages"]]
    lsns = [pgwire_cdc.lsn_to_int(m["lsn"]) for m in capture["messages"]]

    def events_of(messages: Any, lsn_seq: Any) -> list[dict[str, Any]]:
        dec = pgwire_cdc.Decoder(proto_version=capture["proto_version"], binary=capture["binary"])
        dec.feed_many(messages, lsn_seq)
        return [e.to_dict() for e in dec.events(typed=False)]

    expected = events_of(data, lsns)
    assert expected
    mixed = [bytearray(m) if i % 2 else m for i, m in enumerate(data)]
    assert events_of(tuple(data), tuple(lsns)) == expected
    assert events_of((m for m in data), None) == events_of(data, None)
    assert events_of(mixed, lsns) == expected
    assert events_of(data, tuple(lsns)) == expected
    with pytest.raises(TypeError):
        events_of([*data[:2], "not bytes"], None)
    with pytest.raises(TypeError):
        events_of([*data[:2], memoryview(data[2])], None)
    # LSNs: int subclasses and objects with __index__ are ints; out of range is an error.

    class Lsn:
        def __init__(self, value: int) -> None:
            self.value = value

        def __index__(self) -> int:
            return self.value

    class MyInt(int):
        pass

    assert events_of(data, [MyInt(x) for x in lsns]) == expected
    assert events_of(data, [Lsn(x) for x in lsns]) == expected
    for bad, error in ((-1, OverflowError), (2**64, OverflowError), ("0/0", TypeError)):
        with pytest.raises(error):
            events_of(data, [*lsns[:-1], bad])
    # The largest LSN is a value, not the error marker of the int conversion.
    dec = pgwire_cdc.Decoder(proto_version=1, keep_tables=False)
    dec.feed_many(data, [2**64 - 1, 2**32 + 7, *lsns[2:]])
    assert [e.start_lsn for e in dec.events()][:2] == [2**64 - 1, 2**32 + 7]


def test_feed_many_survives_a_list_changed_by_its_own_lsns() -> None:
    """An LSN object whose ``__index__`` empties the messages list (Python code run in the
    middle of feed_many) gives an exception, never a read of a freed message."""
    capture = load_capture(next(p for p in CAPTURES if p.stem == "ri_default"))
    data = [bytes.fromhex(m["data"]) for m in capture["messages"]]

    class Emptying:
        def __index__(self) -> int:
            data.clear()
            return 0

    dec = pgwire_cdc.Decoder(proto_version=capture["proto_version"], binary=capture["binary"])
    with pytest.raises(RuntimeError, match="changed during feed_many"):
        dec.feed_many(data, [0, Emptying(), *([0] * (len(data) - 2))])
    assert len(dec.events()) == 1  # the first message, before the list was emptied


def test_events_are_drained(capture: dict[str, Any]) -> None:
    dec = pgwire_cdc.Decoder(proto_version=capture["proto_version"], binary=capture["binary"])
    first = capture["messages"][0]
    dec.feed(bytes.fromhex(first["data"]), pgwire_cdc.lsn_to_int(first["lsn"]))
    dec.events()
    assert dec.events() == []


def test_incremental_draining_gives_the_same_events(capture: dict[str, Any]) -> None:
    """Calling events() after every message yields the same sequence as once at the end."""
    whole = decode_capture(capture)
    typed = whole.events and all(
        e.table_row is not None for e in whole.events if e.kind == "insert"
    )
    dec = pgwire_cdc.Decoder(proto_version=capture["proto_version"], binary=capture["binary"])
    got: list[Any] = []
    for m in capture["messages"]:
        dec.feed(bytes.fromhex(m["data"]), pgwire_cdc.lsn_to_int(m["lsn"]))
        got.extend(dec.events(typed=bool(typed)))
    assert [e.to_dict() for e in got] == [e.to_dict() for e in whole.events]


def test_lsn_defaults_to_zero() -> None:
    capture = load_capture(next(p for p in CAPTURES if p.stem == "ri_default"))
    dec = pgwire_cdc.Decoder(proto_version=1)
    dec.feed_many([bytes.fromhex(m["data"]) for m in capture["messages"]])
    events = dec.events()
    assert events and all(e.start_lsn == 0 for e in events)


def test_event_kinds_are_the_documented_ones() -> None:
    documented = set(TAG_KIND.values())
    seen: set[str] = set()
    for path in CAPTURES:
        seen |= {e.kind for e in decode_capture(load_capture(path)).events}
    assert seen <= documented
    # the captures exercise every event kind
    assert seen == documented, f"never produced: {sorted(documented - seen)}"


def test_captures_are_valid_json_with_one_message_per_line() -> None:
    for path in CAPTURES:
        text = Path(path).read_text(encoding="utf-8")
        data = json.loads(text)
        assert text.count('{"lsn"') == len(data["messages"])


# -- shapes PostgreSQL does not send, derived from real captures ------------------------


def _messages(server: str, scenario: str) -> list[bytes]:
    capture = load_capture(
        next(p for p in CAPTURES if p.parent.name == server and p.stem == scenario)
    )
    return [bytes.fromhex(m["data"]) for m in capture["messages"]]


def test_unchanged_toast_inside_an_old_image_is_the_sentinel() -> None:
    """'u' in an O image cannot fill the new tuple's 'u': the column stays missing."""
    messages = _messages("pg15", "toast_full")
    i, update = next((i, m) for i, m in enumerate(messages) if m[:1] == b"U")
    layout = layouts(messages[: i + 1])[-1]
    old = layout.tuples[0]
    assert old.marker == "O" and old.kinds == ["t", "t", "t"]
    big_at = old.length_offsets[2]  # Int32 length of `big` in the O tuple
    big_len = struct.unpack(">i", update[big_at : big_at + 4])[0]
    patched = update[: big_at - 1] + b"u" + update[big_at + 4 + big_len :]
    dec = pgwire_cdc.Decoder(proto_version=1)
    dec.feed_many([*messages[:i], patched])
    updates: list[Any] = [e for e in dec.events() if e.kind == "update"]
    (event,) = updates
    kind, values = event.wire_old_table_row
    assert kind == "full"
    assert values[:2] == ("1", "a")
    assert values[2] is pgwire_cdc.UNCHANGED_TOAST
    assert tuple(event.wire_updated_table_row[1]) == ("1", "b")
    assert event.wire_updated_table_row[0] == "partial"
    assert list(event.wire_updated_table_row[2]) == [2]


def test_row_events_name_their_table() -> None:
    for path in CAPTURES:
        for e in decode_capture(load_capture(path)).events:
            if e.kind in ("insert", "update", "delete", "relation"):
                assert e.table and e.table.count(".") == 1, (path.stem, e.kind, e.table)
            elif e.kind in ("begin", "commit", "stream_start", "stream_stop", "stream_commit"):
                assert e.table is None, (path.stem, e.kind, e.table)
