//! Row digests: one 64-bit hash per row of some columns, for comparing two copies of a
//! table (`pgwire-cdc verify`) without holding their rows side by side.
//!
//! A row's columns are encoded with `arrow-row` (the same byte strings the MERGE kernels
//! key on: equal values, nulls included, give equal bytes, whatever the arrays' offsets or
//! chunking) and the bytes hashed with fixed seeds, so two tables read at different times,
//! or from different formats, give equal digests for equal rows in one process. A
//! collision (two different rows, one digest) would hide a difference with odds of about
//! 2^-64 per compared pair.

use std::hash::{BuildHasher, Hasher};

use ahash::RandomState;
use arrow_array::{ArrayRef, RecordBatch, UInt64Array};
use arrow_row::{RowConverter, SortField};
use arrow_schema::SchemaRef;

use super::ApplyError;

/// The fixed seeds of the digest hash (any constants: they only have to stay put).
const SEEDS: [u64; 4] = [
    0x7067_7769_7265_5f63,
    0x6463_5f76_6572_6966,
    0x795f_726f_775f_6469,
    0x6765_7374_5f76_3031,
];

/// One digest per row of `batches` (all of `schema`), over the columns `columns`
/// (indexes into `schema`), in row order across the batches.
pub fn row_digests(
    schema: &SchemaRef,
    batches: &[RecordBatch],
    columns: &[usize],
) -> Result<UInt64Array, ApplyError> {
    let fields: Vec<SortField> = columns
        .iter()
        .map(|&c| {
            schema
                .fields()
                .get(c)
                .map(|f| SortField::new(f.data_type().clone()))
                .ok_or_else(|| ApplyError::Schema(format!("no column {c}")))
        })
        .collect::<Result<_, _>>()?;
    let converter = RowConverter::new(fields)?;
    let state = RandomState::with_seeds(SEEDS[0], SEEDS[1], SEEDS[2], SEEDS[3]);
    let total: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let mut out = Vec::with_capacity(total);
    for batch in batches {
        let arrays: Vec<ArrayRef> = columns
            .iter()
            .map(|&c| {
                batch
                    .columns()
                    .get(c)
                    .cloned()
                    .ok_or_else(|| ApplyError::Schema(format!("no column {c}")))
            })
            .collect::<Result<_, _>>()?;
        let rows = converter.convert_columns(&arrays)?;
        for row in &rows {
            let mut hasher = state.build_hasher();
            hasher.write(row.as_ref());
            out.push(hasher.finish());
        }
    }
    Ok(UInt64Array::from(out))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use arrow_array::types::Int32Type;
    use arrow_array::{Int64Array, ListArray, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;

    fn table(ids: &[i64], names: &[Option<&str>]) -> (SchemaRef, RecordBatch) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(ids.to_vec())),
                Arc::new(StringArray::from(names.to_vec())),
            ],
        )
        .unwrap();
        (schema, batch)
    }

    #[test]
    fn equal_rows_give_equal_digests_however_batched() {
        let (schema, whole) = table(&[1, 2, 3], &[Some("a"), None, Some("c")]);
        let one = row_digests(&schema, std::slice::from_ref(&whole), &[0, 1]).unwrap();
        let split = row_digests(&schema, &[whole.slice(0, 1), whole.slice(1, 2)], &[0, 1]).unwrap();
        assert_eq!(one, split);
    }

    #[test]
    fn a_changed_value_or_null_changes_the_digest() {
        let (schema, a) = table(&[1, 1, 1], &[Some("a"), Some("b"), None]);
        let d = row_digests(&schema, &[a], &[0, 1]).unwrap();
        assert_ne!(d.value(0), d.value(1));
        assert_ne!(d.value(0), d.value(2));
        // An empty string is not a null.
        let (schema, b) = table(&[1, 1], &[Some(""), None]);
        let d = row_digests(&schema, &[b], &[0, 1]).unwrap();
        assert_ne!(d.value(0), d.value(1));
    }

    #[test]
    fn nested_values_are_digested() {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "l",
            DataType::List(Arc::new(Field::new("item", DataType::Int32, true))),
            true,
        )]));
        let list = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            Some(vec![Some(1), Some(2)]),
            Some(vec![Some(2), Some(1)]),
        ]);
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(list)]).unwrap();
        let d = row_digests(&schema, &[batch], &[0]).unwrap();
        assert_eq!(d.value(0), d.value(1));
        assert_ne!(d.value(0), d.value(2));
    }
}
