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

/// 10^0 to 10^8, the scale of a run of that many digits.
const POW10_8: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// The run of ASCII digits at `b[pos..]`, up to eight of them: how many, and the number
/// they spell. Eight bytes are read as one little-endian word (the first byte lowest):
/// those at `pos`, or, nearer the end, the last eight of `b` shifted down past the bytes
/// before `pos` (shorter texts are read a byte at a time). XORed with `'0'`, digits become
/// 0 to 9 and a byte is not a digit exactly when adding 0x76 sets its high bit (a byte
/// from 0x80 has it already), without a carry between bytes. The run's digits are moved
/// to the top of the word, zeros (digit 0) coming in below them, and neighbouring digits,
/// then pairs, then quadruples are combined by one multiplication each.
// Hot path of the number parsers (several calls a value): kept forced-inline.
#[allow(clippy::inline_always)]
#[inline(always)]
pub(crate) fn digits8(b: &[u8], pos: usize) -> (usize, u64) {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let rest = b.get(pos..).unwrap_or_default();
    let (word, len) = match (rest.first_chunk::<8>(), b.last_chunk::<8>()) {
        (Some(chunk), _) => (u64::from_le_bytes(*chunk), 8),
        (None, _) if rest.is_empty() => return (0, 0),
        (None, Some(last)) => (
            u64::from_le_bytes(*last) >> (8 * (8 - rest.len())),
            rest.len(),
        ),
        (None, None) => return digits_bytewise(rest),
    };
    let d = word ^ 0x3030_3030_3030_3030;
    let mut not_digit = (d | d.wrapping_add(0x7676_7676_7676_7676)) & HIGH;
    if len < 8 {
        // The bytes past the end of `b` (zeros, which the XOR made non-digits already).
        not_digit |= HIGH << (8 * len);
    }
    let n = (not_digit.trailing_zeros() / 8) as usize;
    if n == 0 {
        return (0, 0);
    }
    let top = d << (8 * (8 - n));
    // Each byte pair (a, b) becomes 10a + b in the pair's upper byte, shifted down; then
    // pairs into 16-bit quadruples, quadruples into the 32-bit result.
    let pairs = (top.wrapping_mul(10 << 8 | 1) >> 8) & 0x00ff_00ff_00ff_00ff;
    let quads = (pairs.wrapping_mul(100 << 16 | 1) >> 16) & 0x0000_ffff_0000_ffff;
    (n, quads.wrapping_mul(10_000 << 32 | 1) >> 32)
}

/// [`digits8`] for a text shorter than eight bytes.
fn digits_bytewise(b: &[u8]) -> (usize, u64) {
    let mut value = 0;
    let mut n = 0;
    for &c in b.iter().take(8) {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        value = value * 10 + u64::from(d);
        n += 1;
    }
    (n, value)
}

/// A run of ASCII digits at `b[pos..]` read onto `w` (`w` times ten per digit, plus the
/// digit), eight at a time: the new `w` and where the run ends. `None` when `w` overflows
/// (a run of leading zeros onto 0 never does).
#[allow(clippy::inline_always)]
#[inline(always)]
pub(crate) fn digit_run(mut w: u64, b: &[u8], mut pos: usize) -> Option<(u64, usize)> {
    loop {
        let (n, value) = digits8(b, pos);
        if n == 0 {
            break;
        }
        w = w.checked_mul(*POW10_8.get(n)?)?.checked_add(value)?;
        pos += n;
        if n < 8 {
            break;
        }
    }
    Some((w, pos))
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
/// exponents, words or longer numbers. A byte at a time: on numbers of a few digits, such
/// as numeric(12,2) columns mostly hold, about a tenth faster than eight at a time
/// ([`digit_run`]; the synthetic streams' amounts).
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
            ("00000000000000000001", None),
            ("0.000000000000000001", plain(1, 18)),
            ("12345678.12345678", plain(1_234_567_812_345_678, 8)),
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

    #[test]
    fn digit_runs_of_up_to_eight() {
        for (text, expected) in [
            ("", (0, 0)),
            ("x", (0, 0)),
            ("7", (1, 7)),
            ("0000", (4, 0)),
            ("1234.5", (4, 1234)),
            ("12345678", (8, 12_345_678)),
            ("123456789", (8, 12_345_678)),
            ("99999999", (8, 99_999_999)),
            ("01020304", (8, 1_020_304)),
            ("1234567.", (7, 1_234_567)),
            ("/", (0, 0)),
            (":", (0, 0)),
            ("12\u{e9}", (2, 12)),
        ] {
            assert_eq!(digits8(text.as_bytes(), 0), expected, "{text}");
            // The same run at the end of a longer text.
            let longer = format!("abcdefgh{text}");
            assert_eq!(digits8(longer.as_bytes(), 8), expected, "{longer}");
        }
    }

    proptest::proptest! {
        /// Any bytes: the run and its value as read one byte at a time.
        #[test]
        fn digit_runs_match_bytewise(
            b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..20),
            pos in 0_usize..20,
        ) {
            let rest = b.get(pos..).unwrap_or_default();
            let n = rest.iter().take(8).take_while(|c| c.is_ascii_digit()).count();
            let value = rest.iter().take(n).fold(0, |v, &c| v * 10 + u64::from(c - b'0'));
            proptest::prop_assert_eq!(digits8(&b, pos), (n, value));
        }

        /// Digit texts of any length, read in runs: the value of the whole, or an overflow.
        #[test]
        fn long_runs_match_the_parser(s in "[0-9]{0,24}x?") {
            let digits = s.trim_end_matches('x');
            let expected = if digits.is_empty() { Some(0) } else { digits.parse::<u64>().ok() };
            let got = digit_run(0, s.as_bytes(), 0).map(|(w, end)| {
                assert_eq!(end, digits.len());
                w
            });
            proptest::prop_assert_eq!(got, expected);
        }
    }
}
