//! Typed row values for event objects: the seed's Cell model.
//!
//! An event's row values are the Python values of their Arrow type (CONTRACT section 5),
//! the same objects `take()` gives through `to_pylist()`. To be the same by construction,
//! not by a second parser, the values of every drained event go through a change table of
//! their relation ([`ChangeTable`], the `take()` path, text and binary alike) and come out
//! through pyarrow's `to_pylist()`. A value the tables cannot hold is the same
//! `ColumnValueError` here as there.

use std::collections::HashMap;
use std::sync::Arc;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::arrow::{ChangeKind, ChangeTable, RowMeta};
use crate::error::{DecodeError, MessageKind, Reason};
use crate::event::{Event, EventBody, OldRow, UpdatedRow, Value};
use crate::protocol::Datum;
use crate::relation::Relation;

use super::arrow::PyArrowStream;

/// The typed values of one event's row images, full width (one per relation column; a
/// value PostgreSQL did not send is None).
pub struct Images<'py> {
    /// False: the event gets only the wire form of its values (`events(typed=False)`).
    pub values: bool,
    /// Insert's row, update's new row.
    pub new: Option<Vec<Bound<'py, PyAny>>>,
    /// Update's and delete's old row.
    pub old: Option<Vec<Bound<'py, PyAny>>>,
}

/// Where one image's values went: a table and its row.
#[derive(Clone, Copy)]
struct Placed {
    table: usize,
    row: usize,
    event: usize,
}

#[derive(Default)]
struct Placement {
    new: Option<Placed>,
    old: Option<Placed>,
}

/// The first value error of each event that has one, by event index.
pub type ValueErrors = Vec<(usize, DecodeError)>;

/// A column's Python values; a value Python cannot hold is its problem's text.
type PythonColumn<'py> = Vec<Result<Bound<'py, PyAny>, String>>;

/// The typed images of `events`, and the events whose values cannot be represented (such
/// an event has no images).
pub fn typed_images<'py>(
    py: Python<'py>,
    events: &[Event],
    binary: bool,
) -> PyResult<(Vec<Images<'py>>, ValueErrors)> {
    let mut tables: Vec<ChangeTable> = Vec::new();
    let mut by_relation: HashMap<*const Relation, usize> = HashMap::new();
    let mut placements = Vec::with_capacity(events.len());
    let mut errors: Vec<(usize, DecodeError)> = Vec::new();
    for (i, event) in events.iter().enumerate() {
        let mut placement = Placement::default();
        // Each relation's table: keyed by the description's address, which stays the same
        // while `events` holds the relation.
        if let Some((relation, kind, new, old)) = images_of(event) {
            let table = *by_relation.entry(Arc::as_ptr(relation)).or_insert_with(|| {
                tables.push(ChangeTable::new(Arc::clone(relation), binary));
                tables.len() - 1
            });
            let meta = RowMeta {
                lsn: event.meta.start_lsn,
                commit_lsn: event.meta.commit_lsn,
                tx_ordinal: event.meta.tx_ordinal,
                commit_timestamp: None,
                xid: None,
            };
            let mut place = |values: Option<Vec<Datum<'_>>>| -> Option<Placed> {
                let values = values?;
                let t = tables.get_mut(table)?;
                let row = t.rows() - t.failed_rows();
                match t.append(ChangeKind::Insert, &meta, Some(&values), None) {
                    Ok(()) => Some(Placed {
                        table,
                        row,
                        event: i,
                    }),
                    Err(e) => {
                        errors.push((
                            i,
                            value_error(kind, relation, event, &e.column, e.error.to_string()),
                        ));
                        None
                    }
                }
            };
            placement.new = place(new);
            placement.old = place(old);
        }
        placements.push(placement);
    }

    // Each table's columns as Python values, through pyarrow.
    let reader = py.import("pyarrow")?.getattr("RecordBatchReader")?;
    let mut columns: Vec<Vec<PythonColumn<'py>>> = Vec::with_capacity(tables.len());
    for table in &mut tables {
        let width = table.relation.columns.len();
        let batch = table
            .finish()
            .map_err(|e| PyRuntimeError::new_err(format!("building Arrow values failed: {e}")))?;
        let stream = Py::new(py, PyArrowStream::new(batch.schema(), vec![batch]))?;
        let pa_table = reader
            .call_method1("from_stream", (stream,))?
            .call_method0("read_all")?;
        let mut lists = Vec::with_capacity(width);
        for j in 0..width {
            lists.push(python_values(&pa_table.call_method1("column", (j,))?)?);
        }
        columns.push(lists);
    }

    let mut out = Vec::with_capacity(events.len());
    for (event, placement) in events.iter().zip(placements) {
        let mut image = |p: Option<Placed>| -> Option<Vec<Bound<'py, PyAny>>> {
            let p = p?;
            let lists = columns.get(p.table)?;
            let mut values = Vec::with_capacity(lists.len());
            for (j, list) in lists.iter().enumerate() {
                match list.get(p.row)? {
                    Ok(v) => values.push(v.clone()),
                    Err(problem) => {
                        if let Some((relation, kind, ..)) = images_of(event) {
                            let column = relation.columns.get(j).map_or("", |c| c.name.as_str());
                            errors.push((
                                p.event,
                                value_error(kind, relation, event, column, problem.clone()),
                            ));
                        }
                        return None;
                    }
                }
            }
            Some(values)
        };
        let new = image(placement.new);
        let old = image(placement.old);
        out.push(Images {
            values: true,
            new,
            old,
        });
    }
    // One error per event, the first.
    errors.sort_by_key(|(i, _)| *i);
    errors.dedup_by_key(|(i, _)| *i);
    Ok((out, errors))
}

/// The Python values of a pyarrow column, `to_pylist()`'s. A value Python cannot hold
/// (a date past year 9999, say) fails `to_pylist()` as a whole; the values are then read
/// one at a time and such a value becomes its error's text.
fn python_values<'py>(column: &Bound<'py, PyAny>) -> PyResult<PythonColumn<'py>> {
    if let Ok(list) = column.call_method0("to_pylist") {
        let list = list.cast_into::<PyList>()?;
        return Ok(list.iter().map(Ok).collect());
    }
    let n = column.len()?;
    let mut out = Vec::with_capacity(n);
    for k in 0..n {
        out.push(
            column
                .get_item(k)
                .and_then(|scalar| scalar.call_method0("as_py"))
                .map_err(|e| {
                    format!(
                        "Python cannot hold the value: {}",
                        e.get_type(column.py())
                            .name()
                            .map_or_else(|_| "error".to_owned(), |n| n.to_string())
                    )
                }),
        );
    }
    Ok(out)
}

/// The relation, message kind and full-width images (new, old) of a row event.
#[allow(clippy::type_complexity)]
fn images_of(
    event: &Event,
) -> Option<(
    &Arc<Relation>,
    MessageKind,
    Option<Vec<Datum<'_>>>,
    Option<Vec<Datum<'_>>>,
)> {
    match &event.body {
        EventBody::Insert { relation, row } => Some((
            relation,
            MessageKind::Insert,
            Some(row.iter().map(datum).collect()),
            None,
        )),
        EventBody::Update { relation, new, old } => Some((
            relation,
            MessageKind::Update,
            Some(updated_full_width(new)),
            old.as_ref().map(|o| old_full_width(relation, o)),
        )),
        EventBody::Delete { relation, old } => Some((
            relation,
            MessageKind::Delete,
            None,
            Some(old_full_width(relation, old)),
        )),
        _ => None,
    }
}

fn datum(v: &Value) -> Datum<'_> {
    match v {
        Value::Null => Datum::Null,
        Value::UnchangedToast => Datum::UnchangedToast,
        Value::Text(s) => Datum::Text(s),
        Value::Binary(b) => Datum::Binary(b),
    }
}

/// A partial new row with its missing columns put back as unchanged TOAST.
fn updated_full_width(new: &UpdatedRow) -> Vec<Datum<'_>> {
    match new {
        UpdatedRow::Full(values) => values.iter().map(datum).collect(),
        UpdatedRow::Partial {
            values,
            missing_column_indexes,
            total_columns,
        } => {
            let mut known = values.iter();
            (0..*total_columns)
                .map(|i| {
                    if missing_column_indexes.contains(&i) {
                        Datum::UnchangedToast
                    } else {
                        known.next().map_or(Datum::Null, datum)
                    }
                })
                .collect()
        }
    }
}

/// A key image's values put back at their columns (NULL in the others, as sent).
fn old_full_width<'v>(relation: &Relation, old: &'v OldRow) -> Vec<Datum<'v>> {
    match old {
        OldRow::Full(values) => values.iter().map(datum).collect(),
        OldRow::Key(values) => {
            let mut keys = values.iter();
            relation
                .columns
                .iter()
                .map(|c| {
                    if c.is_key {
                        keys.next().map_or(Datum::Null, datum)
                    } else {
                        Datum::Null
                    }
                })
                .collect()
        }
    }
}

fn value_error(
    kind: MessageKind,
    relation: &Relation,
    event: &Event,
    column: &str,
    problem: String,
) -> DecodeError {
    DecodeError::new(
        kind,
        0,
        Reason::Value {
            table: relation.qualified_name.clone(),
            column: column.to_owned(),
            lsn: event.meta.start_lsn,
            problem,
        },
    )
}
