//! LSNs in PostgreSQL's text form `XXXXXXXX/XXXXXXXX` (two hexadecimal 32-bit halves).

use std::fmt;

/// Error for a string that is not an LSN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LsnParseError;

impl fmt::Display for LsnParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "not an LSN: expected two hexadecimal numbers of at most 8 digits, like 0/16B3748",
        )
    }
}

impl std::error::Error for LsnParseError {}

/// Parses `"0/16B3748"` into its 64-bit value.
pub fn parse_lsn(text: &str) -> Result<u64, LsnParseError> {
    let (hi, lo) = text.trim().split_once('/').ok_or(LsnParseError)?;
    let half = |s: &str| -> Result<u64, LsnParseError> {
        if s.is_empty() || s.len() > 8 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(LsnParseError);
        }
        u64::from_str_radix(s, 16).map_err(|_| LsnParseError)
    };
    Ok((half(hi)? << 32) | half(lo)?)
}

/// Formats a 64-bit LSN the way PostgreSQL prints it (upper-case hex, no padding).
pub fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for (text, value) in [
            ("0/0", 0u64),
            ("0/16B3748", 0x16B3748),
            ("1/0", 1 << 32),
            ("FFFFFFFF/FFFFFFFF", u64::MAX),
        ] {
            assert_eq!(parse_lsn(text), Ok(value));
            assert_eq!(format_lsn(value), text);
        }
        assert_eq!(parse_lsn("0/16b3748"), Ok(0x16B3748));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "0",
            "/1",
            "1/",
            "g/1",
            "123456789/0",
            "0/-1",
            "0/1/2",
            "+1/0",
        ] {
            assert_eq!(parse_lsn(bad), Err(LsnParseError), "{bad}");
        }
    }
}
