"""The Spark ``MERGE INTO`` of one batch into an Iceberg table, shaped so that its cost
follows the batch rather than the table (:func:`merge_statement`).

Spark plans a MERGE as a join of the table (the target) with the batch (the source),
and the join's kind follows the clauses:

* **Only ``WHEN MATCHED`` clauses** (every key of the batch is in the table: updates and
  deletes): an inner join. The source, a few thousand rows, is broadcast to the tasks
  scanning the table, so the table's rows are read once and never shuffled. The source
  is broadcast whatever size Spark estimates for it, up to :data:`BROADCAST_BYTES`
  (``spark.sql.autoBroadcastJoinThreshold`` while the statement runs; Spark never
  broadcasts the target of a MERGE).
* **A ``WHEN NOT MATCHED ... INSERT``** (the batch may add a key): an outer join that keeps
  every source row, which Spark cannot make by broadcasting the source; both sides are
  shuffled. Spark's runtime Bloom filter then filters the table's rows by the batch's keys
  before the shuffle, so only the rows that may match (and a few false positives) move.
  Spark builds that filter from a source it sees filtered (the batch's key range, always
  true) and a table larger than :data:`BLOOM_FILTER_MIN_TABLE_BYTES`; the settings of
  :data:`BLOOM_FILTER_SETTINGS` let it (the source is an in-memory relation, whose filter
  Spark would otherwise fold away before it looks).
* **A truncate** (``WHEN NOT MATCHED BY SOURCE THEN DELETE``) touches every row: the full
  outer join, as it is.

Whatever the join, the ON clause also bounds the table's keys by the batch's key range
(:func:`key_bounds`): Iceberg skips the data files whose column statistics lie outside
it, which prunes most files when the changed keys cluster (recent rows) and costs nothing
when they do not.

Which clauses a batch needs: the DELETE when a source row deletes a key (a deleted key, or
the old key of a row moved to a new key), the UPDATE when a row is upserted, the INSERT
when an upserted key may be missing from the table
(:func:`~pgwire_cdc.lakehouse.sink.adds_keys`, :func:`row_kinds`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from ..lakehouse.sink import adds_keys as adds_keys
from ..lakehouse.sql import merge_clauses, quote_name, sql_string

#: The largest source (as Spark estimates it) an inner-join MERGE broadcasts: the sink's
#: batches (``max_batch_rows``, ``max_batch_bytes``) stay well below it.
BROADCAST_BYTES = 256 << 20

#: A table Spark estimates smaller than this is shuffled whole by an outer-join MERGE (a
#: Bloom filter would cost more than it saves).
BLOOM_FILTER_MIN_TABLE_BYTES = 32 << 20

#: The Spark rule that evaluates a filter of an in-memory relation while planning; it
#: would hide the source's filter from the runtime Bloom filter's planning.
CONVERT_TO_LOCAL_RELATION = "org.apache.spark.sql.catalyst.optimizer.ConvertToLocalRelation"

#: Spark setting whose value is a comma-separated list, to which :func:`applied` adds.
EXCLUDED_RULES = "spark.sql.optimizer.excludedRules"

#: The session settings of an outer-join MERGE with a Bloom filter on the table's keys. No
#: broadcast join (Spark injects the filter only into joins it will shuffle, and an outer
#: join keeping the source cannot broadcast it anyway); the filter for any table above
#: :data:`BLOOM_FILTER_MIN_TABLE_BYTES` and any source up to :data:`BROADCAST_BYTES`.
BLOOM_FILTER_SETTINGS = {
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.optimizer.runtime.bloomFilter.enabled": "true",
    "spark.sql.optimizer.runtime.bloomFilter.applicationSideScanSizeThreshold": str(
        BLOOM_FILTER_MIN_TABLE_BYTES
    ),
    "spark.sql.optimizer.runtime.bloomFilter.creationSideThreshold": str(BROADCAST_BYTES),
    EXCLUDED_RULES: CONVERT_TO_LOCAL_RELATION,
}


@dataclass(frozen=True)
class MergeStatement:
    """One MERGE: its SQL, the Spark session settings to hold while it runs
    (:func:`applied`), and the join Spark makes of it (``"inner"``: the source
    broadcast; ``"outer"``: the source kept whole, the table filtered by a Bloom filter
    when ``bloom_filter``; ``"full"``: a truncate's)."""

    sql: str
    settings: dict[str, str] = field(default_factory=dict)
    join: str = "outer"
    bloom_filter: bool = False


def merge_statement(
    target: str,
    source: str,
    columns: Sequence[str],
    keys: Sequence[str],
    unchanged: Collection[str] = (),
    *,
    truncate: bool = False,
    inserts: int = 1,
    updates: int = 1,
    deletes: int = 1,
    bounds: Mapping[str, tuple[Any, Any]] | None = None,
) -> MergeStatement:
    """The MERGE of the reduced batch ``source`` into the Iceberg table ``target``.

    ``target``: the table's Spark SQL name (``catalog.namespace.table``); ``source``: a
    relation holding the batch, one row per key: a view's name or a parenthesised query,
    with the table's ``columns``, then ``_delete`` (the key's row goes) and
    ``_unchanged`` (columns whose value the table row keeps; moved rows already filled,
    no ``_from``); ``keys``: the key columns; ``unchanged``: the columns some row names
    in ``_unchanged`` (only they need the CASE that reads the table's value).

    ``truncate``: the batch holds a truncate, so the rows it does not name go too.
    ``inserts``, ``updates``, ``deletes``: how many source rows upsert a key the table may
    lack, upsert a key the table holds, and delete a key (:func:`row_kinds`); only whether
    each is zero matters. A clause is left out when no row needs it: without inserts the
    MERGE is an inner join. The defaults keep every clause.

    ``bounds``: per key column, the least and greatest value of the batch (deleted keys
    included; :func:`key_bounds`): the ON clause bounds the table's keys with them, and an
    outer join gets its Bloom filter from them. Only integer, string and date bounds are
    used."""
    columns = list(columns)
    keys = list(keys)
    if not keys:
        raise ValueError("a MERGE needs key columns")
    missing = [k for k in keys if k not in columns]
    if missing:
        raise ValueError(f"key columns {missing} are not among the table's columns")
    if min(inserts, updates, deletes) < 0:
        raise ValueError("row counts cannot be negative")
    upserts = inserts + updates
    clauses = merge_clauses(columns, keys, set(unchanged), spark=True)
    update = ", ".join(f"t.{c} = {e}" for c, e in clauses["update"].items())
    names = ", ".join(clauses["insert"])
    values = ", ".join(clauses["insert"].values())
    if truncate:
        sql = (
            f"MERGE INTO {target} t USING {source} s ON {clauses['on']} "
            "WHEN MATCHED AND s._delete THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {update} "
            f"WHEN NOT MATCHED AND NOT s._delete THEN INSERT ({names}) VALUES ({values}) "
            "WHEN NOT MATCHED BY SOURCE THEN DELETE"
        )
        return MergeStatement(sql, {}, "full")
    if upserts == 0 and deletes == 0:
        raise ValueError("nothing to merge: no row inserts, updates or deletes")
    ranges = _ranges(keys, bounds or {})
    on = " AND ".join(
        [clauses["on"], *(f"t.{quote_name(k)} BETWEEN {lo} AND {hi}" for k, (lo, hi) in ranges)]
    )
    when = []
    if deletes:
        when.append(
            "WHEN MATCHED AND s._delete THEN DELETE" if upserts else "WHEN MATCHED THEN DELETE"
        )
    if upserts:
        when.append(f"WHEN MATCHED THEN UPDATE SET {update}")
    if inserts:
        guard = " AND NOT s._delete" if deletes else ""
        when.append(f"WHEN NOT MATCHED{guard} THEN INSERT ({names}) VALUES ({values})")
    if not inserts:
        sql = f"MERGE INTO {target} t USING {source} s ON {on} {' '.join(when)}"
        return MergeStatement(
            sql, {"spark.sql.autoBroadcastJoinThreshold": str(BROADCAST_BYTES)}, "inner"
        )
    if not ranges:
        sql = f"MERGE INTO {target} t USING {source} s ON {on} {' '.join(when)}"
        return MergeStatement(sql, {}, "outer")
    # The key range again, on the source: always true, but a filter Spark sees on the
    # source is what makes it build a Bloom filter of the source's keys for the table.
    within = " AND ".join(f"b.{quote_name(k)} BETWEEN {lo} AND {hi}" for k, (lo, hi) in ranges)
    filtered = f"(SELECT * FROM {source} b WHERE {within})"
    sql = f"MERGE INTO {target} t USING {filtered} s ON {on} {' '.join(when)}"
    return MergeStatement(sql, dict(BLOOM_FILTER_SETTINGS), "outer", bloom_filter=True)


def _ranges(
    keys: Sequence[str], bounds: Mapping[str, tuple[Any, Any]]
) -> list[tuple[str, tuple[str, str]]]:
    """The usable bounds of ``keys``, as SQL literals, in key order."""
    out = []
    for k in keys:
        if k not in bounds:
            continue
        lo, hi = (_literal(v) for v in bounds[k])
        if lo is not None and hi is not None:
            out.append((k, (lo, hi)))
    return out


def _literal(value: Any) -> str | None:
    """``value`` as a Spark SQL literal: integers, strings and dates; None otherwise (a
    float, a timestamp, a null: no bound)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return sql_string(value, True)
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return f"DATE '{value.isoformat()}'"
    return None


def key_bounds(keys: pa.Table) -> dict[str, tuple[Any, Any]]:
    """Per column of ``keys`` (a source's key columns, every row), its least and greatest
    value, for :func:`merge_statement`'s ``bounds``: integer, string and date columns
    with a value; other columns are left out. Strings compare by their UTF-8 bytes, as
    Spark compares them."""
    out: dict[str, tuple[Any, Any]] = {}
    for name in keys.column_names:
        column = keys[name]
        t = column.type
        if not (
            pa.types.is_integer(t)
            or pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or pa.types.is_date32(t)
        ):
            continue
        found = pc.min_max(column)
        lo, hi = found["min"].as_py(), found["max"].as_py()
        if lo is not None and hi is not None:
            out[name] = (lo, hi)
    return out


def row_kinds(source: pa.Table, *, adds: bool) -> dict[str, int]:
    """:func:`merge_statement`'s ``inserts``, ``updates`` and ``deletes`` for the reduced
    change table ``source``: its rows with ``_delete`` delete; the others upsert, as
    inserts when ``adds`` (:func:`adds_keys`), else as updates."""
    deletes = int(pc.sum(pc.cast(source["_delete"], pa.int64())).as_py() or 0)
    upserts = source.num_rows - deletes
    return {
        "inserts": upserts if adds else 0,
        "updates": 0 if adds else upserts,
        "deletes": deletes,
    }


class _Conf(Protocol):
    def get(self, key: str, default: Any = ...) -> Any: ...

    def set(self, key: str, value: Any) -> Any: ...

    def unset(self, key: str) -> Any: ...


@contextmanager
def applied(conf: _Conf, settings: Mapping[str, str]) -> Iterator[None]:
    """While active: the session ``settings`` on Spark's ``conf`` (``spark.conf``, classic
    or Connect), each given its earlier value back afterwards. The rules Spark excludes
    (:data:`EXCLUDED_RULES`) are added to those the session excludes already."""
    earlier = {key: conf.get(key, None) for key in settings}
    try:
        for key, value in settings.items():
            held = earlier[key]
            if key == EXCLUDED_RULES and held:
                rules = [r.strip() for r in held.split(",") if r.strip()]
                value = ",".join([*rules, *(r for r in value.split(",") if r not in rules)])
            conf.set(key, value)
        yield
    finally:
        for key, held in earlier.items():
            if held is None:
                conf.unset(key)
            else:
                conf.set(key, held)
