"""Iceberg catalogs as Spark and pyiceberg open them.

Spark reaches an Iceberg catalog through settings named after it
(``spark.sql.catalog.<name>`` = Iceberg's ``SparkCatalog``, then one setting per catalog
property): :func:`catalog_conf` writes them for any catalog type (``rest``, ``hive``,
``glue``, ``jdbc``, ``hadoop``; docs/iceberg.md lists the properties of each).

:func:`local_catalog_conf` is the catalog of the tests and the demo: a JDBC catalog whose
database is one SQLite file, tables under a local warehouse directory. pyiceberg's
``SqlCatalog`` opens the same file (:func:`local_catalog`), so a table Spark writes is read
without Spark — provided both use the same catalog *name*: the SQLite rows are keyed by
it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

SPARK_CATALOG = "org.apache.iceberg.spark.SparkCatalog"

#: The SQLite file and warehouse folder of a local catalog, inside its directory.
LOCAL_DATABASE = "catalog.db"
LOCAL_WAREHOUSE = "warehouse"


def catalog_conf(name: str, properties: Mapping[str, str]) -> dict[str, str]:
    """The Spark settings of the Iceberg catalog ``name`` with these catalog
    ``properties`` (``{"type": "rest", "uri": "https://..."}``): pass them to
    :func:`pgwire_cdc.spark.session`, or ``spark.conf.set`` them before the catalog is
    first used."""
    conf = {f"spark.sql.catalog.{name}": SPARK_CATALOG}
    conf.update({f"spark.sql.catalog.{name}.{k}": str(v) for k, v in properties.items()})
    return conf


def local_catalog_properties(directory: str | os.PathLike[str]) -> dict[str, str]:
    """The catalog properties of the local JDBC-on-SQLite catalog in ``directory``."""
    base = os.path.abspath(os.fspath(directory))
    return {
        "type": "jdbc",
        "uri": f"jdbc:sqlite:{base}/{LOCAL_DATABASE}",
        # The table layout pyiceberg's SqlCatalog also reads and writes.
        "jdbc.schema-version": "V1",
        "warehouse": f"file:{base}/{LOCAL_WAREHOUSE}",
        # Read table metadata afresh each time: another process (pyiceberg, a
        # maintenance job) may have committed since.
        "cache-enabled": "false",
    }


def local_catalog_conf(name: str, directory: str | os.PathLike[str]) -> dict[str, str]:
    """The Spark settings of the local catalog ``name`` in ``directory`` (created)."""
    os.makedirs(os.path.join(os.fspath(directory), LOCAL_WAREHOUSE), exist_ok=True)
    return catalog_conf(name, local_catalog_properties(directory))


def local_catalog(name: str, directory: str | os.PathLike[str]) -> Any:
    """pyiceberg's view of the local catalog ``name`` in ``directory``: a ``SqlCatalog``
    on the same SQLite file and warehouse."""
    from pyiceberg.catalog.sql import SqlCatalog

    base = os.path.abspath(os.fspath(directory))
    return SqlCatalog(
        name, uri=f"sqlite:///{base}/{LOCAL_DATABASE}", warehouse=f"file://{base}/{LOCAL_WAREHOUSE}"
    )
