//! TupleData, the row submessage shared by Insert, Update and Delete.
//!
//! ```text
//! Int16  number of columns
//! then per column one of:
//!   'n'                      NULL
//!   'u'                      unchanged TOASTed value: the value is not sent
//!   't' Int32 len, Byte[len] text format (the type's output function)
//!   'b' Int32 len, Byte[len] binary format (the type's send function; protocol 2+ with binary)
//! ```
//! Values are borrowed from the message: no copy, no allocation per value.

use crate::error::{DecodeError, Reason};
use crate::wire::Cursor;

/// One column of a TupleData, borrowed from the message bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datum<'a> {
    Null,
    /// 'u': the value did not change and PostgreSQL did not resend it.
    UnchangedToast,
    /// 't': text format, validated as UTF-8 (the walsender converts text output to the
    /// connection's client_encoding, which pgwire_cdc always sets to UTF8).
    Text(&'a str),
    /// 'b': binary send/recv format.
    Binary(&'a [u8]),
}

impl Datum<'_> {
    pub fn is_unchanged(&self) -> bool {
        matches!(self, Datum::UnchangedToast)
    }
}

/// Parses a TupleData at the cursor.
pub fn parse_tuple<'a>(cur: &mut Cursor<'a>) -> Result<Vec<Datum<'a>>, DecodeError> {
    if let Some((tuple, used)) = parse_well_formed(cur.rest()) {
        cur.skip(used);
        return Ok(tuple);
    }
    parse_or_explain(cur)
}

/// The common case, a well-formed tuple, read straight off the slice: the tuple and the
/// bytes it took, or `None` at the first problem (then [`parse_or_explain`] reads it
/// again to say what and where).
fn parse_well_formed(buf: &[u8]) -> Option<(Vec<Datum<'_>>, usize)> {
    let (ncols, mut rest) = buf.split_first_chunk::<2>()?;
    let ncols = usize::try_from(i16::from_be_bytes(*ncols)).ok()?;
    // Every column takes at least one byte: never reserve more than the bytes present.
    if ncols > rest.len() {
        return None;
    }
    let mut out = Vec::with_capacity(ncols);
    for _ in 0..ncols {
        let (&kind, tail) = rest.split_first()?;
        rest = tail;
        let datum = match kind {
            b'n' => Datum::Null,
            b'u' => Datum::UnchangedToast,
            b't' | b'b' => {
                let (len, tail) = rest.split_first_chunk::<4>()?;
                let len = usize::try_from(i32::from_be_bytes(*len)).ok()?;
                let (value, tail) = tail.split_at_checked(len)?;
                rest = tail;
                if kind == b't' {
                    Datum::Text(std::str::from_utf8(value).ok()?)
                } else {
                    Datum::Binary(value)
                }
            }
            _ => return None,
        };
        out.push(datum);
    }
    Some((out, buf.len() - rest.len()))
}

/// Parses a TupleData at the cursor, field by field, naming the first problem exactly.
fn parse_or_explain<'a>(cur: &mut Cursor<'a>) -> Result<Vec<Datum<'a>>, DecodeError> {
    let at = cur.offset();
    let ncols = cur.i16("column count")?;
    let ncols = usize::try_from(ncols).map_err(|_| {
        cur.error_at(
            at,
            Reason::BadLength {
                field: "column count",
                length: i64::from(ncols),
            },
        )
    })?;
    // Every column takes at least one byte: never reserve more than the bytes present.
    if ncols > cur.remaining() {
        return Err(cur.error_at(
            at,
            Reason::BadLength {
                field: "column count",
                length: ncols as i64,
            },
        ));
    }
    let mut out = Vec::with_capacity(ncols);
    for _ in 0..ncols {
        let kind_at = cur.offset();
        let datum = match cur.u8("column kind")? {
            b'n' => Datum::Null,
            b'u' => Datum::UnchangedToast,
            b't' => {
                let bytes = cur.counted("column value length")?;
                let text = std::str::from_utf8(bytes).map_err(|e| {
                    cur.error_at(
                        cur.offset() - bytes.len() + e.valid_up_to(),
                        Reason::InvalidUtf8 {
                            field: "text column value",
                        },
                    )
                })?;
                Datum::Text(text)
            }
            b'b' => Datum::Binary(cur.counted("column value length")?),
            other => return Err(cur.error_at(kind_at, Reason::UnknownColumnKind(other))),
        };
        out.push(datum);
    }
    Ok(out)
}
