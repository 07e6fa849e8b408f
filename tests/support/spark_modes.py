"""Which tests run on Spark Connect as well as on classic Spark.

The ``spark`` fixture, and the tests that choose a Spark by a parameter of their own
(``lake`` in the Iceberg suites, ``writer="spark-connect"`` in the Delta suite), make a
classic variant and a Spark Connect variant of each test. The Connect variant runs only
for the tests :data:`ON_CONNECT` lists, each for a reason of its own: a place where a
Connect session behaves differently from a classic one (the client holds no JVM, plans
are resolved by the server, functions run in the server's Python). Together they keep one
end-to-end Connect test per Spark entry point: ``batch.to_spark``,
``read.format("pgwire_cdc")``, ``readStream.format("pgwire_cdc")``, ``delta.run(...,
writer="spark")``, ``delta.merge_changes`` and ``iceberg.merge_changes`` in
``foreachBatch``, ``iceberg.run``. Connect variants run on PostgreSQL 18 only: the
PostgreSQL 15 variant of a test exercises the same Spark side.

``spark/test_spark_connect.py`` starts Connect servers of its own (a client that never
calls ``register()``, the checks of ``session(remote=...)``): it always runs on Connect.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The ``spark`` fixture's sessions.
SPARK_MODES = ("classic", "connect")

#: Parameter values that run a test through the Spark Connect session.
CONNECT_PARAMS = ("connect", "spark-connect")

#: ``path/under/tests.py::test_function``: why its Spark Connect variant runs.
ON_CONNECT: dict[str, str] = {
    "spark/test_spark.py::test_to_spark_keeps_every_type_and_value": (
        "batch.to_spark and toArrow: Connect's createDataFrame ships the Arrow table to the "
        "server as a local relation, converted by the Connect client's own code, and "
        "toArrow brings the rows back over gRPC; classic sessions use the JVM's Arrow path"
    ),
    "spark/test_spark_snapshot.py::test_columns_and_row_filter_of_a_publication": (
        'read.format("pgwire_cdc"): the server resolves the source by name and runs its '
        "schema, partitions and reader in its own Python; the client never sees the JVM"
    ),
    "spark/test_spark_source.py::test_available_now_snapshot_changes_and_restart": (
        'readStream.format("pgwire_cdc") and foreachBatch: the function is pickled to the '
        "server's Python and runs there; a restart from the checkpoint is a new query "
        "started by the client"
    ),
    "spark/test_spark_source.py::test_foreach_batch_merges_into_delta": (
        "delta.merge_changes in foreachBatch: it runs in the server's Python with the "
        "server's session (df.sparkSession), and a replayed micro-batch must be skipped there"
    ),
    "spark/test_spark_registration.py::test_the_check_tells_a_found_source_from_a_missing_one": (
        "the check of a session's data sources: over Connect an unknown source fails on the "
        "server and reaches the client as a gRPC error, whose condition the check reads"
    ),
    "delta/test_delta.py::test_odd_names_and_moved_toast": (
        'delta.run(writer="spark") end to end: the Spark-task snapshot is sized without a '
        "sparkContext (a Connect client has none); the MERGE settings are set and unset "
        "around each MERGE by RPCs to the server, which may refuse some; column names with "
        "quotes, backticks, spaces, backslashes and mixed case reach the server's analyzer "
        "in unresolved plans; delta.read(spark=...) reads the as-of points by versionAsOf"
    ),
    "iceberg/test_iceberg.py::test_foreach_batch_merges_into_iceberg": (
        "iceberg.merge_changes in foreachBatch: the server's session attached to the query "
        "resolves a table to the snapshot it first read until the table is refreshed "
        "(iceberg.table.refresh), so a replayed micro-batch must still see the sink's own "
        "last commit"
    ),
    "iceberg/test_iceberg_schema.py::test_odd_names_and_moved_toast": (
        "iceberg.run end to end: a first run's missing namespace and tables are looked up "
        "in catalog listings, never refreshed into an analysis error, which a Connect "
        "client would get from the server; the Spark-task snapshot sized without a "
        "sparkContext; column names with quotes, backticks, spaces, backslashes and mixed "
        "case, as the Delta writer's, through unresolved plans the server's analyzer "
        "resolves"
    ),
}


def runs_on_connect(params: Mapping[str, Any]) -> bool:
    """Whether a test variant with these parameters goes through Spark Connect."""
    return any(value in CONNECT_PARAMS for value in params.values() if isinstance(value, str))


def keep(test: str, params: Mapping[str, Any]) -> bool:
    """Whether the variant of ``test`` (``path/under/tests.py::test_function``) with these
    parameters runs: every classic one; a Connect one if :data:`ON_CONNECT` lists its test
    and it runs on PostgreSQL 18."""
    if not runs_on_connect(params):
        return True
    return test in ON_CONNECT and params.get("pg") != "pg15"
