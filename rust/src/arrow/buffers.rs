//! Column memory: plain vectors that become Arrow buffers without a copy, and come back
//! for the next batch once the consumer has let go of them.
//!
//! A finished batch crosses into Python without copying. When the consumer drops it, its
//! memory goes back to the allocator, which returns large blocks to the kernel; the next
//! batch's builders then fault fresh zeroed pages in one by one, about a fifth of the
//! decoding time of a 100,000-row batch (perf: `clear_page`, `do_anonymous_page`). So a
//! table keeps a reference to every buffer it handed out ([`Recycler`]); when the next
//! batch's first row comes, the buffers nobody else holds any more become the vectors of
//! the builders (`Buffer::into_vec`: only when the reference is the last one). A consumer
//! that drains with `take()` has usually dropped the last batch by then; one that iterates
//! (`for batch in stream(...)`) still holds it while the next is built, so a buffer still
//! in use gets a second chance at the batch after (by then the consumer has moved on).
//! Buffers still in use then are let go: nothing is kept beyond the last two batches.

use std::sync::Arc;

use arrow_array::types::GenericBinaryType;
use arrow_array::{
    ArrayRef, ArrowPrimitiveType, GenericByteArray, GenericStringArray, PrimitiveArray,
};
use arrow_buffer::{
    ArrowNativeType, BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer,
};
use arrow_schema::{ArrowError, DataType};

use crate::wire::is_ascii;

/// Room for the next batch of a builder that held `n` values (or bytes): a little more,
/// so a slightly larger batch does not regrow.
pub(crate) fn room(n: usize) -> usize {
    n.saturating_add(n / 16).saturating_add(16)
}

/// The buffers of the last batch a table handed out, and those of the batch before,
/// offered back to its builders.
#[derive(Default)]
pub struct Recycler {
    /// Handed out by the batch being finished.
    lent: Vec<Buffer>,
    /// Handed out by the batch before and still in use when the last batch was built:
    /// offered once more.
    kept: Vec<Buffer>,
    /// Offered while the builders are refilled, smallest first: `kept`'s, then `lent`'s,
    /// the latter marked (true) for a second chance.
    returning: Vec<(Buffer, bool)>,
}

impl Recycler {
    /// Starts refilling the builders: the buffers lent out by the last two batches are
    /// offered for reuse, smallest first.
    pub fn begin(&mut self) {
        self.returning.clear();
        self.returning.extend(
            std::mem::take(&mut self.kept)
                .into_iter()
                .map(|b| (b, false)),
        );
        self.returning.extend(
            std::mem::take(&mut self.lent)
                .into_iter()
                .map(|b| (b, true)),
        );
        self.returning.sort_by_key(|(b, _)| b.capacity());
    }

    /// Ends refilling: what the last batch lent and was not reused is kept for the next
    /// refill; the rest is let go (freed if nobody holds it).
    pub fn end(&mut self) {
        self.kept = self
            .returning
            .drain(..)
            .filter_map(|(b, second_chance)| second_chance.then_some(b))
            .collect();
    }

    /// A buffer of `values`, remembered for reuse.
    pub fn lend<T: ArrowNativeType>(&mut self, values: Vec<T>) -> Buffer {
        let buffer = Buffer::from_vec(values);
        if buffer.capacity() > 0 {
            self.lent.push(buffer.clone());
        }
        buffer
    }

    /// An empty vector with room for `capacity` values: the smallest returned buffer that
    /// fits and that only this table still references, or a new allocation.
    pub fn vec<T: ArrowNativeType>(&mut self, capacity: usize) -> Vec<T> {
        let bytes = capacity.saturating_mul(std::mem::size_of::<T>());
        let mut i = self
            .returning
            .partition_point(|(b, _)| b.capacity() < bytes);
        while i < self.returning.len() {
            let (buffer, second_chance) = self.returning.remove(i);
            match buffer.into_vec::<T>() {
                Ok(mut v) => {
                    v.clear();
                    return v;
                }
                // Still shared, or laid out for another type: it stays, in order.
                Err(buffer) => {
                    self.returning.insert(i, (buffer, second_chance));
                    i += 1;
                }
            }
        }
        Vec::with_capacity(capacity)
    }
}

/// A builder's vector: lent out by `finish`, given memory again by `refill` before the
/// next batch's first value, with room for as many values as the last batch had.
#[derive(Default)]
pub struct Slot<T> {
    pub values: Vec<T>,
    next: usize,
}

impl<T: ArrowNativeType> Slot<T> {
    /// A slot of offsets: one 0 before any value.
    pub fn offsets() -> Self {
        Self {
            values: vec![T::default()],
            next: 0,
        }
    }

    /// The values so far; the slot is left empty, without memory until `refill`.
    pub fn lend(&mut self, recycler: &mut Recycler) -> Buffer {
        self.next = room(self.values.len());
        recycler.lend(std::mem::take(&mut self.values))
    }

    /// Memory for the next batch, if the slot has none yet (`keep`: values it may hold).
    pub fn refill(&mut self, recycler: &mut Recycler, keep: usize) {
        if self.values.len() <= keep && self.values.capacity() < self.next {
            let mut fresh = recycler.vec(self.next.max(keep));
            fresh.extend_from_slice(&self.values);
            self.values = fresh;
        }
    }
}

/// A validity bitmap built one entry at a time, materialised at the first null.
#[derive(Default)]
pub struct Validity {
    bits: Slot<u8>,
    len: usize,
    /// False while every entry is valid: `bits` is then not kept up to date.
    has_nulls: bool,
}

impl Validity {
    // Measured hot path (every value of every row): kept forced-inline.
    #[allow(clippy::inline_always)]
    #[inline(always)]
    pub fn push(&mut self, valid: bool) {
        if valid && !self.has_nulls {
            self.len += 1;
        } else {
            self.push_bit(valid);
        }
    }

    #[inline]
    fn push_bit(&mut self, valid: bool) {
        if !self.has_nulls {
            self.materialise();
        }
        let bit = self.len % 8;
        if bit == 0 {
            self.bits.values.push(u8::from(valid));
        } else if let Some(byte) = self.bits.values.last_mut() {
            *byte |= u8::from(valid) << bit;
        }
        self.len += 1;
    }

    pub fn push_n(&mut self, n: usize, valid: bool) {
        if valid && !self.has_nulls {
            self.len += n;
            return;
        }
        for _ in 0..n {
            self.push_bit(valid);
        }
    }

    /// Writes the all-valid prefix out as bits.
    #[cold]
    fn materialise(&mut self) {
        self.has_nulls = true;
        let bits = &mut self.bits.values;
        bits.clear();
        bits.resize(self.len / 8, 0xff);
        if self.len % 8 != 0 {
            bits.push((1u8 << (self.len % 8)) - 1);
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The bitmap so far (`None`: no nulls); starts empty again.
    pub fn finish(&mut self, recycler: &mut Recycler) -> Option<NullBuffer> {
        let len = std::mem::take(&mut self.len);
        if !std::mem::take(&mut self.has_nulls) {
            return None;
        }
        Some(NullBuffer::new(BooleanBuffer::new(
            self.bits.lend(recycler),
            0,
            len,
        )))
    }

    pub fn refill(&mut self, recycler: &mut Recycler) {
        self.bits.refill(recycler, 0);
    }
}

/// A column of fixed-width values (integers, floats, decimals, dates, times, timestamps).
#[derive(Default)]
pub struct Fixed<T: ArrowNativeType> {
    values: Slot<T>,
    valid: Validity,
}

impl<T: ArrowNativeType> Fixed<T> {
    #[inline]
    pub fn push(&mut self, value: T) {
        self.values.values.push(value);
        self.valid.push(true);
    }

    #[inline]
    pub fn push_option(&mut self, value: Option<T>) {
        self.values.values.push(value.unwrap_or_default());
        self.valid.push(value.is_some());
    }

    #[inline]
    pub fn push_null(&mut self) {
        self.push_option(None);
    }

    /// `n` times the same value (or null).
    pub fn push_option_n(&mut self, value: Option<T>, n: usize) {
        let values = &mut self.values.values;
        values.resize(values.len().saturating_add(n), value.unwrap_or_default());
        self.valid.push_n(n, value.is_some());
    }

    pub fn push_nulls(&mut self, n: usize) {
        self.push_option_n(None, n);
    }

    pub fn len(&self) -> usize {
        self.values.values.len()
    }

    pub fn refill(&mut self, recycler: &mut Recycler) {
        self.values.refill(recycler, 0);
        self.valid.refill(recycler);
    }

    /// The values so far as an array of `data_type` (a type of `P`: the time zone of a
    /// timestamp, the precision and scale of a decimal); the column starts empty again.
    pub fn finish<P: ArrowPrimitiveType<Native = T>>(
        &mut self,
        data_type: &DataType,
        recycler: &mut Recycler,
    ) -> ArrayRef {
        let len = self.len();
        let nulls = self.valid.finish(recycler);
        let values = ScalarBuffer::new(self.values.lend(recycler), 0, len);
        Arc::new(PrimitiveArray::<P>::new(values, nulls).with_data_type(data_type.clone()))
    }
}

/// A column of variable-width values: strings or bytes, 32-bit offsets.
pub struct Bytes {
    /// Starts with 0.
    offsets: Slot<i32>,
    data: Slot<u8>,
    valid: Validity,
}

impl Default for Bytes {
    fn default() -> Self {
        Self {
            offsets: Slot::offsets(),
            data: Slot::default(),
            valid: Validity::default(),
        }
    }
}

/// More bytes in one batch's column than 32-bit offsets address.
#[derive(Debug)]
pub struct OffsetOverflow;

impl Bytes {
    #[inline]
    pub fn push(&mut self, value: &[u8]) -> Result<(), OffsetOverflow> {
        let end = self
            .data
            .values
            .len()
            .checked_add(value.len())
            .and_then(|end| i32::try_from(end).ok())
            .ok_or(OffsetOverflow)?;
        self.data.values.extend_from_slice(value);
        self.offsets.values.push(end);
        self.valid.push(true);
        Ok(())
    }

    #[inline]
    pub fn push_null(&mut self) {
        let offsets = &mut self.offsets.values;
        let end = offsets.last().copied().unwrap_or(0);
        offsets.push(end);
        self.valid.push(false);
    }

    pub fn push_nulls(&mut self, n: usize) {
        let offsets = &mut self.offsets.values;
        let end = offsets.last().copied().unwrap_or(0);
        offsets.resize(offsets.len().saturating_add(n), end);
        self.valid.push_n(n, false);
    }

    pub fn len(&self) -> usize {
        self.valid.len()
    }

    pub fn refill(&mut self, recycler: &mut Recycler) {
        self.offsets.refill(recycler, 1);
        self.data.refill(recycler, 0);
        self.valid.refill(recycler);
    }

    fn finish_parts(
        &mut self,
        recycler: &mut Recycler,
    ) -> (OffsetBuffer<i32>, Buffer, Option<NullBuffer>) {
        let len = self.len();
        let nulls = self.valid.finish(recycler);
        // Offsets start at 0 and never decrease: they are pushed that way.
        let offsets = OffsetBuffer::new(ScalarBuffer::new(self.offsets.lend(recycler), 0, len + 1));
        self.offsets.values.push(0);
        (offsets, self.data.lend(recycler), nulls)
    }

    /// The byte strings so far; the column starts empty again.
    pub fn finish_binary(&mut self, recycler: &mut Recycler) -> Result<ArrayRef, ArrowError> {
        let (offsets, data, nulls) = self.finish_parts(recycler);
        Ok(Arc::new(
            GenericByteArray::<GenericBinaryType<i32>>::try_new(offsets, data, nulls)?,
        ))
    }
}

/// A column of strings: [`Bytes`] that only ever receives `str`s and bytes it has checked
/// to be ASCII, so the finished array needs no second UTF-8 check.
#[derive(Default)]
pub struct Utf8(Bytes);

impl Utf8 {
    #[inline]
    pub fn push(&mut self, value: &str) -> Result<(), OffsetOverflow> {
        self.0.push(value.as_bytes())
    }

    /// Pushes `value` when it is ASCII (so UTF-8): binary-format text, usually ASCII, is
    /// much cheaper to recognise as such than as UTF-8. `Ok(false)`: it is not, nothing
    /// was pushed.
    #[inline]
    pub fn push_ascii(&mut self, value: &[u8]) -> Result<bool, OffsetOverflow> {
        if !is_ascii(value) {
            return Ok(false);
        }
        self.0.push(value).map(|()| true)
    }

    #[inline]
    pub fn push_null(&mut self) {
        self.0.push_null();
    }

    pub fn push_nulls(&mut self, n: usize) {
        self.0.push_nulls(n);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn refill(&mut self, recycler: &mut Recycler) {
        self.0.refill(recycler);
    }

    /// The strings so far; the column starts empty again.
    pub fn finish(&mut self, recycler: &mut Recycler) -> ArrayRef {
        let (offsets, data, nulls) = self.0.finish_parts(recycler);
        // Debug builds (the tests) make the check Arrow would make.
        debug_assert!(GenericStringArray::<i32>::try_new(
            offsets.clone(),
            data.clone(),
            nulls.clone()
        )
        .is_ok());
        // SAFETY: what `GenericStringArray::new_unchecked` asks of its arguments holds by
        // construction. `Bytes` keeps its offsets and data private and changes them only in
        // `push`, `push_null(s)` and `finish_parts`: the offsets start at 0, each push adds
        // the end of the data after appending to it (never decreasing, at most `i32::MAX`,
        // checked), and the last offset is the data's length. `nulls`, when present, has
        // one entry per offset after the first (every push and push_null adds one to each).
        // `Utf8` hands `Bytes` nothing but whole `str`s and byte strings it has just
        // checked to be ASCII (`push_ascii`), so the data is a concatenation of UTF-8
        // strings, itself UTF-8, and every offset (an end of one of those strings) is at a
        // char boundary.
        Arc::new(unsafe { GenericStringArray::<i32>::new_unchecked(offsets, data, nulls) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::Array;

    /// Fills the column with `n` values from `first` (every third one null) and finishes it.
    fn batch(col: &mut Fixed<i64>, recycler: &mut Recycler, first: i64, n: i64) -> ArrayRef {
        recycler.begin();
        col.refill(recycler);
        recycler.end();
        for v in first..first + n {
            col.push_option((v % 3 != 0).then_some(v));
        }
        col.finish::<Int64Type>(&DataType::Int64, recycler)
    }

    fn values_ptr(array: &ArrayRef) -> *const i64 {
        array.as_primitive::<Int64Type>().values().as_ptr()
    }

    fn expected(first: i64, n: i64) -> Vec<Option<i64>> {
        (first..first + n)
            .map(|v| (v % 3 != 0).then_some(v))
            .collect()
    }

    /// A batch the consumer released lends its memory to the next batch; one it keeps is
    /// never written to again.
    #[test]
    fn released_buffers_come_back_and_kept_ones_stay_intact() {
        let mut recycler = Recycler::default();
        let mut col = Fixed::<i64>::default();
        // The first batch grows from nothing; from the second on, the columns have room
        // for a batch like the last.
        let _ = batch(&mut col, &mut recycler, 0, 1000);
        let second = batch(&mut col, &mut recycler, 1000, 1000);
        let second_ptr = values_ptr(&second);
        drop(second);
        let third = batch(&mut col, &mut recycler, 2000, 1000);
        assert_eq!(values_ptr(&third), second_ptr);
        assert_eq!(
            third.as_primitive::<Int64Type>().iter().collect::<Vec<_>>(),
            expected(2000, 1000)
        );

        let kept = batch(&mut col, &mut recycler, 4000, 1000);
        for round in 1..5 {
            let _ = batch(&mut col, &mut recycler, 10_000 * round, 1000);
        }
        assert_eq!(
            kept.as_primitive::<Int64Type>().iter().collect::<Vec<_>>(),
            expected(4000, 1000)
        );
        assert_eq!(kept.null_count(), 333);
    }

    #[test]
    fn ascii_check_finds_every_high_byte() {
        // Every path: bytes alone, 4- and 8-byte word pairs, one to four 16-byte chunks.
        for len in 0..70 {
            let mut bytes = vec![b'a'; len];
            assert!(is_ascii(&bytes));
            for i in 0..len {
                for high in [0x80, 0xc3, 0xff] {
                    let mut high_at_i = bytes.clone();
                    high_at_i.insert(i, high);
                    assert!(!is_ascii(&high_at_i), "{len} {i}");
                    bytes.insert(i, 0x7f);
                    assert!(is_ascii(&bytes), "{len} {i}");
                    bytes.remove(i);
                }
            }
        }
    }

    /// Strings and ASCII bytes go in, anything else is refused: the array finishes as
    /// what was pushed.
    #[test]
    fn utf8_columns_hold_what_was_pushed() {
        let mut recycler = Recycler::default();
        let mut col = Utf8::default();
        for round in 0..3 {
            recycler.begin();
            col.refill(&mut recycler);
            recycler.end();
            assert!(col.push("é☃").is_ok());
            assert!(matches!(col.push_ascii(b"plain"), Ok(true)));
            assert!(matches!(col.push_ascii("é".as_bytes()), Ok(false)));
            assert!(matches!(col.push_ascii(&[b'x', 0xff]), Ok(false)));
            col.push_null();
            col.push_nulls(round);
            let array = col.finish(&mut recycler);
            let strings = array.as_string::<i32>();
            let mut expected = vec![Some("é☃"), Some("plain"), None];
            expected.extend(std::iter::repeat(None).take(round));
            assert_eq!(strings.iter().collect::<Vec<_>>(), expected);
        }
    }

    #[test]
    fn validity_matches_the_entries_pushed() {
        let mut recycler = Recycler::default();
        for pattern in [
            vec![true; 20],
            vec![false; 3],
            (0..37).map(|i| i % 5 != 2).collect(),
        ] {
            let mut v = Validity::default();
            for &b in &pattern {
                v.push(b);
            }
            let nulls = v.finish(&mut recycler);
            let got: Vec<bool> = match &nulls {
                None => vec![true; pattern.len()],
                Some(n) => n.iter().collect(),
            };
            assert_eq!(got, pattern);
            assert_eq!(v.len(), 0);
        }
    }

    /// A batch still held while the next is built (a `for batch in stream(...)` loop)
    /// lends its memory to the batch after; one held longer is let go.
    #[test]
    fn a_batch_held_while_the_next_is_built_comes_back_one_later() {
        let mut recycler = Recycler::default();
        let mut col = Fixed::<i64>::default();
        let _ = batch(&mut col, &mut recycler, 0, 1000);
        let second = batch(&mut col, &mut recycler, 1000, 1000);
        let second_ptr = values_ptr(&second);
        let third = batch(&mut col, &mut recycler, 2000, 1000);
        assert_ne!(values_ptr(&third), second_ptr);
        drop(second);
        let fourth = batch(&mut col, &mut recycler, 3000, 1000);
        assert_eq!(values_ptr(&fourth), second_ptr);
        assert_eq!(
            fourth
                .as_primitive::<Int64Type>()
                .iter()
                .collect::<Vec<_>>(),
            expected(3000, 1000)
        );
        // `third` held through two more batches: no longer offered, never written to.
        drop(fourth);
        let _ = batch(&mut col, &mut recycler, 4000, 1000);
        let _ = batch(&mut col, &mut recycler, 5000, 1000);
        let third_ptr = values_ptr(&third).cast::<u8>();
        assert!(recycler.kept.iter().all(|b| b.as_ptr() != third_ptr));
        assert_eq!(
            third.as_primitive::<Int64Type>().iter().collect::<Vec<_>>(),
            expected(2000, 1000)
        );
    }
}
