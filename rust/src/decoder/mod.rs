//! The stateful pgoutput decoder: transaction framing, streamed and two-phase transaction
//! assembly, the relation cache and unchanged-TOAST reconstruction.
//!
//! Delivery rules (see `docs/event-api.md`):
//!
//! * Plain transactions are delivered as they are fed: Begin already names the commit LSN.
//! * Streamed transactions (protocol 2+, `streaming` on) are sent by the server before
//!   they commit, in blocks framed by Stream Start / Stream Stop, interleaved with other
//!   transactions. Their messages are held per top-level xid; a Stream Abort of a
//!   subtransaction drops the data messages that carry that subtransaction's xid, one of
//!   the top-level xid drops everything; at Stream Commit the held messages are delivered,
//!   in order, with the commit's LSN and timestamp.
//! * Two-phase transactions (protocol 3+, `two_phase` on) are sent at `PREPARE
//!   TRANSACTION` time, before anyone knows whether they will take effect. They are held
//!   by GID from Begin Prepare (or, streamed, until Stream Prepare) and delivered at Commit
//!   Prepared; a Rollback Prepared drops them.
//!
//! Held messages (the private `held` store) stay in memory up to a limit and go to unnamed
//! spill files past it ([`SpillConfig`]). They are kept as their bytes plus the relation
//! descriptions they were checked against when they arrived, so a later Relation message
//! (after DDL) cannot change how an earlier change is read. Every message is checked
//! completely when it is fed: a malformed message fails at `feed` with a
//! [`DecodeError`], and leaves the decoder's state as it was. A spill file that cannot be
//! written or read back fails with a [`SpillError`] instead; both come as a [`FeedError`].
//!
//! Relation descriptions sent inside a streamed transaction apply only to it until it
//! commits (pgoutput keeps "schema sent" per streamed transaction and marks it sent for
//! everyone at stream commit); those sent inside a prepared transaction apply at once
//! (pgoutput marks them sent when it sends them).
//!
//! `tx_ordinal`: data events (Insert, Update, Delete, Truncate, transactional Message)
//! are numbered from 0 within their transaction in delivery order; Begin has 0, Relation,
//! Type, Origin and the prepare markers carry the number of the next data event, and the
//! closing event (Commit, Stream Commit, Commit Prepared) the count of data events.

mod held;
#[cfg(test)]
mod tests;

pub use held::SpillConfig;

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use crate::error::{DecodeError, FeedError, MessageKind, Reason, SpillError};
use crate::protocol::{
    parse_message, parse_message_into, Datum, Lsn, Message, OldKind, ParseContext, PgTimestamp,
};
use crate::relation::{BaseType, Relation, TypeCatalog, TypeInfo};
use crate::sink::{EventMeta, EventRef, EventSink, OldImage};
use held::{Budget, HeldMessage, HeldReader, HeldRef, HeldTx};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecoderConfig {
    /// The `proto_version` the stream was requested with (1 to 4).
    pub proto_version: u32,
    /// Whether the stream was requested with `binary 'true'` (values may then be 'b').
    pub binary: bool,
}

impl Default for DecoderConfig {
    fn default() -> Self {
        Self {
            proto_version: 1,
            binary: false,
        }
    }
}

/// Relations by OID. OIDs come from the server, not from an adversary: a multiplicative
/// hash is enough, and much cheaper per message than SipHash.
pub(crate) type RelationMap = HashMap<u32, Arc<Relation>, BuildHasherDefault<OidHasher>>;

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct OidHasher(u64);

impl Hasher for OidHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Transaction context of the events being delivered.
#[derive(Debug, Clone, Copy, Default)]
struct TxMeta {
    commit_lsn: Option<Lsn>,
    xid: Option<u32>,
    commit_timestamp: Option<PgTimestamp>,
    next_ordinal: u64,
}

impl TxMeta {
    fn meta(&self, start_lsn: Lsn) -> EventMeta {
        EventMeta {
            start_lsn,
            commit_lsn: self.commit_lsn,
            tx_ordinal: self.next_ordinal,
            xid: self.xid,
            commit_timestamp: self.commit_timestamp,
        }
    }
}

/// What a message refers to, looked up when it arrived.
#[derive(Debug, Clone, Default)]
pub(crate) enum Resolved {
    #[default]
    Nothing,
    /// Relation, Insert, Update, Delete.
    Relation(Arc<Relation>),
    /// Truncate.
    Relations(Vec<Arc<Relation>>),
    Type(Arc<TypeInfo>),
}

impl Resolved {
    /// The same descriptions (the same allocations), so one copy serves both.
    pub(crate) fn same_as(&self, other: &Resolved) -> bool {
        match (self, other) {
            (Resolved::Nothing, Resolved::Nothing) => true,
            (Resolved::Relation(a), Resolved::Relation(b)) => Arc::ptr_eq(a, b),
            (Resolved::Type(a), Resolved::Type(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    fn relation(&self) -> Option<&Arc<Relation>> {
        self.as_ref().relation()
    }

    fn type_info(&self) -> Option<&Arc<TypeInfo>> {
        self.as_ref().type_info()
    }

    fn as_ref(&self) -> ResolvedRef<'_> {
        match self {
            Resolved::Nothing => ResolvedRef::Nothing,
            Resolved::Relation(r) => ResolvedRef::Relation(r),
            Resolved::Relations(v) => ResolvedRef::Relations(v),
            Resolved::Type(t) => ResolvedRef::Type(t),
        }
    }
}

/// [`Resolved`], borrowed: what `dispatch` reads (a plain transaction's data message
/// borrows its relation from the cache instead of holding a reference count).
#[derive(Debug, Clone, Copy)]
enum ResolvedRef<'r> {
    Nothing,
    Relation(&'r Arc<Relation>),
    Relations(&'r [Arc<Relation>]),
    Type(&'r Arc<TypeInfo>),
}

impl<'r> ResolvedRef<'r> {
    fn relation(self) -> Option<&'r Arc<Relation>> {
        match self {
            ResolvedRef::Relation(r) => Some(r),
            _ => None,
        }
    }

    fn relations(self) -> &'r [Arc<Relation>] {
        match self {
            ResolvedRef::Relation(r) => std::slice::from_ref(r),
            ResolvedRef::Relations(v) => v,
            _ => &[],
        }
    }

    fn type_info(self) -> Option<&'r Arc<TypeInfo>> {
        match self {
            ResolvedRef::Type(t) => Some(t),
            _ => None,
        }
    }
}

#[derive(Debug)]
enum TxState {
    Idle,
    /// Between Begin and Commit.
    Plain(TxMeta),
    /// Between Begin Prepare and Prepare.
    Preparing {
        gid: String,
        held: HeldTx,
    },
}

/// Decodes a pgoutput message stream; see the module documentation.
#[derive(Debug)]
pub struct Decoder {
    config: DecoderConfig,
    relations: RelationMap,
    types: HashMap<u32, Arc<TypeInfo>>,
    /// User types as the server's catalog describes them (empty offline).
    catalog: TypeCatalog,
    state: TxState,
    /// Top-level xid of the streamed block being received.
    open_stream: Option<u32>,
    streams: HashMap<u32, HeldTx>,
    prepared: HashMap<String, HeldTx>,
    spill: SpillConfig,
    budget: Arc<Budget>,
    /// A committed held transaction being delivered (see [`Decoder::feed_bounded`]).
    replay: Option<Replay>,
    /// The allocation of the last Insert's tuple, for the next one.
    spare_tuple: Vec<Datum<'static>>,
}

impl Decoder {
    pub fn new(config: DecoderConfig) -> Self {
        Self {
            config,
            relations: RelationMap::default(),
            types: HashMap::new(),
            catalog: TypeCatalog::new(),
            state: TxState::Idle,
            open_stream: None,
            streams: HashMap::new(),
            prepared: HashMap::new(),
            spill: SpillConfig::default(),
            budget: Arc::default(),
            replay: None,
            spare_tuple: Vec::new(),
        }
    }

    /// A decoder in this one's state, to decode the same messages again from here, when
    /// that state is cheap to copy: no streamed or prepared transaction held, nothing
    /// being delivered (the relation and type descriptions are shared, not copied).
    /// None otherwise.
    pub fn snapshot(&self) -> Option<Decoder> {
        let state = match &self.state {
            TxState::Idle => TxState::Idle,
            TxState::Plain(meta) => TxState::Plain(*meta),
            TxState::Preparing { .. } => return None,
        };
        if !self.streams.is_empty() || !self.prepared.is_empty() || self.replay.is_some() {
            return None;
        }
        Some(Decoder {
            config: self.config,
            relations: self.relations.clone(),
            types: self.types.clone(),
            catalog: self.catalog.clone(),
            state,
            open_stream: self.open_stream,
            streams: HashMap::new(),
            prepared: HashMap::new(),
            spill: self.spill.clone(),
            budget: Arc::default(),
            replay: None,
            spare_tuple: Vec::new(),
        })
    }

    /// Where held (streamed or prepared) transactions go once they outgrow memory: see
    /// [`SpillConfig`].
    #[must_use]
    pub fn with_spill(mut self, spill: SpillConfig) -> Self {
        self.spill = spill;
        self
    }

    /// Bytes of held messages in memory now.
    pub fn held_in_memory(&self) -> u64 {
        self.budget.in_memory()
    }

    /// Bytes of held messages written to spill files so far.
    pub fn held_spilled(&self) -> u64 {
        self.budget.spilled()
    }

    pub fn config(&self) -> DecoderConfig {
        self.config
    }

    /// Adds what the catalog says about user types (enums, domains, text-like extension
    /// types). Relation messages received from now on use it; it matters for the binary
    /// format, where a type's values cannot be read without knowing the type.
    pub fn extend_type_catalog(&mut self, entries: impl IntoIterator<Item = (u32, BaseType)>) {
        self.catalog.extend(entries);
    }

    /// The relation description currently in force for `oid` outside streamed blocks.
    pub fn relation(&self, oid: u32) -> Option<&Arc<Relation>> {
        self.relations.get(&oid)
    }

    /// True between Begin and Commit (or Begin Prepare and Prepare), or inside a streamed
    /// block: a consumer must not treat the stream as being at a transaction boundary.
    pub fn in_transaction(&self) -> bool {
        !matches!(self.state, TxState::Idle) || self.open_stream.is_some() || self.replay.is_some()
    }

    /// Streamed or prepared transactions held, waiting for their commit.
    pub fn pending_transactions(&self) -> usize {
        self.streams.len() + self.prepared.len()
    }

    /// Prepared transactions held for their COMMIT PREPARED / ROLLBACK PREPARED.
    pub fn prepared_transactions(&self) -> usize {
        self.prepared.len()
    }

    /// Decodes one message, given with the WAL position the server reported for it.
    /// A Stream Commit or Commit Prepared delivers its whole transaction before it
    /// returns.
    pub fn feed<S: EventSink>(
        &mut self,
        bytes: &[u8],
        lsn: Lsn,
        sink: &mut S,
    ) -> Result<(), FeedError> {
        self.feed_bounded(bytes, lsn, sink)?;
        self.replay_some(sink, usize::MAX).map(|_| ())
    }

    /// As [`Decoder::feed`], but a Stream Commit or Commit Prepared only starts the
    /// delivery of its transaction, which may be millions of rows: the caller pulls it
    /// with [`Decoder::replay_some`], cutting batches in between, and [`Decoder::
    /// in_transaction`] stays true until the closing event. Feeding the next message
    /// first delivers whatever is left.
    pub fn feed_bounded<S: EventSink>(
        &mut self,
        bytes: &[u8],
        lsn: Lsn,
        sink: &mut S,
    ) -> Result<(), FeedError> {
        if self.replay.is_some() {
            self.replay_some(sink, usize::MAX)?;
        }
        let ctx = ParseContext {
            proto_version: self.config.proto_version,
            in_stream: self.open_stream.is_some(),
        };
        let msg = parse_message_into(bytes, ctx, std::mem::take(&mut self.spare_tuple))?;
        let result = self.feed_message(&msg, bytes, lsn, sink);
        if let Message::Insert(insert) = msg {
            self.spare_tuple = empty_tuple(insert.new);
        }
        result
    }

    /// One parsed message, handed to its family. A message that opens or settles a whole
    /// transaction is first checked to come between transactions, here and only here.
    #[inline]
    fn feed_message<S: EventSink>(
        &mut self,
        msg: &Message<'_>,
        bytes: &[u8],
        lsn: Lsn,
        sink: &mut S,
    ) -> Result<(), FeedError> {
        self.check_between_transactions(msg.kind())?;
        match msg {
            Message::Begin(_) | Message::Commit(_) => Ok(self.feed_framing(msg, lsn, sink)?),
            Message::StreamStart(_)
            | Message::StreamStop
            | Message::StreamCommit(_)
            | Message::StreamAbort(_) => self.feed_streamed(msg, bytes, lsn, sink),
            Message::BeginPrepare(_)
            | Message::Prepare(_)
            | Message::StreamPrepare(_)
            | Message::CommitPrepared(_)
            | Message::RollbackPrepared(_) => self.feed_two_phase(msg, bytes, lsn, sink),
            Message::Relation(_) | Message::Type(_) | Message::Origin(_) | Message::Message(_) => {
                self.feed_catalog(msg, bytes, lsn, sink)
            }
            Message::Insert(_) | Message::Update(_) | Message::Delete(_) | Message::Truncate(_) => {
                self.feed_row_change(msg, bytes, lsn, sink)
            }
        }
    }

    /// The in-transaction check: a message of `kind` that may only come between
    /// transactions (see [`between_transactions_only`]) fails if a transaction, a two-phase
    /// transaction being prepared or a streamed block is open.
    #[inline]
    fn check_between_transactions(&self, kind: MessageKind) -> Result<(), DecodeError> {
        match between_transactions_only(kind) {
            Some(what) if self.in_transaction() => Err(out_of_sequence(kind, what)),
            _ => Ok(()),
        }
    }

    /// Begin and Commit: the frame of a plain transaction, whose changes are delivered as
    /// they come.
    fn feed_framing<S: EventSink>(
        &mut self,
        msg: &Message<'_>,
        lsn: Lsn,
        sink: &mut S,
    ) -> Result<(), DecodeError> {
        match msg {
            Message::Begin(begin) => {
                let tx = TxMeta {
                    commit_lsn: Some(begin.final_lsn),
                    xid: Some(begin.xid),
                    commit_timestamp: Some(begin.timestamp),
                    next_ordinal: 0,
                };
                sink.event(&tx.meta(lsn), EventRef::Begin(begin))?;
                self.state = TxState::Plain(tx);
                Ok(())
            }
            Message::Commit(commit) => {
                let TxState::Plain(tx) = &self.state else {
                    return Err(out_of_sequence(msg.kind(), "Commit without Begin"));
                };
                sink.event(&tx.meta(lsn), EventRef::Commit(commit))?;
                self.state = TxState::Idle;
                Ok(())
            }
            _ => Err(out_of_sequence(msg.kind(), "not a transaction frame")),
        }
    }

    /// Stream Start, Stream Stop, Stream Commit and Stream Abort: a streamed transaction,
    /// received in blocks before it commits. Start and Stop open and close a block (whose
    /// messages are held under the block's top-level xid); Stream Commit hands the held
    /// transaction to [`Decoder::replay_some`]; Stream Abort drops it, or the messages of
    /// one of its subtransactions.
    fn feed_streamed<S: EventSink>(
        &mut self,
        msg: &Message<'_>,
        bytes: &[u8],
        lsn: Lsn,
        sink: &mut S,
    ) -> Result<(), FeedError> {
        match msg {
            Message::StreamStart(start) => {
                sink.event(
                    &standalone_meta(lsn, Some(start.xid)),
                    EventRef::StreamStart(start),
                )?;
                let budget = &self.budget;
                self.streams
                    .entry(start.xid)
                    .or_insert_with(|| HeldTx::new(budget));
                self.open_stream = Some(start.xid);
                Ok(())
            }
            Message::StreamStop => {
                let Some(xid) = self.open_stream else {
                    return Err(
                        out_of_sequence(msg.kind(), "Stream Stop without Stream Start").into(),
                    );
                };
                sink.event(&standalone_meta(lsn, Some(xid)), EventRef::StreamStop)?;
                self.open_stream = None;
                Ok(())
            }
            Message::StreamCommit(commit) => {
                let held = self.streams.remove(&commit.xid);
                let held = held.unwrap_or_else(|| HeldTx::new(&self.budget));
                // Committed: its relation descriptions are now the ones in force.
                self.relations
                    .extend(held.relations.iter().map(|(k, v)| (*k, Arc::clone(v))));
                let tx = TxMeta {
                    commit_lsn: Some(commit.commit_lsn),
                    xid: Some(commit.xid),
                    commit_timestamp: Some(commit.timestamp),
                    next_ordinal: 0,
                };
                Ok(self.start_replay(held, tx, bytes, lsn)?)
            }
            Message::StreamAbort(abort) => {
                match self.streams.get_mut(&abort.xid) {
                    Some(_) if abort.subxid == abort.xid => {
                        self.streams.remove(&abort.xid);
                    }
                    Some(held) => held.abort_subtransaction(abort.subxid),
                    None => {}
                }
                let meta = standalone_meta(lsn, Some(abort.xid));
                Ok(sink.event(&meta, EventRef::StreamAbort(abort))?)
            }
            _ => Err(out_of_sequence(msg.kind(), "not a streamed-transaction message").into()),
        }
    }

    /// Begin Prepare, Prepare, Stream Prepare, Commit Prepared and Rollback Prepared: a
    /// two-phase transaction, sent when it is prepared and held by GID until COMMIT
    /// PREPARED hands it to [`Decoder::replay_some`] or ROLLBACK PREPARED drops it. The
    /// prepare markers are held with it, delivered in their place.
    fn feed_two_phase<S: EventSink>(
        &mut self,
        msg: &Message<'_>,
        bytes: &[u8],
        lsn: Lsn,
        sink: &mut S,
    ) -> Result<(), FeedError> {
        let marker = || hold(bytes, lsn, false, None, Resolved::default());
        match msg {
            Message::BeginPrepare(info) => {
                let mut held = HeldTx::new(&self.budget);
                held.push(marker(), &self.spill)?;
                self.state = TxState::Preparing {
                    gid: info.gid.to_owned(),
                    held,
                };
                Ok(())
            }
            Message::Prepare(info) => {
                let kind = msg.kind();
                match &self.state {
                    TxState::Preparing { gid, .. } if gid == info.gid => {}
                    TxState::Preparing { .. } => {
                        return Err(out_of_sequence(
                            kind,
                            "Prepare names another GID than Begin Prepare",
                        )
                        .into())
                    }
                    _ => return Err(out_of_sequence(kind, "Prepare without Begin Prepare").into()),
                }
                if let TxState::Preparing { gid, mut held } =
                    std::mem::replace(&mut self.state, TxState::Idle)
                {
                    held.push(marker(), &self.spill)?;
                    self.prepared.insert(gid, held);
                }
                Ok(())
            }
            Message::StreamPrepare(info) => {
                let held = self.streams.remove(&info.xid);
                let mut held = held.unwrap_or_else(|| HeldTx::new(&self.budget));
                self.relations.extend(held.relations.drain());
                held.push(marker(), &self.spill)?;
                self.prepared.insert(info.gid.to_owned(), held);
                Ok(())
            }
            Message::CommitPrepared(commit) => {
                let held = self.prepared.remove(commit.gid);
                let held = held.unwrap_or_else(|| HeldTx::new(&self.budget));
                let tx = TxMeta {
                    commit_lsn: Some(commit.commit_lsn),
                    xid: Some(commit.xid),
                    commit_timestamp: Some(commit.timestamp),
                    next_ordinal: 0,
                };
                Ok(self.start_replay(held, tx, bytes, lsn)?)
            }
            Message::RollbackPrepared(rollback) => {
                self.prepared.remove(rollback.gid);
                let meta = standalone_meta(lsn, Some(rollback.xid));
                Ok(sink.event(&meta, EventRef::RollbackPrepared(rollback))?)
            }
            _ => Err(out_of_sequence(msg.kind(), "not a two-phase message").into()),
        }
    }

    /// Relation, Type, Origin and logical Message: descriptions the changes that follow
    /// are read against, and annotations. A non-transactional logical message is
    /// delivered as it comes, wherever it is; the others belong to the transaction in
    /// progress.
    fn feed_catalog<S: EventSink>(
        &mut self,
        msg: &Message<'_>,
        bytes: &[u8],
        lsn: Lsn,
        sink: &mut S,
    ) -> Result<(), FeedError> {
        if let Message::Message(m) = msg {
            if !m.transactional {
                return Ok(sink.event(&standalone_meta(lsn, m.xid), EventRef::Message(m))?);
            }
        }
        self.hold_or_deliver(msg, bytes, lsn, sink)
    }

    /// Insert, Update, Delete and Truncate: row changes of the transaction in progress.
    #[inline]
    fn feed_row_change<S: EventSink>(
        &mut self,
        msg: &Message<'_>,
        bytes: &[u8],
        lsn: Lsn,
        sink: &mut S,
    ) -> Result<(), FeedError> {
        // The common case: a row change in a plain transaction, delivered at once with its
        // relation borrowed from the cache.
        if self.open_stream.is_none() {
            if let TxState::Plain(tx) = &mut self.state {
                if let Some(relation) = resolve_row(msg, &self.relations, None)? {
                    return Ok(dispatch(
                        msg,
                        ResolvedRef::Relation(relation),
                        lsn,
                        tx,
                        sink,
                    )?);
                }
            }
        }
        self.hold_or_deliver(msg, bytes, lsn, sink)
    }

    /// A message that belongs to the transaction in progress, resolved against the
    /// relations in force: held (streamed block, two-phase transaction being prepared) or
    /// delivered now (plain transaction).
    fn hold_or_deliver<S: EventSink>(
        &mut self,
        msg: &Message<'_>,
        bytes: &[u8],
        lsn: Lsn,
        sink: &mut S,
    ) -> Result<(), FeedError> {
        let stream_relations = self.open_stream.and_then(|xid| self.streams.get(&xid));
        let resolved = resolve(
            msg,
            &self.relations,
            stream_relations.map(|h| &h.relations),
            &self.types,
            &self.catalog,
        )?;
        // What a type is does not depend on the transaction that described it: Type
        // messages apply at once, also inside streamed blocks.
        if let (Message::Type(t), Some(info)) = (msg, resolved.type_info()) {
            self.types.insert(t.oid, Arc::clone(info));
        }

        if let Some(xid) = self.open_stream {
            let budget = &self.budget;
            let held = self
                .streams
                .entry(xid)
                .or_insert_with(|| HeldTx::new(budget));
            if let Message::Relation(r) = msg {
                if let Some(rel) = resolved.relation() {
                    held.relations.insert(r.oid, Arc::clone(rel));
                }
            }
            let subxid = data_xid(msg);
            held.push(hold(bytes, lsn, true, subxid, resolved), &self.spill)?;
            return Ok(());
        }

        if matches!(self.state, TxState::Idle) {
            return Err(
                out_of_sequence(msg.kind(), "change outside a transaction (no Begin)").into(),
            );
        }
        self.remember_schema(msg, &resolved);
        match &mut self.state {
            TxState::Preparing { held, .. } => {
                held.push(hold(bytes, lsn, false, None, resolved), &self.spill)?;
                Ok(())
            }
            TxState::Plain(tx) => Ok(dispatch(msg, resolved.as_ref(), lsn, tx, sink)?),
            TxState::Idle => Ok(()),
        }
    }

    /// Relation and Type messages outside streamed blocks take effect at once.
    fn remember_schema(&mut self, msg: &Message<'_>, resolved: &Resolved) {
        match msg {
            Message::Relation(r) => {
                if let Some(rel) = resolved.relation() {
                    self.relations.insert(r.oid, Arc::clone(rel));
                }
            }
            Message::Type(t) => {
                if let Some(info) = resolved.type_info() {
                    self.types.insert(t.oid, Arc::clone(info));
                }
            }
            _ => {}
        }
    }

    /// A Stream Commit or Commit Prepared (`closing`, at `lsn`): its held transaction is
    /// delivered by [`Decoder::replay_some`], then the closing event.
    fn start_replay(
        &mut self,
        held: HeldTx,
        tx: TxMeta,
        closing: &[u8],
        lsn: Lsn,
    ) -> Result<(), SpillError> {
        let reader = held.into_reader()?;
        self.replay = Some(Replay {
            reader,
            tx,
            closing: closing.into(),
            closing_lsn: lsn,
        });
        Ok(())
    }

    /// Delivers up to `max_messages` messages of the committed transaction being
    /// replayed (see [`Decoder::feed_bounded`]), and its closing event after the last.
    pub fn replay_some<S: EventSink>(
        &mut self,
        sink: &mut S,
        max_messages: usize,
    ) -> Result<Replayed, FeedError> {
        let mut done = Replayed::default();
        let Some(replay) = &mut self.replay else {
            return Ok(done);
        };
        let config = self.config;
        while done.messages < max_messages {
            let Some(m) = replay.reader.next_message()? else {
                done.finished = true;
                break;
            };
            done.messages += 1;
            done.bytes += m.bytes.len();
            deliver_held(m, &mut replay.tx, config, sink)?;
        }
        if done.finished {
            if let Some(replay) = self.replay.take() {
                let ctx = ParseContext {
                    proto_version: config.proto_version,
                    in_stream: false,
                };
                let msg = parse_message(&replay.closing, ctx)?;
                let meta = replay.tx.meta(replay.closing_lsn);
                match &msg {
                    Message::StreamCommit(c) => sink.event(&meta, EventRef::StreamCommit(c))?,
                    Message::CommitPrepared(c) => {
                        sink.event(&meta, EventRef::CommitPrepared(c))?;
                    }
                    _ => return Err(out_of_sequence(msg.kind(), "not a commit").into()),
                }
            }
        }
        Ok(done)
    }

    /// A committed transaction is being delivered by [`Decoder::replay_some`].
    pub fn replaying(&self) -> bool {
        self.replay.is_some()
    }
}

/// What one [`Decoder::replay_some`] call delivered.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Replayed {
    pub messages: usize,
    /// Payload bytes of the delivered messages.
    pub bytes: usize,
    /// The closing event was delivered: the transaction is complete.
    pub finished: bool,
}

/// A committed held transaction being delivered.
#[derive(Debug)]
struct Replay {
    reader: HeldReader,
    tx: TxMeta,
    /// The Stream Commit or Commit Prepared message, delivered after the last change.
    closing: Box<[u8]>,
    closing_lsn: Lsn,
}

/// A message that is valid but not here: `what` says why.
fn out_of_sequence(kind: MessageKind, what: &'static str) -> DecodeError {
    DecodeError::new(kind, 0, Reason::OutOfSequence(what))
}

/// The messages that open or settle a whole transaction, and so are valid only between
/// transactions (outside Begin … Commit, Begin Prepare … Prepare and streamed blocks):
/// the error text for one that comes inside. `None` for the others.
fn between_transactions_only(kind: MessageKind) -> Option<&'static str> {
    Some(match kind {
        MessageKind::Begin => "Begin inside an open transaction or streamed block",
        MessageKind::StreamStart => "Stream Start inside an open transaction or stream",
        MessageKind::StreamCommit => "Stream Commit inside an open transaction or stream",
        MessageKind::StreamAbort => "Stream Abort inside an open transaction or stream",
        MessageKind::BeginPrepare => "Begin Prepare inside an open transaction or stream",
        MessageKind::StreamPrepare => "Stream Prepare inside an open transaction or stream",
        MessageKind::CommitPrepared => "Commit Prepared inside an open transaction or stream",
        MessageKind::RollbackPrepared => "Rollback Prepared inside an open transaction or stream",
        _ => return None,
    })
}

/// The context of an event delivered outside any transaction's numbering: stream
/// framing, Stream Abort, Rollback Prepared, a non-transactional logical message.
fn standalone_meta(lsn: Lsn, xid: Option<u32>) -> EventMeta {
    EventMeta {
        start_lsn: lsn,
        commit_lsn: None,
        tx_ordinal: 0,
        xid,
        commit_timestamp: None,
    }
}

/// `tuple`'s allocation, emptied, free of the message it borrowed from (collecting an
/// emptied vector into one of a type of the same layout keeps the allocation).
fn empty_tuple(mut tuple: Vec<Datum<'_>>) -> Vec<Datum<'static>> {
    tuple.clear();
    tuple.into_iter().map(|_| Datum::Null).collect()
}

fn hold(
    bytes: &[u8],
    lsn: Lsn,
    in_stream: bool,
    subxid: Option<u32>,
    resolved: Resolved,
) -> HeldMessage {
    HeldMessage {
        lsn,
        bytes: bytes.into(),
        in_stream,
        subxid,
        resolved,
    }
}

/// The xid prefix of a streamed data message (Relation and Type are schema, not data).
fn data_xid(msg: &Message<'_>) -> Option<u32> {
    match msg {
        Message::Insert(m) => m.xid,
        Message::Update(m) => m.xid,
        Message::Delete(m) => m.xid,
        Message::Truncate(m) => m.xid,
        Message::Message(m) => m.xid,
        _ => None,
    }
}

/// Where the relation OID sits in a message: after the tag, and after the xid inside a
/// stream.
fn relation_offset(msg: &Message<'_>) -> usize {
    if data_xid(msg).is_some() {
        5
    } else {
        1
    }
}

fn lookup<'r>(
    msg: &Message<'_>,
    oid: u32,
    relations: &'r RelationMap,
    overlay: Option<&'r RelationMap>,
) -> Result<&'r Arc<Relation>, DecodeError> {
    overlay
        .and_then(|o| o.get(&oid))
        .or_else(|| relations.get(&oid))
        .ok_or_else(|| {
            DecodeError::new(
                msg.kind(),
                relation_offset(msg),
                Reason::UnknownRelation(oid),
            )
        })
}

/// For an Insert, Update or Delete: its relation, looked up and its tuples checked
/// against it. `None` for any other message.
fn resolve_row<'r>(
    msg: &Message<'_>,
    relations: &'r RelationMap,
    overlay: Option<&'r RelationMap>,
) -> Result<Option<&'r Arc<Relation>>, DecodeError> {
    let kind = msg.kind();
    let at = relation_offset(msg);
    let check = |rel: &Relation, tuple: &[Datum<'_>]| -> Result<(), DecodeError> {
        if tuple.len() == rel.columns.len() {
            Ok(())
        } else {
            Err(DecodeError::new(
                kind,
                at + 4,
                Reason::ColumnCountMismatch {
                    relation: rel.oid,
                    expected: rel.columns.len(),
                    found: tuple.len(),
                },
            ))
        }
    };
    Ok(Some(match msg {
        Message::Insert(m) => {
            let rel = lookup(msg, m.relation, relations, overlay)?;
            check(rel, &m.new)?;
            if m.new.iter().any(Datum::is_unchanged) {
                return Err(DecodeError::new(
                    kind,
                    at + 4,
                    Reason::BadValue {
                        field: "unchanged TOAST marker in a new row",
                    },
                ));
            }
            rel
        }
        Message::Update(m) => {
            let rel = lookup(msg, m.relation, relations, overlay)?;
            if let Some((_, old)) = &m.old {
                check(rel, old)?;
            }
            check(rel, &m.new)?;
            rel
        }
        Message::Delete(m) => {
            let rel = lookup(msg, m.relation, relations, overlay)?;
            check(rel, &m.old.1)?;
            rel
        }
        _ => return Ok(None),
    }))
}

/// Looks up (and checks the tuples against) the relations a message refers to.
fn resolve(
    msg: &Message<'_>,
    relations: &RelationMap,
    overlay: Option<&RelationMap>,
    types: &HashMap<u32, Arc<TypeInfo>>,
    catalog: &TypeCatalog,
) -> Result<Resolved, DecodeError> {
    if let Some(rel) = resolve_row(msg, relations, overlay)? {
        return Ok(Resolved::Relation(Arc::clone(rel)));
    }
    Ok(match msg {
        Message::Relation(r) => {
            Resolved::Relation(Arc::new(Relation::from_message(r, types, catalog)))
        }
        Message::Type(t) => Resolved::Type(Arc::new(TypeInfo::from_message(t))),
        Message::Truncate(m) => Resolved::Relations(
            m.relations
                .iter()
                .map(|&oid| lookup(msg, oid, relations, overlay).cloned())
                .collect::<Result<_, _>>()?,
        ),
        _ => Resolved::default(),
    })
}

/// Delivers one held message, read against the relations it was checked against when
/// it arrived.
fn deliver_held<S: EventSink>(
    m: HeldRef<'_>,
    tx: &mut TxMeta,
    config: DecoderConfig,
    sink: &mut S,
) -> Result<(), DecodeError> {
    let ctx = ParseContext {
        proto_version: config.proto_version,
        in_stream: m.in_stream,
    };
    let msg = parse_message(m.bytes, ctx)?;
    match &msg {
        Message::BeginPrepare(info) => sink.event(&tx.meta(m.lsn), EventRef::BeginPrepare(info)),
        Message::Prepare(info) => sink.event(&tx.meta(m.lsn), EventRef::Prepare(info)),
        Message::StreamPrepare(info) => sink.event(&tx.meta(m.lsn), EventRef::StreamPrepare(info)),
        _ => dispatch(&msg, m.resolved.as_ref(), m.lsn, tx, sink),
    }
}

/// Hands one in-transaction message to the sink, numbering data events.
fn dispatch<S: EventSink>(
    msg: &Message<'_>,
    resolved: ResolvedRef<'_>,
    lsn: Lsn,
    tx: &mut TxMeta,
    sink: &mut S,
) -> Result<(), DecodeError> {
    let kind = msg.kind();
    let missing = || DecodeError::new(kind, 1, Reason::OutOfSequence("relation not resolved"));
    let meta = tx.meta(lsn);
    let rel = resolved.relation();
    match msg {
        Message::Relation(_) => {
            return sink.event(&meta, EventRef::Relation(rel.ok_or_else(missing)?))
        }
        Message::Type(_) => {
            let info = resolved.type_info().ok_or_else(missing)?;
            return sink.event(&meta, EventRef::Type(info));
        }
        Message::Origin(origin) => return sink.event(&meta, EventRef::Origin(origin)),
        Message::Insert(m) => {
            let relation = rel.ok_or_else(missing)?;
            sink.event(
                &meta,
                EventRef::Insert {
                    relation,
                    row: &m.new,
                },
            )?;
        }
        Message::Update(m) => {
            let relation = rel.ok_or_else(missing)?;
            let old = m.old.as_ref().map(|(kind, values)| OldImage {
                kind: *kind,
                values,
            });
            let new = reconstruct_unchanged(relation, &m.new, old);
            sink.event(
                &meta,
                EventRef::Update {
                    relation,
                    new: new.as_ref(),
                    old,
                },
            )?;
        }
        Message::Delete(m) => {
            let relation = rel.ok_or_else(missing)?;
            let old = OldImage {
                kind: m.old.0,
                values: &m.old.1,
            };
            sink.event(&meta, EventRef::Delete { relation, old })?;
        }
        Message::Truncate(m) => {
            sink.event(
                &meta,
                EventRef::Truncate {
                    relations: resolved.relations(),
                    options: m.options,
                },
            )?;
        }
        Message::Message(m) => sink.event(&meta, EventRef::Message(m))?,
        _ => {
            return Err(DecodeError::new(
                kind,
                0,
                Reason::OutOfSequence("not a change"),
            ))
        }
    }
    tx.next_ordinal += 1;
    Ok(())
}

/// Fills unchanged-TOAST values of an update's new row from the old image, exactly where
/// the old image holds them: a full image ('O') for any column, a key image ('K') for the
/// replica-identity columns. Anything else stays `UnchangedToast`: unknown, never guessed.
pub fn reconstruct_unchanged<'n, 'a>(
    relation: &Relation,
    new: &'n [Datum<'a>],
    old: Option<OldImage<'_, 'a>>,
) -> Cow<'n, [Datum<'a>]> {
    let Some(old) = old else {
        return Cow::Borrowed(new);
    };
    if !new.iter().any(Datum::is_unchanged) {
        return Cow::Borrowed(new);
    }
    let mut row = new.to_vec();
    for (i, (value, old_value)) in row.iter_mut().zip(old.values).enumerate() {
        if !value.is_unchanged() || old_value.is_unchanged() {
            continue;
        }
        let recoverable = match old.kind {
            OldKind::Full => true,
            OldKind::Key => relation.columns.get(i).is_some_and(|c| c.is_key),
        };
        if recoverable {
            *value = *old_value;
        }
    }
    Cow::Owned(row)
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new(DecoderConfig::default())
    }
}
