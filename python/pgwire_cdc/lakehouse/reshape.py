"""A DDL's effect on the rows a lakehouse table holds, as column operations.

:func:`column_ops` turns the :class:`~pgwire_cdc.schema_changes.SchemaChange` objects of
one DDL into :class:`ColumnOp` steps against the table's current columns; a format carries
them out (:meth:`~pgwire_cdc.lakehouse.format.TableFormat.reshape`), in its metadata where
it can (Iceberg renames and drops columns by field id) or by rewriting the rows
(:func:`reshape_rows`). What each DDL becomes:

* ``ADD COLUMN`` — ``add``: the rows the table holds get the value rows that existed
  before the DDL read at the source (``attmissingval``: a constant default), else null. A
  row inserted later with an explicit NULL keeps it: it comes after the DDL.
* ``DROP COLUMN`` — ``drop``. A column of the same name added later is a new column:
  it starts from its own value, never the dropped one's. With ``keep_dropped`` (a table
  with a key) the column stays, renamed :func:`dropped_name` (``email`` dropped at LSN
  ``0/16B3748`` becomes ``email__dropped_16B3748``): the rows held keep their values, rows
  written later have none, and a new column of the old name is another column.
* ``RENAME COLUMN`` — ``rename``: the values follow the column.
* ``ALTER COLUMN ... TYPE`` — ``retype``: without a rewrite at the source (a
  binary-coercible change such as a longer ``varchar``) the values are converted to the
  new type exactly; with one (a conversion, ``USING``) the held values are stale, so they
  are set null until the table's rows, read again by the stream, arrive — but a key
  column's, converted, since the rows read again find their rows by it.
* A rewrite by a volatile default — the added column is null until those rows arrive.

Operations already carried out (the column gone, renamed, present) are left out, so a
DDL applied again after a crash changes nothing twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from ..schema_changes import SchemaChange, typed_row
from .shape import lake_shape

#: The table property that says a table's source table was dropped, and at which LSN
#: (``DROP TABLE``: the table is kept as it was, never dropped with it).
DROPPED_PROPERTY = "pgwire_cdc.dropped_at_lsn"


#: What a dropped column kept in the lake is renamed to ends with this, then its LSN.
DROPPED_SUFFIX = "__dropped_"


def dropped_name(column: str, lsn: int) -> str:
    """The name a column dropped at ``lsn`` is kept under (``keep_dropped``)."""
    return f"{column}{DROPPED_SUFFIX}{lsn:X}"


def is_dropped_name(column: str) -> bool:
    return DROPPED_SUFFIX in column


@dataclass(frozen=True)
class ColumnOp:
    """One step: ``drop`` / ``rename`` (to ``new_name``) / ``add`` (of ``type``, the held
    rows getting ``value``) / ``set`` (a column the table has: every held row gets
    ``value``, in ``type``) / ``retype`` (to ``type``; ``cast`` the held values, or set
    them null)."""

    kind: str
    column: str
    new_name: str | None = None
    type: pa.DataType | None = None
    value: pa.Scalar | None = None
    cast: bool = True

    @property
    def touches_rows(self) -> bool:
        """Whether the rows' values change (else the columns' names or presence only)."""
        if self.kind == "add":
            return self.value is not None and self.value.is_valid
        return self.kind in ("set", "retype")


def column_ops(
    changes: Sequence[SchemaChange], held: pa.Schema, *, keep_dropped: bool = False
) -> list[ColumnOp]:
    """The steps that bring a table of columns ``held`` through one DDL's ``changes``;
    ``keep_dropped``: a dropped column is kept under :func:`dropped_name` (a table with a
    key only: a table without one is matched by whole rows, which have no such column)."""
    names = list(held.names)
    rewritten = any(c.kind == "rewrite" for c in changes)
    ops: list[ColumnOp] = []
    for change in changes:
        if change.kind == "drop_column":
            before = change.before
            keep = keep_dropped and before is not None and before.replica_identity != "f"
            keep = keep and before is not None and bool(before.key)
            for column in change.columns:
                if column not in names:
                    continue
                if keep:
                    kept = dropped_name(column, change.lsn)
                    ops.append(ColumnOp("rename", column, new_name=kept))
                    names[names.index(column)] = kept
                else:
                    ops.append(ColumnOp("drop", column))
                    names.remove(column)
        elif change.kind == "rename_column":
            for new, old in change.renamed.items():
                if old not in names:
                    continue  # renamed already
                if new in names:
                    # Only rows from before the DDL can have given the table this column
                    # (null): the renamed one takes its place.
                    ops.append(ColumnOp("drop", new))
                    names.remove(new)
                ops.append(ColumnOp("rename", old, new_name=new))
                names[names.index(old)] = new
        elif change.kind == "rewrite" and change.after is not None:
            # The table is read again in the columns it has now: no other can be right.
            current = {c.name for c in change.after.columns}
            for column in [n for n in names if n not in current and not is_dropped_name(n)]:
                ops.append(ColumnOp("drop", column))
                names.remove(column)
        elif change.kind in ("alter_column_type", "add_column"):
            assert change.after is not None
            texts = {} if rewritten else change.missing
            row = lake_shape(typed_row(change.after, texts))
            for column in change.columns:
                field = row.schema.field(column)
                if change.kind == "add_column":
                    # Every row the table holds is from before the DDL: it reads the
                    # column's missing value, even where the table has such a column
                    # already (added by rows from before the DDL, null, or left by a
                    # dropped column of the same name).
                    kind = "set" if column in names else "add"
                    ops.append(ColumnOp(kind, column, type=field.type, value=row[column][0]))
                    if kind == "add":
                        names.append(column)
                elif column in names:
                    have = held.field(column).type if column in held.names else None
                    if have != field.type or rewritten:
                        # A key column keeps its values, converted: the rows read again
                        # find their rows by it.
                        cast = not rewritten or column in change.after.key
                        ops.append(ColumnOp("retype", column, type=field.type, cast=cast))
    return ops


def reshape_rows(rows: pa.Table, ops: Sequence[ColumnOp]) -> pa.Table:
    """``rows`` with ``ops`` carried out (a held value that cannot be converted exactly
    to a new type is an ``ArrowInvalid``)."""
    for op in ops:
        if op.kind == "drop":
            rows = rows.drop_columns([op.column])
        elif op.kind == "rename":
            assert op.new_name is not None
            rows = rows.rename_columns(
                [op.new_name if c == op.column else c for c in rows.column_names]
            )
        elif op.kind in ("add", "set"):
            assert op.type is not None
            value = op.value if op.value is not None else pa.scalar(None, op.type)
            column = pa.repeat(value, rows.num_rows).cast(op.type)
            field = pa.field(op.column, op.type)
            if op.kind == "add":
                rows = rows.append_column(field, column)
            else:
                rows = rows.set_column(rows.column_names.index(op.column), field, column)
        elif op.kind == "retype":
            assert op.type is not None
            i = rows.column_names.index(op.column)
            if op.cast:
                column = rows[op.column].cast(op.type, safe=True)
            else:
                column = pa.nulls(rows.num_rows, op.type)
            rows = rows.set_column(i, pa.field(op.column, op.type), column)
        else:
            raise ValueError(f"unknown column operation {op.kind!r}")
    return rows
