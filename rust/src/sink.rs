//! The decoder's output: events handed to a sink, borrowed from the message bytes.
//!
//! The decoder does the protocol work once (transaction framing, streamed and prepared
//! transaction assembly, relation look-up, unchanged-TOAST reconstruction) and hands each
//! event to an [`EventSink`]. Sinks decide what to keep: owned event objects
//! ([`crate::event::EventCollector`]), nothing ([`NullSink`], for benchmarks), and, with
//! the Arrow work, column builders.

use std::sync::Arc;

use crate::error::DecodeError;
use crate::protocol::{
    Begin, Commit, CommitPrepared, Datum, LogicalMessage, Lsn, OldKind, Origin, PgTimestamp,
    PrepareInfo, RollbackPrepared, StreamAbort, StreamCommit, StreamStart,
};
use crate::relation::{Relation, TypeInfo};

/// Where an event sits in the stream and in its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventMeta {
    /// The WAL position given with the message (`lsn` of `Decoder::feed`).
    pub start_lsn: Lsn,
    /// LSN of the transaction's commit record; `None` where it is not known (stream
    /// control events, non-transactional messages, events outside a transaction).
    pub commit_lsn: Option<Lsn>,
    /// Position among the transaction's data events (see `Decoder`).
    pub tx_ordinal: u64,
    pub xid: Option<u32>,
    pub commit_timestamp: Option<PgTimestamp>,
}

/// An old-side row image as sent: full width, in relation column order. For a key image
/// the non-identity columns are NULL.
#[derive(Debug, Clone, Copy)]
pub struct OldImage<'e, 'a> {
    pub kind: OldKind,
    pub values: &'e [Datum<'a>],
}

#[derive(Debug, Clone, Copy)]
pub enum EventRef<'e, 'a> {
    Begin(&'e Begin),
    Commit(&'e Commit),
    Origin(&'e Origin<'a>),
    Relation(&'e Arc<Relation>),
    Type(&'e Arc<TypeInfo>),
    Insert {
        relation: &'e Arc<Relation>,
        row: &'e [Datum<'a>],
    },
    /// `new` is the post-update row with every unchanged-TOAST value that the old image
    /// could supply filled in; a remaining `Datum::UnchangedToast` is a column whose new
    /// value is unknown (the row is partial).
    Update {
        relation: &'e Arc<Relation>,
        new: &'e [Datum<'a>],
        old: Option<OldImage<'e, 'a>>,
    },
    Delete {
        relation: &'e Arc<Relation>,
        old: OldImage<'e, 'a>,
    },
    Truncate {
        relations: &'e [Arc<Relation>],
        options: u8,
    },
    Message(&'e LogicalMessage<'a>),
    StreamStart(&'e StreamStart),
    StreamStop,
    StreamCommit(&'e StreamCommit),
    StreamAbort(&'e StreamAbort),
    BeginPrepare(&'e PrepareInfo<'a>),
    Prepare(&'e PrepareInfo<'a>),
    StreamPrepare(&'e PrepareInfo<'a>),
    CommitPrepared(&'e CommitPrepared<'a>),
    RollbackPrepared(&'e RollbackPrepared<'a>),
}

pub trait EventSink {
    fn event(&mut self, meta: &EventMeta, event: EventRef<'_, '_>) -> Result<(), DecodeError>;
}

/// Discards every event (the decoder still parses and checks every byte): for measuring
/// the decoder alone.
#[derive(Debug, Default)]
pub struct NullSink {
    pub events: u64,
}

impl EventSink for NullSink {
    fn event(&mut self, _meta: &EventMeta, _event: EventRef<'_, '_>) -> Result<(), DecodeError> {
        self.events += 1;
        Ok(())
    }
}
