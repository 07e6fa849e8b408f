"""pgoutput messages of a made-up source, decoded into real ``stream()`` batches offline.

:class:`Source` writes the messages PostgreSQL's ``pgoutput`` (protocol 1, text format)
sends for transactions on a few tables — Begin, Relation, Insert, Update (with the old
key or the old row, unchanged TOAST values as ``u``), Delete, Truncate, Commit — feeds
them to the package's own :class:`~pgwire_cdc.Decoder`, and hands out the change tables
as :class:`~pgwire_cdc.streaming.Batch` objects, so sink tests run on the change tables
the stream would give them, without a server. It also keeps what the source tables hold
(:attr:`Source.rows`), the oracle those tests compare with.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pgwire_cdc import Decoder
from pgwire_cdc.schema_changes import PREFIX, SchemaChange, changes_of
from pgwire_cdc.streaming import Batch
from pgwire_cdc.tables import METADATA_COLUMNS, without_columns

#: Type OIDs and how a Python value is printed in text format.
TYPES = {"int8": 20, "int4": 23, "text": 25}

#: A value left out of an Update's new row: PostgreSQL sends ``u`` for an unchanged value
#: stored out of line (TOAST).
UNCHANGED = object()


@dataclass
class Table:
    name: str
    oid: int
    #: (name, type) of each column, in order.
    columns: list[tuple[str, str]]
    #: The replica-identity key columns; empty for REPLICA IDENTITY FULL.
    key: list[str]
    #: What the source table holds: one dict per row (a list: a keyless table is a multiset).
    rows: list[dict[str, Any]] = field(default_factory=list)
    #: The Relation message was sent for these columns.
    announced: bool = False
    #: Each column's attnum, and the text of the value rows read for a column added with
    #: a constant default (``attmissingval``), as the DDL messages describe them.
    attnums: dict[str, int] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for i, (name, _) in enumerate(self.columns, start=1):
            self.attnums.setdefault(name, i)

    def describe(self) -> dict[str, Any]:
        """The table as ``pgwire_cdc.describe_table()`` describes it in a DDL message."""
        schema, _, name = self.name.rpartition(".")
        return {
            "schema": schema or "public",
            "name": name,
            "relfilenode": self.oid,
            "replica_identity": "d" if self.key else "f",
            "key": list(self.key),
            "columns": [
                {
                    "attnum": self.attnums[c],
                    "name": c,
                    "type": t,
                    "type_oid": TYPES[t],
                    "typmod": -1,
                    "not_null": c in self.key,
                    "has_missing": c in self.missing,
                    "missing": self.missing.get(c),
                    "default": None,
                    "generated": "",
                }
                for c, t in self.columns
            ],
        }

    @property
    def names(self) -> list[str]:
        return [c for c, _ in self.columns]

    def key_of(self, row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(row[k] for k in self.key)

    def find(self, match: dict[str, Any]) -> int:
        for i, row in enumerate(self.rows):
            if all(row.get(c) == v for c, v in match.items()):
                return i
        raise KeyError(match)


def _tuple(values: list[Any]) -> bytes:
    out = bytearray(struct.pack(">H", len(values)))
    for v in values:
        if v is UNCHANGED:
            out += b"u"
        elif v is None:
            out += b"n"
        else:
            text = str(v).encode()
            out += b"t" + struct.pack(">I", len(text)) + text
    return bytes(out)


class Transaction:
    """The changes of one transaction; each also applied to the source's rows."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.messages: list[bytes] = []

    def _announce(self, table: Table) -> None:
        if table.announced:
            return
        identity = b"f" if not table.key else b"d"
        out = bytearray(b"R") + struct.pack(">I", table.oid)
        namespace, _, relname = table.name.rpartition(".")
        out += (namespace or "public").encode() + b"\0" + relname.encode() + b"\0" + identity
        out += struct.pack(">H", len(table.columns))
        for name, type_ in table.columns:
            flag = 1 if (name in table.key or not table.key) else 0
            out += bytes([flag]) + name.encode() + b"\0" + struct.pack(">Ii", TYPES[type_], -1)
        self.messages.append(bytes(out))
        table.announced = True

    def insert(self, name: str, row: dict[str, Any]) -> None:
        table = self.source.tables[name]
        self._announce(table)
        full = {c: row.get(c) for c in table.names}
        self.messages.append(
            b"I" + struct.pack(">I", table.oid) + b"N" + _tuple([full[c] for c in table.names])
        )
        table.rows.append(full)

    def update(self, name: str, match: dict[str, Any], new: dict[str, Any]) -> None:
        """The row ``match`` finds takes the values of ``new`` (:data:`UNCHANGED` for a
        value sent as unchanged TOAST: the row keeps it)."""
        table = self.source.tables[name]
        self._announce(table)
        i = table.find(match)
        old = table.rows[i]
        after = {c: new.get(c, old[c]) for c in table.names}
        out = bytearray(b"U") + struct.pack(">I", table.oid)
        if not table.key:
            out += b"O" + _tuple([old[c] for c in table.names])
        elif table.key_of(old) != tuple(
            old[k] if after[k] is UNCHANGED else after[k] for k in table.key
        ):
            out += b"K" + _tuple([old[c] if c in table.key else None for c in table.names])
        out += b"N" + _tuple([after[c] for c in table.names])
        self.messages.append(bytes(out))
        table.rows[i] = {c: old[c] if after[c] is UNCHANGED else after[c] for c in table.names}

    def delete(self, name: str, match: dict[str, Any]) -> None:
        table = self.source.tables[name]
        self._announce(table)
        i = table.find(match)
        old = table.rows.pop(i)
        kind = b"O" if not table.key else b"K"
        values = [old[c] if (not table.key or c in table.key) else None for c in table.names]
        self.messages.append(b"D" + struct.pack(">I", table.oid) + kind + _tuple(values))

    def truncate(self, *names: str) -> None:
        tables = [self.source.tables[n] for n in names]
        for table in tables:
            self._announce(table)
            table.rows.clear()
        out = b"T" + struct.pack(">IB", len(tables), 0)
        self.messages.append(out + b"".join(struct.pack(">I", t.oid) for t in tables))

    def add_column(self, name: str, column: str, type_: str, default: Any = None) -> None:
        """``ALTER TABLE ... ADD COLUMN`` (with a constant ``default``: the value existing
        rows read); the next change sends the new Relation."""
        table = self.source.tables[name]
        with self._ddl(table):
            table.columns.append((column, type_))
            table.attnums[column] = max(table.attnums.values(), default=0) + 1
            if default is not None:
                table.missing[column] = str(default)
            for row in table.rows:
                row[column] = default

    def drop_column(self, name: str, column: str) -> None:
        table = self.source.tables[name]
        with self._ddl(table):
            table.columns = [c for c in table.columns if c[0] != column]
            table.missing.pop(column, None)
            for row in table.rows:
                row.pop(column, None)

    def rename_column(self, name: str, column: str, to: str) -> None:
        table = self.source.tables[name]
        with self._ddl(table):
            table.columns = [(to if c == column else c, t) for c, t in table.columns]
            table.attnums[to] = table.attnums.pop(column)
            if column in table.missing:
                table.missing[to] = table.missing.pop(column)
            table.key = [to if k == column else k for k in table.key]
            for row in table.rows:
                row[to] = row.pop(column)

    def retype_column(self, name: str, column: str, type_: str, using: Any) -> None:
        """``ALTER COLUMN ... TYPE ... USING using(value)``: the table is rewritten."""
        table = self.source.tables[name]
        with self._ddl(table, rewritten=True):
            table.columns = [(c, type_ if c == column else t) for c, t in table.columns]
            table.missing.clear()
            for row in table.rows:
                row[column] = using(row[column])

    def set_key(self, name: str, key: list[str]) -> None:
        """``ALTER TABLE ... ADD PRIMARY KEY`` (``key``), or ``REPLICA IDENTITY FULL`` on a
        table without one (``[]``)."""
        table = self.source.tables[name]
        with self._ddl(table):
            table.key = list(key)

    def drop_table(self, name: str) -> None:
        """``DROP TABLE``: the source forgets the table; the message its trigger writes."""
        table = self.source.tables.pop(name)
        with self._ddl(table, event="sql_drop"):
            pass

    @contextmanager
    def _ddl(
        self, table: Table, *, rewritten: bool = False, event: str = "ddl_command_end"
    ) -> Iterator[None]:
        """A DDL on ``table``: with the source's DDL capture on, the message its event
        trigger writes (table before and after) at this place in the transaction."""
        before = table.describe()
        yield
        table.announced = False
        if not self.source.ddl_capture:
            return
        dropped = event == "sql_drop"
        doc = {
            "version": 1,
            "event": event,
            "command_tag": "DROP TABLE" if dropped else "ALTER TABLE",
            "command": "...",
            "oid": table.oid,
            "before": before,
            "after": None if dropped else table.describe(),
            "rewritten": rewritten,
            "rewrite_reason": 4 if rewritten else None,
        }
        content = json.dumps(doc).encode()
        prefix = PREFIX.encode() + b"\0"
        # 'M', transactional, the message's LSN (filled in by the decoder's feed), prefix,
        # content.
        message = b"M" + bytes([1]) + struct.pack(">Q", 0) + prefix
        self.messages.append(message + struct.pack(">I", len(content)) + content)


class Source:
    """A made-up source database (see the module documentation)."""

    def __init__(self) -> None:
        self.tables: dict[str, Table] = {}
        self.decoder = Decoder(proto_version=1)
        #: Whether DDL writes its message, as with ``pgwire_cdc.admin.install_ddl_capture``.
        self.ddl_capture = False
        #: The schema changes of the transactions since the last batch.
        self.schema_changes: list[SchemaChange] = []
        self.lsn = 0x100_0000
        self.xid = 700
        #: The commit LSN of every committed transaction, in order.
        self.commits: list[int] = []

    def table(self, name: str, columns: list[tuple[str, str]], key: list[str]) -> None:
        self.tables[name] = Table(name, 16_500 + len(self.tables), list(columns), list(key))

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        tx = Transaction(self)
        yield tx
        self.xid += 1
        first = self.lsn + 8
        lsns = [first + 8 * i for i in range(len(tx.messages))]
        commit = (lsns[-1] if lsns else first) + 8
        self.decoder.feed(b"B" + struct.pack(">QqI", commit, 0, self.xid), first)
        ordinal = 0
        for message, lsn in zip(tx.messages, lsns, strict=True):
            if message[:1] == b"M":
                message = message[:2] + struct.pack(">Q", lsn) + message[10:]
                content = message[message.index(b"\0", 10) + 5 :]
                self.schema_changes += changes_of(lsn, content, (commit, ordinal))
            self.decoder.feed(message, lsn)
            # Data events count in the transaction's ordinals; Relation messages do not.
            ordinal += message[:1] in (b"I", b"U", b"D", b"T", b"M")
        self.decoder.feed(b"C" + struct.pack(">BQQq", 0, commit, commit + 8, 0), commit)
        self.lsn = commit + 16
        self.commits.append(commit)

    def take(self) -> dict[str, pa.Table]:
        """The change tables of every transaction since the last take, keyed as a batch
        keys them (``public.t``, ``public.t@2`` after a type change)."""
        return self.decoder.take()

    def batch(self) -> Batch:
        """The transactions since the last batch as one batch, its LSN past them all."""
        changes, self.schema_changes = self.schema_changes, []
        return Batch(tables=self.take(), lsn=self.lsn, schema_changes=changes)

    def rows(self, name: str) -> list[dict[str, Any]]:
        return [dict(r) for r in self.tables[name].rows]


def _as_decoded(rows: pa.Table) -> pa.Table:
    """A slice of a change table as a batch of those rows alone would hold it: without
    the columns that none of them carried (a column added or dropped by a DDL in another
    part of the table: null and in every row's ``_unchanged``)."""
    if rows.num_rows == 0:
        return rows
    unchanged = [set(u) for u in rows["_unchanged"].to_pylist()]
    names = [c for c in rows.column_names if c not in METADATA_COLUMNS]
    return without_columns(rows, [c for c in names if all(c in u for u in unchanged)])


def cut(batch: Batch, rows: int) -> tuple[Batch, Batch]:
    """``batch`` (of one table) as two batches, the first ending after its first
    ``rows`` rows, inside their transaction when the next row belongs to it too (its LSN
    then stops short of that transaction's commit, as ``max_batch_rows`` cuts)."""
    ((name, table),) = batch.tables.items()
    head, tail = _as_decoded(table.slice(0, rows)), _as_decoded(table.slice(rows))
    commit = int(head["_commit_lsn"][-1].as_py())
    last = (commit, int(head["_tx_ordinal"][-1].as_py()))
    inside = tail.num_rows > 0 and int(tail["_commit_lsn"][0].as_py()) == commit
    early = [c for c in batch.schema_changes if c.place is not None and c.place < last]
    late = [c for c in batch.schema_changes if c not in early]
    first = Batch(tables={name: head}, lsn=commit if inside else commit + 8, schema_changes=early)
    return first, Batch(tables={name: tail}, lsn=batch.lsn, schema_changes=late)


def snapshot_batch(batch: Batch, *, start: bool) -> Batch:
    """The rows of ``batch`` (inserts) as an initial snapshot's batch (the sink reads only
    their data columns and commit LSN)."""
    return Batch(tables=batch.tables, lsn=batch.lsn, snapshot=True, snapshot_start=start)
