//! Binary format (the types' send functions), for the types whose binary form is a
//! fixed-width integer or float or the text's bytes, plus the checked `Reader` the
//! structured formats share. Integers are big-endian, as everywhere in the protocol.

use super::datetime::fixed;
use super::error::{ValueError, ValueErrorKind};

/// A bounds-checked reader over one binary value: every read returns a `Result`, lengths
/// are checked against the bytes present before anything is sliced.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    ty: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], ty: &'static str) -> Self {
        Self { buf, ty }
    }

    fn malformed(&self) -> ValueError {
        ValueError::malformed(self.ty)
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], ValueError> {
        let (head, tail) = self.buf.split_at_checked(n).ok_or(self.malformed())?;
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ValueError> {
        let (head, tail) = self.buf.split_first_chunk::<N>().ok_or(self.malformed())?;
        self.buf = tail;
        Ok(*head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, ValueError> {
        Ok(u8::from_be_bytes(self.array()?))
    }

    pub(crate) fn u16(&mut self) -> Result<u16, ValueError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub(crate) fn i32(&mut self) -> Result<i32, ValueError> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, ValueError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    /// An Int32 length then that many bytes; length -1 is NULL (`None`).
    pub(crate) fn counted(&mut self) -> Result<Option<&'a [u8]>, ValueError> {
        match self.i32()? {
            -1 => Ok(None),
            n => {
                let n = usize::try_from(n).map_err(|_| self.malformed())?;
                self.bytes(n).map(Some)
            }
        }
    }

    /// Bytes up to a NUL, which is consumed.
    pub(crate) fn cstring(&mut self) -> Result<&'a [u8], ValueError> {
        let end = self
            .buf
            .iter()
            .position(|&b| b == 0)
            .ok_or(self.malformed())?;
        let s = self.bytes(end)?;
        self.bytes(1)?;
        Ok(s)
    }

    /// The bytes not read yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.buf
    }

    /// Succeeds when every byte was read.
    pub(crate) fn finish(self) -> Result<(), ValueError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(self.malformed())
        }
    }
}

/// bool: one byte, non-zero for true (as `boolrecv` reads it).
pub fn bool(b: &[u8]) -> Result<bool, ValueError> {
    let [byte] = fixed::<1>(b, "bool")?;
    Ok(byte != 0)
}

pub fn int2(b: &[u8]) -> Result<i16, ValueError> {
    Ok(i16::from_be_bytes(fixed(b, "int2")?))
}

pub fn int4(b: &[u8]) -> Result<i32, ValueError> {
    Ok(i32::from_be_bytes(fixed(b, "int4")?))
}

pub fn int8(b: &[u8]) -> Result<i64, ValueError> {
    Ok(i64::from_be_bytes(fixed(b, "int8")?))
}

/// oid, xid, cid: unsigned 32-bit, widened to i64. `type_name` names it in errors.
pub fn uint32(b: &[u8], type_name: &'static str) -> Result<i64, ValueError> {
    Ok(i64::from(u32::from_be_bytes(fixed(b, type_name)?)))
}

/// float4: IEEE 754 single precision bits.
pub fn float4(b: &[u8]) -> Result<f32, ValueError> {
    Ok(f32::from_bits(u32::from_be_bytes(fixed(b, "float4")?)))
}

/// float8: IEEE 754 double precision bits.
pub fn float8(b: &[u8]) -> Result<f64, ValueError> {
    Ok(f64::from_bits(u64::from_be_bytes(fixed(b, "float8")?)))
}

/// text, varchar, bpchar, name, xml, json, enum labels, citext: the text's UTF-8 bytes
/// (the client encoding is UTF8).
pub fn text<'a>(b: &'a [u8], type_name: &'static str) -> Result<&'a str, ValueError> {
    crate::wire::utf8(b).ok_or(ValueError::new(type_name, ValueErrorKind::InvalidUtf8))
}

/// jsonb: a version byte (1, the only one so far) and the JSON text `jsonb_out` prints.
pub fn jsonb(b: &[u8]) -> Result<&str, ValueError> {
    text(jsonb_json(b)?, "jsonb")
}

/// jsonb's JSON text, not yet checked to be UTF-8.
pub fn jsonb_json(b: &[u8]) -> Result<&[u8], ValueError> {
    match b.split_first() {
        Some((1, json)) => Ok(json),
        Some(_) => Err(ValueError::new("jsonb", ValueErrorKind::Unsupported)),
        None => Err(ValueError::malformed("jsonb")),
    }
}
