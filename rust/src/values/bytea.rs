//! bytea: text in either `bytea_output` form decoded to bytes; binary is the bytes.
//!
//! `hex` (the default, and ours): `\x` then two hex digits per byte; `byteain` skips
//! spaces, tabs and newlines between pairs. `escape` (legacy): printable ASCII as is, a
//! backslash as `\\`, any other byte as `\ooo` (three octal digits, first 0-3).

use super::error::ValueError;

const TY: &str = "bytea";

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// bytea text -> bytes into `out` (cleared first).
pub fn text(s: &str, out: &mut Vec<u8>) -> Result<(), ValueError> {
    out.clear();
    match s.as_bytes().strip_prefix(b"\\x") {
        Some(hex) => decode_hex(hex, out),
        None => decode_escape(s.as_bytes(), out),
    }
}

fn decode_hex(hex: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    out.reserve(hex.len() / 2);
    let mut iter = hex.iter().copied();
    while let Some(first) = iter.next() {
        if matches!(first, b' ' | b'\n' | b'\t' | b'\r') {
            continue;
        }
        let high = hex_value(first).ok_or(ValueError::malformed(TY))?;
        let low = iter
            .next()
            .and_then(hex_value)
            .ok_or(ValueError::malformed(TY))?;
        out.push(high << 4 | low);
    }
    Ok(())
}

fn decode_escape(s: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    out.reserve(s.len());
    let mut rest = s;
    while let Some((&b, tail)) = rest.split_first() {
        if b != b'\\' {
            out.push(b);
            rest = tail;
            continue;
        }
        match tail {
            [b'\\', after @ ..] => {
                out.push(b'\\');
                rest = after;
            }
            [a @ b'0'..=b'3', b @ b'0'..=b'7', c @ b'0'..=b'7', after @ ..] => {
                out.push((a - b'0') << 6 | (b - b'0') << 3 | (c - b'0'));
                rest = after;
            }
            _ => return Err(ValueError::malformed(TY)),
        }
    }
    Ok(())
}
