//! The framing of PostgreSQL's binary COPY format, one frame at a time.
//!
//! PostgreSQL docs, COPY, "Binary Format" (all integers big-endian):
//!
//! ```text
//! header   Byte11  signature  "PGCOPY\n\xff\r\n\0"
//!          Int32   flags      bit 16: tuples carry an OID first; bits 16-31 are critical
//!                             (a reader must stop on one it does not know), 0-15 not
//!          Int32   n          header extension length (currently 0)
//!          Byte[n]            extension, to be skipped
//! tuple    Int16   field count
//!          then per field: Int32 length (-1 = NULL), Byte[length] the type's send format
//! trailer  Int16   -1
//! ```
//!
//! A field's bytes are exactly what pgoutput sends for a column in binary tuple mode
//! (both come from the type's send function), so they become [`Datum::Binary`] for the
//! existing value parsers.
//!
//! The functions here look at one frame at the start of a buffer that may hold only part
//! of it: they say how many bytes they need to go on ([`Scan::Incomplete`]), never read past
//! the buffer and never allocate beyond the row vector the caller hands in. Errors carry
//! the offset inside the frame of the field that is wrong.

use crate::error::CopyProblem;
use crate::protocol::Datum;

/// The 11-byte signature every binary COPY stream starts with.
pub const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";
/// Signature, flags and extension length.
const HEADER_FIXED: usize = 19;
/// Header flag bit 16: each tuple starts with an OID field.
const FLAG_OIDS: u32 = 1 << 16;
/// Bits 16-31 are critical: a reader must stop on any it does not know.
const CRITICAL_FLAGS: u32 = 0xffff_0000;

/// How far a frame at the start of a buffer got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// The frame is complete and `len` bytes long.
    Complete(usize),
    /// The buffer ends inside the frame: at least `needed` bytes (counted from the frame's
    /// start) are needed to go on. Never more than the frame's real length.
    Incomplete { needed: usize },
}

/// What a tuple frame held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tuple {
    /// A row of `len` bytes; its fields are in the caller's row vector.
    Row { len: usize },
    /// The trailer (field count -1, 2 bytes): the stream ends here.
    Trailer,
    /// The buffer ends inside the tuple (see [`Scan::Incomplete`]).
    Incomplete { needed: usize },
}

/// A framing error at `offset` bytes into the frame.
pub type FrameError = (usize, CopyProblem);

fn be_u32(buf: &[u8], at: usize) -> Option<u32> {
    let bytes = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes(bytes.try_into().ok()?))
}

fn be_i16(buf: &[u8], at: usize) -> Option<i16> {
    let bytes = buf.get(at..at.checked_add(2)?)?;
    Some(i16::from_be_bytes(bytes.try_into().ok()?))
}

/// The header at the start of `buf`.
pub fn scan_header(buf: &[u8]) -> Result<Scan, FrameError> {
    // Check what is there of the signature at once: a text-format COPY fails on its first
    // chunk, not after 19 bytes have arrived.
    let seen = buf.len().min(SIGNATURE.len());
    if buf.get(..seen) != SIGNATURE.get(..seen) {
        return Err((0, CopyProblem::BadSignature));
    }
    let (Some(flags), Some(ext)) = (be_u32(buf, 11), be_u32(buf, 15)) else {
        return Ok(Scan::Incomplete {
            needed: HEADER_FIXED,
        });
    };
    if flags & FLAG_OIDS != 0 {
        return Err((11, CopyProblem::OidsIncluded));
    }
    if flags & CRITICAL_FLAGS != 0 {
        return Err((11, CopyProblem::UnknownCriticalFlags(flags)));
    }
    // The extension length is an Int32; negative is malformed.
    let ext = i32::from_be_bytes(ext.to_be_bytes());
    let ext = usize::try_from(ext).map_err(|_| (15, CopyProblem::BadExtensionLength(ext)))?;
    let len = HEADER_FIXED.saturating_add(ext);
    Ok(if buf.len() >= len {
        Scan::Complete(len)
    } else {
        Scan::Incomplete { needed: len }
    })
}

/// The tuple (or trailer) at the start of `buf`, for a table of `columns` columns.
///
/// `row` is cleared and receives one datum per field (`Null` or `Binary`); when the result
/// is not [`Tuple::Row`] its contents are meaningless.
pub fn scan_tuple<'a>(
    buf: &'a [u8],
    columns: usize,
    row: &mut Vec<Datum<'a>>,
) -> Result<Tuple, FrameError> {
    row.clear();
    let Some(count) = be_i16(buf, 0) else {
        return Ok(Tuple::Incomplete { needed: 2 });
    };
    if count == -1 {
        return Ok(Tuple::Trailer);
    }
    if usize::try_from(count).ok() != Some(columns) {
        return Err((
            0,
            CopyProblem::FieldCount {
                expected: columns,
                found: count,
            },
        ));
    }
    let mut pos = 2usize;
    for _ in 0..columns {
        let Some(len) = be_u32(buf, pos) else {
            return Ok(Tuple::Incomplete { needed: pos + 4 });
        };
        let len = i32::from_be_bytes(len.to_be_bytes());
        let at = pos;
        pos += 4;
        if len == -1 {
            row.push(Datum::Null);
            continue;
        }
        let len = usize::try_from(len).map_err(|_| (at, CopyProblem::BadFieldLength(len)))?;
        let end = pos.saturating_add(len);
        match buf.get(pos..end) {
            Some(value) => row.push(Datum::Binary(value)),
            None => return Ok(Tuple::Incomplete { needed: end }),
        }
        pos = end;
    }
    Ok(Tuple::Row { len: pos })
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn header(flags: u32, ext: &[u8]) -> Vec<u8> {
        let mut h = SIGNATURE.to_vec();
        h.extend(flags.to_be_bytes());
        h.extend((ext.len() as u32).to_be_bytes());
        h.extend(ext);
        h
    }

    #[test]
    fn header_needs_its_fixed_part_then_its_extension() {
        let h = header(0, b"xyz");
        assert_eq!(scan_header(&h), Ok(Scan::Complete(22)));
        for cut in 0..19 {
            assert_eq!(
                scan_header(h.get(..cut).unwrap_or_default()),
                Ok(Scan::Incomplete { needed: 19 })
            );
        }
        for cut in 19..22 {
            assert_eq!(
                scan_header(h.get(..cut).unwrap_or_default()),
                Ok(Scan::Incomplete { needed: 22 })
            );
        }
        // Bytes after the header belong to the first tuple.
        let mut more = h.clone();
        more.extend([0, 1]);
        assert_eq!(scan_header(&more), Ok(Scan::Complete(22)));
    }

    #[test]
    fn header_errors() {
        // A text-format COPY is refused on its first byte.
        assert_eq!(scan_header(b"1\t"), Err((0, CopyProblem::BadSignature)));
        assert_eq!(
            scan_header(b"PGCOPY\n\xfe"),
            Err((0, CopyProblem::BadSignature))
        );
        assert_eq!(
            scan_header(&header(1 << 16, b"")),
            Err((11, CopyProblem::OidsIncluded))
        );
        assert_eq!(
            scan_header(&header(1 << 20, b"")),
            Err((11, CopyProblem::UnknownCriticalFlags(1 << 20)))
        );
        // Bits 0-15 are backwards-compatible: ignored.
        assert_eq!(
            scan_header(&header(0x0000_ffff, b"")),
            Ok(Scan::Complete(19))
        );
        let mut negative = header(0, b"");
        negative.truncate(15);
        negative.extend((-2i32).to_be_bytes());
        assert_eq!(
            scan_header(&negative),
            Err((15, CopyProblem::BadExtensionLength(-2)))
        );
    }

    fn scan(buf: &[u8], columns: usize) -> Result<Tuple, FrameError> {
        scan_tuple(buf, columns, &mut Vec::new())
    }

    #[test]
    fn tuples_and_their_pieces() {
        // (int4 7, NULL, text "hi")
        let mut t = 3i16.to_be_bytes().to_vec();
        t.extend(4i32.to_be_bytes());
        t.extend(7i32.to_be_bytes());
        t.extend((-1i32).to_be_bytes());
        t.extend(2i32.to_be_bytes());
        t.extend(b"hi");
        let mut row = Vec::new();
        assert_eq!(scan_tuple(&t, 3, &mut row), Ok(Tuple::Row { len: 20 }));
        assert_eq!(
            row,
            [
                Datum::Binary(&[0, 0, 0, 7]),
                Datum::Null,
                Datum::Binary(b"hi")
            ]
        );
        // Every cut asks for the end of the piece it stopped in, never beyond the tuple.
        let needed = [
            2, 2, 6, 6, 6, 6, 10, 10, 10, 10, 14, 14, 14, 14, 18, 18, 18, 18, 20, 20,
        ];
        for (cut, want) in needed.iter().enumerate() {
            assert_eq!(
                scan_tuple(t.get(..cut).unwrap_or_default(), 3, &mut row),
                Ok(Tuple::Incomplete { needed: *want }),
                "cut at {cut}"
            );
        }
        assert_eq!(scan(&(-1i16).to_be_bytes(), 3), Ok(Tuple::Trailer));
        // A table without published columns has empty tuples.
        assert_eq!(scan(&0i16.to_be_bytes(), 0), Ok(Tuple::Row { len: 2 }));
    }

    #[test]
    fn tuple_errors() {
        assert_eq!(
            scan(&2i16.to_be_bytes(), 3),
            Err((
                0,
                CopyProblem::FieldCount {
                    expected: 3,
                    found: 2
                }
            ))
        );
        assert_eq!(
            scan(&(-2i16).to_be_bytes(), 3),
            Err((
                0,
                CopyProblem::FieldCount {
                    expected: 3,
                    found: -2
                }
            ))
        );
        let mut t = 2i16.to_be_bytes().to_vec();
        t.extend((-1i32).to_be_bytes());
        t.extend((-7i32).to_be_bytes());
        assert_eq!(scan(&t, 2), Err((6, CopyProblem::BadFieldLength(-7))));
        // A huge length is only "incomplete" (the bytes may still come), and allocates
        // nothing.
        let mut t = 1i16.to_be_bytes().to_vec();
        t.extend(i32::MAX.to_be_bytes());
        assert_eq!(
            scan(&t, 1),
            Ok(Tuple::Incomplete {
                needed: 6 + i32::MAX as usize
            })
        );
    }
}
