//! pgoutput messages, protocol versions 1 to 4, parsed without copying.
//!
//! Reference: PostgreSQL documentation, "Logical Replication Message Formats" (section
//! 53.9 in PostgreSQL 18), and the server's `logicalrep_write_*` functions that write
//! these messages.
//!
//! Version floors: streaming of in-progress transactions (Stream Start/Stop/Commit/Abort
//! and the xid prefix on changes inside a streamed block) needs version 2; two-phase
//! messages (Begin Prepare, Prepare, Commit Prepared, Rollback Prepared, Stream Prepare)
//! need version 3; version 4 adds the abort LSN and timestamp to Stream Abort when the
//! subscriber asked for parallel streaming.
//!
//! Parsing is a pure function of the bytes plus two facts from the stream's state: the
//! protocol version, and whether the message sits inside a streamed block (then
//! Relation, Type, Insert, Update, Delete, Truncate and Message carry the xid of the
//! (sub)transaction right after the tag).
//!
//! [`message_kind`] and [`parse_begin`] serve a caller that must look at a message before
//! the decoder takes it: the live session reads a Begin's final LSN to stop before a
//! transaction that commits after the point it was asked to stop at.

mod tuple;

pub use tuple::{parse_tuple, parse_tuple_into, Datum};

use crate::error::{DecodeError, MessageKind, Reason};
use crate::wire::Cursor;

/// A WAL position (XLogRecPtr).
pub type Lsn = u64;
/// Microseconds since 2000-01-01 00:00:00 UTC (TimestampTz).
pub type PgTimestamp = i64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseContext {
    pub proto_version: u32,
    /// Between Stream Start and Stream Stop.
    pub in_stream: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Begin {
    /// LSN of the transaction's commit record.
    pub final_lsn: Lsn,
    pub timestamp: PgTimestamp,
    pub xid: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub flags: u8,
    pub commit_lsn: Lsn,
    pub end_lsn: Lsn,
    pub timestamp: PgTimestamp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin<'a> {
    pub origin_lsn: Lsn,
    pub name: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationColumn<'a> {
    /// 1 marks a replica-identity column (every column under REPLICA IDENTITY FULL).
    pub flags: u8,
    pub name: &'a str,
    pub type_oid: u32,
    pub type_modifier: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationMsg<'a> {
    pub xid: Option<u32>,
    pub oid: u32,
    /// Empty for pg_catalog.
    pub namespace: &'a str,
    pub name: &'a str,
    /// relreplident: 'd' default, 'n' nothing, 'f' full, 'i' index.
    pub replica_identity: u8,
    pub columns: Vec<RelationColumn<'a>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeMsg<'a> {
    pub xid: Option<u32>,
    pub oid: u32,
    pub namespace: &'a str,
    pub name: &'a str,
}

/// Which old-side image an Update or Delete carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OldKind {
    /// 'K': the replica-identity columns; the tuple has every column, NULL in the others.
    Key,
    /// 'O': the whole old row (REPLICA IDENTITY FULL).
    Full,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insert<'a> {
    pub xid: Option<u32>,
    pub relation: u32,
    pub new: Vec<Datum<'a>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update<'a> {
    pub xid: Option<u32>,
    pub relation: u32,
    pub old: Option<(OldKind, Vec<Datum<'a>>)>,
    pub new: Vec<Datum<'a>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete<'a> {
    pub xid: Option<u32>,
    pub relation: u32,
    pub old: (OldKind, Vec<Datum<'a>>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncate {
    pub xid: Option<u32>,
    /// Bit 1: CASCADE, bit 2: RESTART IDENTITY.
    pub options: u8,
    pub relations: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogicalMessage<'a> {
    pub xid: Option<u32>,
    pub transactional: bool,
    pub lsn: Lsn,
    pub prefix: &'a str,
    pub content: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStart {
    pub xid: u32,
    pub first_segment: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamCommit {
    pub xid: u32,
    pub flags: u8,
    pub commit_lsn: Lsn,
    pub end_lsn: Lsn,
    pub timestamp: PgTimestamp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamAbort {
    pub xid: u32,
    pub subxid: u32,
    /// Protocol 4 with parallel streaming only.
    pub abort_lsn: Option<Lsn>,
    pub abort_timestamp: Option<PgTimestamp>,
}

/// Begin Prepare, Prepare and Stream Prepare share one layout (Begin Prepare has no flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareInfo<'a> {
    pub flags: u8,
    pub prepare_lsn: Lsn,
    pub end_lsn: Lsn,
    pub timestamp: PgTimestamp,
    pub xid: u32,
    pub gid: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitPrepared<'a> {
    pub flags: u8,
    pub commit_lsn: Lsn,
    pub end_lsn: Lsn,
    pub timestamp: PgTimestamp,
    pub xid: u32,
    pub gid: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollbackPrepared<'a> {
    pub flags: u8,
    pub prepare_end_lsn: Lsn,
    pub rollback_end_lsn: Lsn,
    pub prepare_timestamp: PgTimestamp,
    pub rollback_timestamp: PgTimestamp,
    pub xid: u32,
    pub gid: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message<'a> {
    Begin(Begin),
    Commit(Commit),
    Origin(Origin<'a>),
    Relation(RelationMsg<'a>),
    Type(TypeMsg<'a>),
    Insert(Insert<'a>),
    Update(Update<'a>),
    Delete(Delete<'a>),
    Truncate(Truncate),
    Message(LogicalMessage<'a>),
    StreamStart(StreamStart),
    StreamStop,
    StreamCommit(StreamCommit),
    StreamAbort(StreamAbort),
    BeginPrepare(PrepareInfo<'a>),
    Prepare(PrepareInfo<'a>),
    CommitPrepared(CommitPrepared<'a>),
    RollbackPrepared(RollbackPrepared<'a>),
    StreamPrepare(PrepareInfo<'a>),
}

impl Message<'_> {
    pub fn kind(&self) -> MessageKind {
        match self {
            Message::Begin(_) => MessageKind::Begin,
            Message::Commit(_) => MessageKind::Commit,
            Message::Origin(_) => MessageKind::Origin,
            Message::Relation(_) => MessageKind::Relation,
            Message::Type(_) => MessageKind::Type,
            Message::Insert(_) => MessageKind::Insert,
            Message::Update(_) => MessageKind::Update,
            Message::Delete(_) => MessageKind::Delete,
            Message::Truncate(_) => MessageKind::Truncate,
            Message::Message(_) => MessageKind::Message,
            Message::StreamStart(_) => MessageKind::StreamStart,
            Message::StreamStop => MessageKind::StreamStop,
            Message::StreamCommit(_) => MessageKind::StreamCommit,
            Message::StreamAbort(_) => MessageKind::StreamAbort,
            Message::BeginPrepare(_) => MessageKind::BeginPrepare,
            Message::Prepare(_) => MessageKind::Prepare,
            Message::CommitPrepared(_) => MessageKind::CommitPrepared,
            Message::RollbackPrepared(_) => MessageKind::RollbackPrepared,
            Message::StreamPrepare(_) => MessageKind::StreamPrepare,
        }
    }
}

/// The protocol version that introduced a message kind.
fn min_version(kind: MessageKind) -> u32 {
    match kind {
        MessageKind::StreamStart
        | MessageKind::StreamStop
        | MessageKind::StreamCommit
        | MessageKind::StreamAbort => 2,
        MessageKind::BeginPrepare
        | MessageKind::Prepare
        | MessageKind::CommitPrepared
        | MessageKind::RollbackPrepared
        | MessageKind::StreamPrepare => 3,
        _ => 1,
    }
}

/// Parses one whole pgoutput message. Fails on a short, over-long or inconsistent
/// message; never reads past `bytes` and never allocates more than `bytes` can fill.
pub fn parse_message(bytes: &[u8], ctx: ParseContext) -> Result<Message<'_>, DecodeError> {
    parse_message_into(bytes, ctx, Vec::new())
}

/// [`parse_message`], an Insert's tuple parsed into `tuple` (see [`parse_tuple_into`]).
pub fn parse_message_into<'a>(
    bytes: &'a [u8],
    ctx: ParseContext,
    tuple: Vec<Datum<'a>>,
) -> Result<Message<'a>, DecodeError> {
    // The message nearly every row comes in, an Insert outside a streamed block, read
    // without the general dispatch (same cursor, same errors at the same offsets).
    if let [b'I', o0, o1, o2, o3, b'N', ..] = *bytes {
        if !ctx.in_stream && ctx.proto_version >= min_version(MessageKind::Insert) {
            let mut cur = Cursor::new(bytes, MessageKind::Insert);
            cur.skip(6);
            let new = parse_tuple_into(&mut cur, tuple)?;
            cur.finish()?;
            return Ok(Message::Insert(Insert {
                xid: None,
                relation: u32::from_be_bytes([o0, o1, o2, o3]),
                new,
            }));
        }
    }
    parse_any_message(bytes, ctx, tuple)
}

/// The kind of the message in `bytes`, from its tag byte alone (nothing else is read or
/// checked); `None` for an empty message or an unknown tag.
pub fn message_kind(bytes: &[u8]) -> Option<MessageKind> {
    MessageKind::from_tag(*bytes.first()?)
}

/// A Begin message on its own, for a caller that must see a transaction's final LSN
/// before the decoder takes the message. A Begin has the same layout in every protocol
/// version and never carries a streamed block's xid prefix, so no [`ParseContext`] is
/// needed. Any other message, or a Begin that is short or over-long, is an error.
pub fn parse_begin(bytes: &[u8]) -> Result<Begin, DecodeError> {
    let kind = message_kind(bytes).unwrap_or(MessageKind::Unknown);
    if kind != MessageKind::Begin {
        return Err(DecodeError::new(kind, 0, Reason::BadValue { field: "tag" }));
    }
    let ctx = ParseContext {
        proto_version: min_version(kind),
        in_stream: false,
    };
    match parse_any_message(bytes, ctx, Vec::new())? {
        Message::Begin(begin) => Ok(begin),
        // The tag said Begin, so the dispatch parsed a Begin.
        other => Err(DecodeError::new(
            other.kind(),
            0,
            Reason::BadValue { field: "tag" },
        )),
    }
}

/// [`parse_message_into`] for every message, through the dispatch on the tag.
fn parse_any_message<'a>(
    bytes: &'a [u8],
    ctx: ParseContext,
    tuple: Vec<Datum<'a>>,
) -> Result<Message<'a>, DecodeError> {
    let tag = *bytes.first().ok_or_else(|| {
        DecodeError::new(
            MessageKind::Unknown,
            0,
            Reason::Truncated {
                field: "tag",
                needed: 1,
            },
        )
    })?;
    let kind = MessageKind::from_tag(tag)
        .ok_or_else(|| DecodeError::new(MessageKind::Unknown, 0, Reason::UnknownTag(tag)))?;
    let needed = min_version(kind);
    if ctx.proto_version < needed {
        return Err(DecodeError::new(
            kind,
            0,
            Reason::NeedsProtocol {
                needed,
                configured: ctx.proto_version,
            },
        ));
    }
    let mut cur = Cursor::new(bytes, kind);
    cur.u8("tag")?;
    let msg = parse_body(&mut cur, kind, ctx, tuple)?;
    cur.finish()?;
    Ok(msg)
}

#[allow(
    clippy::too_many_lines,
    reason = "one arm per pgoutput message: the dispatch reads best as one table"
)]
fn parse_body<'a>(
    cur: &mut Cursor<'a>,
    kind: MessageKind,
    ctx: ParseContext,
    tuple: Vec<Datum<'a>>,
) -> Result<Message<'a>, DecodeError> {
    // Inside a streamed block the data messages start with the (sub)transaction's xid.
    let stream_xid = |cur: &mut Cursor<'a>| -> Result<Option<u32>, DecodeError> {
        if ctx.in_stream {
            cur.u32("xid").map(Some)
        } else {
            Ok(None)
        }
    };
    Ok(match kind {
        MessageKind::Begin => Message::Begin(Begin {
            final_lsn: cur.u64("final LSN")?,
            timestamp: cur.i64("commit timestamp")?,
            xid: cur.u32("xid")?,
        }),
        MessageKind::Commit => Message::Commit(Commit {
            flags: cur.u8("flags")?,
            commit_lsn: cur.u64("commit LSN")?,
            end_lsn: cur.u64("end LSN")?,
            timestamp: cur.i64("commit timestamp")?,
        }),
        MessageKind::Origin => Message::Origin(Origin {
            origin_lsn: cur.u64("origin LSN")?,
            name: cur.cstr("origin name")?,
        }),
        MessageKind::Relation => {
            let xid = stream_xid(cur)?;
            Message::Relation(parse_relation(cur, xid)?)
        }
        MessageKind::Type => Message::Type(TypeMsg {
            xid: stream_xid(cur)?,
            oid: cur.u32("type OID")?,
            namespace: cur.cstr("type namespace")?,
            name: cur.cstr("type name")?,
        }),
        MessageKind::Insert => {
            let xid = stream_xid(cur)?;
            let relation = cur.u32("relation OID")?;
            expect_marker(cur, b"N", "'N' (new tuple)")?;
            Message::Insert(Insert {
                xid,
                relation,
                new: parse_tuple_into(cur, tuple)?,
            })
        }
        MessageKind::Update => {
            let xid = stream_xid(cur)?;
            let relation = cur.u32("relation OID")?;
            let marker = expect_marker(cur, b"KON", "'K', 'O' or 'N'")?;
            let old = if marker == b'N' {
                None
            } else {
                let old = (old_kind(marker), parse_tuple(cur)?);
                expect_marker(cur, b"N", "'N' (new tuple)")?;
                Some(old)
            };
            Message::Update(Update {
                xid,
                relation,
                old,
                new: parse_tuple(cur)?,
            })
        }
        MessageKind::Delete => {
            let xid = stream_xid(cur)?;
            let relation = cur.u32("relation OID")?;
            let marker = expect_marker(cur, b"KO", "'K' or 'O'")?;
            Message::Delete(Delete {
                xid,
                relation,
                old: (old_kind(marker), parse_tuple(cur)?),
            })
        }
        MessageKind::Truncate => {
            let xid = stream_xid(cur)?;
            let at = cur.offset();
            let count = cur.i32("relation count")?;
            let options = cur.u8("options")?;
            let count = usize::try_from(count)
                .ok()
                .filter(|&n| {
                    n.checked_mul(4)
                        .is_some_and(|bytes| bytes <= cur.remaining())
                })
                .ok_or_else(|| {
                    cur.error_at(
                        at,
                        Reason::BadLength {
                            field: "relation count",
                            length: i64::from(count),
                        },
                    )
                })?;
            let mut relations = Vec::with_capacity(count);
            for _ in 0..count {
                relations.push(cur.u32("relation OID")?);
            }
            Message::Truncate(Truncate {
                xid,
                options,
                relations,
            })
        }
        MessageKind::Message => {
            let xid = stream_xid(cur)?;
            let flags = cur.u8("flags")?;
            Message::Message(LogicalMessage {
                xid,
                transactional: flags & 1 == 1,
                lsn: cur.u64("message LSN")?,
                prefix: cur.cstr("prefix")?,
                content: cur.counted("content length")?,
            })
        }
        MessageKind::StreamStart => Message::StreamStart(StreamStart {
            xid: cur.u32("xid")?,
            first_segment: cur.u8("first segment flag")? == 1,
        }),
        MessageKind::StreamStop => Message::StreamStop,
        MessageKind::StreamCommit => Message::StreamCommit(StreamCommit {
            xid: cur.u32("xid")?,
            flags: cur.u8("flags")?,
            commit_lsn: cur.u64("commit LSN")?,
            end_lsn: cur.u64("end LSN")?,
            timestamp: cur.i64("commit timestamp")?,
        }),
        MessageKind::StreamAbort => {
            let xid = cur.u32("xid")?;
            let subxid = cur.u32("subtransaction xid")?;
            // Version 4 sends the abort LSN and time only under parallel streaming, which
            // the decoder cannot know: the message length tells.
            let (abort_lsn, abort_timestamp) = if ctx.proto_version >= 4 && cur.remaining() > 0 {
                (
                    Some(cur.u64("abort LSN")?),
                    Some(cur.i64("abort timestamp")?),
                )
            } else {
                (None, None)
            };
            Message::StreamAbort(StreamAbort {
                xid,
                subxid,
                abort_lsn,
                abort_timestamp,
            })
        }
        MessageKind::BeginPrepare => Message::BeginPrepare(PrepareInfo {
            flags: 0,
            prepare_lsn: cur.u64("prepare LSN")?,
            end_lsn: cur.u64("end LSN")?,
            timestamp: cur.i64("prepare timestamp")?,
            xid: cur.u32("xid")?,
            gid: cur.cstr("gid")?,
        }),
        MessageKind::Prepare => Message::Prepare(parse_prepare(cur)?),
        MessageKind::StreamPrepare => Message::StreamPrepare(parse_prepare(cur)?),
        MessageKind::CommitPrepared => Message::CommitPrepared(CommitPrepared {
            flags: cur.u8("flags")?,
            commit_lsn: cur.u64("commit LSN")?,
            end_lsn: cur.u64("end LSN")?,
            timestamp: cur.i64("commit timestamp")?,
            xid: cur.u32("xid")?,
            gid: cur.cstr("gid")?,
        }),
        MessageKind::RollbackPrepared => Message::RollbackPrepared(RollbackPrepared {
            flags: cur.u8("flags")?,
            prepare_end_lsn: cur.u64("prepare end LSN")?,
            rollback_end_lsn: cur.u64("rollback end LSN")?,
            prepare_timestamp: cur.i64("prepare timestamp")?,
            rollback_timestamp: cur.i64("rollback timestamp")?,
            xid: cur.u32("xid")?,
            gid: cur.cstr("gid")?,
        }),
        // Never announced by a pgoutput tag byte.
        MessageKind::Unknown | MessageKind::CopyData => {
            return Err(cur.error_at(0, Reason::BadValue { field: "tag" }));
        }
    })
}

fn parse_relation<'a>(
    cur: &mut Cursor<'a>,
    xid: Option<u32>,
) -> Result<RelationMsg<'a>, DecodeError> {
    let oid = cur.u32("relation OID")?;
    let namespace = cur.cstr("namespace")?;
    let name = cur.cstr("relation name")?;
    let replica_identity = cur.u8("replica identity")?;
    if !matches!(replica_identity, b'd' | b'n' | b'f' | b'i') {
        return Err(cur.error_at(
            cur.offset() - 1,
            Reason::BadValue {
                field: "replica identity",
            },
        ));
    }
    let at = cur.offset();
    let ncols = cur.i16("column count")?;
    // A column takes at least 10 bytes (flags, empty name, type OID, typmod).
    let ncols = usize::try_from(ncols)
        .ok()
        .filter(|&n| n.saturating_mul(10) <= cur.remaining())
        .ok_or_else(|| {
            cur.error_at(
                at,
                Reason::BadLength {
                    field: "column count",
                    length: i64::from(ncols),
                },
            )
        })?;
    let mut columns = Vec::with_capacity(ncols);
    for _ in 0..ncols {
        columns.push(RelationColumn {
            flags: cur.u8("column flags")?,
            name: cur.cstr("column name")?,
            type_oid: cur.u32("column type OID")?,
            type_modifier: cur.i32("column type modifier")?,
        });
    }
    Ok(RelationMsg {
        xid,
        oid,
        namespace,
        name,
        replica_identity,
        columns,
    })
}

fn parse_prepare<'a>(cur: &mut Cursor<'a>) -> Result<PrepareInfo<'a>, DecodeError> {
    Ok(PrepareInfo {
        flags: cur.u8("flags")?,
        prepare_lsn: cur.u64("prepare LSN")?,
        end_lsn: cur.u64("end LSN")?,
        timestamp: cur.i64("prepare timestamp")?,
        xid: cur.u32("xid")?,
        gid: cur.cstr("gid")?,
    })
}

fn expect_marker(
    cur: &mut Cursor<'_>,
    allowed: &[u8],
    expected: &'static str,
) -> Result<u8, DecodeError> {
    let at = cur.offset();
    let found = cur.u8("tuple marker")?;
    if allowed.contains(&found) {
        Ok(found)
    } else {
        Err(cur.error_at(at, Reason::UnexpectedMarker { expected, found }))
    }
}

fn old_kind(marker: u8) -> OldKind {
    if marker == b'O' {
        OldKind::Full
    } else {
        OldKind::Key
    }
}

#[cfg(test)]
pub(crate) mod tests;
