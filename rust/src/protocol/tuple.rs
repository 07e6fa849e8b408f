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
use crate::wire::{is_ascii, utf8, Cursor};

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
    parse_tuple_into(cur, Vec::new())
}

/// [`parse_tuple`] into `out` (cleared first): a caller that parses tuple after tuple
/// reuses one allocation.
pub fn parse_tuple_into<'a>(
    cur: &mut Cursor<'a>,
    out: Vec<Datum<'a>>,
) -> Result<Vec<Datum<'a>>, DecodeError> {
    let rest = cur.rest();
    // A tuple's values are all text or all binary (the stream's format).
    let binary = rest.get(2) == Some(&b'b');
    let parsed = if binary {
        parse_well_formed::<true>(rest, out)
    } else {
        parse_well_formed::<false>(rest, out)
    };
    if let Some((tuple, used)) = parsed {
        cur.skip(used);
        return Ok(tuple);
    }
    parse_or_explain(cur)
}

/// The common case, a well-formed tuple, read straight off the slice: the tuple and the
/// bytes it took, or `None` at the first problem (then [`parse_or_explain`] reads it
/// again to say what and where).
///
/// Most text values are short ASCII (numbers, dates, uuids, most names and documents):
/// each is recognised as such where it is read, by a pass over its bytes 16 (or 8, or 4)
/// at a time that takes a handful of instructions for a short value, and is then UTF-8
/// with no further check. Only the others wait in the tuple as `Binary` for the UTF-8
/// validator, once the tuple is read.
///
/// `BINARY`: the values are expected in binary format (a text value gives `None`).
fn parse_well_formed<'a, const BINARY: bool>(
    buf: &'a [u8],
    mut out: Vec<Datum<'a>>,
) -> Option<(Vec<Datum<'a>>, usize)> {
    let (ncols, mut rest) = buf.split_first_chunk::<2>()?;
    let ncols = usize::try_from(i16::from_be_bytes(*ncols)).ok()?;
    // Every column takes at least one byte: never reserve more than the bytes present.
    if ncols > rest.len() {
        return None;
    }
    out.clear();
    out.reserve(ncols);
    // Text and binary values seen; text values not yet known to be UTF-8.
    let (mut text, mut binary, mut unchecked) = (false, false, false);
    for _ in 0..ncols {
        let (&kind, tail) = rest.split_first()?;
        rest = tail;
        let datum = match kind {
            b'n' => Datum::Null,
            b'u' => Datum::UnchangedToast,
            b't' | b'b' => {
                if BINARY && kind == b't' {
                    return None;
                }
                let (len, tail) = rest.split_first_chunk::<4>()?;
                let len = usize::try_from(i32::from_be_bytes(*len)).ok()?;
                let (value, tail) = tail.split_at_checked(len)?;
                rest = tail;
                if BINARY || kind == b'b' {
                    binary = true;
                    Datum::Binary(value)
                } else if is_ascii(value) {
                    text = true;
                    // SAFETY: every byte of `value` is below 128 (just checked): ASCII
                    // characters, and ASCII is UTF-8.
                    Datum::Text(unsafe { std::str::from_utf8_unchecked(value) })
                } else {
                    text = true;
                    unchecked = true;
                    Datum::Binary(value)
                }
            }
            _ => return None,
        };
        out.push(datum);
    }
    if !BINARY {
        // Both formats in one tuple: not what pgoutput sends; read value by value.
        if text && binary {
            return None;
        }
        // The only `Binary` values left are the text values waiting for the check.
        if unchecked {
            for datum in &mut out {
                if let Datum::Binary(value) = *datum {
                    *datum = Datum::Text(utf8(value)?);
                }
            }
        }
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::error::MessageKind;

    /// A column: its kind byte and, for 't' and 'b', its value.
    fn column() -> impl Strategy<Value = (u8, Vec<u8>)> {
        let value = prop_oneof![
            // Short and long (ASCII or not, lengths with a byte from 128 up), any Unicode.
            ".{0,8}".prop_map(String::into_bytes),
            ".{100,200}".prop_map(String::into_bytes),
            proptest::collection::vec(any::<u8>(), 0..300),
        ];
        (
            prop_oneof![Just(b'n'), Just(b'u'), Just(b't'), Just(b'b')],
            value,
        )
    }

    fn encode(columns: &[(u8, Vec<u8>)]) -> Vec<u8> {
        let mut out = (columns.len() as i16).to_be_bytes().to_vec();
        for (kind, value) in columns {
            out.push(*kind);
            if matches!(kind, b't' | b'b') {
                out.extend((value.len() as i32).to_be_bytes());
                out.extend(value);
            }
        }
        out
    }

    proptest! {
        /// Whatever the bytes, the fast path gives what the field-by-field path gives, or
        /// leaves the tuple to it.
        #[test]
        fn fast_path_reads_like_the_field_by_field_path(
            columns in proptest::collection::vec(column(), 0..10),
            text_only in any::<bool>(),
            damage in proptest::option::of((any::<prop::sample::Index>(), any::<u8>())),
            cut in proptest::option::of(any::<prop::sample::Index>()),
        ) {
            let columns: Vec<_> = columns
                .into_iter()
                .map(|(k, v)| (if text_only && k == b'b' { b't' } else { k }, v))
                .collect();
            let mut bytes = encode(&columns);
            if let Some((at, byte)) = damage {
                let i = at.index(bytes.len());
                if let Some(b) = bytes.get_mut(i) {
                    *b = byte;
                }
            }
            if let Some(at) = cut {
                bytes.truncate(at.index(bytes.len() + 1));
            }
            let mut slow_cur = Cursor::new(&bytes, MessageKind::Insert);
            let slow = parse_or_explain(&mut slow_cur);
            for (tuple, used) in [
                parse_well_formed::<true>(&bytes, Vec::new()),
                parse_well_formed::<false>(&bytes, vec![Datum::Null; 3]),
            ]
                .into_iter()
                .flatten()
            {
                prop_assert_eq!(Some(&tuple), slow.as_ref().ok());
                prop_assert_eq!(used, slow_cur.offset());
            }
            let mut cur = Cursor::new(&bytes, MessageKind::Insert);
            prop_assert_eq!(parse_tuple(&mut cur), slow);
            prop_assert_eq!(cur.offset(), slow_cur.offset());
        }
    }
}
