"""Where a lakehouse table stands in the stream, as pure state: no I/O.

A table's position is kept with the table, written in the same commit as the rows: in a
Delta table's log as transaction identifiers (``txn`` actions, see
:mod:`pgwire_cdc.delta`, *Exactly once*), in an Iceberg snapshot's summary (see
:mod:`pgwire_cdc.iceberg`). Both record the same two things:

* ``pgwire_cdc`` → the commit LSN of the last transaction applied in full (after an
  initial snapshot: the LSN just before its consistent point, :func:`snapshot_position`);
* ``pgwire_cdc@<commit LSN>`` (:func:`txn_id`) → the last ``_tx_ordinal`` applied of a
  transaction that a batch cut in two.

This module decides which rows of a change table lie past such a position
(:func:`unapplied`), how a batch's change table is cut into commits and what each records
(:func:`marks`: a :class:`Mark` per commit, in any format; :meth:`Mark.commit`: as
Delta's transaction identifiers), and reads and writes the incremental-snapshot progress a commit
carries in its ``userMetadata`` (:meth:`Commit.metadata`, :func:`progress_of`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

#: The transaction identifier (``txn`` appId) holding a table's position in the stream.
APP_ID = "pgwire_cdc"
#: The transaction identifier of commits that record a copy's progress without rows
#: (versioned by the batch's LSN; the position stays under :data:`APP_ID`).
PROGRESS_APP_ID = f"{APP_ID}.progress"
#: The transaction identifier of ``verify``'s repair commits (the position stays under
#: :data:`APP_ID`).
REPAIR_APP_ID = f"{APP_ID}.repair"


class _NoProgress:
    """A commit that records no incremental-snapshot progress (unlike None: complete)."""

    def __repr__(self) -> str:
        return "NO_PROGRESS"


NO_PROGRESS: Any = _NoProgress()


def txn_id(commit_lsn: int) -> str:
    """The transaction identifier holding how far into the transaction committing at
    ``commit_lsn`` a table's rows reach."""
    return f"{APP_ID}@{commit_lsn}"


@dataclass(frozen=True)
class Source:
    """The PostgreSQL database a table's rows come from, as ``IDENTIFY_SYSTEM`` names it:
    the cluster's system identifier (the same on a primary, its standbys and every
    restore of its backups), the timeline its WAL was on, and the database."""

    system: str
    timeline: int
    database: str

    def as_json(self) -> dict[str, Any]:
        return {"system": self.system, "timeline": self.timeline, "database": self.database}

    @staticmethod
    def from_json(doc: Any) -> Source | None:
        """The source a recorded JSON object names; None for anything else."""
        if not isinstance(doc, dict):
            return None
        try:
            return Source(str(doc["system"]), int(doc["timeline"]), str(doc["database"]))
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Commit:
    """What one commit records besides its rows: ``version`` under ``app_id``, the
    incremental-snapshot ``progress`` (a key list, None once complete, or
    :data:`NO_PROGRESS`) and the ``source`` the rows come from."""

    app_id: str
    version: int
    progress: Any = NO_PROGRESS
    source: Source | None = None

    def metadata(self) -> str | None:
        """The commit's ``userMetadata``: the progress and the source as JSON, None
        without either."""
        doc: dict[str, Any] = {}
        if self.progress is not NO_PROGRESS:
            doc["progress"] = self.progress
        if self.source is not None:
            doc["source"] = self.source.as_json()
        return json.dumps({APP_ID: doc}, default=str) if doc else None


def _package_doc(user_metadata: str | None) -> dict[str, Any] | None:
    """This package's part of a commit's ``userMetadata``, None when it holds none
    (absent, not JSON, or another writer's)."""
    if not user_metadata:
        return None
    try:
        doc = json.loads(user_metadata)
    except ValueError:
        return None
    ours = doc.get(APP_ID) if isinstance(doc, dict) else None
    return ours if isinstance(ours, dict) else None


def progress_of(user_metadata: str | None) -> Any:
    """The progress a commit's ``userMetadata`` records, :data:`NO_PROGRESS` when it holds
    none."""
    doc = _package_doc(user_metadata)
    if doc is None or "progress" not in doc:
        return NO_PROGRESS
    return doc["progress"]


def source_of(user_metadata: str | None) -> Source | None:
    """The source a commit's ``userMetadata`` records, None when it holds none."""
    doc = _package_doc(user_metadata)
    return None if doc is None else Source.from_json(doc.get("source"))


def snapshot_position(consistent_point: int) -> int:
    """The position a table holds once it is an initial snapshot's rows: every transaction
    whose commit LSN lies *before* the consistent point, not at it. The consistent point
    is where the slot's snapshot builder became consistent, the end of a
    ``xl_running_xacts`` record; the next WAL record can be the commit record of a
    transaction still running in that snapshot. That transaction is not in the snapshot
    and the slot streams it (the server skips only commit records that start before the
    point), with ``_commit_lsn`` equal to the consistent point, which the snapshot's own
    rows carry too. A position *at* the point would count it applied already."""
    return consistent_point - 1


def after(changes: pa.Table, lsn: int | None, partial: tuple[int, int] | None) -> pa.Table:
    """The rows past a position: commit LSN above ``lsn``, and of the transaction
    ``partial`` = (commit LSN, ordinal) only the rows after that ordinal."""
    keep = None
    commit = changes["_commit_lsn"]
    if lsn is not None:
        keep = pc.greater(commit, lsn)
    if partial is not None:
        c, o = partial
        later = pc.or_(pc.not_equal(commit, c), pc.greater(changes["_tx_ordinal"], o))
        keep = later if keep is None else pc.and_(keep, later)
    return changes if keep is None else changes.filter(keep)


def unapplied(
    changes: pa.Table, lsn: int | None, ordinal_of: Callable[[str], int | None]
) -> pa.Table:
    """The rows of ``changes`` (in commit order) a table at ``lsn`` does not hold yet.
    Only the first transaction past ``lsn`` can have been cut by an earlier batch;
    ``ordinal_of(txn_id(commit_lsn))`` looks up how far into it the table reaches (None:
    not at all)."""
    if changes.num_rows == 0:
        return changes
    past = after(changes, lsn, None)
    if past.num_rows == 0:
        return past
    first = int(past["_commit_lsn"][0].as_py())
    ordinal = ordinal_of(txn_id(first))
    if ordinal is None:
        return past
    return after(changes, lsn, (first, ordinal))


@dataclass(frozen=True)
class Mark:
    """Where a table stands once one commit of the sink's is made, as any format records
    it: ``lsn`` the commit LSN of the last transaction applied in full (None: none yet),
    ``partial`` (commit LSN, last ordinal applied) of a transaction a batch cut in two,
    ``progress`` an incremental copy's progress (a key list, None once complete) or
    :data:`NO_PROGRESS`."""

    lsn: int | None
    partial: tuple[int, int] | None = None
    progress: Any = NO_PROGRESS
    #: A commit of ``verify``'s repair, which keeps the position the table has: Delta
    #: records it under :data:`REPAIR_APP_ID` instead (the Spark writer would skip a
    #: commit whose transaction identifier a commit recorded already).
    repair: bool = False
    #: The source the rows come from (:class:`Source`), recorded with them.
    source: Source | None = None

    def commit(self) -> Commit:
        """The Delta transaction identifier recording this mark (one per commit: the
        Spark writer's commits take one): the cut transaction's own under
        :func:`txn_id`, else :data:`APP_ID` at ``lsn``; a repair's under
        :data:`REPAIR_APP_ID`, versioned by the time in milliseconds."""
        if self.repair:
            return Commit(REPAIR_APP_ID, time.time_ns() // 1_000_000, self.progress, self.source)
        if self.partial is not None:
            return Commit(txn_id(self.partial[0]), self.partial[1], self.progress, self.source)
        if self.lsn is None:
            raise ValueError("a mark without a position records no transaction identifier")
        return Commit(APP_ID, self.lsn, self.progress, self.source)

    def ordinal_of(self, txn: str) -> int | None:
        """How far into the cut transaction ``txn`` (a :func:`txn_id`) this mark
        reaches; None for any other transaction."""
        if self.partial is not None and txn_id(self.partial[0]) == txn:
            return self.partial[1]
        return None


def marks(
    changes: pa.Table, batch_lsn: int, lsn: int | None = None, progress: Any = NO_PROGRESS
) -> list[tuple[pa.Table, Mark]]:
    """``changes`` (non-empty, in commit order, past a table standing at ``lsn``) as the
    commits that record them. When the batch's LSN lies past the last row's commit LSN,
    every transaction is complete: one commit, at that commit LSN. Otherwise the batch
    ends inside the transaction of its last row: the complete transactions before it form
    one commit (at the last of their commit LSNs), the rows of the cut one a commit of
    their own that records it as partial, at its last ordinal. ``progress`` goes with the
    last commit."""
    last = int(changes["_commit_lsn"][-1].as_py())
    if batch_lsn > last:
        return [(changes, Mark(last, None, progress))]
    commit = changes["_commit_lsn"]
    head = changes.filter(pc.less(commit, last))
    tail = changes.filter(pc.equal(commit, last))
    parts = []
    if head.num_rows:
        lsn = int(head["_commit_lsn"][-1].as_py())
        parts.append((head, Mark(lsn)))
    ordinal = int(tail["_tx_ordinal"][-1].as_py())
    parts.append((tail, Mark(lsn, (last, ordinal), progress)))
    return parts
