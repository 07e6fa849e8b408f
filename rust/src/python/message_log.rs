//! The messages an offline `Decoder` was fed, kept so that `events()` can decode them.
//!
//! The decoder cannot know whether its caller will ask for events, and building them as
//! it goes costs as much as the change tables. So it keeps only a reference to each
//! message it fed successfully (the caller's `bytes` object; a `bytearray` is copied,
//! since it may change) with its LSN, and a decoder in the state it was in before the
//! first of them. `events()` decodes the kept messages with that decoder, which then is
//! in the main decoder's state again.
//!
//! While `events()` has never been called, each `take()` forgets the messages fed before
//! the previous `take()`: the log holds at most the messages of the last take and those
//! fed since. The decoder's state at a take is copied when that is cheap
//! ([`Decoder::snapshot`]); when a streamed or prepared transaction is held it is not, and
//! the forgotten messages are decoded once more, into nothing, to reach that state.

use pyo3::pybacked::PyBackedBytes;

use crate::decoder::Decoder;
use crate::error::DecodeError;
use crate::event_log::EventLog;
use crate::relation::BaseType;
use crate::sink::NullSink;

pub struct MessageLog {
    /// In the state before the first kept message.
    start: Decoder,
    messages: Vec<(PyBackedBytes, u64)>,
    /// The last `take()`: how many messages were kept then, and the decoder's state then
    /// when it was cheap to copy.
    last_take: Option<(usize, Option<Decoder>)>,
}

impl MessageLog {
    /// A log starting at `decoder`'s state.
    pub fn new(decoder: Decoder) -> Self {
        Self {
            start: decoder,
            messages: Vec::new(),
            last_take: None,
        }
    }

    /// Keeps a message the main decoder has just decoded without error.
    pub fn push(&mut self, message: PyBackedBytes, lsn: u64) {
        self.messages.push((message, lsn));
    }

    /// What the main decoder was told about user types, told to the kept decoders too.
    pub fn extend_type_catalog(&mut self, entries: &[(u32, BaseType)]) {
        self.start.extend_type_catalog(entries.iter().copied());
        if let Some((_, Some(decoder))) = &mut self.last_take {
            decoder.extend_type_catalog(entries.iter().copied());
        }
    }

    /// A `take()` of a caller that has never asked for events: forgets the messages fed
    /// before the previous take. `now` is the main decoder.
    pub fn taken(&mut self, now: &Decoder) -> Result<(), DecodeError> {
        if let Some((kept, state)) = self.last_take.take() {
            let kept = kept.min(self.messages.len());
            match state {
                Some(decoder) => self.start = decoder,
                None => {
                    let mut nothing = NullSink::default();
                    for (message, lsn) in self.messages.iter().take(kept) {
                        self.start.feed(message, *lsn, &mut nothing)?;
                    }
                }
            }
            self.messages.drain(..kept);
        }
        self.last_take = Some((self.messages.len(), now.snapshot()));
        Ok(())
    }

    /// The events of every kept message, decoded; the log is empty afterwards and starts
    /// at the main decoder's state.
    pub fn drain(&mut self) -> Result<EventLog, DecodeError> {
        let mut events = EventLog::default();
        self.last_take = None;
        for (message, lsn) in self.messages.drain(..) {
            self.start.feed(&message, lsn, &mut events)?;
        }
        Ok(events)
    }
}
