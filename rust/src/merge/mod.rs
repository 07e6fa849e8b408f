//! Change tables turned into what a lakehouse table needs to follow its source table.
//!
//! Applying a change table walks its rows in commit order (then `_tx_ordinal` order, which
//! is the order the change tables already have) and does what the source did:
//!
//! * `read` / `insert`: the row under its key is (re)placed by the new row;
//! * `update`: the row is found by its *old* key (the `_before` image when PostgreSQL sent
//!   one, which it does when the key changed or under REPLICA IDENTITY FULL; the new row's
//!   key otherwise), removed, and the new row takes its place under the new key. Columns
//!   listed in `_unchanged` (unchanged TOAST the stream could not fill in) keep the value
//!   the previous version of the row had, so the copy is complete without REPLICA IDENTITY
//!   FULL;
//! * `delete`: the row found by its old key is removed;
//! * `truncate`: every row is removed.
//!
//! Two functions do this walk:
//!
//! * [`reduce_changes`] for a table with a replica-identity key (primary key or `USING
//!   INDEX`): the walk runs without the table's rows and yields **one final change per
//!   key** — the source of one `MERGE` (which refuses two source rows for one target row).
//!   A key change becomes a delete of the old key plus an upsert of the new one. A column
//!   whose value neither the stream nor an earlier change of the same batch supplied stays
//!   listed in `_unchanged`, for the MERGE to keep the table's value; when the row moved to
//!   a new key on the way, `_from` names the old key whose table row holds that value.
//! * [`apply_changes`] for a table without a key (REPLICA IDENTITY FULL): such a table is a
//!   *multiset* of whole rows, where an update or a delete removes one row equal to the old
//!   image, as PostgreSQL's own apply worker does. No MERGE can remove one of two equal
//!   rows, so the walk runs over the table's rows and yields the table's new contents.
//!
//! The work is columnar: keys become `arrow-row` byte strings, the output is assembled
//! with `interleave` from the change rows (and the table's rows), and no value is copied
//! twice.

mod apply;
mod digest;
mod reduce;

pub use apply::{apply_changes, ApplyError, ApplyStats, KeyMode};
pub use digest::row_digests;
pub use reduce::{history_changes, reduce_changes, Reduced};

#[cfg(test)]
mod tests;
