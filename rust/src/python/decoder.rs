//! `pgwire_cdc._native.Decoder`: offline decoding of bare pgoutput messages.

use std::collections::HashMap;
use std::sync::{Mutex, TryLockError};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyList};

use crate::arrow::ArrowSink;
use crate::decoder::{Decoder, DecoderConfig};
use crate::error::{DecodeError, FeedError, Reason};
use crate::relation::BaseType;
use crate::sink::{EventMeta, EventRef, EventSink};

use super::arrow::PyArrowStream;
use super::errors::{decode_error, rejected_rows_error};
use super::event::PyEvent;
use super::message_log::MessageLog;
use super::typed::{Images, TypedEvents};

/// `feed_many` lets other threads run and checks for Ctrl-C this often (messages).
const YIELD_EVERY: usize = 65_536;

/// Which events a decoder keeps for `events()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeepEvents {
    /// The default: every event until `events()` drains it, except that while `events()`
    /// has never been called, each `take()` drops the events of what the take before it
    /// returned. A caller that drains only with `take()` holds at most two takes' worth
    /// of messages (copies); one that calls `events()` after a `take()` still gets them.
    UntilDrained,
    /// `keep_events=True`: every event until `events()` drains it.
    All,
    /// `keep_events=False`: none; `events()` is an error.
    None,
}

struct State {
    decoder: Decoder,
    /// The messages whose events `events()` has not returned yet (`message_log.rs`);
    /// None for `keep_events=False`.
    messages: Option<MessageLog>,
    /// Whether `events()` was ever called.
    events_drained: bool,
    /// Events made into Python objects but held back by a value error of another event,
    /// returned by the next `events()`.
    held_events: Vec<Py<PyEvent>>,
    tables: ArrowSink,
    keep_events: KeepEvents,
    /// False: no change tables are built (a consumer that only wants events).
    keep_tables: bool,
    /// Rows the change tables rejected since the last `take` (their values cannot be
    /// parsed or represented): `take` raises the first.
    table_errors: Vec<DecodeError>,
}

/// Hands each event to the change tables, if the decoder builds them. A value the tables
/// cannot hold is not an error of the protocol: its row stays out of the tables and the
/// error is kept for `take()` to raise, while the event still reaches `events()`.
struct Outputs<'a> {
    tables: Option<&'a mut ArrowSink>,
    table_errors: &'a mut Vec<DecodeError>,
}

impl EventSink for Outputs<'_> {
    fn event(&mut self, meta: &EventMeta, event: EventRef<'_, '_>) -> Result<(), DecodeError> {
        if let Some(tables) = self.tables.as_deref_mut() {
            match tables.event(meta, event) {
                Err(e) if matches!(e.reason, Reason::Value { .. }) => self.table_errors.push(e),
                other => other?,
            }
        }
        Ok(())
    }
}

impl State {
    /// Decodes one message and, when it decoded, keeps it for `events()`.
    fn feed(&mut self, message: &[u8], lsn: u64) -> Result<(), FeedError> {
        let mut outputs = Outputs {
            tables: self.keep_tables.then_some(&mut self.tables),
            table_errors: &mut self.table_errors,
        };
        self.decoder.feed(message, lsn, &mut outputs)?;
        if let Some(log) = &mut self.messages {
            log.push(message, lsn);
        }
        Ok(())
    }
}

#[pyclass(frozen, subclass, module = "pgwire_cdc._native", name = "Decoder")]
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
    #[pyo3(signature = (proto_version = 1, binary = false, *, keep_events = None, keep_tables = true))]
    fn new(
        proto_version: u32,
        binary: bool,
        keep_events: Option<bool>,
        keep_tables: bool,
    ) -> PyResult<Self> {
        if !(1..=4).contains(&proto_version) {
            return Err(PyValueError::new_err(format!(
                "proto_version must be 1, 2, 3 or 4 (got {proto_version})"
            )));
        }
        let config = DecoderConfig {
            proto_version,
            binary,
        };
        Ok(Self {
            state: Mutex::new(State {
                decoder: Decoder::new(config),
                messages: (keep_events != Some(false))
                    .then(|| MessageLog::new(Decoder::new(config))),
                events_drained: false,
                held_events: Vec::new(),
                tables: ArrowSink::new(binary),
                keep_events: match keep_events {
                    None => KeepEvents::UntilDrained,
                    Some(true) => KeepEvents::All,
                    Some(false) => KeepEvents::None,
                },
                keep_tables,
                table_errors: Vec::new(),
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

    /// Tells the decoder what user types are (`{oid: (base_oid, base_type_modifier)}`,
    /// as `pgwire_cdc.catalog.type_map` reads them from `pg_type`): enums and text-like
    /// types become text, domains their base type with its modifier. Applies to Relation
    /// messages received afterwards; needed to read such columns in binary format.
    fn set_type_map(&self, types: HashMap<u32, (u32, i32)>) -> PyResult<()> {
        let entries: Vec<(u32, BaseType)> = types
            .into_iter()
            .map(|(oid, (base, modifier))| {
                let base = BaseType {
                    oid: base,
                    type_modifier: modifier,
                };
                (oid, base)
            })
            .collect();
        let mut state = self.lock()?;
        state.decoder.extend_type_catalog(entries.iter().copied());
        if let Some(log) = &mut state.messages {
            log.extend_type_catalog(&entries);
        }
        Ok(())
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
        let mut state = self.lock()?;
        // Lists (what the contract names) are indexed directly: no iterator objects.
        if let (Ok(list), Ok(lsn_list)) = (
            messages.cast::<PyList>(),
            lsns.map(|l| l.cast::<PyList>()).transpose(),
        ) {
            return feed_list(py, &mut state, list, lsn_list);
        }
        let mut lsn_iter = lsns.map(PyAnyMethods::try_iter).transpose()?;
        for (i, item) in messages.try_iter()?.enumerate() {
            let item = item?;
            let lsn = match lsn_iter.as_mut().and_then(Iterator::next) {
                Some(l) => l?.extract::<u64>()?,
                None => 0,
            };
            feed_item(py, &mut state, &item, lsn, i)?;
            pause_now_and_then(py, i)?;
        }
        Ok(())
    }

    /// The change-table segments built so far, drained, oldest first: one
    /// `(schema.table, ArrowStream)` per relation and schema version.
    ///
    /// If rows were rejected (a value the tables cannot hold), raises
    /// `ColumnValueError` for the first of them instead and forgets the errors; the other
    /// rows stay for the next call.
    fn _take_segments(&self, py: Python<'_>) -> PyResult<Vec<(String, PyArrowStream)>> {
        let mut state = self.lock()?;
        if state.keep_events == KeepEvents::UntilDrained && !state.events_drained {
            // The caller drains with take(): keep the messages of this take only (for an
            // events() call right after it), not those of the takes before.
            let state = &mut *state;
            if let Some(log) = &mut state.messages {
                log.taken(&state.decoder)
                    .map_err(|e| decode_error(py, &e, None))?;
            }
        }
        if !state.table_errors.is_empty() {
            let errors = std::mem::take(&mut state.table_errors);
            return Err(rejected_rows_error(py, &errors));
        }
        let segments = state
            .tables
            .take()
            .map_err(|e| PyRuntimeError::new_err(format!("building Arrow tables failed: {e}")))?;
        Ok(segments
            .into_iter()
            .map(|s| (s.table, PyArrowStream::new(s.batch.schema(), vec![s.batch])))
            .collect())
    }

    /// Rows in the change tables since the last `take`.
    #[getter]
    fn pending_rows(&self) -> PyResult<usize> {
        Ok(self.lock()?.tables.rows())
    }

    /// The events decoded so far, drained, with typed row values (`typed.rs`); with
    /// `typed=False`, only the wire form (`wire_table_row`, ...), which never fails.
    ///
    /// If a row value cannot be represented (the tables' policy), raises
    /// `ColumnValueError` for the first such event instead; that event is dropped and the
    /// others are returned by the next call.
    #[pyo3(signature = (*, typed = true))]
    fn events(&self, py: Python<'_>, typed: bool) -> PyResult<Vec<Py<PyEvent>>> {
        let mut state = self.lock()?;
        let Some(messages) = &mut state.messages else {
            return Err(PyRuntimeError::new_err(
                "this Decoder was made with keep_events=False and keeps no events; \
                 make it with keep_events=None (the default) or True to call events()",
            ));
        };
        let mut log = messages.drain().map_err(|e| decode_error(py, &e, None))?;
        state.events_drained = true;
        let mut out = std::mem::take(&mut state.held_events);
        let (drained, images, errors) = if typed {
            let mut events = TypedEvents::new(state.decoder.config().binary);
            log.drain_with(|event, images| events.add(event, images));
            events.finish(py)?
        } else {
            let drained = log.drain();
            let wire_only = drained.iter().map(|_| Images::wire_only()).collect();
            (drained, wire_only, Vec::new())
        };
        let mut failed = errors.iter().map(|(i, _)| *i).peekable();
        for (i, (event, typed)) in drained.iter().zip(&images).enumerate() {
            if failed.peek() == Some(&i) {
                failed.next();
                continue;
            }
            out.push(Py::new(py, PyEvent::from_event(py, event, typed)?)?);
        }
        if let Some((_, first)) = errors.first() {
            state.held_events = out;
            let err = decode_error(py, first, None);
            let note = format!(
                "{} event(s) had a value Python or Arrow cannot hold and were dropped; \
                 this is the first. Call events() again for the other events.",
                errors.len()
            );
            return Err(match err.value(py).call_method1("add_note", (note,)) {
                Ok(_) => err,
                Err(e) => e,
            });
        }
        Ok(out)
    }
}

/// `feed_many` over lists, read in place: each item is borrowed from its list (no reference
/// counting) and the next messages and their LSNs are prefetched while this one decodes.
/// The messages are separate objects spread over the heap (Python keeps bytes of different
/// lengths in different pools), so without the prefetch every message starts with a cache
/// miss; prefetching the LSN int objects as well took another 5 % off (binary capture).
///
/// The list lengths are read again on every step: another thread may change the lists while
/// `feed_many` lets it run.
fn feed_list(
    py: Python<'_>,
    state: &mut State,
    messages: &Bound<'_, PyList>,
    lsns: Option<&Bound<'_, PyList>>,
) -> PyResult<()> {
    let mut i = 0;
    while i < messages.len() {
        // The LSN first: reading an int-like object other than an int may run Python code,
        // which must not happen while a message is borrowed.
        let lsn = match lsns {
            Some(l) => lsn_at(l, i)?,
            None => 0,
        };
        prefetch_item(messages, i + PREFETCH_AHEAD, PREFETCH_BYTES);
        if let Some(l) = lsns {
            // An int object is 32 bytes: one cache line, rarely two.
            prefetch_item(l, i + PREFETCH_AHEAD, 1);
        }
        // Emptied by the Python code an LSN ran, or by another thread.
        let item = borrowed_item(messages, i).ok_or_else(list_changed)?;
        // Only Rust code runs while the message is borrowed, so the list cannot change and
        // drop it meanwhile.
        feed_item(py, state, &item, lsn, i)?;
        pause_now_and_then(py, i)?;
        i += 1;
    }
    Ok(())
}

/// Feeds message `i` of a `feed_many` call: `bytes` read in place, `bytearray` copied.
fn feed_item(
    py: Python<'_>,
    state: &mut State,
    item: &Bound<'_, PyAny>,
    lsn: u64,
    i: usize,
) -> PyResult<()> {
    let fed = match item.cast::<PyBytes>() {
        Ok(bytes) => state.feed(bytes.as_bytes(), lsn),
        Err(_) => state.feed(&item.extract::<PyBackedBytes>()?, lsn),
    };
    fed.map_err(|e| decode_error(py, &e, Some(i)))
}

/// Item `i` of an LSN list as a u64. A plain `int` is read with `PyLong_AsUnsignedLong`,
/// which reads the digits directly: PyO3's `u64` extraction goes through
/// `PyLong_AsUnsignedLongLong`, which converts an int above 2^30 (most real LSNs) byte by
/// byte, about 70 instructions a message. Anything else (an int subclass, an object with
/// `__index__`) is extracted as usual.
fn lsn_at(lsns: &Bound<'_, PyList>, i: usize) -> PyResult<u64> {
    let item = lsns.get_item(i)?;
    #[cfg(all(target_pointer_width = "64", not(windows)))]
    if item.is_exact_instance_of::<pyo3::types::PyInt>() {
        // SAFETY: the GIL is held and `item` is a live `int` (checked above), the argument
        // `PyLong_AsUnsignedLong` requires. On this platform `unsigned long` is 64 bits.
        let value = unsafe { ffi::PyLong_AsUnsignedLong(item.as_ptr()) };
        if value == std::ffi::c_ulong::MAX {
            // Either the value u64::MAX, or an error (negative, too large) is set.
            if let Some(err) = PyErr::take(lsns.py()) {
                return Err(err);
            }
        }
        return Ok(value);
    }
    item.extract::<u64>()
}

/// Every `YIELD_EVERY` messages, lets other threads run and checks for Ctrl-C.
fn pause_now_and_then(py: Python<'_>, i: usize) -> PyResult<()> {
    if i % YIELD_EVERY == YIELD_EVERY - 1 {
        py.check_signals()?;
        py.detach(|| ());
    }
    Ok(())
}

/// How many messages ahead `feed_list` prefetches: a message takes 150-300 ns to decode, a
/// cache miss about 100 ns; four ahead measured best (1, 2, 4 and 8 tried, binary capture).
const PREFETCH_AHEAD: usize = 4;

/// Bytes of a message prefetched: the object header and the start of a typical message.
const PREFETCH_BYTES: usize = 512;

fn list_changed() -> PyErr {
    PyRuntimeError::new_err("the messages list changed during feed_many")
}

/// Item `i` of `list` as a borrowed reference, or None past the end.
fn borrowed_item<'a, 'py>(
    list: &'a Bound<'py, PyList>,
    i: usize,
) -> Option<Borrowed<'a, 'py, PyAny>> {
    if i >= list.len() {
        return None;
    }
    let index = ffi::Py_ssize_t::try_from(i).ok()?;
    // SAFETY: the GIL is held (`list` is a `Bound`) and `index` is within the list, so
    // `PyList_GetItem` returns a borrowed reference to a live object without setting an
    // exception. The `Borrowed` cannot outlive `'a`, the borrow of the list; callers drop
    // it before anything runs that could change the list (Python code, releasing the GIL).
    unsafe { Borrowed::from_ptr_or_opt(list.py(), ffi::PyList_GetItem(list.as_ptr(), index)) }
}

/// Asks the CPU to start loading the first `bytes` of item `i` of `list` into the cache (a
/// bytes object keeps its data right after its header). A hint only: nothing is read here.
fn prefetch_item(list: &Bound<'_, PyList>, i: usize, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(item) = borrowed_item(list, i) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let start = item.as_ptr().cast::<i8>().cast_const();
        for offset in (0..bytes).step_by(64) {
            // SAFETY: SSE, the feature `_mm_prefetch` needs, is part of every x86_64 CPU,
            // and a prefetch never faults nor reads memory into the program, whatever the
            // address (`wrapping_add` keeps the pointer arithmetic itself defined).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(offset)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (list, i, bytes);
}
