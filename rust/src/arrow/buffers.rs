//! Column memory: plain vectors that become Arrow buffers without a copy, and come back
//! for the next batch once the consumer has let go of them.
//!
//! A finished batch crosses into Python without copying. When the consumer drops it, its
//! memory goes back to the allocator, which returns large blocks to the kernel; the next
//! batch's builders then fault fresh zeroed pages in one by one, about a fifth of the
//! decoding time of a 100,000-row batch (perf: `clear_page`, `do_anonymous_page`). So a
//! table keeps a reference to every buffer it handed out ([`Recycler`]); when it finishes
//! its next batch, the buffers nobody else holds any more become the vectors of the next
//! builders (`Buffer::into_vec`: only when the reference is the last one). Buffers still
//! in use are let go, so nothing is kept beyond the last batch.

use std::sync::Arc;

use arrow_array::types::{ByteArrayType, GenericBinaryType, GenericStringType};
use arrow_array::{ArrayRef, ArrowPrimitiveType, GenericByteArray, PrimitiveArray};
use arrow_buffer::{
    ArrowNativeType, BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer,
};
use arrow_schema::{ArrowError, DataType};

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
    /// Handed out by the batch before: reusable once their last other reference is gone.
    returning: Vec<Buffer>,
}

impl Recycler {
    /// Starts finishing a batch: the buffers of the previous one are offered for reuse,
    /// smallest first.
    pub fn begin(&mut self) {
        self.returning = std::mem::take(&mut self.lent);
        self.returning.sort_unstable_by_key(Buffer::capacity);
    }

    /// Ends finishing a batch: what was not reused is let go (freed if nobody holds it).
    pub fn end(&mut self) {
        self.returning.clear();
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
        let mut i = self.returning.partition_point(|b| b.capacity() < bytes);
        while i < self.returning.len() {
            let buffer = self.returning.remove(i);
            match buffer.into_vec::<T>() {
                Ok(mut v) => {
                    v.clear();
                    return v;
                }
                // Still shared, or laid out for another type: it stays, in order.
                Err(buffer) => {
                    self.returning.insert(i, buffer);
                    i += 1;
                }
            }
        }
        Vec::with_capacity(capacity)
    }
}

/// A validity bitmap built one entry at a time, materialised at the first null.
#[derive(Default)]
pub struct Validity {
    bits: Vec<u8>,
    len: usize,
    /// False while every entry is valid: `bits` is then not kept up to date.
    has_nulls: bool,
}

impl Validity {
    #[inline(always)]
    pub fn push(&mut self, valid: bool) {
        if valid && !self.has_nulls {
            self.len += 1;
        } else {
            self.push_bit(valid);
        }
    }

    fn push_bit(&mut self, valid: bool) {
        if !self.has_nulls {
            self.materialise();
        }
        if self.len % 8 == 0 {
            self.bits.push(0);
        }
        if valid {
            if let Some(byte) = self.bits.last_mut() {
                *byte |= 1 << (self.len % 8);
            }
        }
        self.len += 1;
    }

    pub fn push_n(&mut self, n: usize, valid: bool) {
        for _ in 0..n {
            self.push(valid);
        }
    }

    /// Writes the all-valid prefix out as bits.
    fn materialise(&mut self) {
        self.has_nulls = true;
        self.bits.clear();
        self.bits.resize(self.len / 8, 0xff);
        if self.len % 8 != 0 {
            self.bits.push((1u8 << (self.len % 8)) - 1);
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
        let next = recycler.vec(room(len) / 8 + 1);
        let bits = std::mem::replace(&mut self.bits, next);
        Some(NullBuffer::new(BooleanBuffer::new(
            recycler.lend(bits),
            0,
            len,
        )))
    }
}

/// A column of fixed-width values (integers, floats, decimals, dates, times, timestamps).
#[derive(Default)]
pub struct Fixed<T: ArrowNativeType> {
    values: Vec<T>,
    valid: Validity,
}

impl<T: ArrowNativeType> Fixed<T> {
    #[inline]
    pub fn push(&mut self, value: T) {
        self.values.push(value);
        self.valid.push(true);
    }

    #[inline]
    pub fn push_option(&mut self, value: Option<T>) {
        self.values.push(value.unwrap_or_default());
        self.valid.push(value.is_some());
    }

    #[inline]
    pub fn push_null(&mut self) {
        self.push_option(None);
    }

    pub fn push_nulls(&mut self, n: usize) {
        self.values
            .resize(self.values.len().saturating_add(n), T::default());
        self.valid.push_n(n, false);
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// The values so far as an array of `data_type` (a type of `P`: the time zone of a
    /// timestamp, the precision and scale of a decimal); the column starts empty again,
    /// with room for as many values.
    pub fn finish<P: ArrowPrimitiveType<Native = T>>(
        &mut self,
        data_type: &DataType,
        recycler: &mut Recycler,
    ) -> ArrayRef {
        let len = self.values.len();
        let next = recycler.vec(room(len));
        let values = std::mem::replace(&mut self.values, next);
        let nulls = self.valid.finish(recycler);
        let values = ScalarBuffer::new(recycler.lend(values), 0, len);
        Arc::new(PrimitiveArray::<P>::new(values, nulls).with_data_type(data_type.clone()))
    }
}

/// A column of variable-width values: strings or bytes, 32-bit offsets.
pub struct Bytes {
    offsets: Vec<i32>,
    data: Vec<u8>,
    valid: Validity,
}

impl Default for Bytes {
    fn default() -> Self {
        Self {
            offsets: vec![0],
            data: Vec::new(),
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
            .len()
            .checked_add(value.len())
            .and_then(|end| i32::try_from(end).ok())
            .ok_or(OffsetOverflow)?;
        self.data.extend_from_slice(value);
        self.offsets.push(end);
        self.valid.push(true);
        Ok(())
    }

    #[inline]
    pub fn push_null(&mut self) {
        let end = self.offsets.last().copied().unwrap_or(0);
        self.offsets.push(end);
        self.valid.push(false);
    }

    pub fn push_nulls(&mut self, n: usize) {
        let end = self.offsets.last().copied().unwrap_or(0);
        self.offsets
            .resize(self.offsets.len().saturating_add(n), end);
        self.valid.push_n(n, false);
    }

    pub fn len(&self) -> usize {
        self.valid.len()
    }

    fn finish_parts(
        &mut self,
        recycler: &mut Recycler,
    ) -> (OffsetBuffer<i32>, Buffer, Option<NullBuffer>) {
        let len = self.len();
        let mut next = recycler.vec(room(len) + 1);
        next.push(0);
        let offsets = std::mem::replace(&mut self.offsets, next);
        let next = recycler.vec(room(self.data.len()));
        let data = std::mem::replace(&mut self.data, next);
        let nulls = self.valid.finish(recycler);
        // Offsets start at 0 and never decrease: they are pushed that way.
        let offsets = OffsetBuffer::new(ScalarBuffer::new(recycler.lend(offsets), 0, len + 1));
        (offsets, recycler.lend(data), nulls)
    }

    /// The strings so far; the column starts empty again. Every value pushed was a `str`,
    /// so the check Arrow makes here does not fail.
    pub fn finish_utf8(&mut self, recycler: &mut Recycler) -> Result<ArrayRef, ArrowError> {
        self.finish_as::<GenericStringType<i32>>(recycler)
    }

    /// The byte strings so far; the column starts empty again.
    pub fn finish_binary(&mut self, recycler: &mut Recycler) -> Result<ArrayRef, ArrowError> {
        self.finish_as::<GenericBinaryType<i32>>(recycler)
    }

    fn finish_as<B: ByteArrayType<Offset = i32>>(
        &mut self,
        recycler: &mut Recycler,
    ) -> Result<ArrayRef, ArrowError> {
        let (offsets, data, nulls) = self.finish_parts(recycler);
        Ok(Arc::new(GenericByteArray::<B>::try_new(
            offsets, data, nulls,
        )?))
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
        for v in first..first + n {
            col.push_option((v % 3 != 0).then_some(v));
        }
        recycler.begin();
        let array = col.finish::<Int64Type>(&DataType::Int64, recycler);
        recycler.end();
        array
    }

    fn values_ptr(array: &ArrayRef) -> *const i64 {
        array.as_primitive::<Int64Type>().values().as_ptr()
    }

    fn expected(first: i64, n: i64) -> Vec<Option<i64>> {
        (first..first + n)
            .map(|v| (v % 3 != 0).then_some(v))
            .collect()
    }

    /// A batch the consumer released lends its memory to the batch after next; one it
    /// keeps is never written to again.
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
        let _third = batch(&mut col, &mut recycler, 2000, 1000);
        let fourth = batch(&mut col, &mut recycler, 3000, 1000);
        assert_eq!(values_ptr(&fourth), second_ptr);
        assert_eq!(
            fourth
                .as_primitive::<Int64Type>()
                .iter()
                .collect::<Vec<_>>(),
            expected(3000, 1000)
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
}
