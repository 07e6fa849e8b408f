//! The apply step against hand-written change tables: one table `(id int4, doc text)`.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, DictionaryArray, Int32Array, Int64Array, RecordBatch, StringArray, StructArray,
};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};

use super::{apply_changes, history_changes, reduce_changes, ApplyStats, KeyMode};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int32, true),
        Field::new("doc", DataType::Utf8, true),
    ]))
}

type Image = (Option<i32>, Option<&'static str>);

fn base(rows: &[Image]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(rows.iter().map(|r| r.0).collect::<Int32Array>()),
            Arc::new(rows.iter().map(|r| r.1).collect::<StringArray>()),
        ],
    )
    .unwrap()
}

/// One change: kind, new image, old image, unchanged column names.
struct Change(&'static str, Image, Option<Image>, &'static [&'static str]);

fn changes(rows: &[Change]) -> RecordBatch {
    let data = base(&rows.iter().map(|c| c.1).collect::<Vec<_>>());
    let before_fields = Fields::from(schema().fields().to_vec());
    let before_images: Vec<Image> = rows.iter().map(|c| c.2.unwrap_or((None, None))).collect();
    let before_data = base(&before_images);
    let validity: Vec<bool> = rows.iter().map(|c| c.2.is_some()).collect();
    let before = StructArray::new(
        before_fields.clone(),
        before_data.columns().to_vec(),
        Some(validity.into()),
    );
    let mut unchanged = ListBuilder::new(StringBuilder::new());
    for c in rows {
        for name in c.3 {
            unchanged.values().append_value(name);
        }
        unchanged.append(true);
    }
    let kinds: ArrayRef = Arc::new(rows.iter().map(|c| Some(c.0)).collect::<StringArray>());
    let mut fields = schema().fields().to_vec();
    fields.push(Arc::new(Field::new("_change_type", DataType::Utf8, true)));
    fields.push(Arc::new(Field::new(
        "_before",
        DataType::Struct(before_fields),
        true,
    )));
    let unchanged = unchanged.finish();
    fields.push(Arc::new(Field::new(
        "_unchanged",
        unchanged.data_type().clone(),
        true,
    )));
    let mut columns = data.columns().to_vec();
    columns.push(kinds);
    columns.push(Arc::new(before));
    columns.push(Arc::new(unchanged));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

fn rows(batch: &RecordBatch) -> Vec<Image> {
    let ids = batch.column(0).as_primitive::<Int32Type>();
    let docs = batch.column(1).as_string::<i32>();
    let mut out: Vec<(Option<i32>, Option<String>)> = (0..batch.num_rows())
        .map(|i| {
            (
                ids.is_valid(i).then(|| ids.value(i)),
                docs.is_valid(i).then(|| docs.value(i).to_owned()),
            )
        })
        .collect();
    out.sort();
    out.into_iter()
        .map(|(i, d)| (i, d.map(|d| &*Box::leak(d.into_boxed_str()))))
        .collect()
}

fn run(key: &KeyMode, start: &[Image], change: &[Change]) -> (Vec<Image>, ApplyStats) {
    let (batch, stats) = apply_changes(&schema(), &[base(start)], &[changes(change)], key).unwrap();
    (rows(&batch), stats)
}

fn pk() -> KeyMode {
    KeyMode::Unique(vec![0])
}

#[test]
fn inserts_updates_deletes_by_key() {
    let (out, stats) = run(
        &pk(),
        &[(Some(1), Some("a")), (Some(2), Some("b"))],
        &[
            Change("insert", (Some(3), Some("c")), None, &[]),
            Change("update", (Some(1), Some("A")), None, &[]),
            Change("delete", (Some(2), None), Some((Some(2), None)), &[]),
        ],
    );
    assert_eq!(out, vec![(Some(1), Some("A")), (Some(3), Some("c"))]);
    assert_eq!((stats.inserted, stats.updated, stats.deleted), (1, 1, 1));
    assert_eq!(stats.missing_rows, 0);
}

#[test]
fn a_key_change_moves_the_row() {
    let (out, _) = run(
        &pk(),
        &[(Some(1), Some("a"))],
        &[Change(
            "update",
            (Some(7), Some("a")),
            Some((Some(1), None)),
            &[],
        )],
    );
    assert_eq!(out, vec![(Some(7), Some("a"))]);
}

#[test]
fn unchanged_toast_keeps_the_table_value_through_several_updates() {
    let (out, stats) = run(
        &pk(),
        &[(Some(1), Some("big"))],
        &[
            Change("update", (Some(1), None), None, &["doc"]),
            // The key changes too: the value follows the row.
            Change("update", (Some(2), None), Some((Some(1), None)), &["doc"]),
        ],
    );
    assert_eq!(out, vec![(Some(2), Some("big"))]);
    assert_eq!(stats.unknown_values, 0);
}

#[test]
fn unchanged_toast_of_a_row_inserted_in_the_same_table() {
    let (out, _) = run(
        &pk(),
        &[],
        &[
            Change("insert", (Some(1), Some("new")), None, &[]),
            Change("update", (Some(1), None), None, &["doc"]),
        ],
    );
    assert_eq!(out, vec![(Some(1), Some("new"))]);
}

#[test]
fn an_unknown_row_is_inserted_and_its_unknown_values_counted() {
    let (out, stats) = run(
        &pk(),
        &[],
        &[Change("update", (Some(1), None), None, &["doc"])],
    );
    assert_eq!(out, vec![(Some(1), None)]);
    assert_eq!((stats.missing_rows, stats.unknown_values), (1, 1));
}

#[test]
fn a_repeated_insert_replaces_the_row() {
    // At-least-once delivery may repeat an insert; the key holds one row.
    let (out, _) = run(
        &pk(),
        &[(Some(1), Some("a"))],
        &[Change("insert", (Some(1), Some("b")), None, &[])],
    );
    assert_eq!(out, vec![(Some(1), Some("b"))]);
}

#[test]
fn truncate_empties_then_later_rows_count() {
    let (out, stats) = run(
        &pk(),
        &[(Some(1), Some("a")), (Some(2), Some("b"))],
        &[
            Change("insert", (Some(3), Some("c")), None, &[]),
            Change("truncate", (None, None), None, &[]),
            Change("insert", (Some(4), Some("d")), None, &[]),
        ],
    );
    assert_eq!(out, vec![(Some(4), Some("d"))]);
    assert_eq!(stats.truncated, 1);
}

#[test]
fn multiset_matches_whole_rows_one_at_a_time() {
    let dup = (Some(1), Some("x"));
    let (out, stats) = run(
        &KeyMode::Multiset,
        &[dup, dup, (Some(2), None)],
        &[
            Change("update", (Some(1), Some("y")), Some(dup), &[]),
            Change("delete", (Some(2), None), Some((Some(2), None)), &[]),
            Change("delete", (Some(9), None), Some((Some(9), None)), &[]),
        ],
    );
    assert_eq!(out, vec![(Some(1), Some("x")), (Some(1), Some("y"))]);
    assert_eq!(stats.missing_rows, 1);
}

#[test]
fn dictionary_encoded_change_types() {
    let plain = changes(&[Change("insert", (Some(5), Some("e")), None, &[])]);
    let dict: DictionaryArray<Int32Type> = vec!["insert"].into_iter().collect();
    let mut columns = plain.columns().to_vec();
    columns[2] = Arc::new(dict);
    let mut fields = plain.schema().fields().to_vec();
    fields[2] = Arc::new(Field::new(
        "_change_type",
        columns[2].data_type().clone(),
        true,
    ));
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
    let (out, _) = apply_changes(&schema(), &[], &[batch], &pk()).unwrap();
    assert_eq!(rows(&out), vec![(Some(5), Some("e"))]);
}

#[test]
fn a_change_table_of_another_shape_is_an_error() {
    let other = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)]));
    let err = apply_changes(&other, &[], &[changes(&[])], &KeyMode::Unique(vec![0])).unwrap_err();
    assert!(err.to_string().contains("\"id\" is Int32"), "{err}");
    let unknown = changes(&[Change("update", (Some(1), None), None, &["nope"])]);
    let err = apply_changes(&schema(), &[], &[unknown], &pk()).unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
}

// -- reduce_changes: one final change per key ---------------------------------------

/// One reduced row: id, doc, _delete, _unchanged, _from id.
type Reduced = (Option<i32>, Option<String>, bool, Vec<String>, Option<i32>);

fn reduce(change: &[Change]) -> (Vec<Reduced>, bool) {
    let out = reduce_changes(&schema(), &[changes(change)], &[0]).unwrap();
    let b = &out.batch;
    let ids = b.column(0).as_primitive::<Int32Type>();
    let docs = b.column(1).as_string::<i32>();
    let deletes = b.column(2).as_boolean();
    let unchanged = b.column(3).as_list::<i32>();
    let from = b.column(4).as_struct();
    let from_ids = from.column(0).as_primitive::<Int32Type>();
    let mut rows: Vec<Reduced> = (0..b.num_rows())
        .map(|i| {
            let names = unchanged.value(i);
            let names = names.as_string::<i32>();
            (
                ids.is_valid(i).then(|| ids.value(i)),
                docs.is_valid(i).then(|| docs.value(i).to_owned()),
                deletes.value(i),
                names.iter().flatten().map(str::to_owned).collect(),
                from.is_valid(i).then(|| from_ids.value(i)),
            )
        })
        .collect();
    rows.sort();
    (rows, out.truncated)
}

fn row(id: i32, doc: Option<&str>, delete: bool, unchanged: &[&str], from: Option<i32>) -> Reduced {
    (
        Some(id),
        doc.map(str::to_owned),
        delete,
        unchanged.iter().map(|s| (*s).to_owned()).collect(),
        from,
    )
}

#[test]
fn reduce_keeps_the_last_change_of_each_key() {
    let (rows, truncated) = reduce(&[
        Change("insert", (Some(1), Some("a")), None, &[]),
        Change("update", (Some(1), Some("b")), None, &[]),
        Change("insert", (Some(2), Some("x")), None, &[]),
        Change("delete", (Some(2), None), Some((Some(2), None)), &[]),
        Change("delete", (Some(3), None), Some((Some(3), None)), &[]),
        Change("insert", (Some(3), Some("again")), None, &[]),
    ]);
    assert!(!truncated);
    assert_eq!(
        rows,
        vec![
            row(1, Some("b"), false, &[], None),
            row(2, None, true, &[], None),
            row(3, Some("again"), false, &[], None),
        ]
    );
}

#[test]
fn reduce_fills_unchanged_toast_from_an_earlier_change_of_the_batch() {
    let (rows, _) = reduce(&[
        Change("update", (Some(1), Some("known")), None, &[]),
        Change("update", (Some(1), None), None, &["doc"]),
        // Never supplied in the batch: the MERGE keeps the table's value.
        Change("update", (Some(2), None), None, &["doc"]),
    ]);
    assert_eq!(
        rows,
        vec![
            row(1, Some("known"), false, &[], None),
            row(2, None, false, &["doc"], None),
        ]
    );
}

#[test]
fn reduce_turns_a_key_change_into_a_delete_and_an_upsert() {
    let (rows, _) = reduce(&[
        // 1 -> 5 with doc unchanged: the value is in the table under key 1.
        Change("update", (Some(5), None), Some((Some(1), None)), &["doc"]),
        // 5 -> 6, still unchanged: the table row is still the one under key 1.
        Change("update", (Some(6), None), Some((Some(5), None)), &["doc"]),
        // 2 -> 3 with doc known.
        Change("update", (Some(3), Some("c")), Some((Some(2), None)), &[]),
    ]);
    assert_eq!(
        rows,
        vec![
            row(1, None, true, &[], None),
            row(2, None, true, &[], None),
            row(3, Some("c"), false, &[], None),
            row(5, None, true, &[], None),
            row(6, None, false, &["doc"], Some(1)),
        ]
    );
}

#[test]
fn reduce_after_a_truncate_keeps_only_later_changes() {
    let (rows, truncated) = reduce(&[
        Change("insert", (Some(1), Some("gone")), None, &[]),
        Change("truncate", (None, None), None, &[]),
        Change("insert", (Some(2), Some("new")), None, &[]),
    ]);
    assert!(truncated);
    assert_eq!(rows, vec![row(2, Some("new"), false, &[], None)]);
}

/// `changes` with each row's transaction: `_commit_lsn`, `_commit_ts`, `_xid`.
fn in_transactions(rows: &[Change], commits: &[i64]) -> RecordBatch {
    let batch = changes(rows);
    let mut fields = batch.schema().fields().to_vec();
    let mut columns = batch.columns().to_vec();
    for name in ["_commit_lsn", "_commit_ts", "_xid"] {
        fields.push(Arc::new(Field::new(name, DataType::Int64, true)));
        columns.push(Arc::new(Int64Array::from(commits.to_vec())));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

/// Each history row: (commit, id, doc, deleted, truncate, unchanged columns).
type Version = (i64, Option<i32>, Option<String>, bool, bool, Vec<String>);

fn history(rows: &[Change], commits: &[i64]) -> Vec<Version> {
    let batch = history_changes(&schema(), &[in_transactions(rows, commits)], &[0])
        .unwrap()
        .batch;
    let ids = batch.column(0).as_primitive::<Int32Type>();
    let docs = batch.column(1).as_string::<i32>();
    let by_name = |n: &str| batch.column_by_name(n).unwrap().clone();
    let deleted = by_name("_delete");
    let truncate = by_name("_truncate");
    let unchanged = by_name("_unchanged");
    let commit = by_name("_commit_lsn");
    (0..batch.num_rows())
        .map(|i| {
            let names = unchanged.as_list::<i32>().value(i);
            (
                commit.as_primitive::<Int64Type>().value(i),
                ids.is_valid(i).then(|| ids.value(i)),
                docs.is_valid(i).then(|| docs.value(i).to_owned()),
                deleted.as_boolean().value(i),
                truncate.as_boolean().value(i),
                (0..names.len())
                    .map(|j| names.as_string::<i32>().value(j).to_owned())
                    .collect(),
            )
        })
        .collect()
}

fn v(commit: i64, id: i32, doc: Option<&str>, deleted: bool, unchanged: &[&str]) -> Version {
    let doc = doc.map(str::to_owned);
    let unchanged = unchanged.iter().map(|s| (*s).to_owned()).collect();
    (commit, Some(id), doc, deleted, false, unchanged)
}

#[test]
fn history_keeps_one_version_per_key_and_transaction() {
    let got = history(
        &[
            Change("insert", (Some(1), Some("a")), None, &[]),
            Change("update", (Some(1), Some("b")), None, &[]),
            Change("insert", (Some(2), Some("x")), None, &[]),
            Change("update", (Some(1), Some("c")), None, &[]),
            Change("delete", (Some(2), None), Some((Some(2), None)), &[]),
        ],
        &[10, 10, 10, 20, 20],
    );
    assert_eq!(
        got,
        vec![
            v(10, 1, Some("b"), false, &[]),
            v(10, 2, Some("x"), false, &[]),
            v(20, 1, Some("c"), false, &[]),
            v(20, 2, None, true, &[]),
        ]
    );
}

#[test]
fn history_fills_unchanged_values_from_an_earlier_transaction_only() {
    let got = history(
        &[
            // Unknown before the batch: left to the version the lake holds.
            Change("update", (Some(1), None), None, &["doc"]),
            Change("update", (Some(2), Some("big")), None, &[]),
            // From the earlier transaction's version; then moved to a new key.
            Change("update", (Some(2), None), None, &["doc"]),
            Change("update", (Some(3), None), Some((Some(2), None)), &["doc"]),
        ],
        &[10, 10, 20, 30],
    );
    assert_eq!(
        got,
        vec![
            v(10, 1, None, false, &["doc"]),
            v(10, 2, Some("big"), false, &[]),
            v(20, 2, Some("big"), false, &[]),
            v(30, 2, None, true, &[]),
            v(30, 3, Some("big"), false, &[]),
        ]
    );
}

#[test]
fn history_marks_a_truncate_and_forgets_what_came_before_it() {
    let got = history(
        &[
            Change("insert", (Some(1), Some("a")), None, &[]),
            Change("truncate", (None, None), None, &[]),
            Change("insert", (Some(2), Some("b")), None, &[]),
        ],
        &[10, 20, 20],
    );
    assert_eq!(
        got,
        vec![
            v(10, 1, Some("a"), false, &[]),
            (20, None, None, true, true, vec![]),
            v(20, 2, Some("b"), false, &[]),
        ]
    );
}
