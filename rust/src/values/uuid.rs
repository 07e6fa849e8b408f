//! uuid: the canonical lower-case `8-4-4-4-12` text, in a fixed 36-byte buffer.
//!
//! PostgreSQL prints uuids only in that form; upper-case hex is accepted too. Binary
//! (`uuid_send`) is the 16 raw bytes.

use std::fmt;

use super::error::ValueError;

const TY: &str = "uuid";
const HEX: &[u8; 16] = b"0123456789abcdef";
/// Byte offsets of the dashes in the canonical form.
const DASHES: [usize; 4] = [8, 13, 18, 23];

/// A uuid's canonical text, without allocation.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Uuid([u8; 36]);

impl Uuid {
    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits and dashes are ever stored.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    pub fn as_bytes(&self) -> &[u8; 36] {
        &self.0
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Uuid({})", self.as_str())
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// uuid text (either case) -> canonical lower-case.
pub fn text(s: &str) -> Result<Uuid, ValueError> {
    let bytes: &[u8; 36] = s
        .as_bytes()
        .try_into()
        .map_err(|_| ValueError::malformed(TY))?;
    let mut out = [0u8; 36];
    for (i, (&b, slot)) in bytes.iter().zip(out.iter_mut()).enumerate() {
        *slot = if DASHES.contains(&i) {
            if b != b'-' {
                return Err(ValueError::malformed(TY));
            }
            b'-'
        } else if b.is_ascii_hexdigit() {
            b.to_ascii_lowercase()
        } else {
            return Err(ValueError::malformed(TY));
        };
    }
    Ok(Uuid(out))
}

/// uuid binary: 16 bytes -> canonical text.
pub fn binary(b: &[u8]) -> Result<Uuid, ValueError> {
    let bytes: &[u8; 16] = b.try_into().map_err(|_| ValueError::malformed(TY))?;
    let mut out = [b'-'; 36];
    let mut slots = out
        .iter_mut()
        .enumerate()
        .filter(|(i, _)| !DASHES.contains(i))
        .map(|(_, slot)| slot);
    for &byte in bytes {
        for nibble in [byte >> 4, byte & 0x0f] {
            if let (Some(slot), Some(&digit)) = (slots.next(), HEX.get(usize::from(nibble))) {
                *slot = digit;
            }
        }
    }
    Ok(Uuid(out))
}
