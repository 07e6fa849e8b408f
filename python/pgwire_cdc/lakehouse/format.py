"""The narrow protocol a table format implements for :class:`~pgwire_cdc.lakehouse.sink.
LakehouseSink`: :class:`TableFormat`, and :class:`TablePosition`, what a format reads
back of where a table stands.

The sink owns every decision about a batch (which rows a table holds already, how a
batch is cut into commits, when a table is made, copied, evolved, cleared or merged, what
each commit records); a format only carries them out on its tables, each call at most one
commit: Delta Lake (:class:`pgwire_cdc.delta.sink.DeltaTables`, both writers), Iceberg
(:class:`pgwire_cdc.iceberg.sink.IcebergTables`) and the in-memory tables of the offline
tests (:class:`pgwire_cdc.lakehouse.memory.MemoryTables`).

Tables are named by a *reference* (``ref``): what the format calls the table of a source
table (a Delta table's path or catalog name, an Iceberg table's Spark SQL name);
:meth:`TableFormat.ref` gives it. Rows come and go in the types
:func:`~pgwire_cdc.lakehouse.shape.lake_shape` gives them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

    from ..streaming import StreamOptions
    from .digests import LakeDigests
    from .positions import Mark, Source
    from .reshape import ColumnOp


def library_errors(*names: str) -> tuple[type[BaseException], ...]:
    """``OSError`` and the exception classes ``names`` ("module.Class") of the libraries
    that are installed."""
    import importlib

    found: list[type[BaseException]] = [OSError]
    for name in names:
        module, _, cls = name.rpartition(".")
        try:
            found.append(getattr(importlib.import_module(module), cls))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def _no_cut(_txn: str) -> int | None:
    return None


@dataclass(frozen=True)
class TablePosition:
    """Where a table stands in the stream, as its format reads it back."""

    #: Commit LSN of the last transaction applied in full (None: nothing yet).
    lsn: int | None
    #: How far into a transaction cut in two (named by
    #: :func:`~pgwire_cdc.lakehouse.positions.txn_id`) the table reaches, None when not
    #: at all. Only the first transaction past ``lsn`` is ever asked about.
    ordinal_of: Callable[[str], int | None] = field(default=_no_cut, compare=False)
    #: The batch LSN of the last commit that recorded a copy's progress without rows
    #: (:meth:`TableFormat.record_progress`), None when the format does not keep it.
    progress_lsn: int | None = None
    #: The cut transaction and ordinal the table's latest commit records, where a format
    #: keeps them with the position (Iceberg, the in-memory tables; Delta keeps them
    #: under transaction identifiers of their own, :attr:`ordinal_of`).
    partial: tuple[int, int] | None = field(default=None, compare=False)

    @property
    def reached(self) -> int | None:
        """The furthest commit LSN the table holds rows of: a cut transaction's, else
        :attr:`lsn`."""
        return self.partial[0] if self.partial is not None else self.lsn

    def past(self, lsn: int) -> bool:
        """Whether the table holds the commits of a batch at ``lsn`` already."""
        return any(v is not None and v >= lsn for v in (self.lsn, self.progress_lsn))

    @staticmethod
    def of(mark: Mark, before: TablePosition | None) -> TablePosition:
        """Where a table stands right after a commit recording ``mark``."""
        progress_lsn = before.progress_lsn if before is not None else None
        return TablePosition(mark.lsn, mark.ordinal_of, progress_lsn, mark.partial)


class TableFormat(Protocol):
    """One table format's tables, as :class:`~pgwire_cdc.lakehouse.sink.LakehouseSink`
    drives them. Every method that writes makes at most one commit, and a commit given a
    ``mark`` records it (:class:`~pgwire_cdc.lakehouse.positions.Mark`) with its rows,
    atomically."""

    @property
    def error(self) -> type[Exception]:
        """The exception this format's refusals raise
        (:class:`~pgwire_cdc.errors.DeltaError`, :class:`~pgwire_cdc.errors.IcebergError`)."""
        ...

    @property
    def kind(self) -> str:
        """What a table is called in messages ("Delta table", "Iceberg table")."""
        ...

    @property
    def foreign_errors(self) -> tuple[type[BaseException], ...]:
        """The exceptions of the format's libraries and store (an object store that stayed
        away, a commit that lost a race, Spark's) that the sink reports as :attr:`error`,
        naming the table (:func:`library_errors`)."""
        ...

    def ref(self, name: str) -> str:
        """The reference of the source table ``name``'s table."""
        ...

    #: What the format calls the column ``_deleted`` of history tables and soft deletes
    #: (Iceberg reserves ``_deleted`` for a metadata column of its own).
    deleted_column: str

    #: Whether the tables the format creates from now on (history tables aside) keep a
    #: change data feed: each commit's changes as rows a reader of the format returns
    #: with their kind (insert, update pre- and post-image, delete). Set by the sink.
    change_data_feed: bool

    def history_ref(self, name: str) -> str:
        """The reference of the source table ``name``'s history table
        (:mod:`~pgwire_cdc.lakehouse.history`), which :meth:`found_tables` never lists."""
        ...

    def where(self) -> str:
        """Where the tables are, for messages ("under /data/lake", "in lake.app")."""
        ...

    def found_tables(self) -> list[str]:
        """The source tables with a table this format finds without being told their
        names (a local directory's tables), besides the published ones."""
        ...

    def position(self, ref: str) -> TablePosition | None:
        """Where the table ``ref`` stands, read from the table afresh; None without a
        table."""
        ...

    def pinned(self, ref: str, reduce: LakeDigests) -> tuple[TablePosition | None, pa.Table | None]:
        """The table's position and its rows reduced batch by batch by ``reduce`` (what
        verify keeps of them: keys and digests), read from one version of the table
        (commits made meanwhile change neither); (None, None) without a table."""
        ...

    def progress(self, ref: str) -> Any:
        """The incremental-copy progress the table's newest commit recording one
        records, or :data:`~pgwire_cdc.lakehouse.positions.NO_PROGRESS`."""
        ...

    def source(self, ref: str) -> Source | None:
        """The source the table's newest commit recording one records
        (:mod:`pgwire_cdc.lakehouse.identity`), None when none does."""
        ...

    def exists(self, ref: str) -> bool: ...

    def version(self, ref: str) -> int | None:
        """The table's current version, as the format's readers travel back to it (a
        Delta table version, an Iceberg snapshot id; -1: a table without any yet), None
        without a table (:mod:`~pgwire_cdc.lakehouse.points`)."""
        ...

    def create(self, ref: str, schema: pa.Schema) -> None:
        """An empty table of ``schema`` (data columns only)."""
        ...

    def schema(self, ref: str) -> pa.Schema:
        """The table's columns, as Arrow types."""
        ...

    def evolve(self, ref: str, name: str, wanted: pa.Schema, *, drop: bool) -> pa.Schema:
        """Brings the table's columns to ``wanted`` (the data columns of a batch's
        changes, in the stored types): adds the new ones, changes a column's type, and with
        ``drop`` removes the columns ``wanted`` lacks; or raises :attr:`error` for a change
        the format cannot make. Returns the table's columns afterwards."""
        ...

    def read(self, ref: str, columns: list[str], keys: pa.Table | None = None) -> pa.Table:
        """The table's rows, ``columns`` of them; ``keys``: only the rows whose key
        columns (``keys``' columns) equal one of its rows (the format may return more)."""
        ...

    def write(self, ref: str, rows: pa.Table, mode: str, mark: Mark | None) -> None:
        """Replaces (``mode="overwrite"``, the table's schema with it) or appends to
        (``"append"``) the table's rows, creating it when missing."""
        ...

    def merge(
        self,
        ref: str,
        source: pa.Table,
        keys: list[str],
        truncate: bool,
        mark: Mark,
        *,
        adds: bool = True,
    ) -> None:
        """One MERGE of a reduced change table (``_native.reduce_changes``: one final
        change per key, ``_delete``, ``_unchanged``, ``_from``) matched on ``keys``: a
        deleted key's row goes, other keys' rows are upserted, a column named in the row's
        ``_unchanged`` keeping the table's value — for a row that moved to a new key, the
        value of the row under its old key (``_from``;
        :func:`~pgwire_cdc.lakehouse.moved.fill_moved` fills them with one read). With
        ``truncate``, the rows the source does not name are deleted too. ``adds``: some
        upserted key may be missing from the table (False: every one is there, see
        :func:`~pgwire_cdc.lakehouse.sink.adds_keys`)."""
        ...

    def reshape(self, ref: str, name: str, ops: Sequence[ColumnOp], mark: Mark) -> None:
        """Carries out one DDL's column operations (:mod:`pgwire_cdc.lakehouse.reshape`)
        on the table ``ref`` (of the source table ``name``) and the rows it holds, the
        position ``mark`` recorded with them. Where the format changes columns in its
        metadata alone, those changes need not record ``mark``: an operation carried out
        already is left out when the DDL is applied again."""
        ...

    def property(self, ref: str, key: str) -> str | None:
        """The table property ``key`` of the table ``ref`` (None: not set)."""
        ...

    def set_property(self, ref: str, key: str, value: str) -> None:
        """Sets the table property ``key`` (one commit, no rows): the sink's
        :data:`~pgwire_cdc.lakehouse.reshape.DROPPED_PROPERTY` (the source table was
        dropped at that LSN: the table is kept, its rows as they were) and
        :data:`~pgwire_cdc.lakehouse.sink.SHAPE_PROPERTY`."""
        ...

    def record_progress(self, ref: str, batch_lsn: int, progress: Any) -> None:
        """A commit without rows recording an incremental copy's ``progress`` (the
        table's position stays where it is; :attr:`TablePosition.progress_lsn` reads
        ``batch_lsn`` back where the format keeps it)."""
        ...

    def copier(
        self, dsn: str, options: StreamOptions
    ) -> Callable[[str, str, Mark | None], None] | None:
        """``copy(name, snapshot, mark)``: a new slot's initial snapshot of the source table
        ``name``, read by Spark tasks under the exported ``snapshot`` and written over the
        table (created when missing) in one commit recording ``mark``; None where the
        stream's own batches carry it."""
        ...
