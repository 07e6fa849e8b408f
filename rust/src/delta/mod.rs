//! Delta Lake tables kept by deletion vectors, without a JVM.
//!
//! The Delta protocol lets a writer retire rows of a data file without rewriting it: the
//! file's `add` action carries a *deletion vector*, the set of its row positions that are
//! no longer in the table, stored as a RoaringBitmapArray (a 64-bit roaring bitmap) in a
//! `deletion_vector_<uuid>.bin` file or inline in the log. Readers that apply deletion
//! vectors (Delta Spark, delta-rs's DataFusion reader, DuckDB's delta extension, Trino)
//! skip those rows; a table that may hold them has the `deletionVectors` reader and writer
//! feature.
//!
//! A MERGE by deletion vectors costs what the batch changes, not what the table holds:
//! the key columns of the files that can hold a changed key are read, the changed rows
//! are written once as new files, and every touched file gains a deletion vector instead
//! of being rewritten (copy-on-write, which delta-rs's own MERGE does, rewrites every file
//! holding a changed row).
//!
//! * [`retire`]: which rows of a file a batch retires (pure);
//! * [`change_feed`]: the change data feed rows of a MERGE (pure);
//! * [`compaction`]: which files a compaction rewrites (pure);
//! * [`index`]: each data file's keys, sorted, kept between MERGEs (pure);
//! * [`rows`]: the rows a batch writes, unchanged TOAST taken from the retired rows
//!   (pure);
//! * `table` (feature `delta`): the reads, writes and the commit, through the deltalake
//!   crate's transaction machinery.

pub mod change_feed;
pub mod compaction;
pub mod index;
pub mod retire;
pub mod rows;
#[cfg(feature = "delta")]
pub mod table;
