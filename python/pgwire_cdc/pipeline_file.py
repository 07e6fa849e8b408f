"""A pipeline in a file: ``pgwire-cdc run PIPELINE.toml``.

The file (TOML, read with the standard library) declares one pipeline: where the changes
come from, where they go, how a run paces itself and ends, and per table what the lake may
hold of each column::

    [source]
    dsn = "${PGWIRE_CDC_DSN}"          # ${VAR}: from the environment, never printed
    publication = "pub"
    slot = "pipeline_slot"
    tables = ["public.orders", "public.customers"]

    [sink]
    kind = "delta"                     # delta | iceberg | parquet
    path = "/data/lake"                # delta, parquet

    [run]
    idle_timeout = 30                  # seconds without changes, then exit 0

    [tables."public.customers".columns]
    email = "hash"                     # drop | redact | hash | hmac | null | truncate | mask
    ssn = "drop"

:data:`KEYS` lists every key each section takes, with its type; an unknown key, a value of
the wrong type, a missing required key or a ``${VAR}`` not set is a :class:`ConfigError`
of one line naming the file's line. :func:`load` reads a file into a :class:`Pipeline`;
``pgwire-cdc run`` runs it, ``pgwire-cdc run --check`` checks it against the server
without changing anything. ``pgwire_cdc/pipeline.schema.json`` (:func:`json_schema`) is the
file's JSON Schema, for editors.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from .errors import ConfigError
from .policies import parse as parse_policy

#: Per section, its keys: (the types a value may have, what it is, required).
KEYS: dict[str, dict[str, tuple[tuple[type, ...], str, bool]]] = {
    "source": {
        "dsn": ((str,), "a libpq connection string or URI", True),
        "publication": ((str, list), "a publication name, or a list of them", False),
        "slot": ((str,), "the replication slot's name", False),
        "tables": ((list,), "the tables to stream (schema.table), all when absent", False),
        "failover": ((bool,), "a failover slot (PostgreSQL 17+)", False),
        "heartbeat_interval": ((int, float), "seconds between heartbeats", False),
        "binary": ((bool,), "binary tuples (default true)", False),
        "snapshot": ((bool,), "copy the existing rows first (default true)", False),
    },
    "sink": {
        "kind": ((str,), "delta, iceberg or parquet", True),
        "path": ((str,), "the directory or object-store URI (delta, parquet)", False),
        "writer": ((str,), "delta-rs or spark (delta); spark (iceberg: the only one)", False),
        "catalog": ((str,), "the Spark catalog (iceberg; delta in catalog mode)", False),
        "namespace": ((str,), "the catalog namespace (iceberg) or schema (delta)", False),
        "warehouse": ((str,), "a local Iceberg catalog's directory (iceberg)", False),
        "storage_options": ((dict,), "delta-rs's object-store options (delta)", False),
        "deletion_vectors": ((bool,), "deletion-vector tables (delta-rs writer)", False),
        "history": ((str,), "scd2: history tables beside the tables", False),
        "history_tables": ((list,), "the tables with a history (all when absent)", False),
        "deletes": ((str,), "hard or soft", False),
        "change_data_feed": ((bool,), "the tables keep a change data feed", False),
        "as_of_every": ((int, float), "seconds between as-of points", False),
        "keep_dropped_columns": ((bool,), "keep columns dropped at the source", False),
    },
    "run": {
        "idle_timeout": ((int, float), "seconds without changes, then exit 0", False),
        "until_lsn": ((str,), "stop once this LSN is delivered (X/Y)", False),
        "max_batch_rows": ((int,), "rows per batch at most", False),
        "max_batch_bytes": ((int,), "bytes per batch at most", False),
        "max_batch_ms": ((int,), "milliseconds a batch gathers at most", False),
        "metrics_port": ((int,), "serve /metrics, /healthz, /readyz on 127.0.0.1:PORT", False),
        "ready_max_lag_mb": ((int, float), "/readyz fails while the slot lags more", False),
    },
}
SINKS = ("delta", "iceberg", "parquet")
#: Per sink kind, the writers it takes: Iceberg tables are written through Spark only.
WRITERS = {"delta": ("delta-rs", "spark"), "iceberg": ("spark",), "parquet": ()}
TABLE_KEYS = ("columns", "strict")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass
class Pipeline:
    """A pipeline file, read and checked: its sections' values (``${VAR}`` taken from
    the environment), and per table the column policies."""

    path: Path
    source: dict[str, Any]
    sink: dict[str, Any]
    run: dict[str, Any] = field(default_factory=dict)
    column_policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    strict_tables: list[str] = field(default_factory=list)

    def stream_options(self) -> dict[str, Any]:
        """The ``StreamOptions`` fields the file sets."""
        source = {k: v for k, v in self.source.items() if k != "dsn"}
        paced = {k: v for k, v in self.run.items() if k not in ("metrics_port", "ready_max_lag_mb")}
        options: dict[str, Any] = {**source, **paced}
        if self.column_policies:
            options["column_policies"] = self.column_policies
        if self.strict_tables:
            options["strict_tables"] = self.strict_tables
        return options


def load(path: str | os.PathLike[str]) -> Pipeline:
    """Reads and checks the pipeline file ``path`` (see the module documentation)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{file}: cannot read the pipeline file: {e.strerror}") from None
    lines = _Lines(file, text)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        found = re.search(r"\(at line (\d+), column \d+\)", str(e))
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(e))
        line = int(found.group(1)) if found else 1
        raise ConfigError(f"{file}:{line}: not TOML: {message}") from None
    for section in raw:
        if section not in (*KEYS, "tables"):
            raise lines.error((section,), f"no section [{section}]; one of {_known()}")
    sections = {}
    for section, keys in KEYS.items():
        given = raw.get(section, {})
        if not isinstance(given, dict):
            raise lines.error((section,), f"[{section}] is a table")
        sections[section] = _section(lines, section, given, keys)
    sink = sections["sink"]
    if sink["kind"] not in SINKS:
        raise lines.error(
            ("sink", "kind"), f"sink kind {sink['kind']!r}: one of {', '.join(SINKS)}"
        )
    writers = WRITERS[sink["kind"]]
    if sink.get("writer", writers[0] if writers else None) not in writers:
        takes = " or ".join(writers) if writers else "no writer (pyarrow writes the files)"
        raise lines.error(("sink", "writer"), f"sink writer: the {sink['kind']} sink takes {takes}")
    if sink["kind"] in ("delta", "parquet") and "path" not in sink and "namespace" not in sink:
        raise lines.error(("sink",), f"a {sink['kind']} sink needs path")
    if sink["kind"] == "iceberg" and ("catalog" not in sink or "namespace" not in sink):
        raise lines.error(("sink",), "an iceberg sink needs catalog and namespace")
    policies: dict[str, dict[str, Any]] = {}
    strict_tables: list[str] = []
    tables = raw.get("tables", {})
    if not isinstance(tables, dict):
        raise lines.error(("tables",), '[tables."schema.table"] sections hold per-table options')
    for name, options in tables.items():
        if not isinstance(options, dict):
            raise lines.error(("tables", name), f'[tables."{name}"] is a table')
        for key in options:
            if key not in TABLE_KEYS:
                raise lines.error(
                    ("tables", name, key), f"tables.{name}: no key {key!r}; one of {TABLE_KEYS}"
                )
        strict = options.get("strict", False)
        if not isinstance(strict, bool):
            raise lines.error(("tables", name, "strict"), f"tables.{name}.strict is true or false")
        if strict:
            strict_tables.append(name)
        columns = options.get("columns", {})
        if not isinstance(columns, dict):
            raise lines.error(("tables", name, "columns"), "columns maps column to policy")
        for column, spec in columns.items():
            try:
                parse_policy(spec, f"tables.{name}.columns.{column}")
            except ConfigError as e:
                raise lines.error(("tables", name, "columns", column), str(e)) from None
        policies[name] = dict(columns)
    return Pipeline(file, sections["source"], sink, sections["run"], policies, strict_tables)


def _known() -> str:
    return ", ".join(f"[{s}]" for s in (*KEYS, 'tables."schema.table"'))


def _section(
    lines: _Lines,
    section: str,
    given: dict[str, Any],
    keys: Mapping[str, tuple[tuple[type, ...], str, bool]],
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in given.items():
        if key not in keys:
            known = ", ".join(keys)
            raise lines.error((section, key), f"[{section}] has no key {key!r}; it takes {known}")
        types, what, _ = keys[key]
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise lines.error((section, key), f"{section}.{key} is {what}")
        out[key] = _interpolated(lines, (section, key), value)
    for key, (_, what, required) in keys.items():
        if required and key not in out:
            raise lines.error((section,), f"[{section}] needs {key} ({what})")
    return out


def _interpolated(lines: _Lines, where: tuple[str, ...], value: Any) -> Any:
    """``value`` with each ``${VAR}`` in its strings replaced by the environment's."""
    if isinstance(value, str):

        def replace(m: re.Match[str]) -> str:
            found = os.environ.get(m.group(1))
            if found is None:
                raise lines.error(where, f"${{{m.group(1)}}} is not set in the environment")
            return found

        return _VAR.sub(replace, value)
    if isinstance(value, list):
        return [_interpolated(lines, where, v) for v in value]
    if isinstance(value, dict):
        return {k: _interpolated(lines, where, v) for k, v in value.items()}
    return value


class _Lines:
    """Where a section or key of the file is: its line number, for messages."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.places: dict[tuple[str, ...], int] = {}
        header: tuple[str, ...] = ()
        for number, line in enumerate(text.splitlines(), start=1):
            stripped = line.strip()
            if stripped.startswith("[") and not stripped.startswith("[["):
                header = _header(stripped)
                self.places.setdefault(header, number)
                for i in range(1, len(header)):
                    self.places.setdefault(header[:i], number)
                continue
            key = re.match(r'\s*("(?:[^"\\]|\\.)*"|[A-Za-z0-9_.-]+)\s*=', line)
            if key:
                parts = tuple(p.strip('"') for p in _split_key(key.group(1)))
                self.places.setdefault((*header, *parts), number)

    def error(self, where: tuple[str, ...], message: str) -> ConfigError:
        for n in range(len(where), 0, -1):
            line = self.places.get(tuple(where[:n]))
            if line is not None:
                return ConfigError(f"{self.path}:{line}: {message}")
        return ConfigError(f"{self.path}: {message}")


def _header(line: str) -> tuple[str, ...]:
    inner = line.split("]", 1)[0].lstrip("[") if '"' not in line else line[1 : line.rindex("]")]
    return tuple(p.strip().strip('"') for p in _split_key(inner))


def _split_key(key: str) -> list[str]:
    """A dotted TOML key's parts (quoted parts may hold dots)."""
    found: list[str] = re.findall(r'"(?:[^"\\]|\\.)*"|[^.\s]+', key)
    return found


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a pipeline file (``pgwire_cdc/pipeline.schema.json``)."""
    kinds = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array"}

    def one(types: tuple[type, ...], what: str) -> dict[str, Any]:
        names = sorted(
            {kinds.get(t, "object") for t in types} - ({"integer"} if float in types else set())
        )
        return {"type": names[0] if len(names) == 1 else names, "description": what}

    sections: dict[str, Any] = {}
    for section, keys in KEYS.items():
        sections[section] = {
            "type": "object",
            "additionalProperties": False,
            "properties": {k: one(types, what) for k, (types, what, _) in keys.items()},
            "required": [k for k, (_, _, required) in keys.items() if required],
        }
    sections["sink"]["properties"]["kind"]["enum"] = list(SINKS)
    sections["sink"]["properties"]["writer"]["enum"] = ["delta-rs", "spark"]
    policy = {
        "oneOf": [
            {"type": "string", "enum": ["drop", "null", "redact", "hash", "hmac", "keep"]},
            {
                "type": "object",
                "properties": {
                    "policy": {"enum": ["redact", "truncate", "mask"]},
                    "text": {"type": "string"},
                    "length": {"type": "integer", "minimum": 0},
                    "keep": {"type": "integer", "minimum": 0},
                },
                "required": ["policy"],
                "additionalProperties": False,
            },
        ]
    }
    sections["tables"] = {
        "type": "object",
        "additionalProperties": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "columns": {"type": "object", "additionalProperties": policy},
                "strict": {"type": "boolean", "description": "every column needs a rule"},
            },
        },
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "pgwire_cdc pipeline file",
        "type": "object",
        "additionalProperties": False,
        "properties": sections,
        "required": ["source", "sink"],
    }
