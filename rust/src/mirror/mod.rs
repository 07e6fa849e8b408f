//! Keeping a copy of a source table equal to it: applying change tables to the copy's rows.
//!
//! A mirror holds, per source table, the rows the table had at some LSN. Applying the
//! next change table walks its rows in commit order (then `_tx_ordinal` order, which is the
//! order the change tables already have) and does what the source did:
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
//! A table with a replica-identity key (primary key or `USING INDEX`) is matched on those
//! columns, one row per key. A table without one (REPLICA IDENTITY FULL, or a table that
//! only ever sees inserts) is a *multiset* of whole rows: an update or a delete removes one
//! row equal to the old image, as PostgreSQL's own apply worker does.
//!
//! The work is columnar: keys become `arrow-row` byte strings, the new table is assembled
//! with `interleave` from the old rows and the change rows, and no value is copied twice.

mod apply;

pub use apply::{apply_changes, ApplyError, ApplyStats, KeyMode};

#[cfg(test)]
mod tests;
