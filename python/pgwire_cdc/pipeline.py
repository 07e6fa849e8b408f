"""A stream kept in a sink: the one loop that applies batches, makes missing tables and
acks.

A :class:`Sink` makes batches durable somewhere (Delta tables, Parquet files). :func:`run`
drives one in a fixed order:

1. the published tables, and whether the slot exists already;
2. the server, which the sink checks against the source of what it holds
   (:meth:`Sink.check_source`);
3. what the sink holds (``StreamOptions.held_tables`` when given, else
   :meth:`Sink.held_tables`) and who reads a new slot's initial snapshot
   (``StreamOptions.snapshot_reader`` when given, else :meth:`Sink.snapshot_reader`);
4. for each batch of ``stream()``: :meth:`Sink.apply`; then the tables a snapshot
   reported complete that the sink has no table for (:meth:`Sink.missing_tables`, source
   tables without rows) are created from their change-table schemas
   (:meth:`Sink.create_tables`); then the batch is acked (the time all this took goes to
   ``pgwire_cdc_apply_seconds`` once :mod:`pgwire_cdc.metrics` is on), and ``on_batch``
   called.

The slot advances only past batches the sink has made durable, tables included.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

    from .lakehouse.identity import Server
    from .streaming import Batch, StreamOptions


class Sink(Protocol):
    """Where a stream's batches are made durable."""

    def held_tables(
        self, published: Sequence[str], slot_exists: bool
    ) -> Mapping[str, Sequence[Any] | None] | None:
        """The tables whose rows the sink holds: per table None when complete, or the key
        its incremental copy reached. None: the sink keeps no such record (the stream
        decides on its own). ``slot_exists``: the stream resumes an existing slot (a sink
        may refuse to stream on top of nothing)."""
        ...

    def held_shapes(self, published: Sequence[str]) -> Mapping[str, dict[str, Any]] | None:
        """Per table, the source-table description its copy's columns follow, as the sink
        recorded ``Batch.table_shapes`` (``stream(held_shapes=...)``); None: the sink
        keeps no such record."""
        ...

    def check_source(self, server: Server, published: Sequence[str]) -> None:
        """The server the stream reads: the sink raises when what it holds came from
        another source, or from further on in the server's history than the server has
        (:mod:`pgwire_cdc.lakehouse.identity`), and may record it with what it writes."""
        ...

    def snapshot_reader(
        self, dsn: str, options: StreamOptions
    ) -> Callable[[str, int, list[str]], None] | None:
        """``stream(snapshot_reader=...)``: who copies a new slot's initial snapshot, or
        None for the stream's own batches."""
        ...

    def apply(self, batch: Batch) -> Any:
        """Makes one batch durable; returns what it did."""
        ...

    def missing_tables(self) -> list[str]:
        """Tables a snapshot reported complete that have no table in the sink yet (their
        source had no rows)."""
        ...

    def create_tables(self, schemas: Mapping[str, pa.Schema]) -> None:
        """Creates those tables from their change-table schemas."""
        ...

    def finish(self) -> None:
        """The stream ended (every batch applied and acked)."""
        ...


def source_state(dsn: str, options: StreamOptions) -> tuple[list[str], bool]:
    """The tables the stream will publish ("schema.table"; ``options.tables`` when
    given, else what the publications hold now, none for one that does not exist yet) and
    whether the replication slot exists."""
    from . import admin, catalog
    from .connection import connect

    names: set[str] = set()
    if options.tables is not None:
        names.update(t if "." in t else f"public.{t}" for t in options.tables)
    with connect(dsn) as conn:
        if options.tables is None:
            for publication in options.publications:
                # A missing publication: stream() creates it for `tables`, or says so.
                if admin.publication_exists(conn, publication):
                    names.update(t.qualified for t in catalog.published_tables(conn, publication))
        slot_exists = admin.get_slot(conn, options.slot) is not None
    return sorted(names), slot_exists


def change_table_schemas(
    dsn: str, options: StreamOptions, names: Sequence[str]
) -> dict[str, pa.Schema]:
    """The change-table schemas of the published tables ``names``."""
    from . import catalog
    from .connection import connect

    out: dict[str, pa.Schema] = {}
    with connect(dsn) as conn:
        published = {
            t.qualified: publication
            for publication in options.publications
            for t in catalog.published_tables(conn, publication)
        }
        for name in names:
            publication = published.get(name, options.publications[0])
            out[name] = catalog.change_table_schema(conn, publication, name)
    return out


class Drain:
    """A stop asked from outside (a service's SIGTERM): :func:`run` ends after the batch
    it is applying is committed and acked, or at once between batches.

    :meth:`request` is safe in a signal handler: while a batch is being applied it only
    notes the request; between batches it raises :class:`Drained`, which ends the stream
    with nothing half-applied (the last acked batch is the last applied)."""

    def __init__(self) -> None:
        self.requested = False
        self.applying = False

    def request(self) -> None:
        self.requested = True
        if not self.applying:
            raise Drained()


class Drained(Exception):
    """:func:`run` stopped on :meth:`Drain.request` after its last acked batch."""


#: The drain the runs of a service use (:func:`draining`), when no run is given one.
_service_drain: Drain | None = None


@contextlib.contextmanager
def draining() -> Iterator[Drain]:
    """A :class:`Drain` every :func:`run` inside the block stops on (the runs that
    ``delta.run`` and ``iceberg.run`` make too), for a service's SIGTERM handler."""
    global _service_drain
    previous, _service_drain = _service_drain, Drain()
    try:
        yield _service_drain
    finally:
        _service_drain = previous


def run(
    dsn: str,
    options: StreamOptions,
    sink: Sink,
    on_batch: Callable[[Batch, Any], None] | None = None,
    drain: Drain | None = None,
) -> int:
    """Streams into ``sink`` until the stream ends (see the module documentation);
    ``on_batch(batch, result)`` after each batch is acked, with what :meth:`Sink.apply`
    returned. Returns the number of batches."""
    from . import metrics
    from .lakehouse.identity import identify
    from .streaming import stream

    held = options.held_tables
    published, slot_exists = source_state(dsn, options)
    sink.check_source(identify(dsn), published)
    if held is None:
        found = sink.held_tables(published, slot_exists)
        held = dict(found) if found is not None else None
    reader = options.snapshot_reader or sink.snapshot_reader(dsn, options)
    shapes = options.held_shapes
    if shapes is None:
        found_shapes = sink.held_shapes(published)
        shapes = dict(found_shapes) if found_shapes is not None else None
    # Without the DDL capture, the sink still learns a DDL from the catalog when it can.
    options = dataclasses.replace(
        options, held_tables=held, snapshot_reader=reader, schema_watch=True, held_shapes=shapes
    )
    recorder = metrics.active()
    apply_seconds = recorder.apply_seconds.labels(options.slot) if recorder is not None else None
    batches = 0
    drain = drain or _service_drain or Drain()
    batch_stream = stream(dsn, options=options)
    try:
        for batch in batch_stream:
            drain.applying = True
            started = time.perf_counter()
            result = sink.apply(batch)
            missing = sink.missing_tables()
            if missing:
                sink.create_tables(change_table_schemas(dsn, options, missing))
            batch.ack()
            drain.applying = False
            if apply_seconds is not None:
                apply_seconds.observe(time.perf_counter() - started)
            batches += 1
            if on_batch is not None:
                on_batch(batch, result)
            if drain.requested:
                raise Drained()
    except Drained:
        # The generator's close() sends the last ack and closes its connections.
        batch_stream.close()  # type: ignore[attr-defined]
        sink.finish()
        raise
    sink.finish()
    return batches
