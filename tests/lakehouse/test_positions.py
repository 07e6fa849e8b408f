"""Delta table positions as pure state (``pgwire_cdc.lakehouse.positions``), without a server:
which rows of a change table lie past a table's recorded position, how a batch is cut
into commits when it ends inside a transaction, the transaction identifiers and the
progress a commit records. Change tables are built here from (commit LSN, ordinal)
pairs."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from pgwire_cdc.lakehouse.positions import (
    APP_ID,
    NO_PROGRESS,
    Commit,
    after,
    marks,
    progress_of,
    txn_id,
    unapplied,
)

Rows = list[tuple[int, int]]


def changes(rows: Rows) -> pa.Table:
    """A change table of (commit LSN, ordinal) rows, in commit order, with an id column
    that names each row."""
    return pa.table(
        {
            "id": pa.array([f"{c}:{o}" for c, o in rows], pa.string()),
            "_commit_lsn": pa.array([c for c, _ in rows], pa.int64()),
            "_tx_ordinal": pa.array([o for _, o in rows], pa.int64()),
        }
    )


def pairs(table: pa.Table) -> Rows:
    return list(
        zip(table["_commit_lsn"].to_pylist(), table["_tx_ordinal"].to_pylist(), strict=True)
    )


BATCH: Rows = [(100, 1), (100, 2), (200, 1), (200, 2), (200, 3), (300, 1)]


@pytest.mark.parametrize(
    ("lsn", "partial", "kept"),
    [
        (None, None, BATCH),
        (99, None, BATCH),
        (100, None, BATCH[2:]),  # at the position: applied already
        (150, None, BATCH[2:]),
        (200, None, BATCH[5:]),
        (300, None, []),
        (400, None, []),
        (100, (200, 1), BATCH[3:]),
        (100, (200, 2), BATCH[4:]),
        (100, (200, 3), BATCH[5:]),  # the whole cut transaction was applied
        (100, (200, 0), BATCH[2:]),
        (None, (100, 1), BATCH[1:]),
        (100, (999, 5), BATCH[2:]),  # another transaction's record: no effect
    ],
)
def test_after_keeps_the_rows_past_a_position(
    lsn: int | None, partial: tuple[int, int] | None, kept: Rows
) -> None:
    assert pairs(after(changes(BATCH), lsn, partial)) == kept


@pytest.mark.parametrize(
    ("lsn", "ordinals", "kept", "asked"),
    [
        (None, {}, BATCH, [txn_id(100)]),
        (100, {}, BATCH[2:], [txn_id(200)]),
        (100, {txn_id(200): 2}, BATCH[4:], [txn_id(200)]),
        # Only the first transaction past the position can have been cut.
        (100, {txn_id(300): 1}, BATCH[2:], [txn_id(200)]),
        (200, {txn_id(300): 1}, [], [txn_id(300)]),
        (None, {txn_id(100): 1}, BATCH[1:], [txn_id(100)]),
        (300, {txn_id(300): 1}, [], []),  # nothing past the position: nothing looked up
    ],
)
def test_unapplied_looks_up_the_first_transaction_past_the_position(
    lsn: int | None, ordinals: dict[str, int], kept: Rows, asked: list[str]
) -> None:
    looked: list[str] = []

    def ordinal_of(app_id: str) -> int | None:
        looked.append(app_id)
        return ordinals.get(app_id)

    assert pairs(unapplied(changes(BATCH), lsn, ordinal_of)) == kept
    assert looked == asked


def test_unapplied_of_no_rows() -> None:
    assert unapplied(changes([]), 5, lambda app_id: 1).num_rows == 0


@pytest.mark.parametrize(
    ("rows", "batch_lsn", "progress", "commits"),
    [
        # The batch's LSN lies past its last commit: complete transactions, one commit.
        (BATCH, 301, NO_PROGRESS, [(BATCH, APP_ID, 300, NO_PROGRESS)]),
        (BATCH, 301, [7], [(BATCH, APP_ID, 300, [7])]),
        # The batch ends inside the transaction committing at 300.
        (
            BATCH,
            300,
            None,
            [(BATCH[:5], APP_ID, 200, NO_PROGRESS), (BATCH[5:], txn_id(300), 1, None)],
        ),
        (
            BATCH,
            250,
            [3],
            [(BATCH[:5], APP_ID, 200, NO_PROGRESS), (BATCH[5:], txn_id(300), 1, [3])],
        ),
        # Only rows of the cut transaction: one commit under its own identifier.
        ([(200, 4), (200, 5), (200, 6)], 200, NO_PROGRESS, [(None, txn_id(200), 6, NO_PROGRESS)]),
    ],
)
def test_marks_make_the_commits_of_a_batch(
    rows: Rows, batch_lsn: int, progress: Any, commits: list[tuple[Any, str, int, Any]]
) -> None:
    got = [(t, m.commit()) for t, m in marks(changes(rows), batch_lsn, None, progress)]
    assert [(pairs(t), c.app_id, c.version, c.progress) for t, c in got] == [
        (rows if part is None else part, app_id, version, p) for part, app_id, version, p in commits
    ]


def test_txn_id_names_the_transaction() -> None:
    assert txn_id(0x16B3748) == "pgwire_cdc@23803720"
    assert APP_ID == "pgwire_cdc"


@pytest.mark.parametrize(
    ("progress", "metadata"),
    [
        (NO_PROGRESS, None),
        (None, {"pgwire_cdc": {"progress": None}}),
        ([42, "k"], {"pgwire_cdc": {"progress": [42, "k"]}}),
        ([], {"pgwire_cdc": {"progress": []}}),
    ],
)
def test_commit_metadata_round_trips(progress: Any, metadata: Any) -> None:
    text = Commit(APP_ID, 1, progress).metadata()
    assert (json.loads(text) if text else None) == metadata
    recorded = progress_of(text)
    if progress is NO_PROGRESS:
        assert recorded is NO_PROGRESS
    else:
        assert recorded == progress


@pytest.mark.parametrize(
    "metadata",
    [None, "", "not json", "[1, 2]", '{"other": {"progress": [1]}}', '{"pgwire_cdc": 3}'],
)
def test_progress_of_other_metadata_is_none_recorded(metadata: str | None) -> None:
    assert progress_of(metadata) is NO_PROGRESS
