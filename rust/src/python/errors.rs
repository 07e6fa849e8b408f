//! The one place where Rust errors become `pgwire_cdc.errors` exceptions.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

use crate::error::{DecodeError, FeedError, Reason, SpillError};
use crate::pg::{ErrorClass, PgError};

static DECODE_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static COLUMN_VALUE_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static CONFIG_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static SLOT_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static CONNECTION_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static SPILL_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn errors_class(
    py: Python<'_>,
    cell: &'static PyOnceLock<Py<PyType>>,
    name: &str,
) -> PyResult<Py<PyType>> {
    cell.get_or_try_init(py, || {
        let module = py.import("pgwire_cdc.errors")?;
        Ok::<_, PyErr>(module.getattr(name)?.cast_into::<PyType>()?.unbind())
    })
    .map(|t| t.clone_ref(py))
}

/// A failure of the decoder layer, borrowed: what [`decode_error`] turns into an exception.
#[derive(Debug, Clone, Copy)]
pub enum DecoderFailure<'e> {
    Decode(&'e DecodeError),
    Spill(&'e SpillError),
}

impl<'e> From<&'e DecodeError> for DecoderFailure<'e> {
    fn from(e: &'e DecodeError) -> Self {
        Self::Decode(e)
    }
}

impl<'e> From<&'e SpillError> for DecoderFailure<'e> {
    fn from(e: &'e SpillError) -> Self {
        Self::Spill(e)
    }
}

impl<'e> From<&'e FeedError> for DecoderFailure<'e> {
    fn from(e: &'e FeedError) -> Self {
        match e {
            FeedError::Decode(e) => Self::Decode(e),
            FeedError::Spill(e) => Self::Spill(e),
        }
    }
}

/// The exception for a decoder failure (a [`DecodeError`], a [`SpillError`] or a
/// [`FeedError`], either of them): see [`decode_exception`] and [`spill_error`].
/// `index`, for `feed_many`, is the index of the failing message.
pub fn decode_error<'e>(
    py: Python<'_>,
    err: impl Into<DecoderFailure<'e>>,
    index: Option<usize>,
) -> PyErr {
    match err.into() {
        DecoderFailure::Decode(e) => decode_exception(py, e, index),
        DecoderFailure::Spill(e) => spill_error(py, e),
    }
}

/// `pgwire_cdc.errors.SpillError`, with the error's text (it names the spill directory,
/// never a row value). Not the bytes' fault, so no message kind, offset or index.
pub fn spill_error(py: Python<'_>, err: &SpillError) -> PyErr {
    errors_class(py, &SPILL_ERROR, "SpillError")
        .and_then(|class| class.bind(py).call1((err.to_string(),)))
        .map_or_else(|e| e, PyErr::from_value)
}

/// `pgwire_cdc.errors.DecodeError` (`ColumnValueError` for a value), with the message
/// kind, the byte offset and, for `feed_many`, the index of the failing message. Never
/// any row value.
fn decode_exception(py: Python<'_>, err: &DecodeError, index: Option<usize>) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let class = match &err.reason {
            Reason::Value { .. } => errors_class(py, &COLUMN_VALUE_ERROR, "ColumnValueError")?,
            _ => errors_class(py, &DECODE_ERROR, "DecodeError")?,
        };
        let mut message = err.to_string();
        if let Some(i) = index {
            message = format!("message #{i}: {message}");
        }
        let kwargs = PyDict::new(py);
        kwargs.set_item("message_kind", err.kind.name())?;
        kwargs.set_item("offset", err.offset)?;
        kwargs.set_item("reason", err.reason.to_string())?;
        kwargs.set_item("index", index)?;
        if let Reason::Value {
            table, column, lsn, ..
        } = &err.reason
        {
            kwargs.set_item("table", table)?;
            kwargs.set_item("column", column)?;
            kwargs.set_item("lsn", lsn)?;
        }
        let instance = class.bind(py).call((message,), Some(&kwargs))?;
        Ok(PyErr::from_value(instance))
    };
    build().unwrap_or_else(|e| e)
}

/// `ColumnValueError` for rows the change tables rejected: the first one, and how many.
pub fn rejected_rows_error(py: Python<'_>, errors: &[DecodeError]) -> PyErr {
    let Some(first) = errors.first() else {
        return pyo3::exceptions::PyRuntimeError::new_err("no rejected rows");
    };
    let err = decode_error(py, first, None);
    let note = format!(
        "{} row(s) were left out of the change tables; this is the first. \
         Call take() again for the other rows.",
        errors.len()
    );
    match err.value(py).call_method1("add_note", (note,)) {
        Ok(_) => err,
        Err(e) => e,
    }
}

/// A client error as its `pgwire_cdc.errors` exception, with `sqlstate` set when the
/// server reported one. The message is the error's Display: no password, no DETAIL.
pub fn pg_error(py: Python<'_>, err: &PgError) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let class = match err.class() {
            ErrorClass::Config => errors_class(py, &CONFIG_ERROR, "ConfigError")?,
            ErrorClass::Slot => errors_class(py, &SLOT_ERROR, "SlotError")?,
            ErrorClass::Connection => errors_class(py, &CONNECTION_ERROR, "ConnectionError")?,
        };
        let kwargs = PyDict::new(py);
        kwargs.set_item("sqlstate", err.sqlstate())?;
        let instance = class.bind(py).call((err.to_string(),), Some(&kwargs))?;
        Ok(PyErr::from_value(instance))
    };
    build().unwrap_or_else(|e| e)
}

/// An instance of `pgwire_cdc.errors.<class_name>` (falling back to `Error`) with `message`.
pub fn pgwire_error(py: Python<'_>, class_name: &str, message: &str) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let module = py.import("pgwire_cdc.errors")?;
        let class = module
            .getattr(class_name)
            .or_else(|_| module.getattr("Error"))?;
        Ok(PyErr::from_value(class.call1((message,))?))
    };
    build().unwrap_or_else(|e| e)
}
