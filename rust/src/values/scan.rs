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
