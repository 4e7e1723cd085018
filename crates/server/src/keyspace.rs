//! How Redis values sit in the engine, and the locks that make
//! read-modify-write commands atomic.
//!
//! An engine value is one type byte followed by the payload: a string's
//! bytes, a small list's, set's or hash's encoding (`crate::hash`), or a
//! big one's stub (`commands::table`), whose members live under keys
//! reserved for the server. Expiry is the engine's per-entry expiry time.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use scaledkv::{now_ms, Db, PinnedValue, WriteBatch, MAX_KEY_BYTES, MAX_VALUE_BYTES};
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::commands::CmdError;
use crate::fences::{FenceChanges, FenceEdits};
use crate::notify::MISS;
use crate::pending::Pending;

/// The expiry time of a value that may be missing.
pub fn expiry_of(value: &Option<Value>) -> Option<u64> {
    value.as_ref().and_then(Value::expiry_ms)
}

/// Type bytes: Redis's object type numbers (0 to 4), with
/// the high bit set for a big collection's stub (`commands::table`).
pub const TYPE_STRING: u8 = 0;
pub const TYPE_LIST: u8 = 1;
pub const TYPE_SET: u8 = 2;
pub const TYPE_ZSET: u8 = 3;
pub const TYPE_HASH: u8 = 4;
/// A string written through the memcached protocol: the type byte, the
/// item's client flags (u32) and CAS (u64), little-endian, then the bytes.
/// Redis commands read it as a string (`Value::tag`, `Value::data`); a
/// Redis write of it stores a plain string (flags 0, a new CAS).
pub const TYPE_ITEM: u8 = 5;
/// The flags and CAS between an item's type byte and its bytes.
pub const ITEM_META_BYTES: usize = 12;
pub const TYPE_LIST_TABLE: u8 = 0x81;
pub const TYPE_SET_TABLE: u8 = 0x82;
pub const TYPE_ZSET_TABLE: u8 = 0x83;
pub const TYPE_HASH_TABLE: u8 = 0x84;
/// A stream (Redis's object type 6) is always a table: its stub holds the
/// stream's metadata (`crate::stream::Meta`).
pub const TYPE_STREAM_TABLE: u8 = 0x86;

/// Whether a value of type `tag` is a table's stub (`commands::table`).
pub fn is_table(tag: u8) -> bool {
    matches!(tag, TYPE_LIST_TABLE | TYPE_SET_TABLE | TYPE_ZSET_TABLE | TYPE_HASH_TABLE | TYPE_STREAM_TABLE)
}
/// Longest string value: the engine's limit less the type byte.
pub const MAX_STRING_BYTES: usize = MAX_VALUE_BYTES - 1;

pub fn type_name(tag: u8) -> &'static str {
    match tag {
        TYPE_STRING | TYPE_ITEM => "string",
        TYPE_HASH | TYPE_HASH_TABLE => "hash",
        TYPE_SET | TYPE_SET_TABLE => "set",
        TYPE_LIST | TYPE_LIST_TABLE => "list",
        TYPE_ZSET | TYPE_ZSET_TABLE => "zset",
        TYPE_STREAM_TABLE => "stream",
        _ => "unknown",
    }
}

/// Engine keys that start with these two bytes are the server's own (the
/// members of big collections, the format marker), never a client's: a
/// client key that starts with them is refused, reads of one find
/// nothing, and SCAN, KEYS, RANDOMKEY and DBSIZE leave them out. They sort
/// after every client key; a 0xFF byte never occurs in UTF-8 text.
pub const RESERVED: &[u8] = b"\xff\xff";
/// The server's settings start with these bytes: FLUSHALL keeps them.
pub const SETTINGS: &[u8] = b"\xff\xff\x00";
/// Written once into every database this server opens: a database without
/// it was written before keys were reserved and must hold none of them.
pub const FORMAT_MARKER: &[u8] = b"\xff\xff\x00format";

pub fn is_reserved(key: &[u8]) -> bool {
    key.starts_with(RESERVED)
}

/// Checks the reserved keys of a database being opened and writes the
/// marker into a new one; returns how many reserved entries it holds (what
/// DBSIZE leaves out).
pub fn prepare(db: &Db) -> Result<u64, String> {
    if db.get(FORMAT_MARKER).map_err(|e| e.to_string())?.is_none() {
        if let Some(item) = db.range::<&[u8], _>(RESERVED..).next() {
            let (key, _) = item.map_err(|e| e.to_string())?;
            return Err(format!(
                "the database holds the key {:?}, which starts with the bytes 0xFF 0xFF that this version of \
                 ScaledKV reserves for itself; rename it with the version that wrote it first",
                String::from_utf8_lossy(&key)
            ));
        }
        db.put(FORMAT_MARKER, b"1").map_err(|e| e.to_string())?;
    }
    let mut count = 0;
    for item in db.range::<&[u8], _>(RESERVED..) {
        item.map_err(|e| e.to_string())?;
        count += 1;
    }
    Ok(count)
}

/// A value read from the engine (borrowed from the log) or from the
/// pending writes of a transaction.
pub enum Value {
    Stored(PinnedValue),
    Pending(Vec<u8>, Option<u64>),
}

impl Value {
    fn encoded(&self) -> &[u8] {
        match self {
            Value::Stored(pinned) => pinned,
            Value::Pending(bytes, _) => bytes,
        }
    }

    /// The value's type (a memcached item is a string).
    pub fn tag(&self) -> u8 {
        match self.encoded().first().copied() {
            None | Some(TYPE_ITEM) => TYPE_STRING,
            Some(tag) => tag,
        }
    }

    /// The payload after the type byte (and an item's flags and CAS).
    pub fn data(&self) -> &[u8] {
        self.encoded().get(self.header_len()..).unwrap_or_default()
    }

    /// The bytes before the payload: the type byte (and an item's meta).
    fn header_len(&self) -> usize {
        if self.is_item() {
            1 + ITEM_META_BYTES
        } else {
            1
        }
    }

    /// The payload, owned: a pending value's bytes are moved, not copied.
    pub fn into_data(self) -> Vec<u8> {
        let skip = self.header_len();
        match self {
            Value::Pending(mut bytes, _) => {
                bytes.drain(..skip.min(bytes.len()));
                bytes
            }
            stored => stored.data().to_vec(),
        }
    }

    /// Written through the memcached protocol, with flags and a CAS.
    pub fn is_item(&self) -> bool {
        self.encoded().first() == Some(&TYPE_ITEM)
    }

    /// A memcached item's client flags and CAS (None for other values).
    pub fn item_meta(&self) -> Option<(u32, u64)> {
        let meta = self.encoded().get(1..1 + ITEM_META_BYTES).filter(|_| self.is_item())?;
        let flags = u32::from_le_bytes(meta[..4].try_into().expect("4 bytes"));
        let cas = u64::from_le_bytes(meta[4..].try_into().expect("8 bytes"));
        Some((flags, cas))
    }

    pub fn expiry_ms(&self) -> Option<u64> {
        match self {
            Value::Stored(pinned) => pinned.expiry_ms(),
            Value::Pending(_, expiry) => *expiry,
        }
    }

    /// The payload if this is a string, WRONGTYPE otherwise.
    pub fn string(&self) -> Result<&[u8], CmdError> {
        if self.tag() == TYPE_STRING {
            Ok(self.data())
        } else {
            Err(CmdError::WrongType)
        }
    }
}

/// Keys written but not yet committed → where their last entry starts in
/// the batch. The value is read back from the batch when a later command
/// asks for it, so a write keeps no second copy (a copy of each value cost
/// a third of the rate of HSETs on a 100 KB hash).
/// Hashed by foldhash: a read-modify-write in a run hashes its key two or
/// three times here, and SipHash was ~3% of an INCR's CPU.
type Overlay = HashMap<Vec<u8>, usize, foldhash::fast::RandomState>;

/// Reads through to the engine and collects the writes of one command (or
/// one transaction, or one run of a pipeline's writes) into a single atomic
/// batch.
pub struct Writes {
    pub batch: WriteBatch,
    /// In a transaction or a run, later commands read earlier ones' writes
    /// through here (the batch is not visible until it is committed whole).
    overlay: Option<Overlay>,
    /// The keys of `overlay` in order, built by the first read of a range
    /// (`pending_as`) and kept up to date after it: each such read walked
    /// the whole overlay before, and a big ZADD reads ranges of its sorted
    /// set's rank blocks per member.
    sorted: RefCell<Option<BTreeSet<Vec<u8>>>>,
    /// A branch's view of the writes it branched from (`branch`): read
    /// after `overlay`, before `outer` and the engine.
    base: Option<(Overlay, WriteBatch)>,
    /// A branch of a branch (a script's command inside a pipeline's run):
    /// the bases of the branches it came from, the newest last, read after
    /// `base`. Kept apart so that a single branch (a script of a run, a
    /// script's command) moves no more than its base.
    outer: Vec<(Overlay, WriteBatch)>,
    /// While a save point is open (`savepoint`): each overlay change since
    /// the oldest, as where the key's new entry starts in the batch and
    /// where its entry before started (None: it had none), so `rollback`
    /// can undo them without a copy of any key.
    undo: Vec<(usize, Option<usize>)>,
    /// Save points open.
    savepoints: u32,
    /// Where the last entry written without an overlay starts.
    last_at: usize,
    /// Entries under `RESERVED` these writes add (or, negative, remove):
    /// applied to `Shared::reserved_entries` once they commit.
    reserved_delta: i64,
    /// Elements were pushed to a list: clients blocked in BLPOP and the
    /// like look again once these writes commit.
    pushed: bool,
    /// A sorted set's rank blocks were split or dropped: until these writes
    /// commit, their commands look the blocks up in the engine.
    blocks_changed: bool,
    /// Those splits and drops, for the fences cached in
    /// `Shared::rank_fences` (brought up to date as the writes commit).
    fence_edits: FenceEdits,
    /// Set for a command that holds its keys' locks: it reads other
    /// commands' queued writes of those keys (`crate::pending`).
    pending: Option<Arc<Pending>>,
    /// Whether a read found one of those: before anyone is told what was
    /// read, these writes (or, if none, a barrier) must be durable.
    read_pending: Cell<bool>,
    /// Big sets, hashes and sorted sets these writes change: until they
    /// are visible, readers without locks read those sorted sets from a
    /// snapshot (`commands::ranks`); their count tells random picks when
    /// to read a table's fences again (`commands::picks`).
    written_tables: Vec<u64>,
    /// Tables these writes create (`commands::table::fill`): no key
    /// points to them before these writes commit.
    new_tables: Vec<u64>,
    /// Keyspace notifications, published once these writes commit.
    events: Vec<crate::notify::Event>,
    /// Set in a transaction and a script: PUBLISH leaves its message here,
    /// sent once these writes commit, so that a subscriber that reads on
    /// receiving it sees the writes before it (as Redis, which runs the
    /// whole transaction or script before anything else), and a script
    /// that is killed or run again sends nothing twice.
    defers_messages: bool,
    /// `set_retry_alone`: where the command's own writes start.
    retry_alone: Option<usize>,
    messages: Vec<Message>,
    /// Keys written and when they now expire (None: never, or deleted),
    /// for the index of expiring keys (`crate::expiry::Volatile`), applied
    /// once these writes commit. Keys without an expiry are noted only once
    /// some key had one (`crate::expiry::notes_removals`).
    expiries: crate::expiry::Changes,
    /// Every key was deleted (FLUSHALL): the index starts over.
    all_deleted: bool,
    /// While writes stream to replicas: the big hashes, sets, sorted sets,
    /// lists and the streams these writes read before writing their keys
    /// (`note_table_read`), so a replica gets their field changes rather
    /// than the whole collection (`master::note_of`).
    table_reads: Vec<TableRead>,
    /// While writes stream to replicas: what each change of a big list
    /// did (`ChunkedList::store`), by table, in order; None for a change
    /// it could not say that way.
    list_ops: Vec<(u64, Option<Vec<ListOp>>)>,
    /// A piece was committed (`commit_piece`), with no note: the keys it
    /// changed must be read whole for the replicas, so no more reads are
    /// noted until the batch is taken.
    pieced: bool,
    /// Who commits these writes: a client's are refused while the write
    /// gate is closed (`crate::write_gate`).
    pub writer: Writer,
}

pub use crate::commands::list_chunks::ListOp;
pub use crate::write_gate::Writer;

/// A big collection's stub as a command found it at `key` before its
/// batch wrote that key: the table the batch's field entries of `id`
/// change, as the replicas hold it.
#[derive(Debug, Clone, PartialEq)]
pub struct TableRead {
    pub key: Vec<u8>,
    pub tag: u8,
    pub id: u64,
    pub expiry: Option<u64>,
    /// A stream's consumer groups as its commands first read them, by
    /// name (`note_group_read`): what a replica holds before the batch's
    /// changes to them.
    pub groups: Vec<(Vec<u8>, GroupBefore)>,
}

/// A stream's consumer group as a batch's first read of it found it.
#[derive(Debug, Clone, PartialEq)]
pub enum GroupBefore {
    /// Not there: the batch makes it.
    Absent,
    /// Its record (`stream::Group`'s encoding).
    Held(Vec<u8>),
    /// First read after the batch wrote it (a transaction's command read
    /// its parent's write): what it was is not known here.
    Unknown,
}

/// A PUBLISH (or SPUBLISH, `shard`) held until its writes commit.
#[derive(Debug)]
pub struct Message {
    pub channel: bytes::Bytes,
    pub payload: bytes::Bytes,
    pub shard: bool,
}

/// Owned (key, value) pairs, in key order.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

pub use crate::fences::FenceEdit;

/// Where a command's writes start (`Writes::savepoint`).
pub struct Savepoint {
    batch: scaledkv::SavePoint,
    undo: usize,
    reserved_delta: i64,
    pushed: bool,
    blocks_changed: bool,
    fence_edits: usize,
    written_tables: usize,
    new_tables: usize,
    events: usize,
    messages: usize,
    expiries: usize,
    list_ops: usize,
}

/// A batch ready to commit, and what it changes in the count of the
/// server's own entries (`Shared::reserved_entries`).
#[derive(Default)]
pub struct Ready {
    pub batch: WriteBatch,
    pub reserved_delta: i64,
    pub pushed: bool,
    /// The rank blocks these writes split off or dropped.
    pub fence_edits: Vec<FenceEdit>,
    /// Read writes that others queued and are not yet durable.
    pub read_pending: bool,
    pub written_tables: Vec<u64>,
    pub new_tables: Vec<u64>,
    pub events: Vec<crate::notify::Event>,
    pub messages: Vec<Message>,
    pub expiries: crate::expiry::Changes,
    pub all_deleted: bool,
    pub table_reads: Vec<TableRead>,
    pub list_ops: Vec<(u64, Option<Vec<ListOp>>)>,
    pub writer: Writer,
}

impl Writes {
    /// Writes that `writer` commits (a client's, unless said).
    pub fn by(mut self, writer: Writer) -> Writes {
        self.writer = writer;
        self
    }

    pub fn new(transaction: bool) -> Writes {
        Writes {
            batch: WriteBatch::new(),
            overlay: transaction.then(Overlay::default),
            sorted: RefCell::new(None),
            base: None,
            outer: Vec::new(),
            undo: Vec::new(),
            savepoints: 0,
            last_at: 0,
            reserved_delta: 0,
            pushed: false,
            blocks_changed: false,
            fence_edits: FenceEdits::default(),
            pending: None,
            read_pending: Cell::new(false),
            written_tables: Vec::new(),
            new_tables: Vec::new(),
            events: Vec::new(),
            defers_messages: false,
            retry_alone: None,
            messages: Vec::new(),
            expiries: Default::default(),
            all_deleted: false,
            table_reads: Vec::new(),
            list_ops: Vec::new(),
            pieced: false,
            writer: Writer::Client,
        }
    }

    /// Every key is being deleted (FLUSHALL): the index of expiring keys
    /// starts over when these writes commit, and their deletes note nothing.
    pub fn note_all_deleted(&mut self) {
        self.all_deleted = true;
        self.expiries.clear();
    }

    /// Notes `key`'s expiry after this write, for the index of expiring keys.
    fn note_expiry(&mut self, key: &[u8], expiry_ms: Option<u64>) {
        let note = expiry_ms.is_some() || !self.all_deleted && crate::expiry::notes_removals();
        if note && !is_reserved(key) {
            self.expiries.push(key, expiry_ms);
        }
    }

    /// Holds PUBLISH's messages until these writes commit (a transaction,
    /// a script); branches inherit it.
    pub fn defer_messages(&mut self) {
        self.defers_messages = true;
    }

    pub fn defers_messages(&self) -> bool {
        self.defers_messages
    }

    pub fn note_message(&mut self, message: Message) {
        self.messages.push(message);
    }

    /// For a command that holds the locks of every key it reads: reads see
    /// writes other holders queued and published (`crate::pending`).
    pub fn see_pending(&mut self, pending: &Arc<Pending>) {
        if self.pending.is_none() {
            self.pending = Some(pending.clone());
        }
    }

    /// For a command whose reply depends on published writes otherwise
    /// than through these reads (WATCH): it too waits for them.
    pub fn note_read_pending(&self) {
        self.read_pending.set(true);
    }

    /// Whether reads see the engine alone: no writes of their own or
    /// others' (a command that takes no locks and has written nothing).
    pub fn reads_engine_only(&self) -> bool {
        self.pending.is_none() && self.base.is_none() && self.batch.is_empty()
    }

    /// Set around a command of a run of a pipeline's writes: one that
    /// finds its change too big for one batch may ask to run again alone
    /// (`CmdError::RunAlone`) instead of failing.
    pub fn set_retry_alone(&mut self, retry: bool) {
        self.retry_alone = retry.then(|| self.batch.size_bytes());
    }

    /// Whether this command should give up with `CmdError::RunAlone` (its
    /// writes are undone, and it runs again where `may_commit_in_pieces`):
    /// it is in a run and has written `piece_bytes` itself (the run's
    /// earlier writes do not count: they commit with the run).
    pub fn outgrows_its_run(&self, piece_bytes: usize) -> bool {
        self.retry_alone.is_some_and(|start| self.batch.size_bytes().saturating_sub(start) >= piece_bytes)
    }

    /// At a point where the writes of a command that may split its change
    /// (`pieces`: `may_commit_in_pieces` held when it started) are a whole
    /// state of its keys: whether to commit them now as a piece (after
    /// writing what makes them whole, then `commit_piece`), or, in a
    /// pipeline's run, `CmdError::RunAlone` once its own writes pass a
    /// piece.
    pub fn piece_due(&self, db: &Db, pieces: bool) -> Result<bool, CmdError> {
        let piece = Self::piece_bytes(db);
        if pieces {
            Ok(self.batch.size_bytes() >= piece)
        } else if self.outgrows_its_run(piece) {
            Err(CmdError::RunAlone)
        } else {
            Ok(false)
        }
    }

    /// Whether a command may commit what it wrote so far before it ends
    /// (`commit_piece`): it runs alone (not in a transaction, a script or
    /// a pipeline's run, which it leaves with `CmdError::RunAlone`) and
    /// has written nothing yet. Asked before its first write.
    pub fn may_commit_in_pieces(&self) -> bool {
        self.overlay.is_none()
            && self.base.is_none()
            && self.outer.is_empty()
            && self.savepoints == 0
            && self.batch.is_empty()
    }

    /// Where a change committed in pieces (`commit_piece`) cuts one: at
    /// 1 MiB of batch, or half the engine's limit if that is less. Small
    /// pieces keep the command's own overlay of its writes small: XTRIM of
    /// 1,000,000 entries took 1.08-1.09 s in pieces of 16 MiB and
    /// 0.62-0.67 s in pieces of 1 MiB (tmpfs, 3 runs each; 256 KiB no
    /// faster).
    fn piece_bytes(db: &Db) -> usize {
        (db.max_batch_bytes() / 2).min(1 << 20)
    }

    /// Makes the writes so far durable and visible now, for a change too
    /// big for one engine batch that its command splits into several, each
    /// a whole state of its keys (a trim's deletes with the stream's new
    /// length), so a crash in between leaves the keys as one of them left
    /// them. Only where `may_commit_in_pieces` said so at the start. As
    /// `commands::commit` does for a batch: readers without locks of the
    /// big sorted sets it changes read a snapshot until it is visible, and
    /// the fences of rank blocks it split or dropped are cached after.
    /// What the writes count or announce (entries, events) goes with the
    /// last batch, as usual.
    pub fn commit_piece(&mut self, shared: &crate::server::Shared) -> Result<(), crate::commands::CommitError> {
        debug_assert!(self.base.is_none() && self.outer.is_empty() && self.savepoints == 0);
        if let Some(overlay) = &mut self.overlay {
            overlay.clear();
        }
        self.sorted.take();
        self.last_at = 0;
        // Tables made so far are in this piece (fields, owner and stub):
        // committed, no longer written ahead of a stub, and a sorted
        // set's blocks are found as any committed table's.
        self.new_tables.clear();
        self.table_reads.clear();
        self.list_ops.clear();
        self.pieced = true;
        let batch = std::mem::take(&mut self.batch);
        let published = self.published().map(|pending| pending.published_of(&batch));
        let writing = (!self.written_tables.is_empty()).then(|| shared.rank_sums.writing(self.written_tables.clone()));
        let written = match shared.replication.gate.admit(self.writer) {
            Ok(_admitted) => shared.db.write(batch),
            Err(closed) => return Err(closed.into()),
        };
        drop(writing);
        written?;
        if !self.fence_edits.is_empty() {
            crate::commands::edit_fences(&mut shared.rank_fences.lock(), &self.fence_edits.take());
        }
        // The cached fences are the committed ones again: the command's
        // next writes find blocks there, not by a walk of the engine's keys
        // merged with these writes (which cost a ZADD of 200,000 members
        // into a new key 4.6 s).
        self.blocks_changed = false;
        // Writes other holders of these keys' locks published before this
        // command took them were queued first, so they are durable too and
        // in the engine, and older than this piece: no reader may find
        // them published any more (as `commands::commit` forgets those of
        // a command's last batch), and this command reads the engine.
        if let (Some(pending), Some(keys)) = (self.pending.take(), published) {
            pending.forget(keys.iter().map(|key| &key[..]));
        }
        Ok(())
    }

    /// Notes that these writes create table `id`.
    pub fn note_new_table(&mut self, id: u64) {
        self.new_tables.push(id);
    }

    /// Whether these are a branch's writes (`branch`): the blocks its
    /// bases changed are not among its `fence_edits`.
    pub fn is_branch(&self) -> bool {
        self.base.is_some()
    }

    /// Whether these writes create table `id` (it is in no committed
    /// state yet).
    pub fn is_new_table(&self, id: u64) -> bool {
        self.new_tables.contains(&id)
    }

    /// Notes that these writes change table `id` (`commands::table`).
    pub fn note_table_written(&mut self, id: u64) {
        if !self.written_tables.contains(&id) {
            self.written_tables.push(id);
        }
    }

    /// Notes that `key` held `value` (a big hash's, set's, sorted set's,
    /// list's or a stream's stub) before these writes: if none of them wrote `key` yet, that is
    /// the table a replica holds there before them. Called only while
    /// writes stream to replicas; reads the batch for `key` once per key.
    pub fn note_table_read(&mut self, key: &[u8], value: &Value) {
        if self.pieced
            || !matches!(
                value.tag(),
                TYPE_HASH_TABLE | TYPE_SET_TABLE | TYPE_ZSET_TABLE | TYPE_LIST_TABLE | TYPE_STREAM_TABLE
            )
            || self.table_reads.iter().any(|read| read.key == key)
        {
            return;
        }
        let batches = std::iter::once(&self.batch).chain(self.base.iter().chain(&self.outer).map(|(_, batch)| batch));
        for batch in batches {
            if batch.entries().any(|(written, _)| written == key) {
                return;
            }
        }
        let Some(id) = value.data().first_chunk::<8>().map(|id| u64::from_le_bytes(*id)) else { return };
        self.table_reads.push(TableRead {
            key: key.to_vec(),
            tag: value.tag(),
            id,
            expiry: value.expiry_ms(),
            groups: Vec::new(),
        });
    }

    /// Notes that stream table `id`'s consumer group `name` (its record
    /// at `field_key`) held `record` (None: no such group) when a command
    /// read it, if the stream's stub was noted (`note_table_read`) and the
    /// group was not noted yet: the state before the batch unless these
    /// writes (or the ones they branched from) already wrote it. Called
    /// only while writes stream to replicas.
    pub fn note_group_read(&mut self, id: u64, field_key: &[u8], name: &[u8], record: Option<&[u8]>) {
        let Some(at) = self.table_reads.iter().position(|read| read.id == id) else { return };
        if self.table_reads[at].groups.iter().any(|(noted, _)| noted == name) {
            return;
        }
        let mut batches = std::iter::once(&self.batch).chain(self.base.iter().chain(&self.outer).map(|(_, b)| b));
        let before = if batches.any(|batch| batch.entries().any(|(written, _)| written == field_key)) {
            GroupBefore::Unknown
        } else {
            record.map_or(GroupBefore::Absent, |record| GroupBefore::Held(record.to_vec()))
        };
        self.table_reads[at].groups.push((name.to_vec(), before));
    }

    /// Notes what a change of big list `id` did (None: what it did is not
    /// said), for the replicas (`master::note_of`).
    pub fn note_list_ops(&mut self, id: u64, ops: Option<Vec<ListOp>>) {
        self.list_ops.push((id, ops));
    }

    fn take_table_reads(&mut self) -> Vec<TableRead> {
        self.pieced = false;
        std::mem::take(&mut self.table_reads)
    }

    /// Whether a read since the last commit found a published write.
    pub fn read_pending(&self) -> bool {
        self.read_pending.get()
    }

    /// Whether committing these writes would do nothing: no entries, and
    /// nothing to wait for or tell once they are durable (a read).
    pub fn nothing_to_commit(&self) -> bool {
        self.batch.is_empty()
            && !self.read_pending.get()
            && self.events.is_empty()
            && self.messages.is_empty()
            && self.expiries.is_empty()
            && !self.all_deleted
    }

    /// The published writes, where these writes may read them and there
    /// are any.
    fn published(&self) -> Option<&Pending> {
        self.pending.as_deref().filter(|pending| !pending.is_empty())
    }

    /// Whether later commands can read these writes before they commit.
    pub fn has_overlay(&self) -> bool {
        self.overlay.is_some()
    }

    /// Tracks writes added from now on, so later commands read them.
    pub fn keep_overlay(&mut self) {
        self.overlay.get_or_insert_with(Overlay::default);
    }

    /// Writes for one more command that reads these ones (moved in, not
    /// copied); `merge` adds its writes here if it succeeds, `abandon`
    /// drops them if it fails half-way.
    pub fn branch(&mut self) -> Writes {
        debug_assert_eq!(self.savepoints, 0, "no branch within a save point");
        let mut outer = std::mem::take(&mut self.outer);
        outer.extend(self.base.take());
        let base = (self.overlay.take().unwrap_or_default(), std::mem::take(&mut self.batch));
        self.sorted.take();
        Writes {
            batch: WriteBatch::new(),
            overlay: Some(Overlay::default()),
            sorted: RefCell::new(None),
            base: Some(base),
            outer,
            undo: Vec::new(),
            savepoints: 0,
            last_at: 0,
            reserved_delta: 0,
            pushed: false,
            // Known to the branch too: its base's blocks are not the cached.
            blocks_changed: self.blocks_changed,
            fence_edits: FenceEdits::default(),
            pending: self.pending.clone(),
            read_pending: Cell::new(false),
            written_tables: Vec::new(),
            new_tables: Vec::new(),
            events: Vec::new(),
            defers_messages: self.defers_messages,
            // A script's command runs where the script does.
            retry_alone: None,
            messages: Vec::new(),
            expiries: Default::default(),
            all_deleted: false,
            table_reads: Vec::new(),
            list_ops: Vec::new(),
            pieced: false,
            writer: self.writer,
        }
    }

    pub fn merge(&mut self, mut branch: Writes) {
        let (mut overlay, mut batch) = branch.base.take().expect("a branch");
        self.base = branch.outer.pop();
        self.outer = std::mem::take(&mut branch.outer);
        let shift = batch.size_bytes();
        batch.append(&mut branch.batch);
        overlay.extend(branch.overlay.take().unwrap_or_default().into_iter().map(|(key, at)| (key, at + shift)));
        (self.overlay, self.batch) = (Some(overlay), batch);
        self.sorted.take();
        self.reserved_delta += branch.reserved_delta;
        self.pushed |= branch.pushed;
        self.blocks_changed |= branch.blocks_changed;
        self.fence_edits.append(&mut branch.fence_edits);
        self.read_pending.set(self.read_pending() || branch.read_pending());
        self.written_tables.append(&mut branch.written_tables);
        self.new_tables.append(&mut branch.new_tables);
        self.events.append(&mut branch.events);
        self.messages.append(&mut branch.messages);
        if branch.all_deleted {
            self.note_all_deleted();
        }
        self.expiries.append(&mut branch.expiries);
        self.table_reads.append(&mut branch.table_reads);
        self.list_ops.append(&mut branch.list_ops);
    }

    /// Marks where one more command's writes start: `release` keeps them,
    /// `rollback` drops them if it fails half-way. For a read-modify-write
    /// in a pipeline's run, where a `branch` cost a fresh overlay and a
    /// copy of its batch per command (merged back after it): INCR of one
    /// key at `-P 16` 10% of its CPU. Not for a command that deletes every
    /// key (its cleared expiry notes are not kept to restore).
    pub fn savepoint(&mut self) -> Savepoint {
        self.keep_overlay();
        self.savepoints += 1;
        Savepoint {
            batch: self.batch.save_point(),
            undo: self.undo.len(),
            reserved_delta: self.reserved_delta,
            pushed: self.pushed,
            blocks_changed: self.blocks_changed,
            fence_edits: self.fence_edits.len(),
            written_tables: self.written_tables.len(),
            new_tables: self.new_tables.len(),
            events: self.events.len(),
            messages: self.messages.len(),
            expiries: self.expiries.len(),
            list_ops: self.list_ops.len(),
        }
    }

    /// The command's writes since `point` stay.
    pub fn release(&mut self, _point: Savepoint) {
        self.close_savepoint();
    }

    /// One save point fewer open; with none, nothing is left to undo.
    fn close_savepoint(&mut self) {
        self.savepoints -= 1;
        if self.savepoints == 0 {
            self.undo.clear();
        }
    }

    /// Drops the command's writes since `point`, and what they noted. What
    /// it read stays read (its error reply may tell it).
    pub fn rollback(&mut self, point: Savepoint) {
        debug_assert!(!self.all_deleted, "a save point over a FLUSHALL");
        let overlay = self.overlay.as_mut().expect("kept by savepoint");
        for &(at, before) in self.undo[point.undo..].iter().rev() {
            let key = self.batch.key_at(at).expect("an entry the overlay points at");
            match before {
                Some(before) => *overlay.get_mut(key).expect("noted") = before,
                None => {
                    overlay.remove(key);
                    if let Some(sorted) = self.sorted.get_mut() {
                        sorted.remove(key);
                    }
                }
            }
        }
        self.undo.truncate(point.undo);
        self.batch.rollback_to(point.batch);
        self.reserved_delta = point.reserved_delta;
        self.pushed = point.pushed;
        self.blocks_changed = point.blocks_changed;
        self.fence_edits.truncate(point.fence_edits);
        self.written_tables.truncate(point.written_tables);
        self.new_tables.truncate(point.new_tables);
        self.keep_misses_after(point.events);
        self.messages.truncate(point.messages);
        self.expiries.truncate(point.expiries);
        self.list_ops.truncate(point.list_ops);
        self.close_savepoint();
    }

    /// Drops the events noted since the first `kept` but the key misses:
    /// a command that fails still looked its keys up, and Redis publishes
    /// `keymiss` as it happens.
    fn keep_misses_after(&mut self, kept: usize) {
        let misses: Vec<_> = self.events.drain(kept..).filter(|event| event.class == MISS).collect();
        self.events.extend(misses);
    }

    /// The key misses noted, for a command that failed (its writes and
    /// other events go unpublished).
    pub fn take_misses(&mut self) -> Vec<crate::notify::Event> {
        self.keep_misses_after(0);
        std::mem::take(&mut self.events)
    }

    pub fn abandon(&mut self, mut branch: Writes) {
        let (overlay, batch) = branch.base.take().expect("a branch");
        self.base = branch.outer.pop();
        self.outer = std::mem::take(&mut branch.outer);
        (self.overlay, self.batch) = (Some(overlay), batch);
        self.sorted.take();
        // Its error reply may tell what it read, and it missed what it missed.
        self.read_pending.set(self.read_pending() || branch.read_pending());
        self.events.append(&mut branch.take_misses());
    }

    /// A client's key (reserved keys hold nothing a client can see).
    pub fn get(&self, db: &Db, key: &[u8]) -> Result<Option<Value>, CmdError> {
        self.get_client(db, key, true)
    }

    /// A client's key, not counted as an access (`Db::peek_pinned`).
    pub fn get_untouched(&self, db: &Db, key: &[u8]) -> Result<Option<Value>, CmdError> {
        self.get_client(db, key, false)
    }

    fn get_client(&self, db: &Db, key: &[u8], touch: bool) -> Result<Option<Value>, CmdError> {
        if is_reserved(key) {
            return Ok(None);
        }
        self.get_as(db, key, touch)
    }

    /// Any key, the server's own included.
    pub fn get_internal(&self, db: &Db, key: &[u8]) -> Result<Option<Value>, CmdError> {
        self.get_as(db, key, true)
    }

    /// Any key; `touch`: counted as an access (`Db::get_pinned`) or not.
    fn get_as(&self, db: &Db, key: &[u8], touch: bool) -> Result<Option<Value>, CmdError> {
        let mine = self.overlay.as_ref().and_then(|o| o.get(key)).map(|&at| (&self.batch, at));
        let base =
            || self.base.iter().chain(self.outer.iter().rev()).find_map(|(o, batch)| Some((batch, *o.get(key)?)));
        if let Some((batch, at)) = mine.or_else(base) {
            return Ok(match batch.value_at(at) {
                Some((bytes, expiry)) if expiry.is_none_or(|at| at > now_ms()) => {
                    Some(Value::Pending(bytes.to_vec(), expiry))
                }
                _ => None,
            });
        }
        if let Some(published) = self.published().and_then(|pending| pending.get(key)) {
            self.read_pending.set(true);
            return Ok(published
                .filter(|(_, expiry)| expiry.is_none_or(|at| at > now_ms()))
                .map(|(bytes, expiry)| Value::Pending(bytes, expiry)));
        }
        let stored = if touch { db.get_pinned(key)? } else { db.peek_pinned(key)? };
        Ok(stored.map(Value::Stored))
    }

    /// Up to `limit` entries under `prefix` (one of the server's own
    /// ranges), after `after` if given, in key order: the engine's merged
    /// with these writes' pending ones. Values without their type byte.
    pub fn scan_internal(
        &self,
        db: &Db,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Entries, CmdError> {
        let upper = prefix_end(prefix);
        let lower = match after {
            Some(after) => Bound::Excluded(after),
            None => Bound::Included(prefix),
        };
        let upper = upper.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        self.scan_range(db, (lower, upper), false, limit)
    }

    /// How many entries `bounds` holds (inside one of the server's own
    /// ranges, whose entries never expire), from the engine's index alone
    /// and these writes.
    pub fn count_range(&self, db: &Db, bounds: (Bound<&[u8]>, Bound<&[u8]>)) -> usize {
        if self.pending_in(bounds).is_empty() {
            // The engine counts without a visit per key (most readers).
            return db.count_keys::<&[u8], _>(bounds);
        }
        scaledkv::walk::count(|visit| self.walk_keys(db, bounds, false, visit))
    }

    /// The key of the `n`th entry (from 0) within `bounds`, as
    /// `count_range` counts them.
    pub fn nth_in_range(&self, db: &Db, bounds: (Bound<&[u8]>, Bound<&[u8]>), n: usize) -> Option<Vec<u8>> {
        self.keys_at_ranks(db, bounds, &[n]).pop()
    }

    /// The keys within `bounds` at `ranks` (ascending, distinct, from 0),
    /// as `count_range` counts them, in one walk (`Db::keys_at_ranks`).
    pub fn keys_at_ranks(&self, db: &Db, bounds: (Bound<&[u8]>, Bound<&[u8]>), ranks: &[usize]) -> Vec<Vec<u8>> {
        if self.pending_in(bounds).is_empty() {
            return db.keys_at_ranks::<&[u8], _>(bounds, ranks);
        }
        scaledkv::walk::at_ranks(ranks, |visit| self.walk_keys(db, bounds, false, visit))
    }

    /// The last key within `bounds`, as `count_range` counts them.
    pub fn last_in_range(&self, db: &Db, bounds: (Bound<&[u8]>, Bound<&[u8]>)) -> Option<Vec<u8>> {
        scaledkv::walk::nth(0, |visit| self.walk_keys(db, bounds, true, visit))
    }

    /// Up to `limit` keys within `bounds`, in order (or in reverse), from
    /// the engine's index merged with these writes: `scan_range` without
    /// the values, for entries whose keys say it all (a sorted set's index
    /// entries). No value is read from the log and no snapshot is taken
    /// (an engine iterator's first merges every pending index update).
    pub fn keys_within(
        &self,
        db: &Db,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
        limit: usize,
    ) -> Vec<Vec<u8>> {
        let mut keys = Vec::with_capacity(limit.min(256));
        if limit > 0 {
            self.walk_keys(db, bounds, reverse, |key| {
                keys.push(key.to_vec());
                keys.len() < limit
            });
        }
        keys
    }

    /// Visits the keys within `bounds`, in order or in reverse: the
    /// engine's index merged with these writes' pending entries, until
    /// `visit` returns false. Reads no value and takes no snapshot.
    pub fn walk_keys(
        &self,
        db: &Db,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
        mut visit: impl FnMut(&[u8]) -> bool,
    ) {
        let pending = self.pending_in(bounds);
        let mut puts: Box<dyn Iterator<Item = &Vec<u8>>> = {
            let puts = pending.iter().filter(|(_, value)| value.is_some()).map(|(key, _)| key);
            if reverse {
                Box::new(puts.rev())
            } else {
                Box::new(puts)
            }
        };
        let mut next_put = puts.next();
        let mut going = true;
        db.visit_keys::<&[u8], _>(bounds, reverse, |key| {
            // Pending puts that come first in the walk's order.
            while let Some(put) = next_put.filter(|put| put.as_slice() != key && (put.as_slice() < key) != reverse) {
                if !visit(put) {
                    going = false;
                    return false;
                }
                next_put = puts.next();
            }
            if pending.contains_key(key) {
                // Its pending put is visited in turn; a pending delete never.
                return true;
            }
            going = visit(key);
            going
        });
        while let (true, Some(put)) = (going, next_put) {
            going = visit(put);
            next_put = puts.next();
        }
    }

    /// These writes' pending entries within `bounds`, newest winning (a
    /// value without its type byte, None for a delete).
    fn pending_in(&self, bounds: (Bound<&[u8]>, Bound<&[u8]>)) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
        self.pending_as(bounds, |value| value.get(1..).unwrap_or_default().to_vec())
    }

    /// These writes' pending entries within `bounds`, newest winning, each
    /// value (type byte first) as `keep` makes it; None for a delete.
    fn pending_as<T>(
        &self,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        keep: impl Fn(&[u8]) -> T,
    ) -> BTreeMap<Vec<u8>, Option<T>> {
        use std::ops::RangeBounds;
        // The branch's own over its bases' (the oldest first), over
        // others' published ones.
        let mut pending = BTreeMap::new();
        if let Some(published) = self.published() {
            for (key, value) in published.within(bounds) {
                self.read_pending.set(true);
                pending.insert(key, value.map(|(bytes, _)| keep(&bytes)));
            }
        }
        for (overlay, batch) in self.outer.iter().chain(self.base.iter()) {
            for (key, &at) in overlay.iter().filter(|(key, _)| RangeBounds::<&[u8]>::contains(&bounds, &key.as_slice()))
            {
                pending.insert(key.clone(), batch.value_at(at).map(|(v, _)| keep(v)));
            }
        }
        let Some(overlay) = &self.overlay else { return pending };
        if overlay.is_empty() || is_empty_range(bounds) {
            return pending;
        }
        let mut sorted = self.sorted.borrow_mut();
        let sorted = sorted.get_or_insert_with(|| overlay.keys().cloned().collect());
        for key in sorted.range::<[u8], _>(bounds) {
            pending.insert(key.clone(), self.batch.value_at(overlay[key]).map(|(v, _)| keep(v)));
        }
        pending
    }

    /// The keys these writes (or the queued ones they read) changed, each
    /// with whether it now holds a value (false: deleted): what a FLUSHALL
    /// inside a transaction or a script must delete besides the engine's.
    pub fn pending_keys(&self) -> BTreeMap<Vec<u8>, bool> {
        let all = (Bound::Unbounded, Bound::Unbounded);
        self.pending_as(all, |_| ()).into_iter().map(|(key, value)| (key, value.is_some())).collect()
    }

    /// The clients' keys these writes (or the queued ones they read)
    /// changed from `lower` on, each with its type byte now (None:
    /// deleted): what KEYS, SCAN and DBSIZE inside a transaction or a
    /// script merge with the engine's.
    pub fn pending_user_keys(&self, lower: Bound<&[u8]>) -> BTreeMap<Vec<u8>, Option<u8>> {
        self.pending_as((lower, Bound::Excluded(RESERVED)), |value| value.first().copied().unwrap_or(TYPE_STRING))
    }

    /// Whether these writes (or the queued ones they read) hold a change
    /// within `bounds`: a read there must merge them with the engine's.
    pub fn holds_pending_in(&self, bounds: (Bound<&[u8]>, Bound<&[u8]>)) -> bool {
        !self.pending_in(bounds).is_empty()
    }

    /// Calls `visit` with up to `limit` entries within `bounds` (inside
    /// one of the server's own ranges), in key order, values without their
    /// type byte, until it returns false; returns how many it saw. Where
    /// these writes hold none there the engine lends them in place (LRANGE
    /// of a big list: no copy per element before the reply's).
    pub fn visit_range(
        &self,
        db: &Db,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        limit: usize,
        mut visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize, CmdError> {
        if self.holds_pending_in(bounds) {
            let found = self.scan_range(db, bounds, false, limit)?;
            let mut seen = 0;
            for (key, value) in &found {
                seen += 1;
                if !visit(key, value) {
                    break;
                }
            }
            return Ok(seen);
        }
        let mut iter = db.range::<&[u8], _>(bounds).expect(limit);
        let mut seen = 0;
        while seen < limit {
            let Some(item) = iter.next_ref() else { break };
            let (key, value) = item?;
            seen += 1;
            if !visit(key, value.get(1..).unwrap_or_default()) {
                break;
            }
        }
        Ok(seen)
    }

    /// Up to `limit` entries within `bounds` (inside one of the server's
    /// own ranges), from the low end or (`reverse`) the high one: the
    /// engine's merged with these writes' pending ones. Values without
    /// their type byte.
    pub fn scan_range(
        &self,
        db: &Db,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
        limit: usize,
    ) -> Result<Entries, CmdError> {
        // Pending writes win over the engine's entries.
        let pending = self.pending_in(bounds);
        let iter = if reverse { db.range_rev::<&[u8], _>(bounds) } else { db.range::<&[u8], _>(bounds) };
        let mut iter = iter.expect(limit.saturating_add(pending.len()));
        if pending.is_empty() {
            // The usual case (a read outside a transaction or run): the
            // engine's entries as they come.
            let mut found = Vec::with_capacity(limit.min(1024));
            while found.len() < limit {
                let Some(item) = iter.next_ref() else { break };
                let (key, value) = item?;
                found.push((key.to_vec(), value.get(1..).unwrap_or_default().to_vec()));
            }
            return Ok(found);
        }
        // The first `limit` of the merge are among the engine's first
        // `limit + pending` and the pending puts.
        let mut merged: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        while merged.len() < limit.saturating_add(pending.len()) {
            let Some(item) = iter.next_ref() else { break };
            let (key, value) = item?;
            merged.insert(key.to_vec(), value.get(1..).unwrap_or_default().to_vec());
        }
        drop(iter);
        // At most `pending` of those are deleted, so `limit` of them are
        // left and the take below never passes the last one read: a pending
        // put beyond it is never taken before an unread engine entry.
        for (key, value) in pending {
            match value {
                Some(value) => merged.insert(key, value),
                None => merged.remove(&key),
            };
        }
        Ok(match reverse {
            false => merged.into_iter().take(limit).collect(),
            true => merged.into_iter().rev().take(limit).collect(),
        })
    }

    pub fn put_string(&mut self, key: &[u8], data: &[u8], expiry_ms: Option<u64>) -> Result<(), CmdError> {
        // The value's size is judged before the key's, as it always was.
        if data.len() > MAX_STRING_BYTES {
            return Err(CmdError::TooBig);
        }
        self.put(key, TYPE_STRING, data, expiry_ms)
    }

    /// Stores `data` as a value of type `tag`: a copy of a value read (COPY,
    /// RENAME, EXPIRE ...), or a hash whose size its caller checked.
    pub fn put(&mut self, key: &[u8], tag: u8, data: &[u8], expiry_ms: Option<u64>) -> Result<(), CmdError> {
        check_key(key)?;
        self.put_internal(key, tag, data, expiry_ms)
    }

    /// As `put`, for any key, the server's own included.
    pub fn put_internal(&mut self, key: &[u8], tag: u8, data: &[u8], expiry_ms: Option<u64>) -> Result<(), CmdError> {
        if data.len() > MAX_STRING_BYTES {
            return Err(CmdError::TooBig);
        }
        self.put_parts(key, &[&[tag], data], expiry_ms);
        Ok(())
    }

    /// Stores a copy of `value` as it is (type, payload, a memcached
    /// item's flags and CAS) with expiry `expiry_ms`: EXPIRE, RENAME, COPY.
    pub fn put_copy(&mut self, key: &[u8], value: &Value, expiry_ms: Option<u64>) -> Result<(), CmdError> {
        check_key(key)?;
        self.put_parts(key, &[value.encoded()], expiry_ms);
        Ok(())
    }

    /// Stores a memcached item: `data` with its client `flags` and `cas`.
    pub fn put_item(
        &mut self,
        key: &[u8],
        (flags, cas): (u32, u64),
        data: &[u8],
        expiry_ms: Option<u64>,
    ) -> Result<(), CmdError> {
        check_key(key)?;
        if data.len() > MAX_STRING_BYTES - ITEM_META_BYTES {
            return Err(CmdError::TooBig);
        }
        let mut meta = [0u8; ITEM_META_BYTES];
        meta[..4].copy_from_slice(&flags.to_le_bytes());
        meta[4..].copy_from_slice(&cas.to_le_bytes());
        self.put_parts(key, &[&[TYPE_ITEM], &meta, data], expiry_ms);
        Ok(())
    }

    pub fn delete(&mut self, key: &[u8]) {
        self.overlay_next(key);
        self.batch.delete(key);
        self.note_expiry(key, None);
    }

    /// Adds a put of the concatenated `parts` (checked by the caller).
    fn put_parts(&mut self, key: &[u8], parts: &[&[u8]], expiry_ms: Option<u64>) {
        self.overlay_next(key);
        self.batch.put_parts(key, parts, expiry_ms);
        self.note_expiry(key, expiry_ms);
    }

    /// Notes that `key`'s latest entry is the one added next, for later
    /// commands of a transaction or run to read.
    fn overlay_next(&mut self, key: &[u8]) {
        let at = self.batch.size_bytes();
        let Some(overlay) = &mut self.overlay else {
            self.last_at = at;
            return;
        };
        // A key written again (the run's hot key) keeps its allocation.
        let before = match overlay.get_mut(key) {
            Some(slot) => Some(std::mem::replace(slot, at)),
            None => {
                overlay.insert(key.to_vec(), at);
                if let Some(sorted) = self.sorted.get_mut() {
                    sorted.insert(key.to_vec());
                }
                None
            }
        };
        if self.savepoints > 0 {
            self.undo.push((at, before));
        }
    }

    /// Counts entries under `RESERVED` these writes add or remove.
    pub fn note_reserved(&mut self, delta: i64) {
        self.reserved_delta += delta;
    }

    /// Notes that these writes may give a client blocked on one of their
    /// keys something to take (a push, a new sorted-set member, a list or
    /// sorted set renamed, copied, restored or stored there): the first in
    /// each key's line looks again once they are visible.
    pub fn note_pushed(&mut self) {
        self.pushed = true;
    }

    /// Notes a keyspace notification (`crate::notify`) for when these
    /// writes commit.
    pub fn note_event(&mut self, class: u32, name: &'static str, key: &[u8], writer: u64) {
        self.events.push(crate::notify::Event { class, name, key: key.to_vec(), writer });
    }

    /// Where these writes' last entry for `key` starts, if they hold one
    /// (`keep_overlay` tracks them).
    pub fn written_at(&self, key: &[u8]) -> Option<usize> {
        self.overlay.as_ref()?.get(key).copied()
    }

    pub fn events_len(&self) -> usize {
        self.events.len()
    }

    /// Where the first event for `key` from `from` on is (the end if none).
    pub fn first_event_of(&self, from: usize, key: &[u8]) -> usize {
        self.events[from..].iter().position(|event| event.key == key).map_or(self.events.len(), |at| from + at)
    }

    pub fn insert_event(&mut self, at: usize, event: crate::notify::Event) {
        self.events.insert(at, event);
    }

    /// Notes a rank block of sorted set `table` added at `fence` (a split)
    /// or dropped.
    pub fn note_fence(&mut self, table: u64, fence: &[u8], added: bool) {
        self.blocks_changed = true;
        self.fence_edits.push(FenceEdit { table, fence: fence.to_vec(), added });
    }

    /// `look` at the rank blocks of sorted set `table` that these writes
    /// split off or dropped.
    pub fn fence_changes<R>(&self, table: u64, look: impl FnOnce(&FenceChanges) -> R) -> R {
        self.fence_edits.changes(table, look)
    }

    pub fn blocks_changed(&self) -> bool {
        self.blocks_changed
    }

    pub fn take_batch(&mut self) -> Ready {
        if let Some(overlay) = &mut self.overlay {
            overlay.clear();
        }
        self.sorted.take();
        // The next batch starts from the blocks these edits leave cached.
        self.blocks_changed = false;
        Ready {
            batch: std::mem::take(&mut self.batch),
            reserved_delta: std::mem::take(&mut self.reserved_delta),
            pushed: std::mem::take(&mut self.pushed),
            fence_edits: self.fence_edits.take(),
            read_pending: self.read_pending.take(),
            written_tables: std::mem::take(&mut self.written_tables),
            new_tables: std::mem::take(&mut self.new_tables),
            events: std::mem::take(&mut self.events),
            messages: std::mem::take(&mut self.messages),
            expiries: std::mem::take(&mut self.expiries),
            all_deleted: std::mem::take(&mut self.all_deleted),
            table_reads: self.take_table_reads(),
            list_ops: std::mem::take(&mut self.list_ops),
            writer: self.writer,
        }
    }

    /// As `take_batch`, for a connection's next run of writes: the new
    /// batch starts with room for as many bytes (up to 64 KiB), since a
    /// pipeline's runs tend to be alike (a run of 16 1 KiB SETs grew its
    /// buffer five times, copying it each time).
    /// The next run starts without an overlay (blind writes need none).
    pub fn take_run_batch(&mut self) -> Ready {
        let overlay = self.overlay.take();
        self.sorted.take();
        let hint = self.batch.size_bytes().min(64 << 10);
        let mut batch = std::mem::replace(&mut self.batch, WriteBatch::with_capacity(hint));
        match overlay {
            Some(overlay) if overlay.len() < batch.len() => {
                // A key the run wrote more than once (a pipeline of PFADDs
                // or INCRs of one key): only its last entry goes to the log.
                batch.retain(|key, at| overlay.get(key).is_none_or(|&last| last <= at));
            }
            // Blind writes keep no overlay; a run whose first and last
            // entries are for one key (redis-benchmark's SET) sends only
            // the last of each repeat: one check, nothing for others.
            None if batch.len() > 1 && batch.key_at(0) == batch.key_at(self.last_at) => batch.drop_repeats(),
            _ => {}
        }
        self.last_at = 0;
        self.blocks_changed = false;
        Ready {
            batch,
            reserved_delta: std::mem::take(&mut self.reserved_delta),
            pushed: std::mem::take(&mut self.pushed),
            fence_edits: self.fence_edits.take(),
            read_pending: self.read_pending.take(),
            written_tables: std::mem::take(&mut self.written_tables),
            new_tables: std::mem::take(&mut self.new_tables),
            events: std::mem::take(&mut self.events),
            messages: std::mem::take(&mut self.messages),
            expiries: std::mem::take(&mut self.expiries),
            all_deleted: std::mem::take(&mut self.all_deleted),
            table_reads: self.take_table_reads(),
            list_ops: std::mem::take(&mut self.list_ops),
            writer: self.writer,
        }
    }
}

/// Whether no key lies within `bounds` (what `BTreeSet::range` refuses).
fn is_empty_range(bounds: (Bound<&[u8]>, Bound<&[u8]>)) -> bool {
    match bounds {
        (Bound::Included(low), Bound::Included(high)) => low > high,
        (Bound::Included(low) | Bound::Excluded(low), Bound::Included(high) | Bound::Excluded(high)) => low >= high,
        _ => false,
    }
}

/// The first key after every key that starts with `prefix`; None if
/// there is none (a prefix of 0xFF bytes only).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

pub fn check_key(key: &[u8]) -> Result<(), CmdError> {
    if key.len() > MAX_KEY_BYTES {
        return Err(CmdError::Msg(format!("ERR key is too large (max {MAX_KEY_BYTES} bytes)")));
    }
    if is_reserved(key) {
        return Err(CmdError::Msg("ERR keys starting with the bytes 0xFF 0xFF are reserved by ScaledKV".into()));
    }
    Ok(())
}

const STRIPES: usize = 1024;

/// Striped key locks. A write command holds the stripes of its keys from
/// its first read until its batch is durable and visible (or, when another
/// command waits for one, until the batch is queued and published to it:
/// `crate::pending`), so concurrent
/// read-modify-writes (INCR, APPEND, SET NX ...) serialise per key as they
/// do in single-threaded Redis. Blind writes (SET, MSET: they read
/// nothing) share a stripe with each other, since their order is the
/// log's, but not with a read-modify-write, whose read must not miss
/// them. Each stripe's version counts writes, which is what WATCH
/// compares.
///
/// Why shared: a run of pipelined SETs holds its stripes until its group
/// commit, and with 50 clients pipelining 16 SETs, 800 keys are in flight
/// over 1024 stripes; nearly every run collided with another and waited for
/// it (3,000 request turns over 4 ms in 1M SETs, up to 25 ms).
pub struct KeyLocks {
    stripes: Box<[RwLock<()>]>,
    versions: Box<[AtomicU64]>,
    /// Commands waiting for each stripe: a writer that sees one lets its
    /// locks go as soon as its writes are queued (`crate::pending`).
    awaited: Box<[AtomicU32]>,
}

impl Default for KeyLocks {
    fn default() -> Self {
        KeyLocks {
            stripes: (0..STRIPES).map(|_| RwLock::new(())).collect(),
            versions: (0..STRIPES).map(|_| AtomicU64::new(0)).collect(),
            awaited: (0..STRIPES).map(|_| AtomicU32::new(0)).collect(),
        }
    }
}

pub type Stripe = u16;

/// Counts a command waiting for a stripe, until it has it or gives up.
struct Awaiting<'a>(&'a AtomicU32);

impl Drop for Awaiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl KeyLocks {
    pub fn stripe(key: &[u8]) -> Stripe {
        // foldhash takes 8 or 16 bytes a step, where FNV-1a's multiply per
        // byte was 3% of an INCR's CPU at `-P 16` (a 20-byte key).
        use std::hash::BuildHasher;
        let hash = foldhash::fast::FixedState::with_seed(0).hash_one(key);
        (hash as usize % STRIPES) as Stripe
    }

    pub fn all() -> Vec<Stripe> {
        (0..STRIPES as Stripe).collect()
    }

    /// Locks `stripes` exclusively; they must be sorted and distinct (so
    /// two commands never wait for each other in a cycle).
    pub async fn lock(&self, stripes: &[Stripe]) -> Vec<RwLockWriteGuard<'_, ()>> {
        self.take_in_order(stripes, |lock| lock.try_write().ok(), RwLock::write).await
    }

    /// Locks `stripes` (sorted, distinct) for blind writes.
    pub async fn share(&self, stripes: &[Stripe]) -> Vec<RwLockReadGuard<'_, ()>> {
        self.take_in_order(stripes, |lock| lock.try_read().ok(), RwLock::read).await
    }

    async fn take_in_order<'a, G, F: std::future::Future<Output = G>>(
        &'a self,
        stripes: &[Stripe],
        try_take: impl Fn(&'a RwLock<()>) -> Option<G>,
        take: impl Fn(&'a RwLock<()>) -> F,
    ) -> Vec<G> {
        debug_assert!(stripes.windows(2).all(|w| w[0] < w[1]));
        let mut guards = Vec::with_capacity(stripes.len());
        for &stripe in stripes {
            let lock = &self.stripes[stripe as usize];
            let guard = match try_take(lock) {
                Some(guard) => guard,
                None => {
                    let awaited = &self.awaited[stripe as usize];
                    awaited.fetch_add(1, Ordering::Relaxed);
                    let _awaiting = Awaiting(awaited);
                    take(lock).await
                }
            };
            guards.push(guard);
        }
        guards
    }

    /// Whether a command waits for `stripe`.
    pub fn is_awaited(&self, stripe: Stripe) -> bool {
        self.awaited[stripe as usize].load(Ordering::Relaxed) > 0
    }

    pub fn try_share(&self, stripe: Stripe) -> Option<RwLockReadGuard<'_, ()>> {
        self.stripes[stripe as usize].try_read().ok()
    }

    pub fn try_lock(&self, stripe: Stripe) -> Option<RwLockWriteGuard<'_, ()>> {
        self.stripes[stripe as usize].try_write().ok()
    }

    pub fn version(&self, stripe: Stripe) -> u64 {
        self.versions[stripe as usize].load(Ordering::Acquire)
    }

    /// Called after a write to the stripe became visible: with the stripe
    /// locked, or for a change no lock orders (an eviction).
    pub fn bump(&self, stripe: Stripe) {
        self.versions[stripe as usize].fetch_add(1, Ordering::AcqRel);
    }
}

/// Redis's glob matching (`stringmatchlen`): `*`, `?`, `[abc]`, `[^a-z]`,
/// and `\` to escape.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where to resume after a `*` that matched too little.
    let mut star: Option<(usize, usize)> = None;
    loop {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    while p < pattern.len() && pattern[p] == b'*' {
                        p += 1;
                    }
                    if p == pattern.len() {
                        return true;
                    }
                    star = Some((p, t));
                    continue;
                }
                b'?' if t < text.len() => {
                    p += 1;
                    t += 1;
                    continue;
                }
                b'[' if t < text.len() => {
                    if let Some((matched, next)) = class_match(pattern, p, text[t]) {
                        if matched {
                            p = next;
                            t += 1;
                            continue;
                        }
                    }
                }
                b'\\' if p + 1 < pattern.len() && t < text.len() && pattern[p + 1] == text[t] => {
                    p += 2;
                    t += 1;
                    continue;
                }
                b'\\' if p + 1 < pattern.len() => {}
                c if t < text.len() && c == text[t] && c != b'?' && c != b'[' => {
                    p += 1;
                    t += 1;
                    continue;
                }
                _ => {}
            }
        } else if t == text.len() {
            return true;
        }
        match star {
            Some((star_p, star_t)) if star_t < text.len() => {
                star = Some((star_p, star_t + 1));
                p = star_p;
                t = star_t + 1;
            }
            _ => return false,
        }
    }
}

/// Matches `c` against the class starting at `pattern[open] == '['`;
/// returns the result and the index after the closing `]`.
fn class_match(pattern: &[u8], open: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = open + 1;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    loop {
        match pattern.get(i) {
            // Redis treats an unterminated class as ending at the pattern's end.
            None => return Some((matched != negate, i)),
            Some(b']') => return Some((matched != negate, i + 1)),
            Some(b'\\') if i + 1 < pattern.len() => {
                matched |= pattern[i + 1] == c;
                i += 2;
            }
            Some(&low) if pattern.get(i + 1) == Some(&b'-') && i + 2 < pattern.len() && pattern[i + 2] != b']' => {
                let high = pattern[i + 2];
                let (low, high) = if low <= high { (low, high) } else { (high, low) };
                matched |= (low..=high).contains(&c);
                i += 3;
            }
            Some(&other) => {
                matched |= other == c;
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        let cases: [(&str, &str, bool); 14] = [
            ("*", "anything", true),
            ("h?llo", "hello", true),
            ("h?llo", "hllo", false),
            ("h*llo", "heeeello", true),
            ("h[ae]llo", "hallo", true),
            ("h[ae]llo", "hillo", false),
            ("h[^e]llo", "hallo", true),
            ("h[^e]llo", "hello", false),
            ("h[a-b]llo", "hbllo", true),
            ("user:*:name", "user:42:name", true),
            ("user:*:name", "user:42:age", false),
            ("a\\*b", "a*b", true),
            ("a\\*b", "axb", false),
            ("*a*b", "xxaxxbxb", true),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(glob_match(pattern.as_bytes(), text.as_bytes()), expected, "{pattern} ~ {text}");
        }
    }

    fn test_db() -> (tempfile::TempDir, scaledkv::Db) {
        let dir = tempfile::tempdir().unwrap();
        let options = scaledkv::Options { background_work: false, ..Default::default() };
        let db = scaledkv::Db::open(dir.path(), options).unwrap();
        (dir, db)
    }

    /// The string `writes` read at `key` (through to `db`).
    fn read_string(db: &scaledkv::Db, writes: &super::Writes, key: &[u8]) -> Option<Vec<u8>> {
        writes.get(db, key).unwrap().map(|value| value.string().unwrap().to_vec())
    }

    /// A branch of a branch (a script's command inside a pipeline's run)
    /// reads every level's writes, newest first; abandoning it drops only
    /// its own, merging adds them one level up.
    #[test]
    fn branches_nest() {
        let (_dir, db) = test_db();
        let read = |writes: &super::Writes, key: &[u8]| read_string(&db, writes, key);
        let mut run = super::Writes::new(true);
        run.put_string(b"a", b"run", None).unwrap();
        let mut script = run.branch();
        script.put_string(b"b", b"script", None).unwrap();
        let mut failed = script.branch();
        failed.put_string(b"a", b"failed", None).unwrap();
        assert_eq!(read(&failed, b"a").as_deref(), Some(&b"failed"[..]));
        assert_eq!(read(&failed, b"b").as_deref(), Some(&b"script"[..]));
        script.abandon(failed);
        assert_eq!(read(&script, b"a").as_deref(), Some(&b"run"[..]));
        let mut done = script.branch();
        assert_eq!(read(&done, b"a").as_deref(), Some(&b"run"[..]));
        done.put_string(b"c", b"done", None).unwrap();
        script.merge(done);
        run.merge(script);
        assert_eq!(read(&run, b"a").as_deref(), Some(&b"run"[..]));
        assert_eq!(read(&run, b"b").as_deref(), Some(&b"script"[..]));
        assert_eq!(read(&run, b"c").as_deref(), Some(&b"done"[..]));
        assert_eq!(run.take_batch().batch.len(), 3);
    }

    #[test]
    fn only_a_commands_own_writes_make_it_leave_its_run() {
        let mut run = super::Writes::new(false);
        run.put_string(b"earlier", &[7; 4096], None).unwrap();
        assert!(!run.outgrows_its_run(1024), "outside a command of a run, never");
        run.set_retry_alone(true);
        run.put_string(b"small", &[1; 512], None).unwrap();
        assert!(!run.outgrows_its_run(1024), "the run's earlier 4 KiB do not count");
        run.put_string(b"big", &[2; 1024], None).unwrap();
        assert!(run.outgrows_its_run(1024));
        run.set_retry_alone(false);
        assert!(!run.outgrows_its_run(1024));
        // Where a command may commit in pieces: alone, nothing written yet.
        assert!(!run.may_commit_in_pieces());
        assert!(super::Writes::new(false).may_commit_in_pieces());
        assert!(!super::Writes::new(true).may_commit_in_pieces(), "a transaction's writes");
        assert!(!super::Writes::new(false).branch().may_commit_in_pieces(), "a script's");
    }

    #[test]
    fn a_rollback_drops_what_came_after_its_save_point() {
        let (_dir, db) = test_db();
        let read = |writes: &super::Writes, key: &[u8]| read_string(&db, writes, key);
        let mut run = super::Writes::new(false);
        run.put_string(b"a", b"run", None).unwrap();
        let kept = run.savepoint();
        run.put_string(b"a", b"kept", None).unwrap();
        run.release(kept);
        let outer = run.savepoint();
        run.put_string(b"b", b"outer", Some(u64::MAX - 1)).unwrap();
        // (Writes without an expiry are noted too once any key had one.)
        let noted = run.expiries.len();
        let inner = run.savepoint();
        run.put_string(b"a", b"inner", None).unwrap();
        run.put_string(b"a", b"inner twice", None).unwrap();
        run.delete(b"b");
        run.put_string(b"c", b"inner", None).unwrap();
        run.note_event(crate::notify::STRING, "set", b"c", 0);
        run.note_reserved(2);
        assert_eq!(read(&run, b"a").as_deref(), Some(&b"inner twice"[..]));
        assert_eq!(read(&run, b"b"), None);
        run.rollback(inner);
        assert_eq!(read(&run, b"a").as_deref(), Some(&b"kept"[..]));
        assert_eq!(read(&run, b"b").as_deref(), Some(&b"outer"[..]));
        assert_eq!(read(&run, b"c"), None);
        assert_eq!((run.events.len(), run.reserved_delta, run.expiries.len()), (0, 0, noted));
        run.release(outer);
        assert!(run.undo.is_empty(), "nothing to undo once every save point is closed");
        let failed = run.savepoint();
        run.put_string(b"d", b"failed", None).unwrap();
        run.rollback(failed);
        let ready = run.take_run_batch();
        let entries: Vec<(Vec<u8>, bool)> =
            ready.batch.entries().map(|(key, value)| (key.to_vec(), value.is_some())).collect();
        // The run's last entry per key: a's 'kept', b's 'outer'.
        assert_eq!(entries, [(b"a".to_vec(), true), (b"b".to_vec(), true)]);
        assert_eq!(ready.expiries.len(), noted, "the failed write's note rolled back");
    }
}
