//! `pgwire_cdc._native.Decoder`: offline decoding of bare pgoutput messages.

use std::sync::{Mutex, TryLockError};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;

use crate::decoder::{Decoder, DecoderConfig};
use crate::event::EventCollector;
use crate::sink::NullSink;

use super::errors::decode_error;
use super::event::PyEvent;

/// `feed_many` lets other threads run and checks for Ctrl-C this often (messages).
const YIELD_EVERY: usize = 65_536;

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
    /// A decoder serves one thread at a time; a second one gets an error rather than
    /// waiting (waiting on the lock with the GIL held could deadlock).
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, State>> {
        self.state.try_lock().map_err(|e| match e {
            TryLockError::WouldBlock => {
                PyRuntimeError::new_err("this Decoder is in use by another thread")
            }
            TryLockError::Poisoned(_) => {
                PyRuntimeError::new_err("decoder state is poisoned by an earlier failure")
            }
        })
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

    /// Feeds many messages. On a malformed message the ones before it stay decoded and the
    /// error names its index.
    ///
    /// The bytes are read in place from the Python objects, so the GIL stays held while
    /// decoding (about 0.15 µs a message; releasing it per chunk cost a third more in
    /// reference counting). Every `YIELD_EVERY` messages the call lets other threads run
    /// and checks for Ctrl-C.
    #[pyo3(signature = (messages, lsns = None))]
    fn feed_many(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        lsns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        if let Some(l) = lsns {
            let (nl, nm) = (l.len()?, messages.len()?);
            if nl != nm {
                return Err(PyValueError::new_err(format!(
                    "lsns has {nl} entries for {nm} messages"
                )));
            }
        }
        let mut lsn_iter = lsns.map(|l| l.try_iter()).transpose()?;
        let mut state = self.lock()?;
        for (i, item) in messages.try_iter()?.enumerate() {
            let item = item?;
            let lsn = match lsn_iter.as_mut().and_then(Iterator::next) {
                Some(l) => l?.extract::<u64>()?,
                None => 0,
            };
            let fed = match item.cast::<PyBytes>() {
                Ok(bytes) => state.feed(bytes.as_bytes(), lsn),
                Err(_) => state.feed(&item.extract::<PyBackedBytes>()?, lsn),
            };
            fed.map_err(|e| decode_error(py, &e, Some(i)))?;
            if i % YIELD_EVERY == YIELD_EVERY - 1 {
                py.check_signals()?;
                py.detach(|| ());
            }
        }
        Ok(())
    }

    /// The events decoded so far, drained.
    fn events(&self, py: Python<'_>) -> PyResult<Vec<PyEvent>> {
        let drained = std::mem::take(&mut self.lock()?.events.events);
        drained.iter().map(|e| PyEvent::from_event(py, e)).collect()
    }
}
