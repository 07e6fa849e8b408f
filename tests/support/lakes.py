"""The lakehouse sink's offline test bench: the made-up source's tables
(:func:`source`), table formats under test (:class:`Lake`: the in-memory tables, and Delta
tables kept by the delta-rs writer with deletion vectors and copy-on-write), a format
that dies at its n-th commit (:class:`Crashing`), the comparison with the source, and a
random workload (:func:`random_transaction`).
The ``lake`` fixture (``tests/lakehouse/conftest.py``) gives each test every kind."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pyarrow.compute as pc
from pgwire_cdc.lakehouse.format import TableFormat
from pgwire_cdc.lakehouse.memory import MemoryTables
from pgwire_cdc.lakehouse.sink import LakehouseSink
from pgwire_cdc.streaming import Batch

from support.pgoutput import UNCHANGED, Source

KEYED = "public.items"
BAG = "public.bag"


def source() -> Source:
    src = Source()
    src.table(KEYED, [("id", "int8"), ("name", "text"), ("note", "text"), ("n", "int4")], ["id"])
    src.table(BAG, [("k", "int4"), ("v", "text")], [])
    return src


def as_multiset(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(sorted(r.items())) for r in rows)


class Crash(Exception):
    """A simulated crash: the process dies here."""


class Crashing:
    """A format that dies (:class:`Crash`) in place of its ``before``-th commit, as a
    process killed there would."""

    COMMITS = ("create", "write", "merge", "record_progress", "reshape")

    def __init__(self, inner: TableFormat, before: int) -> None:
        self.inner = inner
        self.left = before

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if name not in self.COMMITS:
            return found

        def commit(*args: Any, **kwargs: Any) -> Any:
            self.left -= 1
            if self.left == 0:
                raise Crash(f"crashed before {name}")
            return found(*args, **kwargs)

        return commit


class LostAnswer(Exception):
    """A commit done whose answer never came (an object store's lost response)."""


class LosingAnswers(Crashing):
    """A format whose ``nth`` change commit (a write or a MERGE) is done and then raises
    :class:`LostAnswer`, as a commit does whose store lost its answer."""

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if name not in ("write", "merge"):
            return found

        def commit(*args: Any, **kwargs: Any) -> Any:
            result = found(*args, **kwargs)
            self.left -= 1
            if self.left == 0:
                raise LostAnswer(f"the answer to {name} was lost")
            return result

        return commit


class Lake:
    """One table format's tables under test, and what they hold."""

    def __init__(self, kind: str, where: Path) -> None:
        self.kind = kind
        self.format: TableFormat
        #: The Delta tables' directory.
        self.where = where / "lake"
        if kind == "memory":
            self.format = MemoryTables()
        else:
            from pgwire_cdc.delta.sink import DeltaTables

            self.format = DeltaTables(self.where, deletion_vectors=kind == "delta-rs-dv")

    def sink(
        self,
        crash_before: int | None = None,
        as_of_every: float | None = None,
        lose_answer: int | None = None,
    ) -> LakehouseSink:
        """A new sink over the same tables (a new process, as after a crash); writing
        as-of points only when given ``as_of_every``; ``crash_before``: see
        :class:`Crashing`, ``lose_answer``: :class:`LosingAnswers`."""
        if crash_before is not None:
            crashing = cast(TableFormat, Crashing(self.format, crash_before))
            return LakehouseSink(crashing, as_of_every=as_of_every)
        if lose_answer is not None:
            losing = cast(TableFormat, LosingAnswers(self.format, lose_answer))
            return LakehouseSink(losing, as_of_every=as_of_every)
        return LakehouseSink(self.format, as_of_every=as_of_every)

    def rows(self, name: str) -> list[dict[str, Any]]:
        ref = self.format.ref(name)
        if not self.format.exists(ref):
            return []
        columns = self.format.schema(ref).names
        rows: list[dict[str, Any]] = self.format.read(ref, columns).to_pylist()
        return rows

    def property(self, name: str, key: str) -> str | None:
        """A table property (``pgwire_cdc.dropped_at_lsn``, ...)."""
        ref = self.format.ref(name)
        if isinstance(self.format, MemoryTables):
            return self.format.tables[ref].properties.get(key)
        from deltalake import DeltaTable

        value = DeltaTable(ref).metadata().configuration.get(key)
        return None if value is None else str(value)

    def columns(self, name: str) -> list[str]:
        return list(self.format.schema(self.format.ref(name)).names)


LAKES = ("memory", "delta-rs-dv", "delta-rs")


def cuts(batch: Batch) -> bool:
    """Whether ``batch`` ends inside a transaction (rows committing at or past its LSN)."""
    return any(
        t.num_rows and pc.max(t["_commit_lsn"]).as_py() >= batch.lsn for t in batch.tables.values()
    )


def assert_equal(lake: Lake, src: Source, *names: str) -> None:
    for name in names or tuple(src.tables):
        assert as_multiset(lake.rows(name)) == as_multiset(src.rows(name)), name


def random_transaction(src: Source, rng: random.Random, next_id: list[int]) -> None:
    """A few random changes: inserts, updates (some leaving ``note`` as unchanged TOAST,
    some moving the row to a new key), deletes, now and then a truncate."""
    items = src.tables[KEYED]
    bag = src.tables[BAG]
    with src.transaction() as tx:
        for _ in range(rng.randint(1, 6)):
            roll = rng.random()
            if roll < 0.02:
                tx.truncate(KEYED)
            elif roll < 0.3 or not items.rows:
                next_id[0] += 1
                tx.insert(
                    KEYED,
                    {
                        "id": next_id[0],
                        "name": f"n{next_id[0]}",
                        "note": "x" * rng.randint(0, 3),
                        "n": rng.randint(0, 9),
                    },
                )
            elif roll < 0.6:
                row = rng.choice(items.rows)
                new: dict[str, Any] = {"n": rng.randint(0, 99)}
                if rng.random() < 0.5:
                    new["note"] = UNCHANGED
                if rng.random() < 0.2:
                    next_id[0] += 1
                    new["id"] = next_id[0]
                tx.update(KEYED, {"id": row["id"]}, new)
            elif roll < 0.75:
                tx.delete(KEYED, {"id": rng.choice(items.rows)["id"]})
            elif roll < 0.9 or not bag.rows:
                # Equal rows on purpose: a multiset.
                tx.insert(BAG, {"k": rng.randint(0, 3), "v": rng.choice(["a", "b"])})
            elif roll < 0.95:
                row = rng.choice(bag.rows)
                tx.update(BAG, dict(row), {"v": rng.choice(["a", "b", "c"])})
            else:
                tx.delete(BAG, dict(rng.choice(bag.rows)))
