"""The decoder against pgoutput output recorded on the spot from PostgreSQL 15 and 18.

Every capture scenario (tests/support/capture/record.py) is run against a fresh database on each
server, and what the server sends now must satisfy the same checks as the golden captures
(tests/support/scenario_checks.py). A live capture must also match the golden one structurally, so a
change of server behaviour shows up as a clear failure here rather than as stale fixtures.
"""

from __future__ import annotations

from typing import Any

import pgwire_cdc
import pytest
from conftest import Database
from support.capture.record import SCENARIOS, Scenario, capture_labels, capture_path, load_capture
from support.capture.record import record_scenario as record
from support.scenario_checks import check_capture_events, decode_capture

pytestmark = pytest.mark.server


def _record(db: Database, scenario: Scenario) -> dict[str, Any]:
    if not scenario.supported_by(db.cluster.version):
        pytest.skip(f"{scenario.name} needs PostgreSQL >= {scenario.min_version}")
    return record(db.cluster, scenario, dbname=db.name)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_live_scenario(db: Database, scenario: Scenario) -> None:
    capture = _record(db, scenario)
    check_capture_events(decode_capture(capture))
    check_capture_events(decode_capture(capture, feed_many=True))

    golden_path = capture_path(db.cluster.name, scenario.name)
    if golden_path.exists():
        golden = load_capture(golden_path)
        assert capture["options"] == golden["options"]
        # Same server major, same workload: the same message shapes. (Split points of
        # streamed transactions depend on memory accounting, so only compare the rest.)
        if not scenario.streaming:
            assert capture_labels(capture) == capture_labels(golden)


def test_live_decode_matches_server_side_row_state(db: Database) -> None:
    """Replaying the decoded events reproduces the table contents on the server."""
    conn = db.conn
    conn.execute("CREATE TABLE acct (id int PRIMARY KEY, owner text, balance int)")
    conn.execute("CREATE PUBLICATION pub FOR TABLE acct")
    conn.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
    conn.execute("INSERT INTO acct SELECT i, 'owner' || i, i * 10 FROM generate_series(1, 50) i")
    conn.execute("UPDATE acct SET balance = balance + 1 WHERE id % 3 = 0")
    conn.execute("UPDATE acct SET id = id + 1000 WHERE id % 7 = 0")
    conn.execute("DELETE FROM acct WHERE id % 5 = 0")
    conn.execute("UPDATE acct SET owner = NULL WHERE id = 1")
    rows = conn.execute(
        "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes('s', NULL, NULL,"
        " 'proto_version', '1', 'publication_names', 'pub')"
    ).fetchall()
    dec = pgwire_cdc.Decoder(proto_version=1)
    for lsn, data in rows:
        dec.feed(bytes(data), pgwire_cdc.lsn_to_int(lsn))
    state: dict[int, tuple[Any, ...]] = {}
    events: list[Any] = dec.events()
    for e in events:
        if e.kind == "insert":
            state[e.table_row[0]] = e.table_row
        elif e.kind == "update":
            kind, values = e.updated_table_row[0], e.updated_table_row[1]
            assert kind == "full"
            old_id = e.old_table_row[1][0] if e.old_table_row else values[0]
            del state[old_id]
            state[values[0]] = values
        elif e.kind == "delete":
            assert e.old_table_row[0] == "key"
            del state[e.old_table_row[1][0]]
    # Event values are typed: int4 columns arrive as int.
    server = {
        r[0]: (r[0], r[1], r[2])
        for r in conn.execute("SELECT id, owner, balance FROM acct").fetchall()
    }
    assert state == server
