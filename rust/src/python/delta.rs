//! `_native.DeltaDvTable`: a Delta table kept by deletion vectors (see `crate::delta`),
//! for the sink's `deletion-vectors` writer.

use std::collections::HashMap;
use std::sync::Mutex;

use arrow_select::concat::concat_batches;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::arrow::import_batches;
use super::errors::pgwire_error;
use crate::delta::compaction::Policy;
use crate::delta::table::{runtime, DvError, DvTable, Position};

/// `DeltaDvTable(uri, storage_options=None, key_index_bytes=256 MiB)`: the Delta table at
/// `uri`, opened once and brought up to date by each call, keeping up to
/// `key_index_bytes` of its files' keys in memory between MERGEs (`crate::delta::index`).
#[pyclass(name = "DeltaDvTable", module = "pgwire_cdc._native", frozen)]
pub struct PyDeltaDvTable {
    table: Mutex<DvTable>,
}

/// The default bound of a table's key index: 256 MiB, the keys of some 20 to 30 million
/// rows (8 bytes a row in key order, 12 otherwise).
const KEY_INDEX_BYTES: usize = 256 << 20;

fn delta_error(py: Python<'_>, e: &DvError) -> PyErr {
    pgwire_error(py, "DeltaError", &e.to_string())
}

#[pymethods]
impl PyDeltaDvTable {
    #[new]
    #[pyo3(signature = (uri, storage_options=None, key_index_bytes=KEY_INDEX_BYTES))]
    fn new(
        py: Python<'_>,
        uri: String,
        storage_options: Option<HashMap<String, String>>,
        key_index_bytes: usize,
    ) -> PyResult<Self> {
        let options = storage_options.unwrap_or_default();
        let table = py
            .detach(|| runtime()?.block_on(DvTable::open(&uri, options, key_index_bytes)))
            .map_err(|e| delta_error(py, &e))?;
        Ok(Self {
            table: Mutex::new(table),
        })
    }

    /// `unsupported() -> str | None`: why this writer cannot keep the table by deletion
    /// vectors (None: it can).
    fn unsupported(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.with_table(py, |t| t.unsupported())
    }

    /// `merge(source, keys, app_id, version, metadata=None) -> dict`: one MERGE of the
    /// reduced change table `source` matched on `keys`, committed with the position
    /// `app_id` → `version` and `userMetadata` `metadata`; what it did.
    #[pyo3(signature = (source, keys, app_id, version, metadata=None))]
    fn merge<'py>(
        &self,
        py: Python<'py>,
        source: &Bound<'py, PyAny>,
        keys: Vec<String>,
        app_id: String,
        version: i64,
        metadata: Option<String>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (schema, batches) = import_batches(source)?;
        let batch = concat_batches(&schema, &batches)
            .map_err(|e| pgwire_error(py, "DeltaError", &e.to_string()))?;
        let position = Position {
            app_id,
            version,
            metadata,
        };
        let stats = self.with_table(py, |t| {
            runtime()?.block_on(t.merge(&batch, &keys, &position))
        })?;
        let out = PyDict::new(py);
        out.set_item("version", stats.version)?;
        out.set_item("files", stats.files)?;
        out.set_item("files_read", stats.files_read)?;
        out.set_item("files_indexed", stats.files_indexed)?;
        out.set_item("rows_read", stats.rows_read)?;
        out.set_item("retired", stats.retired)?;
        out.set_item("written", stats.written)?;
        out.set_item("files_removed", stats.files_removed)?;
        out.set_item("deletion_vectors", stats.deletion_vectors)?;
        out.set_item("conflicts", stats.conflicts)?;
        out.set_item("load_ms", stats.load_ms)?;
        out.set_item("scan_ms", stats.scan_ms)?;
        out.set_item("write_ms", stats.write_ms)?;
        out.set_item("commit_ms", stats.commit_ms)?;
        out.set_item("index_files", stats.index_files)?;
        out.set_item("index_bytes", stats.index_bytes)?;
        Ok(out)
    }

    /// `compact(min_file_rows, target_file_size, max_deleted_ratio=0.0,
    /// min_small_files=1, max_worn_bytes=None) -> dict`: rewrites the small files (fewer
    /// than `min_file_rows` rows) when there are `min_small_files` of them, and the other
    /// files with more than `max_deleted_ratio` of their rows deleted, up to
    /// `max_worn_bytes` of them (see `delta::compaction`).
    #[pyo3(signature = (
        min_file_rows, target_file_size, max_deleted_ratio=0.0, min_small_files=1,
        max_worn_bytes=None
    ))]
    fn compact<'py>(
        &self,
        py: Python<'py>,
        min_file_rows: u64,
        target_file_size: u64,
        max_deleted_ratio: f64,
        min_small_files: usize,
        max_worn_bytes: Option<u64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let policy = Policy {
            min_file_rows,
            min_small_files: min_small_files.max(1),
            max_deleted_ratio,
            max_worn_bytes,
        };
        let stats = self.with_table(py, |t| {
            runtime()?.block_on(t.compact(&policy, target_file_size))
        })?;
        let out = PyDict::new(py);
        out.set_item("version", stats.version)?;
        out.set_item("files_removed", stats.files_removed)?;
        out.set_item("files_added", stats.files_added)?;
        out.set_item("rows_purged", stats.rows_purged)?;
        out.set_item("rows_kept", stats.rows_kept)?;
        Ok(out)
    }
}

impl PyDeltaDvTable {
    /// Runs `f` on the table without the GIL (one call at a time).
    fn with_table<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut DvTable) -> Result<T, DvError> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut table = self.table.lock().map_err(|_| {
                DvError::Unsupported("a previous call on this table panicked".into())
            })?;
            f(&mut table)
        })
        .map_err(|e| delta_error(py, &e))
    }
}
