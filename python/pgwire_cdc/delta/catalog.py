"""Delta tables named in a Spark catalog (``catalog.schema.table``) instead of kept under
one directory.

The sink names each table by a *reference*: a path (or object-store URI) for a path
table, or a fully quoted SQL name (``\\`c\\`.\\`s\\`.\\`t\\```) for a catalog table — a path
never starts with a backtick, so :func:`is_table_name` tells them apart. Spark statements
(``CREATE``, ``ALTER``, ``MERGE INTO``) name a catalog table by its name; positions and
history are read with delta-rs at the location the catalog gives (``DESCRIBE DETAIL``),
the same code as for a path table.

:class:`CatalogNames` maps source tables to catalog names: by default
``<pg schema>_<pg table>`` in lower case with every character other than ``a-z``,
``0-9`` and ``_`` turned into ``_`` (:func:`default_table_name`), the names a Hive
metastore accepts; or by the caller's function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import ConfigError
from ..lakehouse.sql import default_table_name, quote_name, split_name


def is_table_name(ref: str) -> bool:
    """Whether the table reference ``ref`` is a catalog name (see the module docs), not a
    path."""
    return ref.startswith("`")


def table_ref(name: str) -> str:
    """The reference of the catalog table ``name`` (as Spark SQL writes it:
    ``catalog.schema.table``, parts in backticks where needed): every part quoted."""
    return ".".join(quote_name(p) for p in split_name(name))


@dataclass
class CatalogNames:
    """Where the tables of one stream live in a Spark catalog: ``catalog.schema``
    (``catalog`` None: the session's current catalog), each named by ``table_name``
    (source name → table name within the schema)."""

    catalog: str | None
    schema: str
    table_name: Callable[[str], str] = default_table_name
    _sources: dict[str, str] = field(default_factory=dict)

    def schema_ref(self) -> str:
        parts = [self.schema] if self.catalog is None else [self.catalog, self.schema]
        return ".".join(quote_name(p) for p in parts)

    def ref(self, source: str) -> str:
        """The reference of the source table ``source``'s Delta table. Two source tables
        given one name (catalogs compare names without case) are refused."""
        name = self.table_name(source)
        if not isinstance(name, str) or not name:
            raise ConfigError(f"table_name({source!r}) gave {name!r}, not a table name")
        ref = f"{self.schema_ref()}.{quote_name(name)}"
        other = self._sources.setdefault(ref.casefold(), source)
        if other != source:
            raise ConfigError(
                f"source tables {other!r} and {source!r} both map to the catalog table "
                f"{ref}; pass table_name= to name them apart"
            )
        return ref
