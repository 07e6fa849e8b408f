"""The SQL both lakehouse sinks build: quoted names and strings, and the clauses of the
one MERGE per table and batch (:func:`merge_clauses`) whose source is a reduced change
table (one final change per key, a ``_delete`` flag, ``_unchanged`` column lists)."""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigError


def quote_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def sql_string(value: str, spark: bool = False) -> str:
    """A string literal: Spark SQL escapes with backslashes, DataFusion (delta-rs) doubles
    the quote as standard SQL does."""
    if spark:
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return "'" + value.replace("'", "''") + "'"


def merge_clauses(
    columns: list[str], keys: list[str], unchanged: set[str], spark: bool = False
) -> dict[str, Any]:
    """The SQL of one MERGE (every writer speaks it; ``spark``: Spark SQL's string
    escapes): the ON condition, the UPDATE assignments and the INSERT values, by target
    column. Only the ``unchanged`` columns (named in some row's ``_unchanged``) need the
    CASE that keeps the table's value; the others are plain assignments, which spares the
    MERGE reading them from the target."""

    def assign(c: str) -> str:
        if c not in unchanged:
            return f"s.{quote_name(c)}"
        return (
            f"CASE WHEN array_contains(s._unchanged, {sql_string(c, spark)}) "
            f"THEN t.{quote_name(c)} ELSE s.{quote_name(c)} END"
        )

    on = " AND ".join(f"t.{quote_name(k)} = s.{quote_name(k)}" for k in keys)
    update = {quote_name(c): assign(c) for c in columns}
    insert = {quote_name(c): f"s.{quote_name(c)}" for c in columns}
    return {"on": on, "update": update, "insert": insert}


def unchanged_names(source: pa.Table) -> set[str]:
    """The columns some row of a MERGE source leaves unchanged."""
    names = pc.unique(pc.list_flatten(source["_unchanged"])).to_pylist()
    return {n for n in names if n is not None}


def source_columns(source: pa.Table) -> list[str]:
    """The table columns of a MERGE source (everything before ``_delete``)."""
    names = source.column_names
    return list(names[: names.index("_delete")] if "_delete" in names else names)


def key_filter(keys: pa.Table, spark: bool = False) -> str | None:
    """An SQL condition that holds for the rows whose key columns (``keys``' columns)
    equal one of ``keys``' rows, and maybe for some others (each column in its own IN
    list); None when a key column is neither an integer nor a string (no filter: every
    row). ``spark``: Spark SQL's string escapes."""
    if not all(pa.types.is_integer(f.type) or pa.types.is_string(f.type) for f in keys.schema):
        return None
    conditions = []
    for k in keys.column_names:
        values = ", ".join(_literal(v, spark) for v in pc.unique(keys[k]).to_pylist())
        conditions.append(f"{quote_name(k)} IN ({values})")
    return " AND ".join(conditions)


def _literal(value: int | str | None, spark: bool) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(value)
    return sql_string(value, spark)


def default_table_name(source: str) -> str:
    """The catalog table name of the source table ``source`` ("schema.table"):
    ``public.Order Lines`` → ``public_order_lines``."""
    return re.sub(r"[^a-z0-9_]", "_", source.lower())


def split_name(name: str) -> list[str]:
    """The parts of a dotted SQL name, each unquoted: ``a.\\`b.c\\`.d`` → ``["a", "b.c",
    "d"]`` (a doubled backtick inside a quoted part is one backtick)."""
    parts: list[str] = []
    current: list[str] = []
    quoted = started = False
    i = 0
    while i < len(name):
        ch = name[i]
        if quoted:
            if ch == "`" and name[i + 1 : i + 2] == "`":
                current.append("`")
                i += 1
            elif ch == "`":
                quoted = False
            else:
                current.append(ch)
        elif ch == "`" and not current:
            quoted = started = True
        elif ch == ".":
            parts.append("".join(current))
            current, started = [], False
        elif ch == "`":
            raise ConfigError(f"table name {name!r}: a backtick inside an unquoted part")
        else:
            current.append(ch)
            started = True
        i += 1
    if quoted:
        raise ConfigError(f"table name {name!r}: an unclosed backtick")
    parts.append("".join(current))
    if not started or any(not p for p in parts):
        raise ConfigError(f"table name {name!r}: an empty part")
    return parts
