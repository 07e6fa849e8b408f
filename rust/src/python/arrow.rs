//! Arrow data out to Python without copying: the Arrow PyCapsule interface.
//!
//! [`PyArrowStream`] implements `__arrow_c_stream__`: pyarrow (`pa.table(obj)`,
//! `pa.RecordBatchReader.from_stream(obj)`) and any other consumer of the interface import
//! the batches' buffers as they are.

use std::sync::Mutex;

use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{RecordBatch, RecordBatchIterator};
use arrow_schema::SchemaRef;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

/// Record batches of one schema, handed out once through `__arrow_c_stream__`.
#[pyclass(frozen, module = "pgwire_cdc._native", name = "ArrowStream")]
pub struct PyArrowStream {
    schema: SchemaRef,
    batches: Mutex<Option<Vec<RecordBatch>>>,
    rows: usize,
}

impl PyArrowStream {
    pub fn new(schema: SchemaRef, batches: Vec<RecordBatch>) -> Self {
        let rows = batches.iter().map(RecordBatch::num_rows).sum();
        Self {
            schema,
            batches: Mutex::new(Some(batches)),
            rows,
        }
    }
}

#[pymethods]
impl PyArrowStream {
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        // Schema negotiation is optional in the protocol; the batches keep their schema.
        let _ = requested_schema;
        let batches = self
            .batches
            .lock()
            .map_err(|_| PyRuntimeError::new_err("arrow stream state is poisoned"))?
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("this Arrow stream was already consumed"))?;
        let reader = RecordBatchIterator::new(batches.into_iter().map(Ok), self.schema.clone());
        let stream = FFI_ArrowArrayStream::new(Box::new(reader));
        PyCapsule::new_with_value(py, stream, c"arrow_array_stream")
    }

    /// Rows in the stream.
    fn __len__(&self) -> usize {
        self.rows
    }
}
