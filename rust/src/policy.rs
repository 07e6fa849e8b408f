//! Column policies: what a pipeline keeps of a column holding personal data, applied to a
//! change table (its data columns and the `_before` images alike) before the table
//! leaves Rust.
//!
//! * `drop`: the column goes, from the rows and from `_before`;
//! * `null`: every value null, the column's type kept;
//! * `redact`: every non-null value the constant given (the column becomes text);
//! * `hash`: the hex SHA-256 of a salt followed by the value (text);
//! * `hmac`: the hex HMAC-SHA-256 of the value under a key (text);
//! * `truncate`: a text value's first `n` characters;
//! * `mask`: a text value with all but its last `n` characters replaced by `*`.
//!
//! A value is hashed as its UTF-8 bytes when the column is text (so
//! `sha256(salt || value)` computed anywhere gives the same hex), as its `arrow-row`
//! encoding otherwise (stable for a type: the snapshot, the stream and the copies of a
//! table give equal values equal hashes). Nulls stay null, so an unchanged TOAST value
//! (null, named in `_unchanged`) is still kept from the table. `truncate` and `mask` on a
//! column that is not text, like an unknown column name, are the caller's to refuse.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::cast::AsArray;
use arrow_array::{new_null_array, Array, ArrayRef, RecordBatch, StructArray};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema};
use sha2::{Digest, Sha256};

use crate::arrow::meta;

/// What one column keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    Drop,
    Null,
    Redact(String),
    Hash { salt: Vec<u8> },
    Hmac { key: Vec<u8> },
    Truncate(usize),
    Mask { keep: usize },
}

/// `batch` with `policies` (by column name) applied to its columns and to the fields of
/// its `_before` struct.
pub fn apply_policies<S: std::hash::BuildHasher>(
    batch: &RecordBatch,
    policies: &HashMap<String, Policy, S>,
) -> Result<RecordBatch, ArrowError> {
    let schema = batch.schema();
    let mut fields: Vec<Arc<Field>> = Vec::with_capacity(schema.fields().len());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        if field.name() == meta::BEFORE {
            if let Some(before) = column.as_any().downcast_ref::<StructArray>() {
                let (f, c) = before_images(field, before, policies)?;
                fields.push(f);
                columns.push(c);
                continue;
            }
        }
        match policies.get(field.name()) {
            Some(Policy::Drop) => {}
            Some(policy) => {
                let out = apply(column, policy)?;
                fields.push(Arc::new(governed(field, out.data_type())));
                columns.push(out);
            }
            None => {
                fields.push(field.clone());
                columns.push(column.clone());
            }
        }
    }
    let schema = Schema::new_with_metadata(fields, schema.metadata().clone());
    RecordBatch::try_new_with_options(
        Arc::new(schema),
        columns,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
}

/// The `_before` struct with the policies applied to its fields.
fn before_images<S: std::hash::BuildHasher>(
    field: &Field,
    before: &StructArray,
    policies: &HashMap<String, Policy, S>,
) -> Result<(Arc<Field>, ArrayRef), ArrowError> {
    let mut fields: Vec<Arc<Field>> = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (f, c) in before.fields().iter().zip(before.columns()) {
        match policies.get(f.name()) {
            Some(Policy::Drop) => {}
            Some(policy) => {
                let out = apply(c, policy)?;
                fields.push(Arc::new(governed(f, out.data_type())));
                columns.push(out);
            }
            None => {
                fields.push(f.clone());
                columns.push(c.clone());
            }
        }
    }
    let fields = Fields::from(fields);
    let out = StructArray::try_new(fields.clone(), columns, before.nulls().cloned())?;
    let field = field.clone().with_data_type(DataType::Struct(fields));
    Ok((Arc::new(field), Arc::new(out)))
}

/// The field of a column a policy changed: of type `data_type`, nullable; where the type
/// changed, of the PostgreSQL type metadata only the replica-identity flag stays (the
/// values are no longer the source type's).
fn governed(field: &Field, data_type: &DataType) -> Field {
    let mut out = field.clone().with_nullable(true);
    if field.data_type() != data_type {
        let kept = field
            .metadata()
            .iter()
            .filter(|(k, _)| k.as_str() == "pg_replica_identity")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        out = out.with_data_type(data_type.clone()).with_metadata(kept);
    }
    out
}

/// One column with `policy` applied (not `Drop`).
fn apply(column: &ArrayRef, policy: &Policy) -> Result<ArrayRef, ArrowError> {
    match policy {
        Policy::Drop | Policy::Null => Ok(new_null_array(column.data_type(), column.len())),
        Policy::Redact(text) => map_text(column, |_, out| out.push_str(text), |_| Ok(())),
        Policy::Hash { salt } => {
            // The salt's state once, cloned per value.
            let salted = Sha256::new_with_prefix(salt);
            hashed(column, |bytes| {
                let mut h = salted.clone();
                h.update(bytes);
                h.finalize().into()
            })
        }
        Policy::Hmac { key } => hashed(column, |bytes| hmac_sha256(key, bytes)),
        Policy::Truncate(n) => text_only(column, |s| s.chars().take(*n).collect()),
        Policy::Mask { keep } => text_only(column, |s| {
            let count = s.chars().count();
            let hidden = count.saturating_sub(*keep);
            s.chars()
                .enumerate()
                .map(|(i, c)| if i < hidden { '*' } else { c })
                .collect()
        }),
    }
}

/// A text column of what `f` writes for each non-null value's bytes (see
/// [`for_each_value`]); `check` refuses a column type first.
fn map_text(
    column: &ArrayRef,
    mut f: impl FnMut(&[u8], &mut String),
    check: impl Fn(&DataType) -> Result<(), ArrowError>,
) -> Result<ArrayRef, ArrowError> {
    check(column.data_type())?;
    let mut out = StringBuilder::with_capacity(column.len(), column.len() * 64);
    let mut buffer = String::with_capacity(64);
    for_each_value(column, |value| match value {
        Some(bytes) => {
            buffer.clear();
            f(bytes, &mut buffer);
            out.append_value(&buffer);
        }
        None => out.append_null(),
    })?;
    Ok(Arc::new(out.finish()))
}

fn hashed(column: &ArrayRef, digest: impl Fn(&[u8]) -> [u8; 32]) -> Result<ArrayRef, ArrowError> {
    let mut out = StringBuilder::with_capacity(column.len(), column.len() * 64);
    for_each_value(column, |value| match value {
        Some(bytes) => {
            let text = hex64(&digest(bytes));
            out.append_value(std::str::from_utf8(&text).unwrap_or_default());
        }
        None => out.append_null(),
    })?;
    Ok(Arc::new(out.finish()))
}

/// A SHA-256 digest as 64 lower-case hex digits (ASCII).
fn hex64(digest: &[u8; 32]) -> [u8; 64] {
    let digit = |n: u8| if n < 10 { b'0' + n } else { b'a' + n - 10 };
    let mut out = [0u8; 64];
    for (pair, &b) in out.chunks_exact_mut(2).zip(digest) {
        if let [high, low] = pair {
            *high = digit(b >> 4);
            *low = digit(b & 0xf);
        }
    }
    out
}

/// A text column's values through `f`; other types are refused.
fn text_only(column: &ArrayRef, f: impl Fn(&str) -> String) -> Result<ArrayRef, ArrowError> {
    map_text(
        column,
        |b, out| out.push_str(&f(&String::from_utf8_lossy(b))),
        |t| match t {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Ok(()),
            other => Err(ArrowError::InvalidArgumentError(format!(
                "truncate and mask apply to text columns, not {other}"
            ))),
        },
    )
}

/// Calls `f` with each value's bytes (None for a null), in row order, without copying
/// them: UTF-8 for text, the raw bytes of a binary value, the `arrow-row` encoding of
/// any other type.
fn for_each_value(column: &ArrayRef, mut f: impl FnMut(Option<&[u8]>)) -> Result<(), ArrowError> {
    let valid = |i: usize| column.is_valid(i);
    match column.data_type() {
        DataType::Utf8 => {
            let a = column.as_string::<i32>();
            (0..a.len()).for_each(|i| f(valid(i).then(|| a.value(i).as_bytes())));
        }
        DataType::LargeUtf8 => {
            let a = column.as_string::<i64>();
            (0..a.len()).for_each(|i| f(valid(i).then(|| a.value(i).as_bytes())));
        }
        DataType::Binary => {
            let a = column.as_binary::<i32>();
            (0..a.len()).for_each(|i| f(valid(i).then(|| a.value(i))));
        }
        other => {
            let converter = RowConverter::new(vec![SortField::new(other.clone())])?;
            let rows = converter.convert_columns(std::slice::from_ref(column))?;
            for i in 0..column.len() {
                let row = rows.row(i);
                f(valid(i).then_some(row.as_ref()));
            }
        }
    }
    Ok(())
}

/// HMAC-SHA-256 (RFC 2104) of `message` under `key`.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    let short: Vec<u8> = if key.len() > BLOCK {
        Sha256::digest(key).to_vec()
    } else {
        key.to_vec()
    };
    for (slot, b) in k.iter_mut().zip(short) {
        *slot = b;
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(message);
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

#[cfg(test)]
fn hex(bytes: &[u8]) -> String {
    let digest: [u8; 32] = bytes.try_into().unwrap_or([0; 32]);
    String::from_utf8_lossy(&hex64(&digest)).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;
    use arrow_array::{Int32Array, StringArray};

    fn batch() -> RecordBatch {
        let data: Fields = vec![
            Field::new("id", DataType::Int32, false),
            Field::new("email", DataType::Utf8, true),
        ]
        .into();
        let before = StructArray::new(
            data.clone(),
            vec![
                Arc::new(Int32Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("a@x.org"), None])),
            ],
            Some(vec![true, false].into()),
        );
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("email", DataType::Utf8, true),
            Field::new("ssn", DataType::Utf8, true),
            Field::new(meta::BEFORE, DataType::Struct(data), true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int32Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("a@x.org"), None])),
                Arc::new(StringArray::from(vec![Some("123-45-6789"), Some("987")])),
                Arc::new(before),
            ],
        )
        .unwrap()
    }

    fn text(batch: &RecordBatch, name: &str) -> Vec<Option<String>> {
        let a = batch.column_by_name(name).unwrap().as_string::<i32>();
        (0..a.len())
            .map(|i| a.is_valid(i).then(|| a.value(i).to_owned()))
            .collect()
    }

    #[test]
    fn hash_drop_and_mask_reach_the_before_images_too() {
        let policies = HashMap::from([
            (
                "email".to_owned(),
                Policy::Hash {
                    salt: b"s".to_vec(),
                },
            ),
            ("ssn".to_owned(), Policy::Mask { keep: 4 }),
            ("id".to_owned(), Policy::Drop),
        ]);
        let out = apply_policies(&batch(), &policies).unwrap();
        assert!(out.column_by_name("id").is_none());
        let want = hex(&Sha256::digest(b"sa@x.org"));
        assert_eq!(text(&out, "email"), vec![Some(want.clone()), None]);
        assert_eq!(
            text(&out, "ssn"),
            vec![Some("*******6789".to_owned()), Some("987".to_owned())]
        );
        let before = out.column_by_name(meta::BEFORE).unwrap().as_struct();
        assert!(before.column_by_name("id").is_none());
        let email = before.column_by_name("email").unwrap().as_string::<i32>();
        assert_eq!(email.value(0), want);
        assert!(before.is_null(1));
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        // RFC 4231, test case 2.
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex(&mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_number_hashes_by_its_row_encoding_and_null_stays_null() {
        let column: ArrayRef = Arc::new(Int32Array::from(vec![Some(7), None, Some(7)]));
        let out = apply(&column, &Policy::Hash { salt: vec![] }).unwrap();
        let out = out.as_string::<i32>();
        assert_eq!(out.value(0), out.value(2));
        assert!(out.is_null(1));
        assert!(apply(&column, &Policy::Truncate(2)).is_err());
    }
}
