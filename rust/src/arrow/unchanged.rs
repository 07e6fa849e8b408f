//! Naming columns a change did not carry in `_unchanged`.
//!
//! A change table's rows can come from changes made under different shapes of one table:
//! a publication's column list changed (`ALTER PUBLICATION ... SET TABLE t (a, c)`), or a
//! column was added or dropped, between two changes. When such rows are presented under
//! one schema (the segments of a batch merged, or a batch applied to a copy that has more
//! columns), a column a change did not carry has no value for that row: it is not NULL.
//! The change-table schema says such a column is listed in `_unchanged` (its value is null
//! there, never a made-up value), so a consumer keeps the value it holds, as PostgreSQL's
//! own subscriber does.
//!
//! Only rows that carry a new row image get the names: `read`, `insert` and `update`. A
//! `delete` row's data columns are its old image and a `truncate` row has none.

use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::ArrowError;

use super::table::meta;

/// `batch` with `names` added to `_unchanged` of every row that has a new row image.
pub fn mark_unchanged(batch: &RecordBatch, names: &[String]) -> Result<RecordBatch, ArrowError> {
    let schema = batch.schema();
    let (Ok(unchanged_at), Ok(kind_at)) = (
        schema.index_of(meta::UNCHANGED),
        schema.index_of(meta::CHANGE_TYPE),
    ) else {
        return Err(ArrowError::SchemaError(
            "not a change table: _unchanged or _change_type is missing".into(),
        ));
    };
    if names.is_empty() || batch.num_rows() == 0 {
        return Ok(batch.clone());
    }
    let new_image = has_new_image(batch.column(kind_at).as_ref())?;
    let old = batch
        .column(unchanged_at)
        .as_list_opt::<i32>()
        .ok_or_else(|| ArrowError::SchemaError("_unchanged is not a list".into()))?;
    let old_names = old
        .values()
        .as_string_opt::<i32>()
        .ok_or_else(|| ArrowError::SchemaError("_unchanged is not a list of strings".into()))?;
    let field = match schema.field(unchanged_at).data_type() {
        arrow_schema::DataType::List(f) => Arc::clone(f),
        _ => return Err(ArrowError::SchemaError("_unchanged is not a list".into())),
    };
    let mut out =
        ListBuilder::with_capacity(StringBuilder::new(), batch.num_rows()).with_field(field);
    let offsets = old.value_offsets();
    for (window, new_image) in offsets.windows(2).zip(new_image) {
        let &[start, end] = window else { continue };
        let (start, end) = (to_index(start), to_index(end));
        for i in start..end {
            out.values().append_value(old_names.value(i));
        }
        if new_image {
            for name in names {
                if !(start..end).any(|i| old_names.value(i) == name) {
                    out.values().append_value(name);
                }
            }
        }
        out.append(true);
    }
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    if let Some(column) = columns.get_mut(unchanged_at) {
        *column = Arc::new(out.finish());
    }
    RecordBatch::try_new(schema, columns)
}

fn to_index(offset: i32) -> usize {
    usize::try_from(offset).unwrap_or(0)
}

/// Per row, whether its `_change_type` (string, or dictionary of strings) is one with a
/// new row image.
fn has_new_image(kinds: &dyn Array) -> Result<Vec<bool>, ArrowError> {
    let new = |k: Option<&str>| matches!(k, Some("read" | "insert" | "update"));
    if let Some(strings) = kinds.as_string_opt::<i32>() {
        return Ok(strings.iter().map(new).collect());
    }
    if let Some(dictionary) = kinds.as_any_dictionary_opt() {
        if let Some(values) = dictionary.values().as_string_opt::<i32>() {
            let by_key: Vec<bool> = values.iter().map(new).collect();
            return Ok(dictionary
                .normalized_keys()
                .iter()
                .map(|&k| by_key.get(k).copied().unwrap_or(false))
                .collect());
        }
    }
    Err(ArrowError::SchemaError(
        "_change_type is not a string column".into(),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use arrow_array::builder::StringDictionaryBuilder;
    use arrow_array::types::Int8Type;
    use arrow_array::{Int32Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    fn unchanged(rows: &[&[&str]]) -> ArrayRef {
        let mut b = ListBuilder::new(StringBuilder::new());
        for row in rows {
            for name in *row {
                b.values().append_value(name);
            }
            b.append(true);
        }
        Arc::new(b.finish())
    }

    fn batch(kinds: ArrayRef, rows: &[&[&str]]) -> RecordBatch {
        let list = unchanged(rows);
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("_change_type", kinds.data_type().clone(), false),
            Field::new("_unchanged", list.data_type().clone(), false),
        ]);
        let ids = Arc::new(Int32Array::from_iter_values(0..kinds.len() as i32));
        RecordBatch::try_new(Arc::new(schema), vec![ids, kinds, list]).unwrap()
    }

    fn names(batch: &RecordBatch) -> Vec<Vec<String>> {
        let list = batch.column_by_name("_unchanged").unwrap().as_list::<i32>();
        (0..list.len())
            .map(|i| {
                let v = list.value(i);
                v.as_string::<i32>()
                    .iter()
                    .map(|s| s.unwrap().to_owned())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn rows_with_a_new_image_get_the_names_once() {
        let kinds: ArrayRef = Arc::new(StringArray::from(vec![
            "read", "insert", "update", "delete", "truncate", "update",
        ]));
        let b = batch(kinds, &[&[], &["c"], &[], &[], &[], &["b"]]);
        let marked = mark_unchanged(&b, &["b".to_owned(), "d".to_owned()]).unwrap();
        assert_eq!(
            names(&marked),
            vec![
                vec!["b", "d"],
                vec!["c", "b", "d"],
                vec!["b", "d"],
                vec![],
                vec![],
                vec!["b", "d"],
            ]
        );
        assert_eq!(marked.schema(), b.schema());
        assert_eq!(marked.column(0), b.column(0));
        // Nothing to add: the same batch.
        assert_eq!(names(&mark_unchanged(&b, &[]).unwrap()), names(&b));
    }

    #[test]
    fn dictionary_change_types_are_read() {
        let mut kinds = StringDictionaryBuilder::<Int8Type>::new();
        for k in ["delete", "insert"] {
            kinds.append_value(k);
        }
        let b = batch(Arc::new(kinds.finish()), &[&[], &[]]);
        let marked = mark_unchanged(&b, &["x".to_owned()]).unwrap();
        assert_eq!(
            names(&marked),
            vec![Vec::<String>::new(), vec!["x".to_owned()]]
        );
    }

    #[test]
    fn a_table_without_the_metadata_columns_is_an_error() {
        let schema = Schema::new(vec![Field::new("a", DataType::Int32, true)]);
        let b = RecordBatch::try_new(Arc::new(schema), vec![Arc::new(Int32Array::from(vec![1]))])
            .unwrap();
        assert!(mark_unchanged(&b, &["x".to_owned()]).is_err());
    }
}
