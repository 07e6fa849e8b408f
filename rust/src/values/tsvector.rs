//! tsvector: text passed through; binary (`tsvectorsend`) written as `tsvectorout`
//! prints it.
//!
//! ```text
//! Int32 count                       number of lexemes
//! per lexeme:
//!   String  lexeme                  NUL-terminated
//!   UInt16  npos                    number of positions
//!   UInt16[npos] position           low 14 bits: position; high 2 bits: weight
//!                                   (3 = A, 2 = B, 1 = C, 0 = D, which prints as nothing)
//! ```
//! Output: lexemes separated by spaces, each in single quotes with `'` and `\` doubled,
//! then `:pos[weight],...` when it has positions: `'a':1A,2 'b'`.

use std::fmt::Write as _;

use super::binary::Reader;
use super::error::{ValueError, ValueErrorKind};

const TY: &str = "tsvector";

/// tsvector text: passed through.
pub fn text(s: &str) -> Result<&str, ValueError> {
    Ok(s)
}

/// tsvector binary -> `tsvectorout` text into `out` (cleared first).
pub fn binary(b: &[u8], out: &mut String) -> Result<(), ValueError> {
    let mut r = Reader::new(b, TY);
    let count = r.i32()?;
    if count < 0 {
        return Err(ValueError::malformed(TY));
    }
    out.clear();
    for i in 0..count {
        let lexeme = r.cstring()?;
        let lexeme = std::str::from_utf8(lexeme)
            .map_err(|_| ValueError::new(TY, ValueErrorKind::InvalidUtf8))?;
        if i > 0 {
            out.push(' ');
        }
        out.push('\'');
        for ch in lexeme.chars() {
            if ch == '\'' || ch == '\\' {
                out.push(ch);
            }
            out.push(ch);
        }
        out.push('\'');
        let npos = r.u16()?;
        for j in 0..npos {
            let entry = r.u16()?;
            out.push(if j == 0 { ':' } else { ',' });
            let _ = write!(out, "{}", entry & 0x3fff);
            match entry >> 14 {
                3 => out.push('A'),
                2 => out.push('B'),
                1 => out.push('C'),
                _ => {}
            }
        }
    }
    r.finish()
}
