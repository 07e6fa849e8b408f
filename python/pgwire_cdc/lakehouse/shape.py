"""The column types a lakehouse table stores: the change table's, with ``time`` as
``HH:MM:SS.ffffff`` strings (Delta Lake has no time type, and Spark's is off by default:
:mod:`pgwire_cdc.spark.types` says more), plain (not view or large) strings and binaries,
decoded dictionaries, and every nested field nullable."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.types as pat

from ..errors import ConfigError
from ..tables import METADATA_COLUMNS


def has_time(arrow: pa.DataType) -> bool:
    if pat.is_time(arrow):
        return True
    if pat.is_struct(arrow):
        return any(has_time(f.type) for f in arrow)
    if pat.is_list(arrow) or pat.is_large_list(arrow):
        return has_time(arrow.value_type)
    return False


def _time_as_string(arrow: pa.DataType) -> pa.DataType:
    """``arrow`` with every time type (nested ones too) replaced by string."""
    if pat.is_time(arrow):
        return pa.string()
    if pat.is_struct(arrow):
        return pa.struct([f.with_type(_time_as_string(f.type)) for f in arrow])
    if pat.is_list(arrow):
        return pa.list_(arrow.value_field.with_type(_time_as_string(arrow.value_type)))
    if pat.is_large_list(arrow):
        return pa.large_list(arrow.value_field.with_type(_time_as_string(arrow.value_type)))
    return arrow


def times_as_strings(table: pa.Table) -> pa.Table:
    """The table with its time columns as ``HH:MM:SS.ffffff`` strings (cast by Arrow, no
    per-row Python); other columns as they are."""
    if not any(has_time(f.type) for f in table.schema):
        return table
    schema = pa.schema(
        [f.with_type(_time_as_string(f.type)) for f in table.schema], metadata=table.schema.metadata
    )
    return table.cast(schema)


#: The column a table with a key and a change data feed holds besides the source's: the
#: commit LSN of the source transaction that wrote the row as it stands (a snapshot's row:
#: the snapshot's consistent point; a row a repair wrote: the LSN it was compared at), so
#: that every change its feed returns carries it.
CHANGE_FEED_COLUMN = "_commit_lsn"


def data_columns(table: pa.Table) -> list[str]:
    return [c for c in table.column_names if c not in METADATA_COLUMNS]


def plain_type(t: pa.DataType) -> pa.DataType:
    """``t`` as the sink stores it: plain (not view or large) strings and binaries, every
    nested field nullable (a NOT NULL field is an ``invariants`` table feature to Delta
    Spark, which delta-rs does not write: delta-io/delta-rs#2882)."""
    if t == pa.string_view() or pa.types.is_large_string(t):
        return pa.string()
    if t == pa.binary_view() or pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_dictionary(t):
        return plain_type(t.value_type)
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, plain_type(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return pa.list_(pa.field(t.value_field.name, plain_type(t.value_type)))
    return t


def plain_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema(
        [pa.field(f.name, plain_type(f.type), True, f.metadata) for f in schema],
        metadata=schema.metadata,
    )


def lake_shape(changes: pa.Table) -> pa.Table:
    """The change table in the types the table holds: time as strings, dictionaries
    decoded, nested fields nullable. The metadata columns stay as they are."""
    changes = times_as_strings(changes)
    fields = [
        f if f.name in METADATA_COLUMNS else pa.field(f.name, plain_type(f.type), True, f.metadata)
        for f in changes.schema
    ]
    schema = pa.schema(fields, metadata=changes.schema.metadata)
    return changes if schema.equals(changes.schema) else changes.cast(schema)


def with_keys(table: pa.Table, keys: list[str]) -> pa.Table:
    """``table`` with its key columns marked as the change tables mark them."""
    missing = [k for k in keys if k not in table.column_names]
    if missing:
        raise ConfigError(f"key column(s) {missing} are not among the changes' columns")
    fields = [
        f.with_metadata({**(f.metadata or {}), b"pg_replica_identity": b"true"})
        if f.name in keys
        else f
        for f in table.schema
    ]
    identity = b"d" if keys else b"f"
    metadata = {**(table.schema.metadata or {}), b"pg_replica_identity": identity}
    return table.replace_schema_metadata(None).cast(pa.schema(fields, metadata=metadata))
