//! `pgwire_cdc._native.Decoder`: offline decoding of bare pgoutput messages.

use std::sync::Mutex;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;

use crate::decoder::{Decoder, DecoderConfig};
use crate::event::EventCollector;
use crate::sink::NullSink;

use super::errors::decode_error;
use super::event::PyEvent;

struct State {
    decoder: Decoder,
    events: EventCollector,
    /// False: events are checked and discarded (a consumer that only wants tables).
    keep_events: bool,
}

impl State {
    fn feed(&mut self, message: &[u8], lsn: u64) -> Result<(), crate::error::DecodeError> {
        if self.keep_events {
            self.decoder.feed(message, lsn, &mut self.events)
        } else {
            self.decoder.feed(message, lsn, &mut NullSink::default())
        }
    }
}

#[pyclass(frozen, module = "pgwire_cdc._native", name = "Decoder")]
pub struct PyDecoder {
    state: Mutex<State>,
}

impl PyDecoder {
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, State>> {
        self.state
            .lock()
            .map_err(|_| PyRuntimeError::new_err("decoder state is poisoned by an earlier failure"))
    }
}

#[pymethods]
impl PyDecoder {
    #[new]
    #[pyo3(signature = (proto_version = 1, binary = false, *, keep_events = true))]
    fn new(proto_version: u32, binary: bool, keep_events: bool) -> PyResult<Self> {
        if !(1..=4).contains(&proto_version) {
            return Err(PyValueError::new_err(format!(
                "proto_version must be 1, 2, 3 or 4 (got {proto_version})"
            )));
        }
        Ok(Self {
            state: Mutex::new(State {
                decoder: Decoder::new(DecoderConfig {
                    proto_version,
                    binary,
                }),
                events: EventCollector::default(),
                keep_events,
            }),
        })
    }

    #[getter]
    fn proto_version(&self) -> PyResult<u32> {
        Ok(self.lock()?.decoder.config().proto_version)
    }

    #[getter]
    fn binary(&self) -> PyResult<bool> {
        Ok(self.lock()?.decoder.config().binary)
    }

    /// True inside a transaction or a streamed block.
    #[getter]
    fn in_transaction(&self) -> PyResult<bool> {
        Ok(self.lock()?.decoder.in_transaction())
    }

    /// Streamed or prepared transactions held until their commit.
    #[getter]
    fn pending_transactions(&self) -> PyResult<usize> {
        Ok(self.lock()?.decoder.pending_transactions())
    }

    #[pyo3(signature = (message, lsn = 0))]
    fn feed(&self, py: Python<'_>, message: PyBackedBytes, lsn: u64) -> PyResult<()> {
        self.lock()?
            .feed(&message, lsn)
            .map_err(|e| decode_error(py, &e, None))
    }

    /// Feeds many messages with the GIL released. On a malformed message the ones before
    /// it stay decoded and the error names its index.
    #[pyo3(signature = (messages, lsns = None))]
    fn feed_many(
        &self,
        py: Python<'_>,
        messages: Vec<PyBackedBytes>,
        lsns: Option<Vec<u64>>,
    ) -> PyResult<()> {
        if let Some(l) = &lsns {
            if l.len() != messages.len() {
                return Err(PyValueError::new_err(format!(
                    "lsns has {} entries for {} messages",
                    l.len(),
                    messages.len()
                )));
            }
        }
        let mut guard = self.lock()?;
        let state: &mut State = &mut guard;
        let result = py.detach(|| {
            for (i, message) in messages.iter().enumerate() {
                let lsn = lsns.as_ref().and_then(|l| l.get(i)).copied().unwrap_or(0);
                state.feed(message, lsn).map_err(|e| (i, e))?;
            }
            Ok(())
        });
        result.map_err(|(i, e)| decode_error(py, &e, Some(i)))
    }

    /// The events decoded so far, drained.
    fn events(&self, py: Python<'_>) -> PyResult<Vec<PyEvent>> {
        let drained = std::mem::take(&mut self.lock()?.events.events);
        drained.iter().map(|e| PyEvent::from_event(py, e)).collect()
    }
}
