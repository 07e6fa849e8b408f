"""Schema changes and odd names on the Iceberg sink (``pgwire_cdc.iceberg``) against real
PostgreSQL 15 and 18, real Spark and real pyiceberg. After each step of the workloads of
``schema_workload.py`` every table, read by Spark and by pyiceberg, equals the ``SELECT``
on the source that step gives: added columns are added, int/float/decimal columns
widened, a dropped column kept by a keyed table (updated and moved rows keep its value)
and dropped by a keyless one; odd names and key values round-trip, and rows moved to a
new key keep their toasted value. A type Iceberg cannot widen stops the sink with
:class:`~pgwire_cdc.errors.IcebergError`, the table untouched. With the DDL capture
installed, the everyday migrations keep every table equal to the source.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from conftest import Database
from pgwire_cdc import iceberg
from pgwire_cdc.admin import install_ddl_capture
from pgwire_cdc.errors import IcebergError
from pgwire_cdc.lakehouse.sink import SHAPE_PROPERTY
from support.schema_workload import EVOLVING, MIGRATIONS, ODD, ODD_MOVES, Step
from support.spark_modes import SPARK_MODES

from iceberg.test_iceberg import Lake, rows_of


@pytest.fixture
def lake(
    request: pytest.FixtureRequest, db: Database, iceberg_spark_in: Any, iceberg_catalog: Any
) -> Lake:
    """test_iceberg's: classic Spark, or Spark Connect when parametrized ``indirect``."""
    return Lake(db, iceberg_spark_in(getattr(request, "param", "classic")), iceberg_catalog)


def readers(lake: Lake) -> list[Callable[[str], pa.Table]]:
    """A source table's Iceberg table, read by Spark and by pyiceberg."""
    return [
        lambda name: lake.spark.table(lake.ref(name)).toArrow(),
        lambda name: iceberg.read_table(lake.catalog, lake.identifier(name)),
    ]


def apply(lake: Lake, step: Step) -> None:
    step.run(lake.db.conn)
    lake.run()
    for read in readers(lake):
        step.check(lake.db.conn, read)


def test_schema_changes_evolve_the_tables(lake: Lake) -> None:
    for step in EVOLVING:
        apply(lake, step)
    before = [rows_of(read("public.t")) for read in readers(lake)]
    # A table with no source description recorded (kept by an earlier version) learns the
    # type change from its changes alone.
    lake.spark.sql(f"ALTER TABLE {lake.ref('public.t')} UNSET TBLPROPERTIES ('{SHAPE_PROPERTY}')")
    lake.db.conn.execute("ALTER TABLE t ALTER COLUMN a TYPE text")
    lake.db.conn.execute("UPDATE t SET a = 'x' WHERE id = 4")
    with pytest.raises(IcebergError, match=r"column 'a' changed type .* re-snapshot"):
        lake.run()
    assert [rows_of(read("public.t")) for read in readers(lake)] == before


# A Spark Connect variant as well (support/spark_modes.py: on PostgreSQL 18).
@pytest.mark.parametrize("lake", SPARK_MODES, indirect=True)
def test_odd_names_and_moved_toast(lake: Lake) -> None:
    apply(lake, ODD)
    apply(lake, ODD_MOVES)


def test_migrations_with_ddl_capture(lake: Lake) -> None:
    """The everyday migrations of ``schema_workload.MIGRATIONS`` with the DDL capture
    installed, all in one run after the first (a Spark MERGE costs seconds): renames and
    drops by Iceberg's field ids, an added column's default for the held rows, the
    rewrites read again; every table equals the source, read by Spark and by pyiceberg."""
    install_ddl_capture(lake.db.dsn)
    first, *rest = MIGRATIONS
    apply(lake, first)
    for step in rest:
        step.run(lake.db.conn)
    lake.run()
    for read in readers(lake):
        rest[-1].check(lake.db.conn, read)
