//! One-dimensional arrays, in both formats: checked whole first, then iterated element
//! by element without allocation (a text element with quotes or backslashes is unescaped
//! into a caller's scratch buffer on demand).
//!
//! Text format (`array_out`, read back as `array_in` reads it): `{e1,e2,...}`, `{}` when
//! empty, prefixed by `[lower:upper]=` when the lower bound is not 1. An element is
//! double-quoted when it is empty, is `NULL` in any case, or holds `{`, `}`, `,`, `"`,
//! `\` or white space; inside quotes `"` and `\` are backslash-escaped. A NULL element is
//! the unquoted word `NULL`. `array_in` also allows white space around elements (dropped)
//! and backslash escapes in unquoted elements, both handled here.
//! Nested braces (`{{1,2},{3,4}}`) are a multi-dimensional array.
//!
//! Binary format (`array_send`):
//! ```text
//! Int32 ndim            0 for an empty array
//! Int32 flags           1 if any element is NULL, else 0
//! UInt32 element type OID
//! per dimension: Int32 size, Int32 lower bound
//! per element: Int32 length (-1 for NULL), Byte[length] in the element's binary format
//! ```
//!
//! This module reads the structure only. What an element's bytes mean is left to
//! [`Raw`](super::raw::Raw): `raw.rs` uses this module, never the other way round. It
//! gives [`Element::raw`] and holds the text fallback of binary arrays of any dimension,
//! which prints every element (`Raw::to_text`), built on `MAX_DIMS` and `write_quoted`
//! from here.

use super::binary::Reader;
use super::error::{ValueError, ValueErrorKind};

/// The type name array errors carry.
pub(super) const TY: &str = "array";

pub(super) fn malformed() -> ValueError {
    ValueError::malformed(TY)
}

fn multi_dimensional() -> ValueError {
    ValueError::new(TY, ValueErrorKind::MultiDimensionalArray)
}

/// `array_isspace`: the bytes `array_in` skips around elements.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// A checked one-dimensional text array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextArray<'a> {
    /// The text after the opening brace, up to and including the closing one.
    body: &'a str,
    len: usize,
    lower_bound: i32,
}

/// One element of a text array: borrowed, unescaped only when asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextElement<'a> {
    /// The element from its first to its last significant byte, quotes and backslashes
    /// included.
    raw: &'a str,
    escaped: bool,
}

impl<'a> TextElement<'a> {
    /// The element's value: the input slice itself when it has no quotes or escapes,
    /// else unescaped into `scratch` (cleared first).
    pub fn get<'s>(&self, scratch: &'s mut String) -> &'s str
    where
        'a: 's,
    {
        if !self.escaped {
            return self.raw;
        }
        scratch.clear();
        let mut chars = self.raw.chars();
        while let Some(ch) = chars.next() {
            match ch {
                '\\' => scratch.extend(chars.next()),
                '"' => {}
                other => scratch.push(other),
            }
        }
        scratch
    }

    /// Whether [`Self::get`] needs the scratch buffer.
    pub fn is_escaped(&self) -> bool {
        self.escaped
    }
}

/// The end of one element scanned from `pos` (after leading white space).
struct Scanned {
    /// Offset just past the element's last significant byte.
    end_significant: usize,
    /// Offset of the `,` or `}` that ends it.
    stop: usize,
    escaped: bool,
}

/// Scans one element of `b` from `pos` (its first byte, past white space) to the
/// unquoted `,` or `}` that ends it. As in `array_in`, an element is either quoted
/// whole (only white space may follow the closing quote) or unquoted (no quotes,
/// backslash escapes allowed).
fn scan_element(b: &[u8], start: usize) -> Result<Scanned, ValueError> {
    let quoted = b.get(start) == Some(&b'"');
    let mut pos = if quoted { start + 1 } else { start };
    let mut escaped = quoted;
    let mut end_significant = start;
    if quoted {
        // Inside the quotes: everything up to the closing quote, `\` escaping.
        loop {
            match *b.get(pos).ok_or_else(malformed)? {
                b'\\' => {
                    b.get(pos + 1).ok_or_else(malformed)?;
                    pos += 2;
                }
                b'"' => {
                    pos += 1;
                    end_significant = pos;
                    break;
                }
                _ => pos += 1,
            }
        }
    }
    loop {
        let ch = *b.get(pos).ok_or_else(malformed)?;
        match ch {
            b',' | b'}' => {
                return Ok(Scanned {
                    end_significant,
                    stop: pos,
                    escaped,
                })
            }
            c if is_space(c) => pos += 1,
            _ if quoted => return Err(malformed()),
            b'{' | b'"' => return Err(malformed()),
            b'\\' => {
                b.get(pos + 1).ok_or_else(malformed)?;
                pos += 2;
                escaped = true;
                end_significant = pos;
            }
            _ => {
                pos += 1;
                end_significant = pos;
            }
        }
    }
}

fn skip_space(b: &[u8], mut pos: usize) -> usize {
    while b.get(pos).copied().is_some_and(is_space) {
        pos += 1;
    }
    pos
}

/// `[lower:upper]` or `[upper]`: (lower, upper); None when malformed.
fn dimension(s: &str) -> Option<(i32, i32)> {
    let number = |t: &str| {
        t.trim_matches(|c: char| c.is_ascii() && is_space(c as u8))
            .parse::<i32>()
            .ok()
    };
    match s.split_once(':') {
        Some((lower, upper)) => Some((number(lower)?, number(upper)?)),
        None => Some((1, number(s)?)),
    }
}

impl<'a> TextArray<'a> {
    /// Checks a text array and counts its elements.
    pub fn parse(s: &'a str) -> Result<Self, ValueError> {
        let b = s.as_bytes();
        let mut pos = skip_space(b, 0);
        // Optional dimension decoration: `[lower:upper]` per dimension, then `=`.
        let mut declared: Option<(i32, i32)> = None;
        while b.get(pos) == Some(&b'[') {
            if declared.is_some() {
                return Err(multi_dimensional());
            }
            let close = b
                .get(pos..)
                .and_then(|r| r.iter().position(|&c| c == b']'))
                .ok_or_else(malformed)?;
            let inner = s.get(pos + 1..pos + close).ok_or_else(malformed)?;
            declared = Some(dimension(inner).ok_or_else(malformed)?);
            pos = skip_space(b, pos + close + 1);
        }
        if declared.is_some() {
            if b.get(pos) != Some(&b'=') {
                return Err(malformed());
            }
            pos = skip_space(b, pos + 1);
        }
        if b.get(pos) != Some(&b'{') {
            return Err(malformed());
        }
        let open = pos;
        pos = skip_space(b, pos + 1);
        let mut len = 0usize;
        let close = if b.get(pos) == Some(&b'}') {
            pos
        } else {
            loop {
                if b.get(pos) == Some(&b'{') {
                    return Err(multi_dimensional());
                }
                let element = scan_element(b, pos)?;
                if element.end_significant == pos {
                    // An empty unquoted element (`{1,,2}`).
                    return Err(malformed());
                }
                len += 1;
                match b.get(element.stop) {
                    Some(b',') => pos = skip_space(b, element.stop + 1),
                    _ => break element.stop,
                }
            }
        };
        if skip_space(b, close + 1) != b.len() {
            return Err(malformed());
        }
        let body = s.get(open + 1..=close).ok_or_else(malformed)?;
        let lower_bound = match declared {
            None => 1,
            Some((lower, upper)) => {
                let declared_len = i64::from(upper) - i64::from(lower) + 1;
                if declared_len != len as i64 {
                    return Err(malformed());
                }
                lower
            }
        };
        Ok(Self {
            body,
            len,
            lower_bound,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The subscript of the first element (1 unless the text said otherwise).
    pub fn lower_bound(&self) -> i32 {
        self.lower_bound
    }

    /// The elements in order, `None` for NULL.
    pub fn iter(&self) -> TextElements<'a> {
        TextElements {
            body: self.body,
            pos: 0,
            remaining: self.len,
        }
    }
}

/// Iterator over a checked [`TextArray`].
#[derive(Debug, Clone)]
pub struct TextElements<'a> {
    body: &'a str,
    pos: usize,
    remaining: usize,
}

impl<'a> IntoIterator for &TextArray<'a> {
    type Item = Option<TextElement<'a>>;
    type IntoIter = TextElements<'a>;

    fn into_iter(self) -> TextElements<'a> {
        self.iter()
    }
}

impl<'a> Iterator for TextElements<'a> {
    type Item = Option<TextElement<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        // The body was checked by `TextArray::parse`; it keeps the closing brace, so the
        // same scanner finds the end of the last element.
        let b = self.body.as_bytes();
        let start = skip_space(b, self.pos);
        let scanned = scan_element(b, start).ok()?;
        self.pos = scanned.stop + 1;
        let raw = self.body.get(start..scanned.end_significant)?;
        let is_null = !scanned.escaped && raw.eq_ignore_ascii_case("NULL");
        Some((!is_null).then_some(TextElement {
            raw,
            escaped: scanned.escaped,
        }))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

/// A checked one-dimensional binary array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinaryArray<'a> {
    element_oid: u32,
    lower_bound: i32,
    len: usize,
    has_nulls: bool,
    /// The elements: Int32 length + bytes each.
    data: &'a [u8],
}

impl<'a> BinaryArray<'a> {
    /// Checks the header and that exactly `size` elements fill the rest.
    pub fn parse(b: &'a [u8]) -> Result<Self, ValueError> {
        let mut r = Reader::new(b, TY);
        let ndim = r.i32()?;
        let flags = r.i32()?;
        let element_oid = r.u32()?;
        if flags != 0 && flags != 1 {
            return Err(malformed());
        }
        let (size, lower_bound) = match ndim {
            0 => (0, 1),
            1 => {
                let (size, lower) = (r.i32()?, r.i32()?);
                // The text form names the upper bound, an int4 too.
                if size > 0 && lower.checked_add(size - 1).is_none() {
                    return Err(malformed());
                }
                (size, lower)
            }
            // Like array_recv (and the text fallback in `raw.rs`): dimensions without a
            // single element make the empty array.
            n @ 2.. if n as usize <= MAX_DIMS => {
                let mut empty = false;
                for _ in 0..n {
                    let size = r.i32()?;
                    r.i32()?;
                    empty |= size == 0;
                    if size < 0 {
                        return Err(malformed());
                    }
                }
                if !empty {
                    return Err(multi_dimensional());
                }
                (0, 1)
            }
            n if n > 1 => return Err(multi_dimensional()),
            _ => return Err(malformed()),
        };
        let len = usize::try_from(size).map_err(|_| malformed())?;
        let data = r.rest();
        let mut check = Reader::new(data, TY);
        let mut has_null = false;
        for _ in 0..len {
            has_null |= check.counted()?.is_none();
        }
        check.finish()?;
        Ok(Self {
            element_oid,
            lower_bound,
            len,
            has_nulls: has_null,
            data,
        })
    }

    /// The element type the sender named (a domain's OID for an array of a domain).
    pub fn element_oid(&self) -> u32 {
        self.element_oid
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn lower_bound(&self) -> i32 {
        self.lower_bound
    }

    pub fn has_nulls(&self) -> bool {
        self.has_nulls
    }

    /// The elements' bytes in order, `None` for NULL.
    pub fn iter(&self) -> BinaryElements<'a> {
        BinaryElements {
            reader: Reader::new(self.data, TY),
            remaining: self.len,
        }
    }
}

/// Iterator over a checked [`BinaryArray`].
pub struct BinaryElements<'a> {
    reader: Reader<'a>,
    remaining: usize,
}

impl<'a> IntoIterator for &BinaryArray<'a> {
    type Item = Option<&'a [u8]>;
    type IntoIter = BinaryElements<'a>;

    fn into_iter(self) -> BinaryElements<'a> {
        self.iter()
    }
}

impl<'a> Iterator for BinaryElements<'a> {
    type Item = Option<&'a [u8]>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        self.reader.counted().ok()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

/// A checked one-dimensional array in either format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Array<'a> {
    Text(TextArray<'a>),
    Binary(BinaryArray<'a>),
}

/// One non-NULL array element in either format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Element<'a> {
    Text(TextElement<'a>),
    Binary(&'a [u8]),
}

impl<'a> Array<'a> {
    pub fn len(&self) -> usize {
        match self {
            Self::Text(a) => a.len(),
            Self::Binary(a) => a.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn lower_bound(&self) -> i32 {
        match self {
            Self::Text(a) => a.lower_bound(),
            Self::Binary(a) => a.lower_bound(),
        }
    }

    /// The elements in order, `None` for NULL.
    pub fn iter(&self) -> Elements<'a> {
        match self {
            Self::Text(a) => Elements::Text(a.iter()),
            Self::Binary(a) => Elements::Binary(a.iter()),
        }
    }
}

/// Iterator over an [`Array`].
pub enum Elements<'a> {
    Text(TextElements<'a>),
    Binary(BinaryElements<'a>),
}

impl<'a> IntoIterator for &Array<'a> {
    type Item = Option<Element<'a>>;
    type IntoIter = Elements<'a>;

    fn into_iter(self) -> Elements<'a> {
        self.iter()
    }
}

impl<'a> Iterator for Elements<'a> {
    type Item = Option<Element<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Self::Text(it) => it.next().map(|e| e.map(Element::Text)),
            Self::Binary(it) => it.next().map(|e| e.map(Element::Binary)),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Self::Text(it) => it.size_hint(),
            Self::Binary(it) => it.size_hint(),
        }
    }
}

/// `MAXDIM`: PostgreSQL arrays have at most six dimensions.
pub(super) const MAX_DIMS: usize = 6;

/// Appends an element as `array_out` does: double-quoted when empty, `NULL` in any case,
/// or holding `"`, `\`, `{`, `}`, `,` or white space, with `"` and `\` escaped.
pub(super) fn write_quoted(out: &mut String, text: &str) {
    let needs_quotes = text.is_empty()
        || text.eq_ignore_ascii_case("NULL")
        || text
            .bytes()
            .any(|b| matches!(b, b'"' | b'\\' | b'{' | b'}' | b',') || is_space(b));
    if !needs_quotes {
        out.push_str(text);
        return;
    }
    out.push('"');
    for ch in text.chars() {
        if ch == '"' || ch == '\\' {
            out.push('\\');
        }
        out.push(ch);
    }
    out.push('"');
}
