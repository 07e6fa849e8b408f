//! The live half of `pgwire_cdc.stream()`: a replication connection streaming pgoutput
//! into change tables, with exact LSN bookkeeping.
//!
//! * [`session`]: `START_REPLICATION` on a logical slot; XLogData frames go into the
//!   [`crate::Decoder`] and straight into Arrow builders; keepalives are answered and
//!   standby status updates report, as *flush* position, only what the consumer acked.
//! * [`progress`]: the session's bookkeeping without its I/O — which LSN a batch carries,
//!   what is reported as flushed, when status updates go out and batches are cut.
//! * [`snapshot`]: the consistent initial snapshot, `COPY … (FORMAT BINARY)` on several
//!   connections that imported the slot's exported snapshot, decoded into the same change
//!   tables with `_change_type = 'read'`.
//!
//! LSN vocabulary: a logical slot's `confirmed_flush_lsn` is the point up to which the
//! consumer has durably applied the stream. On (re)start the server decodes from the slot's `restart_lsn` and skips
//! every transaction whose commit record lies before the requested start point (at least
//! `confirmed_flush_lsn`). A transaction's Commit message carries the end of its commit
//! record (`end_lsn`); confirming that point means "this transaction and everything that
//! committed before it are done". So a batch's LSN is always such an end point, never a
//! point inside a transaction.

pub mod progress;
pub mod session;
pub mod snapshot;

#[cfg(test)]
mod progress_tests;

pub use progress::{BatchLimits, Stop};
pub use session::{LiveSession, Polled, StartOptions};
