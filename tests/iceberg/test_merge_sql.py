"""The Iceberg MERGE statement (``pgwire_cdc.iceberg.merge``): its clauses for each kind
of batch (no server), and the statements run against a small real Iceberg table, made as
the sink makes its tables, in a real local Spark: only updates, only deletes, inserts
with updates and deletes, a truncate; the join Spark plans for each; the session settings
given back afterwards."""

from __future__ import annotations

import datetime as dt
import itertools
import re
from typing import Any

import pyarrow as pa
import pytest
from conftest import ICEBERG_CATALOG
from pgwire_cdc.iceberg.merge import (
    BLOOM_FILTER_SETTINGS,
    BROADCAST_BYTES,
    CONVERT_TO_LOCAL_RELATION,
    EXCLUDED_RULES,
    adds_keys,
    applied,
    key_bounds,
    merge_statement,
    row_kinds,
)

COLUMNS = ["id", "name", "score"]
KEYS = ["id"]
BROADCAST = "spark.sql.autoBroadcastJoinThreshold"


def clauses(sql: str) -> list[str]:
    """The WHEN clauses of a MERGE, each up to its action's first word."""
    return [
        m.group(0).strip()
        for m in re.finditer(r"WHEN (NOT MATCHED BY SOURCE|NOT MATCHED|MATCHED)[^W]*?THEN \w+", sql)
    ]


def on_clause(sql: str) -> str:
    return sql.split(" ON ", 1)[1].split(" WHEN ", 1)[0]


# -- the statement's shape (no server) -------------------------------------------------


def test_updates_only_join_the_table_to_the_broadcast_batch() -> None:
    st = merge_statement(
        "lake.app.t", "v", COLUMNS, KEYS, inserts=0, updates=10, deletes=0, bounds={"id": (3, 9)}
    )
    assert clauses(st.sql) == ["WHEN MATCHED THEN UPDATE"]
    assert "NOT MATCHED" not in st.sql and "DELETE" not in st.sql
    assert st.sql.startswith("MERGE INTO lake.app.t t USING v s ON ")
    assert on_clause(st.sql) == "t.`id` = s.`id` AND t.`id` BETWEEN 3 AND 9"
    assert "SET t.`id` = s.`id`, t.`name` = s.`name`, t.`score` = s.`score`" in st.sql
    assert st.join == "inner" and not st.bloom_filter
    assert st.settings == {BROADCAST: str(BROADCAST_BYTES)}


def test_deletes_only_delete_every_matched_row() -> None:
    st = merge_statement("t", "v", COLUMNS, KEYS, inserts=0, updates=0, deletes=4)
    assert clauses(st.sql) == ["WHEN MATCHED THEN DELETE"]
    assert on_clause(st.sql) == "t.`id` = s.`id`"
    assert st.join == "inner"


def test_updates_and_deletes_test_the_flag_first() -> None:
    st = merge_statement("t", "v", COLUMNS, KEYS, inserts=0, updates=3, deletes=2)
    assert clauses(st.sql) == ["WHEN MATCHED AND s._delete THEN DELETE", "WHEN MATCHED THEN UPDATE"]
    assert st.join == "inner"


def test_inserts_keep_the_outer_join_with_a_bloom_filter_from_the_key_range() -> None:
    st = merge_statement(
        "t", "v", COLUMNS, KEYS, inserts=1, updates=9, deletes=0, bounds={"id": (-5, 70)}
    )
    assert clauses(st.sql) == ["WHEN MATCHED THEN UPDATE", "WHEN NOT MATCHED THEN INSERT"]
    assert "INSERT (`id`, `name`, `score`) VALUES (s.`id`, s.`name`, s.`score`)" in st.sql
    # The source seen through its own key range: always true, the Bloom filter's origin.
    assert "USING (SELECT * FROM v b WHERE b.`id` BETWEEN -5 AND 70) s ON " in st.sql
    assert on_clause(st.sql) == "t.`id` = s.`id` AND t.`id` BETWEEN -5 AND 70"
    assert st.join == "outer" and st.bloom_filter
    assert st.settings == BLOOM_FILTER_SETTINGS
    assert st.settings[BROADCAST] == "-1"
    assert st.settings[EXCLUDED_RULES] == CONVERT_TO_LOCAL_RELATION


def test_inserts_with_deletes_insert_only_rows_that_stay() -> None:
    st = merge_statement("t", "v", COLUMNS, KEYS, inserts=2, updates=0, deletes=1)
    assert clauses(st.sql) == [
        "WHEN MATCHED AND s._delete THEN DELETE",
        "WHEN MATCHED THEN UPDATE",
        "WHEN NOT MATCHED AND NOT s._delete THEN INSERT",
    ]
    # No bounds: no filter on the source, no settings; the plain outer join.
    assert "USING v s ON t.`id` = s.`id` WHEN" in st.sql
    assert st.join == "outer" and not st.bloom_filter and st.settings == {}


def test_the_defaults_keep_every_clause() -> None:
    st = merge_statement("t", "v", COLUMNS, KEYS)
    assert clauses(st.sql) == [
        "WHEN MATCHED AND s._delete THEN DELETE",
        "WHEN MATCHED THEN UPDATE",
        "WHEN NOT MATCHED AND NOT s._delete THEN INSERT",
    ]


def test_a_truncate_deletes_what_the_batch_does_not_name_and_scans_everything() -> None:
    st = merge_statement(
        "t", "v", COLUMNS, KEYS, truncate=True, inserts=0, updates=1, deletes=0,
        bounds={"id": (1, 2)},
    )  # fmt: skip
    assert clauses(st.sql) == [
        "WHEN MATCHED AND s._delete THEN DELETE",
        "WHEN MATCHED THEN UPDATE",
        "WHEN NOT MATCHED AND NOT s._delete THEN INSERT",
        "WHEN NOT MATCHED BY SOURCE THEN DELETE",
    ]
    assert on_clause(st.sql) == "t.`id` = s.`id`"
    assert st.join == "full" and st.settings == {}


def test_unchanged_columns_keep_the_tables_value() -> None:
    st = merge_statement("t", "v", COLUMNS, KEYS, {"name"}, inserts=0, updates=1, deletes=0)
    assert (
        "t.`name` = CASE WHEN array_contains(s._unchanged, 'name') THEN t.`name` "
        "ELSE s.`name` END, t.`score` = s.`score`"
    ) in st.sql


def test_bounds_of_each_key_column_as_literals() -> None:
    st = merge_statement(
        "t", "v", ["tenant", "day", "n", "x"], ["tenant", "day", "n", "x"],
        inserts=0, updates=1, deletes=0,
        bounds={
            "tenant": ("a'b", "z\\"), "day": (dt.date(2024, 1, 2), dt.date(2024, 3, 4)),
            "n": (1.5, 2.5), "x": (None, 3),
        },
    )  # fmt: skip
    assert on_clause(st.sql) == (
        "t.`tenant` = s.`tenant` AND t.`day` = s.`day` AND t.`n` = s.`n` AND t.`x` = s.`x` "
        "AND t.`tenant` BETWEEN 'a\\'b' AND 'z\\\\' "
        "AND t.`day` BETWEEN DATE '2024-01-02' AND DATE '2024-03-04'"
    )


def test_booleans_and_timestamps_are_no_bounds() -> None:
    st = merge_statement(
        "t", "v", ["a", "b"], ["a", "b"], inserts=1, updates=0, deletes=0,
        bounds={"a": (False, True), "b": (dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2))},
    )  # fmt: skip
    assert on_clause(st.sql) == "t.`a` = s.`a` AND t.`b` = s.`b`"
    assert not st.bloom_filter


@pytest.mark.parametrize(
    "keys, counts, error",
    [
        ([], {}, "needs key columns"),
        (["nope"], {}, "not among"),
        (["id"], {"inserts": 0, "updates": 0, "deletes": 0}, "nothing to merge"),
        (["id"], {"inserts": -1}, "negative"),
    ],
)
def test_refuses(keys: list[str], counts: dict[str, int], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        merge_statement("t", "v", COLUMNS, keys, **counts)


def test_key_bounds_of_the_columns_that_order() -> None:
    keys = pa.table(
        {
            "i": pa.array([5, None, -2, 9], pa.int16()),
            "s": pa.array(["b", "é", "a", None]),
            "d": pa.array([dt.date(2024, 5, 1), None, dt.date(2023, 1, 1), None]),
            "f": pa.array([1.0, 2.0, 3.0, 4.0]),
            "nulls": pa.nulls(4, pa.int64()),
        }
    )
    assert key_bounds(keys) == {
        "i": (-2, 9),
        "s": ("a", "é"),
        "d": (dt.date(2023, 1, 1), dt.date(2024, 5, 1)),
    }


def changes(rows: list[dict[str, Any]]) -> pa.Table:
    """A change table of ``id``, ``name``: each row ``{"op", "id", "name", "before"}``."""
    before = pa.struct([("id", pa.int64()), ("name", pa.string())])
    return pa.table(
        {
            "id": pa.array([r["id"] for r in rows], pa.int64()),
            "name": pa.array([r.get("name") for r in rows], pa.string()),
            "_change_type": pa.array([r["op"] for r in rows]),
            "_before": pa.array([r.get("before") for r in rows], before),
        }
    )


def test_adds_keys() -> None:
    update = {"op": "update", "id": 1, "name": "a"}
    delete = {"op": "delete", "id": 2}
    assert not adds_keys(changes([update, delete]), ["id"])
    assert adds_keys(changes([update, delete]), ["id"], copying=True)
    assert adds_keys(changes([update, {"op": "insert", "id": 3}]), ["id"])
    assert adds_keys(changes([{"op": "read", "id": 3}]), ["id"])
    # An old image with the same key (REPLICA IDENTITY FULL) moves nothing; another does.
    same = {**update, "before": {"id": 1, "name": "x"}}
    moved = {**update, "before": {"id": 7, "name": None}}
    assert not adds_keys(changes([same, delete]), ["id"])
    assert adds_keys(changes([same, moved]), ["id"])
    # A delete's old image is no move.
    assert not adds_keys(changes([{**delete, "before": {"id": 9, "name": None}}]), ["id"])
    assert not adds_keys(changes([update]).drop_columns(["_before"]), ["id"])


def test_row_kinds() -> None:
    source = pa.table({"id": [1, 2, 3], "_delete": [False, True, False]})
    assert row_kinds(source, adds=False) == {"inserts": 0, "updates": 2, "deletes": 1}
    assert row_kinds(source, adds=True) == {"inserts": 2, "updates": 0, "deletes": 1}


# -- against a real Iceberg table ------------------------------------------------------

SCHEMA = "id bigint, name string, score double"
SOURCE = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("score", pa.float64()),
        ("_delete", pa.bool_()),
        ("_unchanged", pa.list_(pa.string())),
    ]
)
_namespaces = itertools.count()


@pytest.fixture
def table(iceberg_spark: Any) -> str:
    """A table of ten rows (``id`` 1..10, ``name`` ``n<id>``, ``score`` ``id``) created
    with the sink's table properties."""
    from pgwire_cdc.iceberg.sink import DEFAULT_PROPERTIES

    ref = f"{ICEBERG_CATALOG}.merge_sql_{next(_namespaces)}.t"
    iceberg_spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {ref.rsplit('.', 1)[0]}")
    props = ", ".join(f"'{k}' = '{v}'" for k, v in DEFAULT_PROPERTIES.items())
    iceberg_spark.sql(f"CREATE TABLE {ref} ({SCHEMA}) USING iceberg TBLPROPERTIES ({props})")
    iceberg_spark.sql(
        f"INSERT INTO {ref} SELECT id, concat('n', id), CAST(id AS double) FROM range(1, 11)"
    )
    return ref


def run(
    spark: Any,
    ref: str,
    rows: list[tuple[Any, ...]],
    *,
    adds: bool,
    truncate: bool = False,
    **extra: str,
) -> tuple[list[tuple[Any, ...]], str]:
    """Merges ``rows`` (``id, name, score, _delete, _unchanged``) as the statement for
    them says, its settings (and ``extra`` ones) held; the table's rows after, and the
    statement's physical plan."""
    source = pa.Table.from_pylist([dict(zip(SOURCE.names, r, strict=True)) for r in rows], SOURCE)
    view = f"merge_sql_source_{abs(hash(ref))}"
    spark.createDataFrame(source).createOrReplaceTempView(view)
    unchanged = {n for r in rows for n in r[4]}
    st = merge_statement(
        ref, view, COLUMNS, KEYS, unchanged, truncate=truncate,
        **row_kinds(source, adds=adds), bounds=key_bounds(source.select(KEYS)),
    )  # fmt: skip
    try:
        with applied(spark.conf, {**st.settings, **extra}):
            plan = spark.sql(f"EXPLAIN {st.sql}").collect()[0][0]
            spark.sql(st.sql).collect()
    finally:
        spark.catalog.dropTempView(view)
    got = [tuple(r) for r in spark.sql(f"SELECT * FROM {ref} ORDER BY id").collect()]
    return got, plan


def base(*changed: tuple[Any, ...], without: tuple[int, ...] = ()) -> list[tuple[Any, ...]]:
    rows = {i: (i, f"n{i}", float(i)) for i in range(1, 11) if i not in without}
    rows.update({r[0]: r for r in changed})
    return [rows[i] for i in sorted(rows)]


def test_spark_updates_only(iceberg_spark: Any, table: str) -> None:
    got, plan = run(
        iceberg_spark, table,
        [(2, "two", 20.0, False, []), (7, None, 70.0, False, ["name"])],
        adds=False,
    )  # fmt: skip
    assert got == base((2, "two", 20.0), (7, "n7", 70.0))
    assert "BroadcastHashJoin" in plan and "Inner" in plan and "SortMergeJoin" not in plan


def test_spark_updates_only_leave_keys_the_table_lacks_alone(
    iceberg_spark: Any, table: str
) -> None:
    """What the INSERT clause is for: without it, an upsert of a missing key does nothing
    (so a batch that may add keys must say so: ``adds_keys``)."""
    got, _ = run(iceberg_spark, table, [(42, "x", 1.0, False, [])], adds=False)
    assert got == base()
    got, _ = run(iceberg_spark, table, [(42, "x", 1.0, False, [])], adds=True)
    assert got == base((42, "x", 1.0))


def test_spark_deletes_only(iceberg_spark: Any, table: str) -> None:
    got, plan = run(
        iceberg_spark, table,
        [(4, None, None, True, []), (5, None, None, True, []), (99, None, None, True, [])],
        adds=False,
    )  # fmt: skip
    assert got == base(without=(4, 5))
    assert "BroadcastHashJoin" in plan


def test_spark_inserts_updates_and_deletes(iceberg_spark: Any, table: str) -> None:
    rows = [
        (3, "three", 30.0, False, []),
        (8, None, None, True, []),
        (11, "eleven", 11.0, False, []),
        (12, None, None, True, []),  # inserted and deleted in the batch: stays out
    ]
    got, plan = run(iceberg_spark, table, rows, adds=True)
    assert got == base((3, "three", 30.0), (11, "eleven", 11.0), without=(8,))
    assert "RightOuter" in plan
    # The table is below the size a Bloom filter pays off at; with that size lowered,
    # Spark filters the table's rows by one built from the batch's keys.
    assert "might_contain" not in plan
    got, plan = run(
        iceberg_spark, table, [(13, "thirteen", 13.0, False, []), (3, "3", 3.0, False, [])],
        adds=True,
        **{"spark.sql.optimizer.runtime.bloomFilter.applicationSideScanSizeThreshold": "0"},
    )  # fmt: skip
    assert got == base((3, "3", 3.0), (11, "eleven", 11.0), (13, "thirteen", 13.0), without=(8,))
    assert "might_contain" in plan and "bloom_filter_agg" in plan


def test_spark_truncate(iceberg_spark: Any, table: str) -> None:
    got, plan = run(
        iceberg_spark, table,
        [
            (2, None, 2.5, False, ["name"]),
            (20, "twenty", 20.0, False, []),
            (3, None, None, True, []),
        ],
        adds=True, truncate=True,
    )  # fmt: skip
    assert got == [(2, "n2", 2.5), (20, "twenty", 20.0)]
    assert "FullOuter" in plan


def test_applied_gives_the_settings_back(iceberg_spark: Any) -> None:
    conf = iceberg_spark.conf
    rule = "org.apache.spark.sql.catalyst.optimizer.PushFoldableIntoBranches"
    before = conf.get(BROADCAST)
    conf.set(EXCLUDED_RULES, rule)
    try:
        with applied(conf, BLOOM_FILTER_SETTINGS):
            assert conf.get(BROADCAST) == "-1"
            assert conf.get(EXCLUDED_RULES) == f"{rule},{CONVERT_TO_LOCAL_RELATION}"
        assert conf.get(BROADCAST) == before
        assert conf.get(EXCLUDED_RULES) == rule
    finally:
        conf.unset(EXCLUDED_RULES)
    with applied(conf, BLOOM_FILTER_SETTINGS):
        assert conf.get(EXCLUDED_RULES) == CONVERT_TO_LOCAL_RELATION
    assert conf.get(EXCLUDED_RULES, None) is None
