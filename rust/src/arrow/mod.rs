//! Arrow change tables, built straight from the message bytes.
//!
//! [`ArrowSink`] receives the decoder's events and appends one row per change to the
//! change table of its relation: the published columns (typed by the type mapping,
//! parsed from the text or binary wire format by [`crate::values`]), then the metadata
//! columns `_change_type`, `_lsn`, `_commit_lsn`, `_tx_ordinal`, `_commit_ts`, `_xid`,
//! `_before`, `_before_kind`, `_unchanged`.
//!
//! A Relation message that changes a table's columns (after ADD / DROP / RENAME COLUMN or
//! a type change) starts a new *segment* with the new schema; [`ArrowSink::take`] returns
//! every segment in the order they were started, so nothing is dropped and every batch has
//! one schema.
//!
//! [`ChangeTable`] is public for rows that do not come from the stream: the initial
//! snapshot ([`crate::snapshot`]) appends its `read` rows to one directly.

mod buffers;
pub mod column;
mod sink;
mod table;
mod unchanged;

pub use buffers::Recycler;
pub use sink::{ArrowSink, Segment};
pub use table::{change_table_schema, meta, ChangeKind, ChangeTable, ColumnError, RowMeta};
pub use unchanged::mark_unchanged;
