"""What the lakehouse sinks (:mod:`pgwire_cdc.delta`, :mod:`pgwire_cdc.iceberg`) share:
where a table stands in the stream (:mod:`~pgwire_cdc.lakehouse.positions`), the MERGE
they run (:mod:`~pgwire_cdc.lakehouse.sql`), the column types they store
(:mod:`~pgwire_cdc.lakehouse.shape`) and the counts they return
(:mod:`~pgwire_cdc.lakehouse.stats`). Pure code: no I/O, no table format."""
