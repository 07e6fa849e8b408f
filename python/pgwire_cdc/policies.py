"""Column policies: what a pipeline keeps of columns that hold personal data.

Per table and column (``StreamOptions.column_policies``, or a pipeline file's
``[tables."schema.table".columns]``), one of:

* ``"drop"``: the column never leaves the stream;
* ``"null"``: every value null;
* ``"redact"`` (or ``{policy = "redact", text = "..."}``): every value the text given
  (default ``REDACTED``);
* ``"hash"``: the hex SHA-256 of ``$PGWIRE_CDC_HASH_SALT`` followed by the value;
* ``"hmac"``: the hex HMAC-SHA-256 of the value under ``$PGWIRE_CDC_HMAC_KEY``;
* ``{policy = "truncate", length = N}``: a text value's first N characters;
* ``{policy = "mask", keep = N}``: a text value with all but its last N characters ``*``;
* ``"keep"``: the column as it is (for strict mode).

A table in strict mode (``StreamOptions.strict_tables``, a pipeline file's ``strict =
true``) must name every column it has: a column without a rule — one a migration added —
stops the stream with an error naming it, before a batch holding its values is handed out.

They are applied in Rust (:func:`pgwire_cdc._native.apply_column_policies`) to every
batch's change tables — the initial snapshot, the changes, the rows of tables copied
later, the ``_before`` images — before ``stream()`` hands the batch out, so no value of a
governed column reaches Python or a lake. A text value hashes as its UTF-8 bytes, so
``sha256(salt + value)`` computed elsewhere matches; nulls stay null. The salt and the
key come from the environment, are read once, and are never printed.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from . import _native
from .errors import ConfigError
from .tables import METADATA_COLUMNS, parse_segment_key, table_of

KINDS = ("drop", "null", "redact", "hash", "hmac", "truncate", "mask", "keep")
#: The settings a kind takes besides ``policy``.
OPTIONS = {"redact": ("text",), "truncate": ("length",), "mask": ("keep",)}
#: Where ``hash`` takes its salt and ``hmac`` its key.
SALT_ENV = "PGWIRE_CDC_HASH_SALT"
KEY_ENV = "PGWIRE_CDC_HMAC_KEY"


@dataclass(frozen=True)
class ColumnPolicy:
    """One column's policy (see the module documentation)."""

    kind: str
    text: str = "REDACTED"
    length: int = 0

    def native(self, column: str) -> tuple[str, str, bytes, int]:
        """The ``(column, kind, data, n)`` of ``apply_column_policies``."""
        if self.kind == "hash":
            return (column, "hash", _secret(SALT_ENV, "hash"), 0)
        if self.kind == "hmac":
            return (column, "hmac", _secret(KEY_ENV, "hmac"), 0)
        if self.kind == "redact":
            return (column, "redact", self.text.encode(), 0)
        return (column, self.kind, b"", self.length)


def _secret(variable: str, kind: str) -> bytes:
    value = os.environ.get(variable)
    if not value:
        raise ConfigError(f"the {kind} column policy takes its secret from ${variable}: set it")
    return value.encode()


def parse(spec: Any, where: str) -> ColumnPolicy:
    """A policy as a pipeline file or ``column_policies`` gives it: a kind's name, or a
    table ``{policy = ..., text/length/keep = ...}``; ``where`` names it in errors."""
    if isinstance(spec, str):
        spec = {"policy": spec}
    if not isinstance(spec, Mapping) or not isinstance(spec.get("policy"), str):
        raise ConfigError(f"{where}: a policy is one of {', '.join(KINDS)} (a string)")
    kind = spec["policy"]
    if kind not in KINDS:
        raise ConfigError(f"{where}: no policy {kind!r}; one of {', '.join(KINDS)}")
    allowed = {"policy", *OPTIONS.get(kind, ())}
    extra = sorted(set(spec) - allowed)
    if extra:
        raise ConfigError(f"{where}: {kind} takes no {', '.join(extra)}")
    if kind == "redact":
        text = spec.get("text", "REDACTED")
        if not isinstance(text, str):
            raise ConfigError(f"{where}: redact's text is a string")
        return ColumnPolicy(kind, text=text)
    if kind in ("truncate", "mask"):
        name = "length" if kind == "truncate" else "keep"
        n = spec.get(name)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ConfigError(f"{where}: {kind} needs {name} = a number of characters")
        return ColumnPolicy(kind, length=n)
    return ColumnPolicy(kind)


class Policies:
    """The column policies of a stream, by table (``"schema.table"``) and column. The
    secrets ``hash`` and ``hmac`` need are read when this is built: a missing one is a
    :class:`ConfigError` before anything streams."""

    def __init__(
        self, given: Mapping[str, Mapping[str, Any]], strict: Collection[str] = ()
    ) -> None:
        self.by_table: dict[str, list[tuple[str, str, bytes, int]]] = {}
        #: Per table in strict mode, the columns it names.
        self.strict: dict[str, set[str]] = {t: set(given.get(t, {})) for t in strict}
        for table, columns in given.items():
            if not isinstance(columns, Mapping):
                raise ConfigError(f"column_policies[{table!r}]: a mapping of column to policy")
            rules = [parse(spec, f"{table}.{column}") for column, spec in columns.items()]
            self.by_table[table] = [
                rule.native(column)
                for column, rule in zip(columns, rules, strict=True)
                if rule.kind != "keep"
            ]

    def __bool__(self) -> bool:
        return any(self.by_table.values()) or bool(self.strict)

    def apply(self, key: str, table: pa.Table) -> pa.Table:
        """The change table ``table`` of batch key ``key`` (``schema.table``, or
        ``schema.table@2`` for a later schema) with its table's policies applied."""
        name, _ = parse_segment_key(key)
        named = self.strict.get(name)
        if named is not None:
            data = [c for c in table.column_names if c not in METADATA_COLUMNS]
            unruled = [c for c in data if c not in named]
            if unruled:
                raise ConfigError(
                    f"{name} is in strict mode and its column {unruled[0]!r} has no rule: add "
                    f'one (drop, hash, ... or keep) under [tables."{name}".columns]; '
                    "nothing of it was written"
                )
        rules = self.by_table.get(name)
        if not rules:
            return table
        return table_of(_native.apply_column_policies(table, rules))
