"""As-of points: where every table of a lake stood at one source LSN, so that several
tables can be read as of the same moment of the source.

A table's own position (:mod:`~pgwire_cdc.lakehouse.positions`) says what *it* holds;
two tables read at their newest versions may stand at different LSNs (a batch commits
one table after the other), and a join of them can then see half of a source
transaction. A **point** closes that gap: after a batch whose every commit is made, the
sink appends to a small table of its own (:data:`POINTS`, beside the lake's tables: a
Delta table ``_pgwire_cdc.points`` under the lake's path, an Iceberg table
``_pgwire_cdc_points`` in its namespace) one row per table:

* ``lsn``: the batch's LSN ``W``. Every table holds exactly the source transactions whose
  commit LSN lies before ``W``: the stream delivers every transaction committed before a
  batch's LSN in that batch or an earlier one, and every commit of it was made before the
  point was written;
* ``table``, ``version``: the source table and the version of its lake table (a Delta
  table version, an Iceberg snapshot id) that holds it so: its newest, or for a table with
  rows of the transaction the batch cut in two (a batch ends inside one at
  ``max_batch_rows``), its version from before that transaction's first rows;
* ``written_at``: when the point was written.

A table being copied (a table added to the publication later, a re-snapshot) is left out
of the points until its copy is complete; the initial snapshot's point waits for its last
batch; a process that finds a cut transaction begun by an earlier one (after a crash)
writes none until that transaction ends. A point is written at most every
``as_of_every`` seconds (a commit of its own), and once more when a run ends
(:meth:`~pgwire_cdc.lakehouse.sink.LakehouseSink.finish`).

Reading as of an LSN ``X`` (:func:`choose`) takes the newest point at or before ``X``
that names every table asked for; every table is then read at the version the point
names, and the result is the source as it was at that point's LSN.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..lsn import int_to_lsn

#: The points table, named as a source table would be (the format's
#: :meth:`~pgwire_cdc.lakehouse.format.TableFormat.ref` places it beside the others).
POINTS = "_pgwire_cdc.points"

POINTS_SCHEMA = pa.schema(
    [
        pa.field("lsn", pa.int64(), nullable=False),
        pa.field("table", pa.string(), nullable=False),
        pa.field("version", pa.int64(), nullable=False),
        pa.field("written_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


def is_points(name: str) -> bool:
    """Whether the source-table name ``name`` is the points table's own."""
    return name == POINTS


def point_rows(lsn: int, versions: Mapping[str, int], written_at: dt.datetime) -> pa.Table:
    """The rows of one point: each table of ``versions`` (source table → version) at
    ``lsn``."""
    names = sorted(versions)
    return pa.Table.from_pydict(
        {
            "lsn": [lsn] * len(names),
            "table": names,
            "version": [versions[n] for n in names],
            "written_at": [written_at] * len(names),
        },
        schema=POINTS_SCHEMA,
    )


class NoPoint(LookupError):
    """No recorded point fits the read asked for."""


def choose(
    points: pa.Table, tables: Iterable[str] | None, as_of_lsn: int | None = None
) -> tuple[int, dict[str, int]]:
    """The newest point at or before ``as_of_lsn`` (None: the newest of all) that names
    every table of ``tables`` (None: the tables of the newest point): its LSN and the
    version of each table asked for. Raises :class:`NoPoint` when there is none."""
    if as_of_lsn is not None:
        points = points.filter(pc.less_equal(points["lsn"], as_of_lsn))
    wanted = None if tables is None else sorted(set(tables))
    # Newest first; only the rows of the points looked at become Python values (the
    # table holds every point ever written).
    for lsn in sorted(pc.unique(points["lsn"]).to_pylist(), reverse=True):
        rows = points.filter(pc.equal(points["lsn"], lsn)).select(["table", "version"])
        versions = dict(zip(rows["table"].to_pylist(), rows["version"].to_pylist(), strict=True))
        names = list(versions) if wanted is None else wanted
        if all(n in versions for n in names):
            return int(lsn), {n: int(versions[n]) for n in names}
    where = "" if as_of_lsn is None else f" at or before LSN {int_to_lsn(as_of_lsn)}"
    asked = "" if wanted is None else f" with {', '.join(wanted)}"
    raise NoPoint(
        f"no as-of point{where}{asked}: the sink records one after a batch (at most every "
        "as_of_every seconds, and when a run ends), for the tables whose copy is complete; "
        "run the pipeline on, or ask for a later LSN"
    )


class AsOf(dict[str, Any]):
    """Tables read as of one source LSN: a ``dict`` of source table name → rows (a
    ``pyarrow.Table``, or a Spark DataFrame), with :attr:`lsn` the LSN they are all at
    (every source transaction committed before it, none after)."""

    def __init__(self, lsn: int, tables: Mapping[str, Any]) -> None:
        super().__init__(tables)
        self.lsn = lsn

    def __repr__(self) -> str:
        return f"AsOf(lsn={int_to_lsn(self.lsn)!r}, tables={sorted(self)!r})"
