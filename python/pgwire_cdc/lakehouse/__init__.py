"""What the lakehouse sinks (:mod:`pgwire_cdc.delta`, :mod:`pgwire_cdc.iceberg`) share:
where a table stands in the stream (:mod:`~pgwire_cdc.lakehouse.positions`), the MERGE
they run (:mod:`~pgwire_cdc.lakehouse.sql`), the column types they store
(:mod:`~pgwire_cdc.lakehouse.shape`), the counts they return
(:mod:`~pgwire_cdc.lakehouse.stats`) and what their public calls do around a sink
(:mod:`~pgwire_cdc.lakehouse.changes`: ``merge_changes``' change table, a counted
pipeline run). No table format, and I/O only through the sink a run is given."""
