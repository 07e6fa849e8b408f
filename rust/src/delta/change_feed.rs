//! The change data feed rows of one MERGE by deletion vectors (pure).
//!
//! A Delta table with `delta.enableChangeDataFeed = true` answers `table_changes` /
//! `readChangeFeed` with every row a commit changed and its `_change_type`: `insert`,
//! `update_preimage` and `update_postimage` (the row before and after an update),
//! `delete` (the row as it was). A commit that retires rows (here: by deletion vectors)
//! must list them in `cdc` files under `_change_data/`, the table's columns plus
//! `_change_type`; a reader of such a commit returns those files' rows and ignores its
//! `add` and `remove` actions (PROTOCOL.md, "Change Data Files"). Readers add
//! `_commit_version` and `_commit_timestamp` themselves.
//!
//! Per MERGE source row: a delete whose key the table held gives `delete` with the
//! retired row; an upsert whose key the table held gives `update_preimage` (the retired
//! row) and `update_postimage` (the new row); an upsert of a new key gives `insert`. A row
//! that moved to a new key is a delete of the old key and an insert of the new one, as
//! the source sends it.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use arrow_select::concat::concat_batches;

/// The column a change data file adds to the table's columns.
pub const CHANGE_TYPE: &str = "_change_type";

/// The rows of one MERGE's change data file, in the table's columns and `_change_type`.
///
/// * `table`: the table's columns;
/// * `retired`: the rows the MERGE retired, in those columns, and `retired_source`: the
///   MERGE source row whose key matched each;
/// * `written`: the rows the MERGE wrote, in those columns, and `written_source`: the
///   source row each comes from;
/// * `is_delete(r)`: whether source row `r` deletes its key.
///
/// `None` when the MERGE changed no row.
pub fn change_rows(
    table: &SchemaRef,
    retired: &RecordBatch,
    retired_source: &[u32],
    written: &RecordBatch,
    written_source: &[u32],
    is_delete: impl Fn(u32) -> bool,
) -> Result<Option<RecordBatch>, ArrowError> {
    if retired.num_rows() != retired_source.len() || written.num_rows() != written_source.len() {
        return Err(ArrowError::InvalidArgumentError(
            "change feed: rows and their source rows differ in number".into(),
        ));
    }
    if retired.num_rows() == 0 && written.num_rows() == 0 {
        return Ok(None);
    }
    let mut matched: Vec<u32> = retired_source.to_vec();
    matched.sort_unstable();
    let retired_kinds = retired_source.iter().map(|&r| {
        if is_delete(r) {
            "delete"
        } else {
            "update_preimage"
        }
    });
    let written_kinds = written_source.iter().map(|r| {
        if matched.binary_search(r).is_ok() {
            "update_postimage"
        } else {
            "insert"
        }
    });
    let mut fields: Vec<Arc<Field>> = table.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(CHANGE_TYPE, DataType::Utf8, false)));
    let schema: SchemaRef = Arc::new(Schema::new(fields));
    let with_kind = |batch: &RecordBatch, kinds: StringArray| -> Result<RecordBatch, _> {
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        columns.push(Arc::new(kinds));
        RecordBatch::try_new(schema.clone(), columns)
    };
    let parts = [
        with_kind(retired, retired_kinds.map(Some).collect())?,
        with_kind(written, written_kinds.map(Some).collect())?,
    ];
    Ok(Some(concat_batches(&schema, &parts)?))
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "test data that is known good"
)]
mod tests {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::Int64Array;

    use super::*;

    fn table() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
        ]))
    }

    fn rows(ids: &[i64], vs: &[i64]) -> RecordBatch {
        RecordBatch::try_new(
            table(),
            vec![
                Arc::new(Int64Array::from(ids.to_vec())),
                Arc::new(Int64Array::from(vs.to_vec())),
            ],
        )
        .unwrap()
    }

    fn described(batch: &RecordBatch) -> Vec<(i64, i64, String)> {
        let ids = batch.column(0).as_primitive::<Int64Type>();
        let vs = batch.column(1).as_primitive::<Int64Type>();
        let kinds = batch.column(2).as_string::<i32>();
        (0..batch.num_rows())
            .map(|i| (ids.value(i), vs.value(i), kinds.value(i).to_string()))
            .collect()
    }

    #[test]
    fn each_source_row_gives_its_kinds_of_change() {
        // Source rows: 0 updates key 1, 1 deletes key 2, 2 inserts key 3, 3 deletes key 9
        // (not in the table: nothing), 4 moves key 4 to key 5 (row 5 deletes key 4).
        let retired = rows(&[1, 2, 4], &[10, 20, 40]);
        let written = rows(&[1, 3, 5], &[11, 30, 40]);
        let deletes = [1u32, 3, 5];
        let out = change_rows(&table(), &retired, &[0, 1, 5], &written, &[0, 2, 4], |r| {
            deletes.contains(&r)
        })
        .unwrap()
        .unwrap();
        assert_eq!(
            described(&out),
            vec![
                (1, 10, "update_preimage".into()),
                (2, 20, "delete".into()),
                (4, 40, "delete".into()),
                (1, 11, "update_postimage".into()),
                (3, 30, "insert".into()),
                (5, 40, "insert".into()),
            ]
        );
    }

    #[test]
    fn a_merge_that_changes_nothing_has_no_change_file() {
        let none = rows(&[], &[]);
        assert!(change_rows(&table(), &none, &[], &none, &[], |_| false)
            .unwrap()
            .is_none());
    }

    #[test]
    fn rows_and_source_rows_must_agree() {
        let one = rows(&[1], &[1]);
        assert!(change_rows(&table(), &one, &[], &one, &[0], |_| false).is_err());
    }
}
