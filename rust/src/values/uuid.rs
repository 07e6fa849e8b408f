//! uuid: the canonical lower-case `8-4-4-4-12` text, in a fixed 36-byte buffer.
//!
//! PostgreSQL prints uuids only in that form; upper-case hex is accepted too. Binary
//! (`uuid_send`) is the 16 raw bytes.

use std::fmt;

use super::error::ValueError;

const TY: &str = "uuid";
const HEX: &[u8; 16] = b"0123456789abcdef";

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

/// Which bytes of the canonical form are dashes (offsets 8, 13, 18 and 23).
#[rustfmt::skip]
const IS_DASH: [bool; 36] = [
    false, false, false, false, false, false, false, false, true,
    false, false, false, false, true,
    false, false, false, false, true,
    false, false, false, false, true,
    false, false, false, false, false, false, false, false, false, false, false, false,
];

/// Each byte's two lower-case hex digits.
#[allow(clippy::indexing_slicing)] // constant evaluation: out of range would not compile
const HEX_PAIRS: [[u8; 2]; 256] = {
    let mut table = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = [HEX[i >> 4], HEX[i & 0x0f]];
        i += 1;
    }
    table
};

/// uuid text (either case) -> canonical lower-case.
pub fn text(s: &str) -> Result<Uuid, ValueError> {
    let bytes: &[u8; 36] = s
        .as_bytes()
        .try_into()
        .map_err(|_| ValueError::malformed(TY))?;
    let mut out = *bytes;
    let mut ok = true;
    for (slot, &dash) in out.iter_mut().zip(IS_DASH.iter()) {
        let b = *slot;
        // Branch-free per byte: check, then lower-case (a no-op on digits and dashes).
        ok &= if dash {
            b == b'-'
        } else {
            b.is_ascii_hexdigit()
        };
        *slot = b.to_ascii_lowercase();
    }
    if ok {
        Ok(Uuid(out))
    } else {
        Err(ValueError::malformed(TY))
    }
}

/// Whether `s` is already the canonical lower-case text (what PostgreSQL prints), so it
/// can be stored as it is. One pass without early exit over the fixed 36 bytes.
pub fn is_canonical(s: &str) -> bool {
    let Ok(bytes) = <&[u8; 36]>::try_from(s.as_bytes()) else {
        return false;
    };
    bytes
        .iter()
        .zip(IS_DASH.iter())
        .fold(true, |ok, (&b, &dash)| {
            let lower_hex = b.wrapping_sub(b'0') < 10 || b.wrapping_sub(b'a') < 6;
            ok & if dash { b == b'-' } else { lower_hex }
        })
}

/// uuid binary: 16 bytes -> canonical text.
pub fn binary(b: &[u8]) -> Result<Uuid, ValueError> {
    // Where each byte's two hex digits go: the groups are 4, 2, 2, 2 and 6 bytes.
    const AT: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];
    let bytes: &[u8; 16] = b.try_into().map_err(|_| ValueError::malformed(TY))?;
    let mut out = [b'-'; 36];
    for (&byte, &at) in bytes.iter().zip(AT.iter()) {
        let pair = HEX_PAIRS
            .get(usize::from(byte))
            .copied()
            .unwrap_or([b'0'; 2]);
        if let Some(slot) = out.get_mut(at..at + 2) {
            slot.copy_from_slice(&pair);
        }
    }
    Ok(Uuid(out))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Canonical exactly when reading the text gives it back unchanged.
        #[test]
        fn canonical_text_is_what_reading_gives_back(
            s in prop_oneof![
                "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
                "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
                "[0-9a-g/:@`-]{36}",
                ".{30,40}",
            ],
        ) {
            let read_back = text(&s).is_ok_and(|u| u.as_str() == s);
            prop_assert_eq!(is_canonical(&s), read_back);
        }
    }
}
