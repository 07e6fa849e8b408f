//! Errors of the decoder layer.
//!
//! * [`DecodeError`], for every way a pgoutput byte stream can be wrong: it names the
//!   message kind and the byte offset inside that message, and never carries row values
//!   (errors end up in logs).
//! * [`SpillError`], for a streamed or prepared transaction that could not be held on
//!   disk: the stream is fine, the spill directory is not.
//! * [`FeedError`], one of the two: what feeding the [`crate::decoder::Decoder`] fails with.
//!
//! The PyO3 layer maps each once onto its `pgwire_cdc.errors` class: `DecodeError` (or
//! `ColumnValueError` for a value) and `SpillError`.

use std::fmt;
use std::io;

/// The pgoutput message kinds, by their tag byte
/// (PostgreSQL docs, "Logical Replication Message Formats").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageKind {
    Begin,
    Commit,
    Origin,
    Relation,
    Type,
    Insert,
    Update,
    Delete,
    Truncate,
    Message,
    StreamStart,
    StreamStop,
    StreamCommit,
    StreamAbort,
    BeginPrepare,
    Prepare,
    CommitPrepared,
    RollbackPrepared,
    StreamPrepare,
    /// Not pgoutput: a row of an initial snapshot, `COPY ... TO STDOUT (FORMAT BINARY)`
    /// data (see [`crate::snapshot`]). Offsets count from the start of the COPY stream.
    CopyData,
    /// The tag byte itself is missing or not a pgoutput tag.
    Unknown,
}

impl MessageKind {
    /// The kind a tag byte announces, if it is a pgoutput tag.
    pub fn from_tag(tag: u8) -> Option<Self> {
        Some(match tag {
            b'B' => Self::Begin,
            b'C' => Self::Commit,
            b'O' => Self::Origin,
            b'R' => Self::Relation,
            b'Y' => Self::Type,
            b'I' => Self::Insert,
            b'U' => Self::Update,
            b'D' => Self::Delete,
            b'T' => Self::Truncate,
            b'M' => Self::Message,
            b'S' => Self::StreamStart,
            b'E' => Self::StreamStop,
            b'c' => Self::StreamCommit,
            b'A' => Self::StreamAbort,
            b'b' => Self::BeginPrepare,
            b'P' => Self::Prepare,
            b'K' => Self::CommitPrepared,
            b'r' => Self::RollbackPrepared,
            b'p' => Self::StreamPrepare,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Begin => "Begin",
            Self::Commit => "Commit",
            Self::Origin => "Origin",
            Self::Relation => "Relation",
            Self::Type => "Type",
            Self::Insert => "Insert",
            Self::Update => "Update",
            Self::Delete => "Delete",
            Self::Truncate => "Truncate",
            Self::Message => "Message",
            Self::StreamStart => "Stream Start",
            Self::StreamStop => "Stream Stop",
            Self::StreamCommit => "Stream Commit",
            Self::StreamAbort => "Stream Abort",
            Self::BeginPrepare => "Begin Prepare",
            Self::Prepare => "Prepare",
            Self::CommitPrepared => "Commit Prepared",
            Self::RollbackPrepared => "Rollback Prepared",
            Self::StreamPrepare => "Stream Prepare",
            Self::CopyData => "CopyData",
            Self::Unknown => "unknown",
        }
    }
}

impl fmt::Display for MessageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What exactly was wrong. Kept as data so tests and callers can match on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The message ended before a field of `needed` bytes.
    Truncated { field: &'static str, needed: usize },
    /// A length field was negative (other than -1 where NULL is allowed) or larger than
    /// the bytes that follow.
    BadLength { field: &'static str, length: i64 },
    /// A NUL-terminated string had no terminator.
    UnterminatedString { field: &'static str },
    /// A name or text value was not valid UTF-8.
    InvalidUtf8 { field: &'static str },
    /// The first byte is not a pgoutput message tag.
    UnknownTag(u8),
    /// A tuple submessage marker ('K', 'O', 'N') other than the ones allowed here.
    UnexpectedMarker { expected: &'static str, found: u8 },
    /// A TupleData column kind other than 'n', 'u', 't', 'b'.
    UnknownColumnKind(u8),
    /// A change names a relation OID no Relation message has described.
    UnknownRelation(u32),
    /// A tuple's column count differs from its relation's.
    ColumnCountMismatch {
        relation: u32,
        expected: usize,
        found: usize,
    },
    /// Bytes remain after the last field of the message.
    TrailingBytes(usize),
    /// The message is not valid at this point of the stream (e.g. Stream Stop outside a
    /// streamed block, Begin inside a transaction).
    OutOfSequence(&'static str),
    /// The message needs a newer protocol version than the decoder was configured with.
    NeedsProtocol { needed: u32, configured: u32 },
    /// A field had a value the protocol does not allow.
    BadValue { field: &'static str },
    /// A column value that is malformed for its type or that its Arrow type cannot hold
    /// (the unrepresentable-value policy). Names the column, never the value.
    Value {
        table: String,
        column: String,
        lsn: u64,
        problem: String,
    },
    /// COPY BINARY data (an initial snapshot) that breaks the format's framing.
    Copy { table: String, problem: CopyProblem },
}

/// What is wrong with a COPY BINARY stream (PostgreSQL docs, COPY, "Binary Format").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyProblem {
    /// The first 11 bytes are not `PGCOPY\n\xff\r\n\0` (a text or CSV COPY, or a
    /// stream that does not start at its beginning).
    BadSignature,
    /// Flags bit 16: every tuple carries an OID field first (pre-12 `WITH OIDS` tables).
    OidsIncluded,
    /// Another of the critical flag bits (16-31), which a reader must not ignore.
    UnknownCriticalFlags(u32),
    /// A negative header extension length.
    BadExtensionLength(i32),
    /// A tuple's field count differs from the number of columns the decoder expects.
    FieldCount { expected: usize, found: i16 },
    /// A field length below -1 (-1 is NULL).
    BadFieldLength(i32),
    /// Bytes after the trailer (field count -1), which ends the stream.
    DataAfterTrailer,
    /// The stream ended (`finish`) inside the header or a tuple, or before the trailer.
    Truncated { inside: &'static str },
}

impl fmt::Display for CopyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadSignature => f.write_str("no COPY BINARY signature (PGCOPY\\n\\377\\r\\n\\0)"),
            Self::OidsIncluded => f.write_str("header flags say tuples include OIDs (unsupported)"),
            Self::UnknownCriticalFlags(flags) => {
                write!(f, "unknown critical header flags 0x{flags:08x}")
            }
            Self::BadExtensionLength(n) => write!(f, "bad header extension length {n}"),
            Self::FieldCount { expected, found } => {
                write!(
                    f,
                    "tuple has {found} fields, the table has {expected} columns"
                )
            }
            Self::BadFieldLength(n) => write!(f, "bad field length {n}"),
            Self::DataAfterTrailer => f.write_str("data after the trailer"),
            Self::Truncated { inside } => write!(f, "stream ends {inside}"),
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { field, needed } => {
                write!(f, "message ends before {field} ({needed} bytes needed)")
            }
            Self::BadLength { field, length } => write!(f, "bad {field} {length}"),
            Self::UnterminatedString { field } => write!(f, "{field} is not NUL-terminated"),
            Self::InvalidUtf8 { field } => write!(f, "{field} is not valid UTF-8"),
            Self::UnknownTag(tag) => write!(f, "unknown message tag 0x{tag:02x}"),
            Self::UnexpectedMarker { expected, found } => {
                write!(f, "expected {expected}, found byte 0x{found:02x}")
            }
            Self::UnknownColumnKind(kind) => {
                write!(f, "unknown TupleData column kind 0x{kind:02x}")
            }
            Self::UnknownRelation(oid) => {
                write!(
                    f,
                    "relation OID {oid} was not described by a Relation message"
                )
            }
            Self::ColumnCountMismatch {
                relation,
                expected,
                found,
            } => write!(
                f,
                "tuple has {found} columns but relation {relation} has {expected}"
            ),
            Self::TrailingBytes(n) => write!(f, "{n} unexpected bytes after the last field"),
            Self::OutOfSequence(what) => f.write_str(what),
            Self::NeedsProtocol { needed, configured } => write!(
                f,
                "message needs protocol version {needed}, decoder configured for {configured}"
            ),
            Self::BadValue { field } => write!(f, "invalid {field}"),
            Self::Value {
                table,
                column,
                lsn,
                problem,
            } => write!(
                f,
                "column {column:?} of {table} at LSN {}: {problem}",
                crate::lsn::format_lsn(*lsn)
            ),
            Self::Copy { table, problem } => write!(f, "{table}: {problem}"),
        }
    }
}

/// A malformed or out-of-sequence pgoutput message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    pub kind: MessageKind,
    /// Byte offset inside the message where the problem was found.
    pub offset: usize,
    pub reason: Reason,
}

impl DecodeError {
    pub fn new(kind: MessageKind, offset: usize, reason: Reason) -> Self {
        Self {
            kind,
            offset,
            reason,
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reason {
            // The message is fine; one of its values is not.
            Reason::Value { .. } => write!(f, "{} message: {}", self.kind, self.reason),
            Reason::Copy { table, problem } => write!(
                f,
                "malformed COPY BINARY data of {table} at byte {}: {problem}",
                self.offset
            ),
            _ => write!(
                f,
                "malformed {} message at byte {}: {}",
                self.kind, self.offset, self.reason
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A streamed or prepared transaction could not be held on disk: its spill file could
/// not be created, written or read back (a missing, unwritable or full spill directory).
///
/// Not the stream's fault: the messages were well-formed, and the same stream decodes once
/// the directory is fixed. Never carries row values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillError {
    /// What the I/O error was.
    pub io_kind: io::ErrorKind,
    /// The I/O error as text; it names the spill directory.
    pub problem: String,
}

impl From<io::Error> for SpillError {
    fn from(e: io::Error) -> Self {
        Self {
            io_kind: e.kind(),
            problem: e.to_string(),
        }
    }
}

impl fmt::Display for SpillError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "holding a streamed or prepared transaction on disk failed: {} \
             (give spill_dir a writable directory with room for the largest \
             transaction, or raise spill_threshold)",
            self.problem
        )
    }
}

impl std::error::Error for SpillError {}

/// What feeding the [`crate::decoder::Decoder`] can fail with: a message it cannot take,
/// or a held transaction it cannot keep.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeedError {
    /// A malformed or out-of-sequence message, or an event the sink refused.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A held transaction's spill file failed.
    #[error(transparent)]
    Spill(#[from] SpillError),
}
