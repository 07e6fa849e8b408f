"""Schema changes read from the WAL: the DDL that :mod:`pgwire_cdc.ddl_capture`'s event
triggers write as transactional logical decoding messages (prefix :data:`PREFIX`).

A pgoutput ``Relation`` message says which columns a table has now, by name, without
attnums, defaults or any word of a rewrite (``../FIDELITY.md``): from it alone a
``RENAME COLUMN`` looks like a dropped column and a new one, ``ADD COLUMN ... DEFAULT 7``
like a column that existing rows hold NULL in, and ``ALTER COLUMN ... TYPE ... USING``
like nothing at all. The event triggers describe the table before and after each DDL
(attnums, types, the value existing rows read for an added column, whether the table was
rewritten), in the DDL's own transaction, so the message arrives at the DDL's place among
the transaction's rows: :attr:`SchemaChange.commit_lsn` and :attr:`SchemaChange.tx_ordinal`
order it with the change tables' ``_commit_lsn`` / ``_tx_ordinal``.

:func:`changes_of` turns one message into :class:`SchemaChange` objects, one per kind of
change, comparing the two descriptions column by attnum:

* ``create_table``, ``drop_table``, ``rename_table`` (a new name or schema);
* ``drop_column``, ``rename_column`` (same attnum, new name), ``alter_column_type``,
  ``add_column`` (new attnums; :attr:`SchemaChange.missing` holds the text of the value
  rows that existed before read, from ``pg_attribute.attmissingval``);
* ``rewrite``: the table's rows were rewritten (a volatile default, a type change with a
  conversion, ``USING``): their new values are not in the stream;
* ``replica_identity``: the replica identity or its key columns changed.

They come in that order within one message, so applying them in turn is applying the DDL.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

log = logging.getLogger("pgwire_cdc")

#: The prefix of the DDL messages in the WAL.
PREFIX = "pgwire_cdc.ddl"
#: The message format this package reads.
VERSION = 1

#: The kinds of :class:`SchemaChange`, in the order a message's changes are listed.
KINDS = (
    "create_table",
    "drop_table",
    "rename_table",
    "drop_column",
    "rename_column",
    "alter_column_type",
    "add_column",
    "rewrite",
    "replica_identity",
)


@dataclass(frozen=True)
class Column:
    """A column as the event trigger described it."""

    attnum: int
    name: str
    type: str  # format_type(): "integer", "character varying(20)", "numeric(10,2)"
    type_oid: int
    typmod: int
    #: A domain's base type and its modifier (the column's own type otherwise): what the
    #: stream's values are parsed as.
    base_type_oid: int
    base_typmod: int
    not_null: bool
    #: The text of the value rows that existed before the column was added read for it
    #: (``attmissingval``, as the type's output function prints it); None when there is
    #: none (such rows read NULL, or the table was rewritten).
    missing: str | None
    default: str | None

    @classmethod
    def of(cls, doc: dict[str, Any]) -> Column:
        return cls(
            attnum=int(doc["attnum"]),
            name=str(doc["name"]),
            type=str(doc["type"]),
            type_oid=int(doc["type_oid"]),
            typmod=int(doc["typmod"]),
            base_type_oid=int(doc.get("base_type_oid") or doc["type_oid"]),
            base_typmod=int(doc.get("base_typmod", doc["typmod"])),
            not_null=bool(doc["not_null"]),
            missing=doc["missing"] if doc.get("has_missing") else None,
            default=doc.get("default"),
        )


@dataclass(frozen=True)
class TableShape:
    """A table as the event trigger described it."""

    oid: int
    schema: str
    name: str
    columns: tuple[Column, ...]
    replica_identity: str  # "d" default (primary key), "i" index, "f" full, "n" nothing
    key: tuple[str, ...]

    @property
    def qualified(self) -> str:
        """``"schema.table"``, as change tables are keyed."""
        return f"{self.schema}.{self.name}"

    @classmethod
    def of(cls, doc: dict[str, Any] | None, oid: int) -> TableShape | None:
        if doc is None:
            return None
        return cls(
            oid=oid,
            schema=str(doc["schema"]),
            name=str(doc["name"]),
            columns=tuple(Column.of(c) for c in doc["columns"]),
            replica_identity=str(doc["replica_identity"]),
            key=tuple(doc.get("key") or ()),
        )

    def by_attnum(self) -> dict[int, Column]:
        return {c.attnum: c for c in self.columns}


@dataclass(frozen=True)
class SchemaChange:
    """One kind of change a DDL made to one table (see the module documentation)."""

    #: ``"schema.table"``: the table's name after the DDL (before it for ``drop_table``).
    table: str
    #: The LSN of the DDL's message.
    lsn: int
    kind: str
    #: The columns concerned, by their names after the change (before it for
    #: ``drop_column``); empty for changes of the whole table.
    columns: tuple[str, ...]
    #: The DDL's place among its transaction's rows: its commit LSN and ``tx_ordinal``
    #: (rows up to this ordinal came before it). A change learnt from the catalog
    #: (:mod:`pgwire_cdc.schema_watch`) has the ordinal of the row before the first it
    #: knows to come after it (-1: before the first row of the transaction).
    commit_lsn: int | None = None
    tx_ordinal: int | None = None
    #: ``rename_column``: each renamed column's name before, by its new name;
    #: ``rename_table``: ``{"table": old "schema.table"}``.
    renamed: dict[str, str] = field(default_factory=dict)
    #: ``add_column``: the text of the value existing rows read, per column that has one.
    missing: dict[str, str] = field(default_factory=dict)
    #: The command's tag (``ALTER TABLE``, ``DROP TABLE``, ...).
    command_tag: str = ""
    #: The table before and after the DDL, as described (None: not known / dropped).
    before: TableShape | None = field(default=None, repr=False)
    after: TableShape | None = field(default=None, repr=False)

    @property
    def place(self) -> tuple[int, int] | None:
        """``(commit_lsn, tx_ordinal)``, or None outside a transaction."""
        if self.commit_lsn is None or self.tx_ordinal is None:
            return None
        return (self.commit_lsn, self.tx_ordinal)


def changes_of(lsn: int, content: bytes, place: Sequence[int] | None = None) -> list[SchemaChange]:
    """The schema changes of one DDL message (``content``, at ``lsn``; ``place`` its
    ``(commit_lsn, tx_ordinal)``). A message of another format version, or one that is not
    JSON, is logged and skipped: the Relation messages that follow still evolve the
    tables."""
    try:
        doc = json.loads(content)
        if doc.get("version") != VERSION:
            raise ValueError(f"format version {doc.get('version')!r}, this package reads {VERSION}")
        oid = int(doc.get("oid") or 0)
        before = TableShape.of(doc.get("before"), oid)
        after = TableShape.of(doc.get("after"), oid)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        log.warning("a DDL message at LSN %s was not understood (%s): skipped", lsn, e)
        return []
    commit, ordinal = (place[0], place[1]) if place is not None else (None, None)
    common: dict[str, Any] = {
        "lsn": lsn,
        "commit_lsn": commit,
        "tx_ordinal": ordinal,
        "command_tag": str(doc.get("command_tag") or ""),
        "before": before,
        "after": after,
    }
    if after is None:
        if before is None or doc.get("event") != "sql_drop":
            return []
        return [SchemaChange(before.qualified, kind="drop_table", columns=(), **common)]
    table = after.qualified
    if before is None:
        names = tuple(c.name for c in after.columns)
        return [SchemaChange(table, kind="create_table", columns=names, **common)]
    out: list[SchemaChange] = []
    if before.qualified != table:
        out.append(
            SchemaChange(
                table,
                kind="rename_table",
                columns=(),
                renamed={"table": before.qualified},
                **common,
            )
        )
    old, new = before.by_attnum(), after.by_attnum()
    dropped = tuple(c.name for n, c in old.items() if n not in new)
    if dropped:
        out.append(SchemaChange(table, kind="drop_column", columns=dropped, **common))
    renamed = {new[n].name: c.name for n, c in old.items() if n in new and new[n].name != c.name}
    if renamed:
        out.append(
            SchemaChange(
                table, kind="rename_column", columns=tuple(renamed), renamed=renamed, **common
            )
        )
    retyped = tuple(
        new[n].name
        for n, c in old.items()
        if n in new and (new[n].type_oid, new[n].typmod) != (c.type_oid, c.typmod)
    )
    if retyped:
        out.append(SchemaChange(table, kind="alter_column_type", columns=retyped, **common))
    added = [c for n, c in new.items() if n not in old]
    if added:
        missing = {c.name: c.missing for c in added if c.missing is not None}
        out.append(
            SchemaChange(
                table,
                kind="add_column",
                columns=tuple(c.name for c in added),
                missing=missing,
                **common,
            )
        )
    if doc.get("rewritten"):
        out.append(SchemaChange(table, kind="rewrite", columns=(), **common))
    if (before.replica_identity, before.key) != (after.replica_identity, after.key):
        out.append(SchemaChange(table, kind="replica_identity", columns=after.key, **common))
    return out


def typed_row(shape: TableShape, texts: Mapping[str, str | None]) -> pa.Table:
    """One row of ``shape``'s columns, typed as the stream types them: ``texts`` (values
    as PostgreSQL prints them, by column name; the other columns null) parsed by the
    decoder from a pgoutput Relation and Insert in text format, so a value here equals
    the one a change table would hold."""
    from .decoder import Decoder

    relation = bytearray(b"R") + struct.pack(">I", shape.oid or 1)
    relation += shape.schema.encode() + b"\0" + shape.name.encode() + b"\0"
    relation += shape.replica_identity.encode()
    relation += struct.pack(">H", len(shape.columns))
    row = bytearray(struct.pack(">H", len(shape.columns)))
    for c in shape.columns:
        key = 1 if c.name in shape.key else 0
        relation += bytes([key]) + c.name.encode() + b"\0"
        relation += struct.pack(">Ii", c.base_type_oid, c.base_typmod)
        text = texts.get(c.name)
        if text is None:
            row += b"n"
        else:
            data = text.encode()
            row += b"t" + struct.pack(">I", len(data)) + data
    decoder = Decoder(proto_version=1)
    decoder.feed(b"B" + struct.pack(">QqI", 48, 0, 1), 8)
    decoder.feed(bytes(relation), 16)
    decoder.feed(b"I" + struct.pack(">I", shape.oid or 1) + b"N" + bytes(row), 24)
    decoder.feed(b"C" + struct.pack(">BQQq", 0, 48, 56, 0), 48)
    (table,) = decoder.take().values()
    return table
