//! A byte cursor for the text forms: every step checks its bounds and says whether it
//! matched, so parsers read as the grammar they accept.

pub(crate) struct Scanner<'a> {
    s: &'a [u8],
    pos: usize,
}

impl<'a> Scanner<'a> {
    pub(crate) fn new(s: &'a str) -> Self {
        Self {
            s: s.as_bytes(),
            pos: 0,
        }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    #[allow(clippy::should_implement_trait)]
    pub(crate) fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.pos += 1;
        Some(b)
    }

    pub(crate) fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    pub(crate) fn eat_str(&mut self, word: &str) -> bool {
        let rest = self.s.get(self.pos..).unwrap_or_default();
        if rest.starts_with(word.as_bytes()) {
            self.pos += word.len();
            true
        } else {
            false
        }
    }

    pub(crate) fn expect(&mut self, b: u8) -> Option<()> {
        self.eat(b).then_some(())
    }

    /// A run of `min..=max` ASCII digits (all of the run: a longer run fails), as a number.
    pub(crate) fn digits(&mut self, min: usize, max: usize) -> Option<u64> {
        let start = self.pos;
        let mut value: u64 = 0;
        while let Some(b) = self.peek().filter(u8::is_ascii_digit) {
            if self.pos - start >= max {
                self.pos = start;
                return None;
            }
            value = value * 10 + u64::from(b - b'0');
            self.pos += 1;
        }
        if self.pos - start < min {
            self.pos = start;
            return None;
        }
        Some(value)
    }

    /// Exactly `n` digits, not followed by another digit.
    pub(crate) fn fixed_digits(&mut self, n: usize) -> Option<u64> {
        self.digits(n, n)
    }

    /// `Some` when every byte was consumed.
    pub(crate) fn end(&self) -> Option<()> {
        (self.pos == self.s.len()).then_some(())
    }
}

/// A plain decimal `digits(.digits)?` of at most 19 digits, read as one integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PlainDecimal {
    /// The digits, point left out.
    pub(crate) mantissa: u64,
    /// Digits after the point.
    pub(crate) fraction_digits: usize,
}

/// Reads `digits(.digits)?` (at least one digit each side of a point, as the output
/// functions print) of at most 19 digits in all; `None` for anything else, such as signs,
/// exponents, words or longer numbers.
pub(crate) fn plain_decimal(body: &[u8]) -> Option<PlainDecimal> {
    // Wrapping: more than 19 digits are refused below.
    let mut mantissa: u64 = 0;
    let mut dot = None;
    for (i, &c) in body.iter().enumerate() {
        let d = c.wrapping_sub(b'0');
        if d <= 9 {
            mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(d));
        } else if c == b'.' && dot.is_none() {
            dot = Some(i);
        } else {
            return None;
        }
    }
    let fraction_digits = match dot {
        // "5." and ".5".
        Some(0) => return None,
        Some(dot) if dot + 1 == body.len() => return None,
        Some(dot) => body.len() - dot - 1,
        None => 0,
    };
    let digits = body.len() - usize::from(dot.is_some());
    if digits == 0 || digits > 19 {
        return None;
    }
    Some(PlainDecimal {
        mantissa,
        fraction_digits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_decimals() {
        let plain = |mantissa, fraction_digits| {
            Some(PlainDecimal {
                mantissa,
                fraction_digits,
            })
        };
        for (text, expected) in [
            ("0", plain(0, 0)),
            ("123.45", plain(12_345, 2)),
            ("9999999999999999999", plain(9_999_999_999_999_999_999, 0)),
            ("999999999.9999999999", plain(9_999_999_999_999_999_999, 10)),
            ("10000000000000000000", None),
            ("", None),
            (".5", None),
            ("5.", None),
            ("1.2.3", None),
            ("-1", None),
            ("1e5", None),
        ] {
            assert_eq!(plain_decimal(text.as_bytes()), expected, "{text}");
        }
    }
}
