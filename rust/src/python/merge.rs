//! `_native.reduce_changes`, `_native.apply_changes` and `_native.row_digests` (see
//! `crate::merge`) for Python.
//!
//! Arrow comes in through the Arrow PyCapsule interface (`__arrow_c_stream__`, which
//! `pyarrow.Table` implements), so no value is copied on the way in, and goes out the same
//! way as a [`PyArrowStream`].

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::arrow::{import_batches, PyArrowStream};
use super::errors::pgwire_error;
use crate::merge::{
    apply_changes as apply, history_changes as history, reduce_changes as reduce,
    row_digests as digest, ApplyError, KeyMode, Reduced,
};

/// `apply_changes(base, changes, key_columns) -> (ArrowStream, stats)`: the table
/// `base` after applying the change table `changes`. `key_columns` names the columns rows
/// are matched on (one row per key); `None` matches whole rows as a multiset.
#[pyfunction]
#[pyo3(signature = (base, changes, key_columns))]
pub fn apply_changes<'py>(
    py: Python<'py>,
    base: &Bound<'py, PyAny>,
    changes: &Bound<'py, PyAny>,
    key_columns: Option<Vec<String>>,
) -> PyResult<(PyArrowStream, Bound<'py, PyDict>)> {
    let (schema, base_batches) = import_batches(base)?;
    let (_, change_batches) = import_batches(changes)?;
    // Field metadata plays no part in matching; the output keeps the base schema.
    let schema: SchemaRef = Arc::new(Schema::clone(&schema));
    let key = match key_columns {
        None => KeyMode::Multiset,
        Some(names) => KeyMode::Unique(
            names
                .iter()
                .map(|n| {
                    schema.index_of(n).map_err(|_| {
                        PyValueError::new_err(format!("key column {n:?} is not in the table"))
                    })
                })
                .collect::<PyResult<_>>()?,
        ),
    };
    let (batch, stats) = py
        .detach(|| apply(&schema, &base_batches, &change_batches, &key))
        .map_err(|e: ApplyError| pgwire_error(py, "DeltaError", &e.to_string()))?;
    let out = PyDict::new(py);
    out.set_item("inserted", stats.inserted)?;
    out.set_item("updated", stats.updated)?;
    out.set_item("deleted", stats.deleted)?;
    out.set_item("truncated", stats.truncated)?;
    out.set_item("missing_rows", stats.missing_rows)?;
    out.set_item("unknown_values", stats.unknown_values)?;
    Ok((PyArrowStream::new(schema, vec![batch]), out))
}

/// `reduce_changes(changes, columns, key_columns) -> (ArrowStream, stats)`: the MERGE
/// source of the change table `changes` (see `crate::merge::reduce_changes`): its columns
/// named in `columns`, then `_delete`, `_unchanged` and `_from`, one row per key of
/// `key_columns`. `stats["truncated"]` counts the truncates among the changes.
#[pyfunction]
#[pyo3(signature = (changes, columns, key_columns))]
pub fn reduce_changes<'py>(
    py: Python<'py>,
    changes: &Bound<'py, PyAny>,
    columns: Vec<String>,
    key_columns: Vec<String>,
) -> PyResult<(PyArrowStream, Bound<'py, PyDict>)> {
    reduced(py, changes, &columns, &key_columns, reduce)
}

/// `history_changes(changes, columns, key_columns) -> (ArrowStream, stats)`: one change
/// per key and source transaction of the change table `changes`, in commit order (see
/// `crate::merge::history_changes`): the columns of `reduce_changes`, then `_truncate`,
/// `_commit_lsn`, `_commit_ts` and `_xid`.
#[pyfunction]
#[pyo3(signature = (changes, columns, key_columns))]
pub fn history_changes<'py>(
    py: Python<'py>,
    changes: &Bound<'py, PyAny>,
    columns: Vec<String>,
    key_columns: Vec<String>,
) -> PyResult<(PyArrowStream, Bound<'py, PyDict>)> {
    reduced(py, changes, &columns, &key_columns, history)
}

type Reducer = fn(&SchemaRef, &[RecordBatch], &[usize]) -> Result<Reduced, ApplyError>;

fn reduced<'py>(
    py: Python<'py>,
    changes: &Bound<'py, PyAny>,
    columns: &[String],
    key_columns: &[String],
    fold_with: Reducer,
) -> PyResult<(PyArrowStream, Bound<'py, PyDict>)> {
    let (schema, change_batches) = import_batches(changes)?;
    let fields = columns
        .iter()
        .map(|n| {
            schema
                .field_with_name(n)
                .map(|f| f.clone().with_metadata(std::collections::HashMap::new()))
                .map_err(|_| PyValueError::new_err(format!("column {n:?} is not in the table")))
        })
        .collect::<PyResult<Vec<_>>>()?;
    let data: SchemaRef = Arc::new(Schema::new(fields));
    let keys = key_columns
        .iter()
        .map(|n| {
            data.index_of(n)
                .map_err(|_| PyValueError::new_err(format!("key column {n:?} is not in the table")))
        })
        .collect::<PyResult<Vec<usize>>>()?;
    let reduced = py
        .detach(|| fold_with(&data, &change_batches, &keys))
        .map_err(|e: ApplyError| pgwire_error(py, "DeltaError", &e.to_string()))?;
    let out = PyDict::new(py);
    out.set_item("inserted", reduced.stats.inserted)?;
    out.set_item("updated", reduced.stats.updated)?;
    out.set_item("deleted", reduced.stats.deleted)?;
    out.set_item("truncated", reduced.stats.truncated)?;
    out.set_item("missing_rows", reduced.stats.missing_rows)?;
    let schema = reduced.batch.schema();
    Ok((PyArrowStream::new(schema, vec![reduced.batch]), out))
}

/// `row_digests(table, columns) -> ArrowStream`: a one-column table (`_digest`, uint64)
/// holding a 64-bit digest of each row's `columns` (see `crate::merge::row_digests`), in
/// row order.
#[pyfunction]
#[pyo3(signature = (table, columns))]
pub fn row_digests(
    py: Python<'_>,
    table: &Bound<'_, PyAny>,
    columns: Vec<String>,
) -> PyResult<PyArrowStream> {
    let (schema, batches) = import_batches(table)?;
    let indexes = columns
        .iter()
        .map(|n| {
            schema
                .index_of(n)
                .map_err(|_| PyValueError::new_err(format!("column {n:?} is not in the table")))
        })
        .collect::<PyResult<Vec<usize>>>()?;
    let digests = py
        .detach(|| digest(&schema, &batches, &indexes))
        .map_err(|e: ApplyError| pgwire_error(py, "Error", &e.to_string()))?;
    let out_schema: SchemaRef = Arc::new(Schema::new(vec![Field::new(
        "_digest",
        DataType::UInt64,
        false,
    )]));
    let batch = RecordBatch::try_new(out_schema.clone(), vec![Arc::new(digests)])
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(PyArrowStream::new(out_schema, vec![batch]))
}
