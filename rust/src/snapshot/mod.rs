//! The initial snapshot: a table's existing rows as change-table rows of kind `read`.
//!
//! Each published table is read with
//! `COPY (SELECT <published columns> FROM t [WHERE <row filter>]) TO STDOUT (FORMAT BINARY)`
//! in a transaction that uses the snapshot exported when the slot was created, so the rows
//! are exactly the table as of the slot's consistent point, and the stream continues with
//! the changes committed after it. The network client delivers the COPY data; this module
//! only decodes bytes ([`frame`] the format, [`copy`] the rows), so it knows nothing of
//! the transport.

pub mod copy;
pub mod frame;

#[cfg(test)]
mod tests;

pub use copy::{reads_as_text, select_list, CopyBinaryDecoder, SnapshotError, SnapshotMeta};
