//! Owned events, the event model (row images as PostgreSQL sends them), for debugging and
//! low-volume consumers: [`EventCollector`] turns the decoder's borrowed events into
//! [`Event`]s.
//!
//! Row images follow pgoutput exactly:
//! * an insert's row is a complete [`Vec<Value>`] in replicated column order;
//! * an update's new row is [`UpdatedRow::Full`] when every value is known, otherwise
//!   [`UpdatedRow::Partial`] with the known values and the zero-based indexes of the
//!   missing (unchanged-TOAST, not recoverable) columns;
//! * an old row is [`OldRow::Full`] (REPLICA IDENTITY FULL) or [`OldRow::Key`], the
//!   identity columns only, densely packed in replicated column order.

use std::sync::Arc;

use crate::error::DecodeError;
use crate::protocol::{Datum, Lsn, OldKind, PgTimestamp};
use crate::relation::{Relation, TypeInfo};
use crate::sink::{EventMeta, EventRef, EventSink, OldImage};

/// One column value, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    Text(String),
    Binary(Vec<u8>),
    /// An unchanged-TOAST marker where no value could be had (only inside an old image,
    /// which PostgreSQL does not send; kept rather than guessed).
    UnchangedToast,
}

impl From<&Datum<'_>> for Value {
    fn from(d: &Datum<'_>) -> Self {
        match d {
            Datum::Null => Value::Null,
            Datum::UnchangedToast => Value::UnchangedToast,
            Datum::Text(s) => Value::Text((*s).to_owned()),
            Datum::Binary(b) => Value::Binary(b.to_vec()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdatedRow {
    Full(Vec<Value>),
    Partial {
        values: Vec<Value>,
        missing_column_indexes: Vec<usize>,
        total_columns: usize,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OldRow {
    Full(Vec<Value>),
    Key(Vec<Value>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareData {
    pub flags: u8,
    pub prepare_lsn: Lsn,
    pub end_lsn: Lsn,
    pub timestamp: PgTimestamp,
    pub gid: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventBody {
    Begin {
        final_lsn: Lsn,
        timestamp: PgTimestamp,
    },
    Commit {
        flags: u8,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        timestamp: PgTimestamp,
    },
    Origin {
        origin_lsn: Lsn,
        name: String,
    },
    Relation(Arc<Relation>),
    Type(Arc<TypeInfo>),
    Insert {
        relation: Arc<Relation>,
        row: Vec<Value>,
    },
    Update {
        relation: Arc<Relation>,
        new: UpdatedRow,
        old: Option<OldRow>,
    },
    Delete {
        relation: Arc<Relation>,
        old: OldRow,
    },
    Truncate {
        relations: Vec<Arc<Relation>>,
        options: u8,
    },
    Message {
        transactional: bool,
        message_lsn: Lsn,
        prefix: String,
        content: Vec<u8>,
    },
    StreamStart {
        first_segment: bool,
    },
    StreamStop,
    StreamCommit {
        flags: u8,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        timestamp: PgTimestamp,
    },
    StreamAbort {
        subxid: u32,
        abort_lsn: Option<Lsn>,
        abort_timestamp: Option<PgTimestamp>,
    },
    BeginPrepare(PrepareData),
    Prepare(PrepareData),
    StreamPrepare(PrepareData),
    CommitPrepared {
        flags: u8,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        timestamp: PgTimestamp,
        gid: String,
    },
    RollbackPrepared {
        flags: u8,
        prepare_end_lsn: Lsn,
        rollback_end_lsn: Lsn,
        prepare_timestamp: PgTimestamp,
        rollback_timestamp: PgTimestamp,
        gid: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub meta: EventMeta,
    pub body: EventBody,
}

impl EventBody {
    /// The event kind's name in the Python API (`Event.kind`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Begin { .. } => "begin",
            Self::Commit { .. } => "commit",
            Self::Origin { .. } => "origin",
            Self::Relation(_) => "relation",
            Self::Type(_) => "type",
            Self::Insert { .. } => "insert",
            Self::Update { .. } => "update",
            Self::Delete { .. } => "delete",
            Self::Truncate { .. } => "truncate",
            Self::Message { .. } => "message",
            Self::StreamStart { .. } => "stream_start",
            Self::StreamStop => "stream_stop",
            Self::StreamCommit { .. } => "stream_commit",
            Self::StreamAbort { .. } => "stream_abort",
            Self::BeginPrepare(_) => "begin_prepare",
            Self::Prepare(_) => "prepare",
            Self::StreamPrepare(_) => "stream_prepare",
            Self::CommitPrepared { .. } => "commit_prepared",
            Self::RollbackPrepared { .. } => "rollback_prepared",
        }
    }
}

fn values(datums: &[Datum<'_>]) -> Vec<Value> {
    datums.iter().map(Value::from).collect()
}

/// An update's new row image: Full when no column is unknown.
pub fn updated_row(new: &[Datum<'_>]) -> UpdatedRow {
    if !new.iter().any(Datum::is_unchanged) {
        return UpdatedRow::Full(values(new));
    }
    let missing_column_indexes = new
        .iter()
        .enumerate()
        .filter(|(_, d)| d.is_unchanged())
        .map(|(i, _)| i)
        .collect();
    UpdatedRow::Partial {
        values: new
            .iter()
            .filter(|d| !d.is_unchanged())
            .map(Value::from)
            .collect(),
        missing_column_indexes,
        total_columns: new.len(),
    }
}

/// An update's or delete's old row image: a key image keeps the identity columns only.
pub fn old_row(relation: &Relation, old: OldImage<'_, '_>) -> OldRow {
    match old.kind {
        OldKind::Full => OldRow::Full(values(old.values)),
        OldKind::Key => OldRow::Key(
            old.values
                .iter()
                .zip(&relation.columns)
                .filter(|(_, c)| c.is_key)
                .map(|(d, _)| Value::from(d))
                .collect(),
        ),
    }
}

fn prepare_data(info: &crate::protocol::PrepareInfo<'_>) -> PrepareData {
    PrepareData {
        flags: info.flags,
        prepare_lsn: info.prepare_lsn,
        end_lsn: info.end_lsn,
        timestamp: info.timestamp,
        gid: info.gid.to_owned(),
    }
}

impl EventBody {
    pub fn from_ref(event: EventRef<'_, '_>) -> Self {
        match event {
            EventRef::Begin(b) => Self::Begin {
                final_lsn: b.final_lsn,
                timestamp: b.timestamp,
            },
            EventRef::Commit(c) => Self::Commit {
                flags: c.flags,
                commit_lsn: c.commit_lsn,
                end_lsn: c.end_lsn,
                timestamp: c.timestamp,
            },
            EventRef::Origin(o) => Self::Origin {
                origin_lsn: o.origin_lsn,
                name: o.name.to_owned(),
            },
            EventRef::Relation(r) => Self::Relation(Arc::clone(r)),
            EventRef::Type(t) => Self::Type(Arc::clone(t)),
            EventRef::Insert { relation, row } => Self::Insert {
                relation: Arc::clone(relation),
                row: values(row),
            },
            EventRef::Update { relation, new, old } => Self::Update {
                relation: Arc::clone(relation),
                new: updated_row(new),
                old: old.map(|o| old_row(relation, o)),
            },
            EventRef::Delete { relation, old } => Self::Delete {
                relation: Arc::clone(relation),
                old: old_row(relation, old),
            },
            EventRef::Truncate { relations, options } => Self::Truncate {
                relations: relations.to_vec(),
                options,
            },
            EventRef::Message(m) => Self::Message {
                transactional: m.transactional,
                message_lsn: m.lsn,
                prefix: m.prefix.to_owned(),
                content: m.content.to_vec(),
            },
            EventRef::StreamStart(s) => Self::StreamStart {
                first_segment: s.first_segment,
            },
            EventRef::StreamStop => Self::StreamStop,
            EventRef::StreamCommit(c) => Self::StreamCommit {
                flags: c.flags,
                commit_lsn: c.commit_lsn,
                end_lsn: c.end_lsn,
                timestamp: c.timestamp,
            },
            EventRef::StreamAbort(a) => Self::StreamAbort {
                subxid: a.subxid,
                abort_lsn: a.abort_lsn,
                abort_timestamp: a.abort_timestamp,
            },
            EventRef::BeginPrepare(p) => Self::BeginPrepare(prepare_data(p)),
            EventRef::Prepare(p) => Self::Prepare(prepare_data(p)),
            EventRef::StreamPrepare(p) => Self::StreamPrepare(prepare_data(p)),
            EventRef::CommitPrepared(c) => Self::CommitPrepared {
                flags: c.flags,
                commit_lsn: c.commit_lsn,
                end_lsn: c.end_lsn,
                timestamp: c.timestamp,
                gid: c.gid.to_owned(),
            },
            EventRef::RollbackPrepared(r) => Self::RollbackPrepared {
                flags: r.flags,
                prepare_end_lsn: r.prepare_end_lsn,
                rollback_end_lsn: r.rollback_end_lsn,
                prepare_timestamp: r.prepare_timestamp,
                rollback_timestamp: r.rollback_timestamp,
                gid: r.gid.to_owned(),
            },
        }
    }
}

/// Keeps every event as an owned [`Event`].
#[derive(Debug, Default)]
pub struct EventCollector {
    pub events: Vec<Event>,
}

impl EventSink for EventCollector {
    fn event(&mut self, meta: &EventMeta, event: EventRef<'_, '_>) -> Result<(), DecodeError> {
        self.events.push(Event {
            meta: *meta,
            body: EventBody::from_ref(event),
        });
        Ok(())
    }
}
