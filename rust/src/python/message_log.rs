//! The messages an offline `Decoder` was fed, kept so that `events()` can decode them.
//!
//! The decoder cannot know whether its caller will ask for events, and building them as
//! it goes costs as much as the change tables. So it keeps a copy of each message it fed
//! successfully, with its LSN, in large buffers (a copy while the message is in the cache is
//! cheaper than holding a reference to the Python object, whose release later touches it
//! again), and a decoder in the state it was in before the first of them. `events()`
//! decodes the kept messages with that decoder, which then is in the main decoder's state
//! again.
//!
//! While `events()` has never been called, each `take()` forgets the messages fed before
//! the previous `take()`: the log holds the messages of the last take and those fed since.
//! The decoder's state at a take is copied when that is cheap ([`Decoder::snapshot`]);
//! when a streamed or prepared transaction is held it is not, and the forgotten messages
//! are decoded once more, into nothing, to reach that state.

use crate::decoder::Decoder;
use crate::error::FeedError;
use crate::event_log::EventLog;
use crate::relation::BaseType;
use crate::sink::{EventSink, NullSink};

/// Bytes of one chunk of [`Messages`]: large enough that starting a chunk is rare, small
/// enough that the last one's unused room does not matter.
const CHUNK_BYTES: usize = 1 << 20;

/// Messages one after another, in chunks of [`CHUNK_BYTES`] (a longer message gets a chunk
/// of its own). A single growing buffer copied everything it held at each doubling, into
/// freshly faulted pages: about 8 % of the default decoder's time on the synthetic streams
/// (perf, five takes of 100,000 messages per decoder).
#[derive(Default)]
struct Messages {
    /// In use, oldest first: only the last one takes new messages.
    chunks: Vec<Chunk>,
    /// Emptied by `clear`, their memory kept for the next messages.
    spare: Vec<Chunk>,
}

#[derive(Default)]
struct Chunk {
    bytes: Vec<u8>,
    /// Where each message ends in `bytes`, and its LSN.
    ends: Vec<(usize, u64)>,
}

impl Messages {
    fn push(&mut self, message: &[u8], lsn: u64) {
        let fits = self
            .chunks
            .last()
            .is_some_and(|c| c.bytes.capacity() - c.bytes.len() >= message.len());
        if !fits {
            let mut chunk = self.spare.pop().unwrap_or_default();
            chunk.bytes.reserve(CHUNK_BYTES.max(message.len()));
            self.chunks.push(chunk);
        }
        if let Some(chunk) = self.chunks.last_mut() {
            chunk.bytes.extend_from_slice(message);
            chunk.ends.push((chunk.bytes.len(), lsn));
        }
    }

    /// Feeds every message to `decoder`, in order.
    fn feed(&self, decoder: &mut Decoder, sink: &mut impl EventSink) -> Result<(), FeedError> {
        for chunk in &self.chunks {
            let mut start = 0;
            for &(end, lsn) in &chunk.ends {
                decoder.feed(chunk.bytes.get(start..end).unwrap_or_default(), lsn, sink)?;
                start = end;
            }
        }
        Ok(())
    }

    /// Forgets the messages, keeping the memory for the next ones.
    fn clear(&mut self) {
        for mut chunk in self.chunks.drain(..) {
            chunk.bytes.clear();
            chunk.ends.clear();
            self.spare.push(chunk);
        }
    }
}

pub struct MessageLog {
    /// In the state before the first kept message.
    start: Decoder,
    /// The messages of the last take (fed before it), while `events()` has never been
    /// called; otherwise empty.
    taken: Messages,
    /// The messages fed since.
    fed: Messages,
    /// The main decoder's state at the last take, when it was cheap to copy.
    at_last_take: LastTake,
}

/// The main decoder's state at the last take.
// As large as the `Option<Option<Decoder>>` it names, and like `start`, kept inline: one
// per log, moved only at a take.
#[allow(clippy::large_enum_variant)]
enum LastTake {
    /// No take since the log started (or was drained).
    None,
    /// There was a take, but its state could not be copied.
    Uncopied,
    /// There was a take, and this is its state.
    Copied(Decoder),
}

impl From<Option<Decoder>> for LastTake {
    fn from(snapshot: Option<Decoder>) -> Self {
        snapshot.map_or(LastTake::Uncopied, LastTake::Copied)
    }
}

impl MessageLog {
    /// A log starting at `decoder`'s state.
    pub fn new(decoder: Decoder) -> Self {
        Self {
            start: decoder,
            taken: Messages::default(),
            fed: Messages::default(),
            at_last_take: LastTake::None,
        }
    }

    /// Keeps a message the main decoder has just decoded without error.
    pub fn push(&mut self, message: &[u8], lsn: u64) {
        self.fed.push(message, lsn);
    }

    /// What the main decoder was told about user types, told to the kept decoders too.
    pub fn extend_type_catalog(&mut self, entries: &[(u32, BaseType)]) {
        self.start.extend_type_catalog(entries.iter().copied());
        if let LastTake::Copied(decoder) = &mut self.at_last_take {
            decoder.extend_type_catalog(entries.iter().copied());
        }
    }

    /// A `take()` of a caller that has never asked for events: forgets the messages fed
    /// before the previous take. `now` is the main decoder.
    pub fn taken(&mut self, now: &Decoder) -> Result<(), FeedError> {
        match std::mem::replace(&mut self.at_last_take, LastTake::None) {
            LastTake::Copied(decoder) => self.start = decoder,
            LastTake::Uncopied => self.taken.feed(&mut self.start, &mut NullSink::default())?,
            // The first take: `taken` is empty.
            LastTake::None => {}
        }
        std::mem::swap(&mut self.taken, &mut self.fed);
        self.fed.clear();
        self.at_last_take = now.snapshot().into();
        Ok(())
    }

    /// The events of every kept message, decoded; the log is empty afterwards and starts
    /// at the main decoder's state.
    pub fn drain(&mut self) -> Result<EventLog, FeedError> {
        let mut events = EventLog::default();
        self.at_last_take = LastTake::None;
        let fed = self
            .taken
            .feed(&mut self.start, &mut events)
            .and_then(|()| self.fed.feed(&mut self.start, &mut events));
        self.taken.clear();
        self.fed.clear();
        fed.map(|()| events)
    }
}
