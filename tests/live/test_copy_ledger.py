"""The slot's copy-state bookkeeping (``pgwire_cdc.copies.CopyLedger``), without a server:
when a note must be written, what it holds, what the idle session may confirm, and what a
run learns from an earlier run's notes."""

from __future__ import annotations

import json

import pytest
from pgwire_cdc.copies import CopyLedger, decode, encode


def ledger(caught_up: bool = True) -> CopyLedger:
    return CopyLedger("s", caught_up=caught_up)


def written(led: CopyLedger, end: int) -> dict[str, object]:
    """Writes the due note (as the stream does) and returns its content."""
    doc = json.loads(led.note())
    led.noted(end)
    return doc


def test_nothing_to_record_writes_nothing() -> None:
    led = ledger()
    led.handed_out(0, {})
    led.acking(0)
    assert not led.note_due(100)
    assert led.idle_confirm_limit() is None


def test_a_started_copy_is_noted_at_once() -> None:
    led = ledger()
    led.started("public.b", None)
    assert led.note_due()
    assert written(led, 500) == {"slot": "s", "copies": {"public.b": []}, "full": True}
    assert not led.note_due()


@pytest.mark.parametrize(
    ("ack_lsn", "due"),
    [(499, False), (500, True), (900, True)],
    ids=["before the note", "at its end", "past it"],
)
def test_an_ack_passing_the_note_writes_a_new_one_first(ack_lsn: int, due: bool) -> None:
    led = ledger()
    led.started("public.b", None)
    written(led, 500)
    led.handed_out(0, {})
    led.acking(0)
    assert led.note_due(ack_lsn) is due


def test_a_note_holds_the_acked_progress_not_the_handed_out_one() -> None:
    led = ledger()
    led.started("public.b", None)
    written(led, 100)
    led.handed_out(0, {"public.b": [100]})
    led.handed_out(1, {"public.b": [200]})
    assert not led.note_due(50), "nothing acked yet: the note stands"
    led.acking(0)
    assert led.note_due(150)
    assert written(led, 300)["copies"] == {"public.b": [100]}
    led.acking(1)
    assert written(led, 400)["copies"] == {"public.b": [200]}


def test_a_finished_copy_is_noted_once_then_nothing() -> None:
    led = ledger()
    led.started("public.b", None)
    written(led, 100)
    led.handed_out(0, {"public.b": None})
    led.acking(0)
    assert led.note_due(50), "the note ahead still asks for the copy"
    assert written(led, 200)["copies"] == {}
    assert led.idle_confirm_limit() is None
    led.handed_out(1, {})
    led.acking(1)
    assert not led.note_due(300)


def test_the_idle_session_stays_before_the_last_note() -> None:
    led = ledger()
    led.started("public.b", None)
    written(led, 500)
    assert led.idle_confirm_limit() == 0, "its start is unknown until it comes back"
    led.received(440, led.note().encode(), run_start=400)
    assert led.idle_confirm_limit() == 440


def test_an_earlier_runs_note_restarts_its_copy() -> None:
    led = ledger(caught_up=False)
    wanted = led.received(150, encode("s", {"public.b": [300]}, True).encode(), run_start=400)
    assert wanted == {"public.b": [300]}
    # Another slot's note, or one that does not parse, says nothing.
    assert led.received(160, encode("other", {"public.c": []}, True).encode(), 400) == {}
    assert led.received(170, b"{not json", 400) == {}


def test_a_full_note_replaces_a_partial_one_merges() -> None:
    led = ledger(caught_up=False)
    led.received(100, encode("s", {"public.b": [], "public.c": [5]}, True).encode(), 400)
    led.received(200, encode("s", {"public.d": []}, False).encode(), 400)
    assert set(led.learnt) == {"public.b", "public.c", "public.d"}
    led.received(250, encode("s", {"public.c": None}, False).encode(), 400)
    assert led.learnt["public.c"] is None
    led.received(300, encode("s", {"public.d": [9]}, True).encode(), 400)
    assert led.learnt == {"public.d": [9]}


def test_notes_before_catching_up_are_partial_and_name_finished_copies() -> None:
    led = ledger(caught_up=False)
    led.started("public.c", None)
    first = written(led, 600)
    assert first["full"] is False
    led.handed_out(0, {"public.c": None})
    led.acking(0)
    assert written(led, 700)["copies"] == {"public.c": None}
    led.caught_up = True  # the stream passed the run's start
    led.handed_out(1, {})
    led.acking(1)
    doc = written(led, 900)
    assert doc == {"slot": "s", "copies": {}, "full": True}


def test_a_copy_learnt_while_acks_are_pending_is_kept_by_them() -> None:
    led = ledger(caught_up=False)
    led.handed_out(0, {})
    led.started("public.b", [7])
    led.acking(0)
    assert led.acked == {"public.b": [7]}


def test_decode_keeps_only_well_formed_entries() -> None:
    content = json.dumps({"slot": "s", "copies": {"a": [1], "b": "x", "c": None}}).encode()
    assert decode("s", content) == ({"a": [1], "c": None}, True, None)
    listed = json.dumps({"slot": "s", "copies": {}, "known": ["a", 1]}).encode()
    assert decode("s", listed) == ({}, True, {"a"})


def test_a_candidate_is_copied_unless_an_earlier_run_knew_it() -> None:
    led = ledger(caught_up=False)
    assert led.candidates_to_copy({"public.b"}) == {"public.b"}, "no last note: copy"
    last = encode("s", {}, True, known=["public.a", "public.b"]).encode()
    led.received(100, last, run_start=400)
    assert led.known_before == {"public.a", "public.b"}
    assert led.candidates_to_copy({"public.b", "public.c"}) == {"public.c"}
    led.started("public.c", None)
    assert led.candidates_to_copy({"public.c"}) == set(), "already copying"


def test_the_last_note_of_a_run_lists_what_it_knows() -> None:
    led = ledger()
    doc = json.loads(led.note(known={"public.b", "public.a"}))
    assert doc["known"] == ["public.a", "public.b"]
    # A run that had not read every earlier note passes on what they knew too.
    led = ledger(caught_up=False)
    led.received(100, encode("s", {}, True, known=["public.z"]).encode(), run_start=400)
    assert json.loads(led.note(known={"public.a"}))["known"] == ["public.a", "public.z"]
