//! A bounds-checked reader over one message's bytes.
//!
//! Every read returns a `Result`: pgoutput messages arrive whole (one per XLogData frame or
//! per row of `pg_logical_slot_peek_binary_changes`), so running out of bytes is always a
//! malformed message, never "need more input". Integers are big-endian (network order),
//! strings are NUL-terminated, as in the PostgreSQL frontend/backend protocol.
//!
//! Also the checks that text taken from the messages is ASCII ([`is_ascii`]) or UTF-8
//! ([`utf8`]), for the protocol and value layers.

use crate::error::{DecodeError, MessageKind, Reason};

/// Whether every byte is below 128, without a branch per byte or per word: 16 bytes at a
/// time ORed together, the last 16 read again overlapping (shorter values: two
/// overlapping words). Measured on strings of 8 to 108 bytes, 40 % faster than 8-byte
/// words with a byte-wise tail, and than `<[u8]>::is_ascii`.
#[inline]
pub fn is_ascii(bytes: &[u8]) -> bool {
    const HIGH: u128 = 0x8080_8080_8080_8080_8080_8080_8080_8080;
    if let Some(last) = bytes.last_chunk::<16>() {
        let mut chunks = bytes.chunks_exact(16);
        let mut acc = u128::from_ne_bytes(*last);
        for chunk in &mut chunks {
            acc |= chunk.try_into().map_or(u128::MAX, u128::from_ne_bytes);
        }
        return acc & HIGH == 0;
    }
    let pair = |a: u64, b: u64| (a | b) & (HIGH as u64) == 0;
    match (bytes.first_chunk::<8>(), bytes.last_chunk::<8>()) {
        (Some(&a), Some(&b)) => pair(u64::from_ne_bytes(a), u64::from_ne_bytes(b)),
        _ => match (bytes.first_chunk::<4>(), bytes.last_chunk::<4>()) {
            (Some(&a), Some(&b)) => pair(
                u64::from(u32::from_ne_bytes(a)),
                u64::from(u32::from_ne_bytes(b)),
            ),
            _ => bytes.iter().fold(0, |acc, &b| acc | b) < 0x80,
        },
    }
}

/// `bytes` as UTF-8 text, if they are. The SIMD validator checks 64 bytes at a time and
/// leaves shorter input to the standard library's validator, which on short text with a
/// few multi-byte characters (names, small JSON documents) takes three times as long as
/// the SIMD validator on a zero-padded 64-byte copy: so short text is checked that way.
/// The zeros are characters of their own, so the copy is UTF-8 exactly when `bytes` is.
#[inline]
pub fn utf8(bytes: &[u8]) -> Option<&str> {
    const BLOCK: usize = 64;
    if bytes.len() >= BLOCK {
        return simdutf8::basic::from_utf8(bytes).ok();
    }
    let mut padded = [0u8; BLOCK];
    padded.get_mut(..bytes.len())?.copy_from_slice(bytes);
    simdutf8::basic::from_utf8(&padded).ok()?;
    // SAFETY: `bytes` followed by zero bytes is UTF-8 (just checked), and a zero byte is a
    // character of its own, never part of another: so `bytes` alone is UTF-8.
    Some(unsafe { std::str::from_utf8_unchecked(bytes) })
}

pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    kind: MessageKind,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8], kind: MessageKind) -> Self {
        Self { buf, pos: 0, kind }
    }

    /// Offset of the next unread byte.
    pub fn offset(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    /// Moves past `n` bytes of [`Cursor::rest`] the caller has read itself (at most to
    /// the end).
    pub fn skip(&mut self, n: usize) {
        self.pos = self.pos.saturating_add(n).min(self.buf.len());
    }

    pub fn set_kind(&mut self, kind: MessageKind) {
        self.kind = kind;
    }

    /// An error at the current offset.
    pub fn error(&self, reason: Reason) -> DecodeError {
        DecodeError::new(self.kind, self.pos, reason)
    }

    /// An error at an explicit offset (for a field already consumed).
    pub fn error_at(&self, offset: usize, reason: Reason) -> DecodeError {
        DecodeError::new(self.kind, offset, reason)
    }

    pub fn bytes(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(|| self.error(Reason::Truncated { field, needed: n }))?;
        let out = self
            .buf
            .get(self.pos..end)
            .ok_or_else(|| self.error(Reason::Truncated { field, needed: n }))?;
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let bytes = self.bytes(N, field)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        Ok(u8::from_be_bytes(self.array::<1>(field)?))
    }

    pub fn i16(&mut self, field: &'static str) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(self.array::<2>(field)?))
    }

    pub fn i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.array::<4>(field)?))
    }

    pub fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array::<4>(field)?))
    }

    pub fn i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array::<8>(field)?))
    }

    pub fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array::<8>(field)?))
    }

    /// A NUL-terminated UTF-8 string (the terminator is consumed, not returned).
    pub fn cstr(&mut self, field: &'static str) -> Result<&'a str, DecodeError> {
        let start = self.pos;
        let rest = self.buf.get(start..).unwrap_or_default();
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| self.error(Reason::UnterminatedString { field }))?;
        let raw = rest.get(..len).unwrap_or_default();
        let s = std::str::from_utf8(raw)
            .map_err(|e| self.error_at(start + e.valid_up_to(), Reason::InvalidUtf8 { field }))?;
        self.pos = start + len + 1;
        Ok(s)
    }

    /// An Int32 length followed by that many bytes. A negative length, or one longer than
    /// the bytes present, is an error before anything is allocated or sliced.
    pub fn counted(&mut self, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let at = self.pos;
        let len = self.i32(field)?;
        let len = usize::try_from(len).map_err(|_| {
            self.error_at(
                at,
                Reason::BadLength {
                    field,
                    length: i64::from(len),
                },
            )
        })?;
        if len > self.remaining() {
            return Err(self.error_at(
                at,
                Reason::BadLength {
                    field,
                    length: len as i64,
                },
            ));
        }
        self.bytes(len, field)
    }

    /// The message must end here.
    pub fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(self.error(Reason::TrailingBytes(n))),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The text checks say what the standard library says, for text of every length
        /// around the 16-, 64-byte blocks and any bytes.
        #[test]
        fn text_checks_match_the_standard_library(
            bytes in prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..150),
                "\\PC{0,80}".prop_map(String::into_bytes),
                ("[ -~]{0,70}", "\\PC{0,3}", "[ -~]{0,70}")
                    .prop_map(|(a, b, c)| format!("{a}{b}{c}").into_bytes()),
            ],
            cut in any::<prop::sample::Index>(),
        ) {
            // Also cut anywhere, possibly inside a character.
            let cut = cut.index(bytes.len() + 1);
            for b in [&bytes[..], bytes.get(..cut).unwrap_or_default()] {
                let expected = std::str::from_utf8(b).ok();
                prop_assert_eq!(utf8(b), expected);
                prop_assert_eq!(is_ascii(b), b.is_ascii());
            }
        }
    }
}
