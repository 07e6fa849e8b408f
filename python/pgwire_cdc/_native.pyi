"""Type stubs of the Rust extension module (rust/src/python)."""

import os
from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar, final

from typing_extensions import Self, disjoint_base

__version__: str
BUILD_PROFILE: str

@final
class UnchangedToast: ...

UNCHANGED_TOAST: UnchangedToast

#: A row value as sent on the wire (``wire_*`` attributes of events).
_WireValue = str | bytes | None | UnchangedToast
#: A typed row value: the Python value of the column's Arrow type (int, float, Decimal,
#: str, bytes, bool, date, time, datetime, list, dict for interval), None for NULL.
_Value = Any

@final
class ArrowStream:
    """Record batches handed out once through the Arrow PyCapsule stream interface."""

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object: ...
    def __len__(self) -> int: ...

@disjoint_base
class Decoder:
    def __new__(
        cls,
        proto_version: int = 1,
        binary: bool = False,
        *,
        keep_events: bool | None = None,
        keep_tables: bool = True,
    ) -> Self: ...
    @property
    def proto_version(self) -> int: ...
    @property
    def binary(self) -> bool: ...
    @property
    def in_transaction(self) -> bool: ...
    @property
    def pending_transactions(self) -> int: ...
    def set_type_map(self, types: dict[int, tuple[int, int]]) -> None: ...
    def feed(self, message: bytes | bytearray, lsn: int = 0) -> None: ...
    def feed_many(
        self, messages: Sequence[bytes | bytearray], lsns: Sequence[int] | None = None
    ) -> None: ...
    def events(self, *, typed: bool = True) -> list[Event]: ...
    @property
    def pending_rows(self) -> int: ...
    def _take_segments(self) -> list[tuple[str, ArrowStream]]: ...

#: The metadata columns of every change table, after the table's own columns, in order.
METADATA_COLUMNS: tuple[str, ...]

def change_table_schema(
    table_oid: int,
    namespace: str,
    name: str,
    replica_identity: str,
    columns: Sequence[tuple[str, int, int, int, int, bool]],
) -> ArrowStream:
    """The Arrow schema of a table's change table from its catalog description, as an empty
    Arrow stream (``CopyDecoder``'s arguments but the positions)."""

@final
class CopyDecoder:
    """One table's ``COPY (SELECT ...) TO STDOUT (FORMAT BINARY)`` data into a change table
    of ``read`` rows (docs/change-tables.md), the same schema and values the stream gives."""

    def __new__(
        cls,
        table_oid: int,
        namespace: str,
        name: str,
        replica_identity: str,
        # (name, type_oid, base_type_oid, type_modifier, base_type_modifier, is_key),
        # published columns in attnum order (pgwire_cdc.catalog.ColumnInfo)
        columns: Sequence[tuple[str, int, int, int, int, bool]],
        consistent_point: int,
        first_ordinal: int = 0,
    ) -> CopyDecoder: ...
    @property
    def table(self) -> str: ...
    @property
    def select_list(self) -> str: ...
    @property
    def rows(self) -> int: ...
    @property
    def tuples(self) -> int: ...
    @property
    def complete(self) -> bool: ...
    def feed(self, chunk: bytes | bytearray) -> None: ...
    def feed_many(self, chunks: Sequence[bytes | bytearray]) -> None: ...
    def take(self) -> ArrowStream: ...
    def finish(self) -> ArrowStream: ...

@final
class Event:
    kind: str
    start_lsn: int
    commit_lsn: int | None
    tx_ordinal: int
    xid: int | None
    table: str | None
    table_row: tuple[_Value, ...] | None
    updated_table_row: tuple[Any, ...] | None
    old_table_row: tuple[str, tuple[_Value, ...]] | None
    wire_table_row: tuple[_WireValue, ...] | None
    wire_updated_table_row: tuple[Any, ...] | None
    wire_old_table_row: tuple[str, tuple[_WireValue, ...]] | None
    tables: list[str] | None
    options: int | None
    prefix: str | None
    content: bytes | None
    transactional: bool | None
    message_lsn: int | None
    commit_ts: datetime | None
    timestamp: int | None
    final_lsn: int | None
    flags: int | None
    end_lsn: int | None
    origin_name: str | None
    origin_lsn: int | None
    relation_id: int | None
    replica_identity: str | None
    columns: list[tuple[str, int, int, bool]] | None
    type_oid: int | None
    type_namespace: str | None
    type_name: str | None
    first_segment: bool | None
    subxid: int | None
    abort_lsn: int | None
    abort_ts: datetime | None
    gid: str | None
    prepare_lsn: int | None
    prepare_ts: datetime | None
    prepare_end_lsn: int | None
    rollback_end_lsn: int | None
    rollback_ts: datetime | None
    def to_dict(self) -> dict[str, Any]: ...

# PgConnection and PgReplicationStream (rust/src/python/pg.rs) exist only in the test
# build (Cargo feature `test-client`, `make build`) and are left out here, as from the
# wheel; stubtest-allowlist.txt says so to `make lint`.

def binary_decodable(oid: int) -> bool:
    """Whether binary-format values of this (built-in or resolved) type OID decode."""

def mark_unchanged(table: object, names: list[str]) -> ArrowStream: ...
def apply_changes(
    base: object, changes: object, key_columns: list[str] | None
) -> tuple[ArrowStream, dict[str, int]]:
    """The table ``base`` after the change table ``changes`` (both Arrow streams): rows
    matched on ``key_columns``, or as a multiset of whole rows when ``None``."""

def reduce_changes(
    changes: object, columns: list[str], key_columns: list[str]
) -> tuple[ArrowStream, dict[str, int]]:
    """The MERGE source of the change table ``changes``: its ``columns``, then ``_delete``,
    ``_unchanged`` and ``_from``, one row per value of ``key_columns``."""

def history_changes(
    changes: object, columns: list[str], key_columns: list[str]
) -> tuple[ArrowStream, dict[str, int]]:
    """One change per key and source transaction of the change table ``changes``, in
    commit order: the columns of :func:`reduce_changes`, then ``_truncate`` (a truncate's
    own row), ``_commit_lsn``, ``_commit_ts`` and ``_xid``."""

def apply_column_policies(
    table: object, policies: list[tuple[str, str, bytes, int]]
) -> ArrowStream:
    """The change table ``table`` with each ``(column, kind, data, n)`` applied: drop,
    null, redact (``data`` the text), hash (``data`` the salt), hmac (``data`` the key),
    truncate and mask (``n`` characters)."""

def row_digests(table: object, columns: list[str]) -> ArrowStream:
    """A one-column table (``_digest``, uint64): a 64-bit digest of each row's ``columns``
    of ``table`` (an Arrow stream), in row order; equal rows give equal digests."""

_ColumnSpec = tuple[str, int, int, int, int, bool]
_TaskSpec = tuple[int, str, str, str, list[_ColumnSpec], str]

@final
class DeltaDvTable:
    """A Delta table kept by deletion vectors (MERGEs that rewrite no data file)."""

    def __new__(
        cls,
        uri: str,
        storage_options: dict[str, str] | None = None,
        key_index_bytes: int = ...,
    ) -> Self: ...
    def unsupported(self) -> str | None: ...
    def merge(
        self,
        source: object,
        keys: list[str],
        app_id: str,
        version: int,
        metadata: str | None = None,
    ) -> dict[str, Any]: ...
    def compact(
        self,
        min_file_rows: int,
        target_file_size: int,
        max_deleted_ratio: float = 0.0,
        min_small_files: int = 1,
        max_worn_bytes: int | None = None,
    ) -> dict[str, Any]: ...

@final
class SessionOptions:
    """How a streaming session runs (``ReplicationConnection.start_streaming``), resolved
    once per ``stream()`` run; ``ValueError`` for a ``proto_version`` outside 1 to 4."""

    def __new__(
        cls,
        *,
        publication_names: list[str],
        proto_version: int,
        binary: bool,
        messages: bool = True,
        streaming: bool = True,
        status_interval_ms: int = 10000,
        stall_timeout_ms: int | None = None,
        type_map: dict[int, tuple[int, int]] = ...,
        spill_threshold: int = ...,  # 64 MiB (SpillConfig::DEFAULT_MEMORY_LIMIT)
        spill_dir: str | os.PathLike[str] | None = None,
        note_prefixes: list[str] = ...,
    ) -> SessionOptions: ...

@final
class Stop:
    """Why ``LiveStream.poll`` returned."""

    #: Nothing to hand out yet; poll again.
    PENDING: ClassVar[Stop]
    #: The batch reached ``max_rows`` or ``max_bytes``.
    FULL: ClassVar[Stop]
    #: The batch's first message is ``max_ms`` old.
    WAITED: ClassVar[Stop]
    #: Everything committed up to ``until_lsn`` is in this or earlier batches.
    UNTIL_LSN: ClassVar[Stop]
    #: ``idle_timeout_ms`` passed without a message.
    IDLE: ClassVar[Stop]
    def __int__(self) -> int: ...

@final
class ReplicationConnection:
    """A ``replication=database`` connection before streaming (used by ``stream()``)."""

    def __new__(cls, dsn: str, settings: list[tuple[str, str]] = ...) -> ReplicationConnection: ...
    @property
    def server_version(self) -> int: ...
    def identify_system(self) -> tuple[str, int, int, str | None]: ...
    def create_slot(
        self, name: str, *, temporary: bool = False, export_snapshot: bool = False
    ) -> tuple[str, int, str | None]: ...
    def drop_slot(self, name: str, wait: bool = False) -> None: ...
    def query(self, sql: str) -> list[list[str | None]]: ...
    def start_snapshot(
        self,
        snapshot_name: str,
        consistent_point: int,
        tasks: list[_TaskSpec],
        *,
        workers: int = 1,
        batch_rows: int = 65536,
    ) -> SnapshotReader: ...
    def start_streaming(
        self,
        slot: str,
        start_lsn: int,
        options: SessionOptions,
        *,
        acked_lsn: int = 0,
        skip_through: tuple[int, int] | None = None,
    ) -> LiveStream: ...
    def close(self) -> None: ...

@final
class SnapshotReader:
    """The parallel snapshot copy in progress."""

    def next_batch(self, timeout_ms: int) -> tuple[str, ArrowStream] | None: ...
    def close(self) -> None: ...

@final
class LiveStream:
    """A streaming replication session."""

    def poll(
        self,
        *,
        max_rows: int,
        max_bytes: int,
        max_ms: int,
        until_lsn: int | None = None,
        idle_timeout_ms: int | None = None,
        slice_ms: int = 200,
        idle_confirm_limit: int | None = None,
    ) -> tuple[
        list[tuple[str, ArrowStream]],
        int,
        Stop,
        # (lsn, content, prefix, (commit_lsn, tx_ordinal) of a transactional message)
        list[tuple[int, bytes, str, tuple[int, int] | None]],
    ]: ...
    def ack(self, lsn: int) -> None: ...
    @property
    def delivered_lsn(self) -> int: ...
    @property
    def acked_lsn(self) -> int: ...
    @property
    def partial_transaction(self) -> tuple[int, int] | None: ...
    def close(self) -> None: ...
