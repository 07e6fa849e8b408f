//! money: text passed through (its form depends on the server's lc_monetary); binary
//! (`cash_send`: Int64, the amount in cents) written as `cash_out` prints it under
//! `lc_monetary = 'C'`: `$1,234.56`, `-$1,234.56`, `$0.00` — two fraction digits,
//! groups of three, `$` before the digits and the sign before the `$`.
//! Connections that want text and binary to agree for money set lc_monetary to C.

use super::datetime::fixed;
use super::error::ValueError;

const TY: &str = "money";

/// money text: any non-empty text, passed through.
pub fn text(s: &str) -> Result<&str, ValueError> {
    if s.is_empty() {
        return Err(ValueError::malformed(TY));
    }
    Ok(s)
}

/// money binary -> `cash_out` text (C locale) into `out` (cleared first).
pub fn binary(b: &[u8], out: &mut String) -> Result<(), ValueError> {
    let cents = i64::from_be_bytes(fixed(b, TY)?);
    out.clear();
    if cents < 0 {
        out.push('-');
    }
    out.push('$');
    let magnitude = cents.unsigned_abs();
    let units = magnitude / 100;
    let fraction = magnitude % 100;
    // The units' digits, least significant first, into a stack buffer (u64 has at most
    // 20), then out most significant first with a comma before each group of three.
    let mut digits = [0u8; 20];
    let mut len = 0;
    let mut rest = units;
    for slot in &mut digits {
        *slot = (rest % 10) as u8;
        rest /= 10;
        len += 1;
        if rest == 0 {
            break;
        }
    }
    for (i, &d) in digits.iter().take(len).rev().enumerate() {
        if i > 0 && (len - i) % 3 == 0 {
            out.push(',');
        }
        out.push(char::from(b'0' + d));
    }
    out.push('.');
    out.push(char::from(b'0' + (fraction / 10) as u8));
    out.push(char::from(b'0' + (fraction % 10) as u8));
    Ok(())
}
