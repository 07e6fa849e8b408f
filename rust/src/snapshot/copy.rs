//! [`CopyBinaryDecoder`]: a table's `COPY ... TO STDOUT (FORMAT BINARY)` stream into
//! change-table rows with `_change_type = 'read'`.
//!
//! The stream may arrive split anywhere (the COPY transport gives one CopyData message per
//! tuple, the first one also holding the header, but nothing here relies on that). Whole
//! frames are decoded straight from the chunk they arrive in; only a frame that spans
//! chunks is gathered in a buffer, and only up to its own end.
//!
//! Rows go through the same [`ChangeTable`] as streamed changes, in binary mode, so a
//! snapshot batch has exactly the schema and values the stream gives its relation. The
//! metadata of a snapshot row: `_lsn` = `_commit_lsn` = the slot's consistent point,
//! `_tx_ordinal` = `first_ordinal` + the row's position in this stream, `_commit_ts`,
//! `_xid`, `_before`, `_before_kind` null, `_unchanged` empty.
//!
//! Errors:
//! * malformed framing (signature, flags, field counts, lengths, data after the trailer) is
//!   a [`DecodeError`] with [`Reason::Copy`] naming the table and the byte offset in the
//!   stream. It is final: a byte stream cannot be resynchronised, so every later `feed`
//!   returns it again;
//! * a value the Arrow type cannot hold (numeric NaN in a decimal column, an infinite
//!   timestamp, ...) follows the streaming path's unrepresentable-value policy: the row is
//!   left out, decoding goes on, and the next [`CopyBinaryDecoder::take_batch`] or
//!   [`CopyBinaryDecoder::finish`] returns [`SnapshotError::Rejected`] (a
//!   [`Reason::Value`] error per row, naming table, column and the consistent point as
//!   LSN) instead of the batch; the call after it returns the other rows.
//!
//! Columns of a type the value layer does not know (enum, citext, composites, arrays of
//! those, extension types) have no binary parser. The snapshot query must select them as
//! `column::text` ([`select_list`] writes the list); their field is then text's send
//! format, the UTF-8 text the text-format stream sends for them, and is read as such.
//! (The connection's client_encoding must be UTF8, as for the stream.)

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};

use super::frame::{scan_header, scan_tuple, FrameError, Scan, Tuple};
use crate::arrow::{ChangeKind, ChangeTable, ColumnError, RowMeta};
use crate::error::{CopyProblem, DecodeError, MessageKind, Reason};
use crate::protocol::Datum;
use crate::relation::{Column, Relation};
use crate::values::PgType;

/// Whether the decoder reads a column's field as UTF-8 text: its type has no binary parser,
/// so the query selects it as `::text`.
pub fn reads_as_text(column: &Column) -> bool {
    !PgType::from_oid(column.base_type_oid, column.base_type_modifier).is_known()
}

/// The SELECT list of a relation's snapshot query: its columns in order, quoted, with
/// `::text` on those [`reads_as_text`] names, e.g. `"id", "mood"::text`.
pub fn select_list(relation: &Relation) -> String {
    let mut out = String::new();
    for (i, c) in relation.columns.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push('"');
        out.push_str(&c.name.replace('"', "\"\""));
        out.push('"');
        if reads_as_text(c) {
            out.push_str("::text");
        }
    }
    out
}

/// Where the snapshot sits in the change stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotMeta {
    /// The slot's consistent point: `_lsn` and `_commit_lsn` of every row.
    pub consistent_point: u64,
    /// `_tx_ordinal` of this stream's first row (several streams of one table, e.g. ctid
    /// ranges read in parallel, get disjoint ordinals).
    pub first_ordinal: u64,
}

/// Why a batch could not be returned.
#[derive(Debug)]
pub enum SnapshotError {
    /// The COPY data is malformed or incomplete.
    Decode(DecodeError),
    /// Rows left out since the last batch because a value has no Arrow representation
    /// (one [`Reason::Value`] error each, in stream order). The other rows are kept for
    /// the next call.
    Rejected(Vec<DecodeError>),
    /// Arrow refused the finished columns (a bug, not a property of the data).
    Arrow(ArrowError),
}

impl std::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Decode(e) => e.fmt(f),
            Self::Rejected(errors) => match errors.first() {
                Some(first) => write!(f, "{} row(s) left out; the first: {first}", errors.len()),
                None => f.write_str("no rows left out"),
            },
            Self::Arrow(e) => write!(f, "building the Arrow batch failed: {e}"),
        }
    }
}

impl std::error::Error for SnapshotError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Header,
    Tuples,
    /// The trailer was read: nothing may follow.
    Done,
}

pub struct CopyBinaryDecoder {
    table: ChangeTable,
    meta: SnapshotMeta,
    /// Per column: read the field as UTF-8 text (a type without a binary parser, selected
    /// as `::text`).
    as_text: Vec<bool>,
    phase: Phase,
    /// The start of a frame that spans chunks, gathered up to what the frame needs.
    pending: Vec<u8>,
    /// Stream offset of the next frame (the first byte of `pending`, when it has any).
    offset: usize,
    /// Tuples decoded, rejected ones included: the next row's ordinal offset.
    tuples: u64,
    /// Value errors since the last batch, and how many rows of the batch they left out.
    rejected: Vec<DecodeError>,
    rejected_in_batch: usize,
    /// The first framing error: the stream cannot be resynchronised after it.
    failed: Option<DecodeError>,
    /// The row vector, kept to reuse its allocation (empty between rows; see `recycle`).
    row: Vec<Datum<'static>>,
}

impl CopyBinaryDecoder {
    pub fn new(relation: Arc<Relation>, meta: SnapshotMeta) -> Self {
        let as_text = relation.columns.iter().map(reads_as_text).collect();
        let row = Vec::with_capacity(relation.columns.len());
        Self {
            table: ChangeTable::new(relation, true),
            meta,
            as_text,
            phase: Phase::Header,
            pending: Vec::new(),
            offset: 0,
            tuples: 0,
            rejected: Vec::new(),
            rejected_in_batch: 0,
            failed: None,
            row,
        }
    }

    pub fn relation(&self) -> &Arc<Relation> {
        &self.table.relation
    }

    /// The schema of every batch (the relation's change-table schema).
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(self.table.schema())
    }

    /// Rows decoded since the last batch that the next batch will hold.
    pub fn rows(&self) -> usize {
        self.table.rows().saturating_sub(self.rejected_in_batch)
    }

    /// Tuples decoded from the stream so far, rows left out included.
    pub fn tuples(&self) -> u64 {
        self.tuples
    }

    /// Bytes of the stream fed so far.
    pub fn bytes(&self) -> usize {
        self.offset.saturating_add(self.pending.len())
    }

    /// True once the trailer has been read.
    pub fn is_complete(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Decodes the next bytes of the stream, split anywhere.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), DecodeError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let fed = self
            .feed_pending(chunk)
            .and_then(|rest| self.feed_frames(rest));
        if let Err(e) = &fed {
            self.failed = Some(e.clone());
        }
        fed
    }

    /// Completes a frame begun in an earlier chunk with the bytes it still needs; returns
    /// the rest of the chunk (empty if the frame is still incomplete).
    fn feed_pending<'c>(&mut self, mut chunk: &'c [u8]) -> Result<&'c [u8], DecodeError> {
        if self.pending.is_empty() {
            return Ok(chunk);
        }
        // Taken out so its frame can be decoded while the rest of `self` changes.
        let mut pending = std::mem::take(&mut self.pending);
        let result = loop {
            match self.frame(&pending) {
                Ok(Scan::Incomplete { needed }) => {
                    // `needed` always exceeds what the frame has; at least one byte anyway,
                    // so the loop ends with the chunk whatever a scan says.
                    let want = needed.saturating_sub(pending.len()).max(1);
                    let (head, tail) = chunk.split_at(want.min(chunk.len()));
                    pending.extend_from_slice(head);
                    chunk = tail;
                    if head.len() < want {
                        break Ok(chunk);
                    }
                }
                Ok(Scan::Complete(len)) => {
                    // `needed` never overshoots a frame, so `len` is all of `pending`; drain
                    // anyway rather than rely on it.
                    pending.drain(..len.min(pending.len()));
                    self.offset += len;
                    if pending.is_empty() {
                        break Ok(chunk);
                    }
                }
                Err(e) => break Err(e),
            }
        };
        self.pending = pending;
        result
    }

    /// Decodes the whole frames of `chunk` in place and keeps an incomplete last one.
    fn feed_frames(&mut self, chunk: &[u8]) -> Result<(), DecodeError> {
        let mut rest = chunk;
        while !rest.is_empty() {
            match self.frame(rest)? {
                Scan::Complete(len) => {
                    self.offset += len;
                    rest = rest.get(len..).unwrap_or_default();
                }
                Scan::Incomplete { .. } => {
                    self.pending.extend_from_slice(rest);
                    break;
                }
            }
        }
        Ok(())
    }

    /// Decodes the frame at the start of `buf` (at stream offset `self.offset`) if it is
    /// complete: the header, a row into the table, or the trailer.
    fn frame(&mut self, buf: &[u8]) -> Result<Scan, DecodeError> {
        match self.phase {
            Phase::Header => {
                let scan = scan_header(buf).map_err(|e| self.copy_error(e))?;
                if let Scan::Complete(_) = scan {
                    self.phase = Phase::Tuples;
                }
                Ok(scan)
            }
            Phase::Tuples => self.tuple(buf),
            Phase::Done => Err(self.copy_error((0, CopyProblem::DataAfterTrailer))),
        }
    }

    fn tuple(&mut self, buf: &[u8]) -> Result<Scan, DecodeError> {
        let mut row = recycle(std::mem::take(&mut self.row));
        let scanned = scan_tuple(buf, self.as_text.len(), &mut row);
        let result = match scanned {
            Err(e) => Err(self.copy_error(e)),
            Ok(Tuple::Incomplete { needed }) => Ok(Scan::Incomplete { needed }),
            Ok(Tuple::Trailer) => {
                self.phase = Phase::Done;
                Ok(Scan::Complete(2))
            }
            Ok(Tuple::Row { len }) => {
                self.append(&mut row);
                Ok(Scan::Complete(len))
            }
        };
        self.row = recycle(row);
        result
    }

    fn append(&mut self, row: &mut [Datum<'_>]) {
        for (datum, &text) in row.iter_mut().zip(&self.as_text) {
            if let (true, Datum::Binary(bytes)) = (text, *datum) {
                // Invalid UTF-8 stays binary: the builder then rejects the row, as it
                // rejects a binary value of an unknown type from the stream.
                if let Ok(s) = std::str::from_utf8(bytes) {
                    *datum = Datum::Text(s);
                }
            }
        }
        let meta = RowMeta {
            lsn: self.meta.consistent_point,
            commit_lsn: Some(self.meta.consistent_point),
            tx_ordinal: self.meta.first_ordinal.saturating_add(self.tuples),
            commit_timestamp: None,
            xid: None,
        };
        self.tuples += 1;
        if let Err(e) = self.table.append(ChangeKind::Read, &meta, Some(row), None) {
            let error = self.value_error(e);
            self.rejected.push(error);
            self.rejected_in_batch += 1;
        }
    }

    fn copy_error(&self, (at, problem): FrameError) -> DecodeError {
        DecodeError::new(
            MessageKind::CopyData,
            self.offset.saturating_add(at),
            Reason::Copy {
                table: self.table.relation.qualified_name.clone(),
                problem,
            },
        )
    }

    fn value_error(&self, e: ColumnError) -> DecodeError {
        DecodeError::new(
            MessageKind::CopyData,
            self.offset,
            Reason::Value {
                table: self.table.relation.qualified_name.clone(),
                column: e.column,
                lsn: self.meta.consistent_point,
                problem: e.error.to_string(),
            },
        )
    }

    /// The rows decoded since the last batch, as one batch; decoding goes on after it.
    /// If rows were left out since then, returns them as [`SnapshotError::Rejected`]
    /// instead, and the kept rows come with the next call.
    pub fn take_batch(&mut self) -> Result<RecordBatch, SnapshotError> {
        if !self.rejected.is_empty() {
            return Err(SnapshotError::Rejected(std::mem::take(&mut self.rejected)));
        }
        self.rejected_in_batch = 0;
        self.table.finish().map_err(SnapshotError::Arrow)
    }

    /// Ends the stream: it must be complete (header, tuples, trailer, nothing after).
    /// Returns the last batch as [`take_batch`](Self::take_batch) does.
    pub fn finish(&mut self) -> Result<RecordBatch, SnapshotError> {
        if let Some(e) = &self.failed {
            return Err(SnapshotError::Decode(e.clone()));
        }
        let inside = match (self.phase, self.pending.is_empty()) {
            (Phase::Done, _) => None,
            (Phase::Header, true) if self.offset == 0 => Some("before the header"),
            (Phase::Header, _) => Some("inside the header"),
            (Phase::Tuples, false) => Some("inside a tuple"),
            (Phase::Tuples, true) => Some("before the trailer"),
        };
        if let Some(inside) = inside {
            let error = self.copy_error((self.pending.len(), CopyProblem::Truncated { inside }));
            return Err(SnapshotError::Decode(error));
        }
        self.take_batch()
    }
}

/// An empty vector with `v`'s allocation, for datums of another lifetime: the row vector
/// borrows each chunk in turn. (`into_iter().map().collect()` reuses the allocation when
/// the element layout is the same, as it is here.)
fn recycle<'b>(mut v: Vec<Datum<'_>>) -> Vec<Datum<'b>> {
    v.clear();
    v.into_iter().map(|_| Datum::Null).collect()
}
