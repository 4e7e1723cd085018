//! ScaledKV as a master: a replica (Redis's REPLICAOF, or ScaledKV's own)
//! gets the data set as an RDB file, then every write after it, and
//! resumes a broken link from the backlog (PSYNC, +CONTINUE).
//!
//! What streams is each changed key's state, not the client's command.
//! Commands note the keys they change (their keyspace events) on their
//! engine batch (`WriteBatch::set_note`, `note_of`), with the command that
//! makes a replica's key what the batch left it where the batch alone
//! says (a string's SET ... PXAT, a DEL); the engine hands the notes over
//! in commit order with their sequence numbers (`Db::set_commit_observer`).
//! A drain takes the notes and writes each key's latest command; a key a
//! note could not say (a collection, whose fields are other entries) is
//! read at a snapshot taken after the notes (RESTORE ... REPLACE ABSTTL,
//! or DEL if it is gone), with the notes up to that snapshot's moment. A
//! drain of several keys goes as MULTI/EXEC. So a replica moves from one
//! moment of the master's data to a later one, never to a mix of two, and
//! what scripts, relative expiry times, random pops and blocking moves
//! come down to needs no rewrite per command (Redis rewrites each into
//! its effects for the same reason); a key written many times between two
//! drains goes once. Expired and evicted keys are read (so sent as DELs)
//! by the same path: their deletes are the engine's own, noted when they
//! are announced, before the drain's snapshot.
//!
//! A big hash, set or sorted set (a table, one engine entry per field)
//! that a batch changed in place goes as its fields' changes instead
//! (HSET/HDEL, SADD/SREM, ZADD/ZREM), a big list as what its changes did
//! (pushes, pops, LSET, LTRIM: `ChunkedList`'s `ListOp`s), a stream as
//! its new and deleted entries and its counters (XADD, XDEL, XSETID), in
//! commit order after the key's earlier notes, where the batch's commands
//! found the table at the key before writing it
//! (`Writes::note_table_read`); reading it whole would send it once per
//! drain while it is being written.
//!
//! The cost is the other side of that: a change to a stream's consumer
//! groups (XREADGROUP, XACK ...) or a LINSERT or an LREM of a big list
//! sends it whole, once per drain while it is being written, and a note
//! carries a string's value once more.
//!
//! A full sync's file and its place in the stream are one moment: the
//! drain up to the file's snapshot (its notes up to that moment, its
//! reads there) runs first, under the lock drains take, and the replica's
//! stream starts where it ended.
//!
//! Streaming starts with the first replica, under every key's lock (so no
//! command that ran before it, unnoted, commits after the file's moment),
//! and stops an hour (`repl-backlog-ttl`) after the last one left, with a
//! new replication ID, as Redis frees its backlog.
//!
//! While this server follows a master, nothing is noted: its stream is
//! the master's, each run of it appended once the link has committed it
//! (`relay`), as a Redis replica proxies its master's stream. Replicas of
//! this one thus hold the master's replication ID and offsets and can go
//! on from the master itself, and a promotion keeps that stream as the
//! new history's start (`promote`): the master's other replicas behind
//! this one go on from it.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::{Condvar, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use crate::conn::{ClientInfo, ConnState};
use crate::keyspace::{KeyLocks, ListOp, Writes, TYPE_ITEM, TYPE_STRING};
use crate::notify::Event;
use crate::rdb_sync::{random_hex, until_killed};
use crate::resp::request::put_request;
use crate::resp::{Out, Protocol};
use crate::server::Shared;
use crate::socket::{self, Peer};

/// Redis's `repl-backlog-size` default.
pub const DEFAULT_BACKLOG_BYTES: usize = 1 << 20;
/// Redis's `repl-backlog-ttl`.
const BACKLOG_TTL: Duration = Duration::from_secs(3600);
/// Redis's `client-output-buffer-limit replica` hard limit: a replica this
/// far behind the stream is disconnected.
const MAX_LAG_BYTES: u64 = 256 << 20;
/// Redis's `repl-ping-replica-period`.
const PING_EVERY: Duration = Duration::from_secs(10);
/// At most one drain per this long: the drains between two of a key's
/// writes are what send it again.
const DRAIN_EVERY: Duration = Duration::from_millis(1);
/// The most a replica's sender copies from the backlog per write.
const SEND_BYTES: usize = 1 << 20;
/// How often a wait on the replicas asks them to acknowledge.
const ASK_EVERY: Duration = Duration::from_millis(100);
/// Drains remembered for WAIT: its writes are found among them unless it
/// waited this many drains (several seconds) to start.
const DRAINS_KEPT: usize = 4096;

/// The master's side of replication.
pub struct Master {
    /// Whether commands note the keys they change (`note_of`).
    streaming: AtomicBool,
    /// The notes the engine handed over, and the keys deleted outside
    /// commands (expiry, eviction), not yet drained.
    changes: Mutex<Changes>,
    changed: Condvar,
    stream: Mutex<Stream>,
    /// Held for a drain, so drains (the drainer's and full syncs') follow
    /// one another.
    draining: Mutex<()>,
    /// `master_repl_offset`, for the replicas' senders.
    end: watch::Sender<u64>,
    /// `repl-backlog-size`.
    pub backlog_bytes: AtomicUsize,
    /// Redis's `min-replicas-to-write` and `min-replicas-max-lag` (0: no
    /// such rule): writes are refused while fewer online replicas than
    /// the first acknowledged within the second's seconds.
    pub min_replicas_to_write: AtomicU64,
    pub min_replicas_max_lag: AtomicU64,
    /// Clients in WAIT, woken by acknowledgements.
    waiting: Mutex<Vec<Arc<ClientInfo>>>,
    drainer: Mutex<Option<std::thread::JoinHandle<()>>>,
    stop: AtomicBool,
    /// The stream stands still at the offset `capture` fixed, until the
    /// new master answers (`thaw`): nothing more is drained meanwhile.
    frozen: AtomicBool,
    /// Set by a replica's link while it runs and commits what it read of
    /// its master's stream, until those bytes are relayed: a full sync of
    /// a replica of this one takes its snapshot between two reads.
    committing: tokio::sync::Mutex<()>,
    /// INFO stats' `sync_full`, `sync_partial_ok`, `sync_partial_err`.
    pub syncs: [std::sync::atomic::AtomicU64; 3],
    /// Keys this server's own expiry dropped while it followed a master,
    /// the newest `EXPIRED_KEPT`: the relayed stream has no DEL for them
    /// (a Redis replica keeps such a key, logically expired, until its
    /// master's DEL), so a promotion drains them (`promote`).
    expired_following: Mutex<std::collections::VecDeque<Vec<u8>>>,
}

/// How many keys expired while following `Master` keeps: the oldest are
/// the likeliest to have had their master's DEL already.
const EXPIRED_KEPT: usize = 1 << 16;

#[derive(Default)]
struct Changes {
    batches: std::collections::VecDeque<(u64, Vec<u8>)>,
    loose: Vec<Vec<u8>>,
    /// Evictions outran their announcements: which keys went is not
    /// known, so the replicas sync again in full.
    lost_track: bool,
}

struct Stream {
    replid: String,
    /// The history this one went on from, and the first offset that is
    /// not its (PSYNC2's `replid2` and `second_repl_offset`): a promoted
    /// replica's old master's, so that the master's other replicas go on
    /// with a partial resync.
    replid2: Option<(String, u64)>,
    backlog: Backlog,
    replicas: Vec<Arc<Replica>>,
    /// The snapshots recent drains read and where their bytes ended,
    /// oldest first (WAIT's offsets).
    drained: std::collections::VecDeque<(u64, u64)>,
    last_ping: Instant,
    alone_since: Option<Instant>,
    /// WAIT asked for acknowledgements since the last drain.
    getack: bool,
    /// A full sync ended at the stream's end: the next drain starts with
    /// SELECT 0, as Redis's stream does after one (`redis-cli --replica`
    /// reads it as the answer to its REPLCONF ACK).
    select: bool,
}

impl Stream {
    fn end(&self) -> u64 {
        self.backlog.end()
    }

    /// Ends every replica's link: they come back and sync again (from
    /// the backlog where it holds their place).
    fn disconnect_replicas(&self) {
        for replica in &self.replicas {
            replica.client.kill();
        }
    }
}

/// The stream's recent bytes, as drains appended them: pieces the
/// replicas' senders share (a drain's bytes are copied once, into its
/// piece).
#[derive(Default)]
struct Backlog {
    /// Each piece with the offset of the byte before its first.
    pieces: std::collections::VecDeque<(u64, Bytes)>,
    /// The offset of the byte before the first piece's first.
    start: u64,
    len: u64,
}

impl Backlog {
    /// Empty, the stream going on after `offset`.
    fn starting_at(offset: u64) -> Backlog {
        Backlog { pieces: Default::default(), start: offset, len: 0 }
    }

    fn end(&self) -> u64 {
        self.start + self.len
    }

    fn push(&mut self, piece: Vec<u8>) {
        if !piece.is_empty() {
            self.len += piece.len() as u64;
            self.pieces.push_back((self.end() - piece.len() as u64, Bytes::from(piece)));
        }
    }

    /// Drops the pieces that end at or before `keep_from`.
    fn trim(&mut self, keep_from: u64) {
        while let Some((at, piece)) = self.pieces.front() {
            let piece_end = at + piece.len() as u64;
            if piece_end > keep_from {
                break;
            }
            self.len -= piece.len() as u64;
            self.start = piece_end;
            self.pieces.pop_front();
        }
    }

    /// The stream's bytes after `from`, up to the end of the piece that
    /// holds them; None if they are no longer kept.
    fn read(&self, from: u64) -> Option<Bytes> {
        if from < self.start || from > self.end() {
            return None;
        }
        let index = self.pieces.partition_point(|(at, piece)| at + piece.len() as u64 <= from);
        Some(self.pieces.get(index).map_or_else(Bytes::new, |(at, piece)| piece.slice((from - at) as usize..)))
    }

    /// Drops every piece: the stream goes on from here.
    fn clear(&mut self) {
        self.start = self.end();
        self.len = 0;
        self.pieces.clear();
    }
}

/// A replica as INFO and ROLE show it.
pub struct Replica {
    client: Arc<ClientInfo>,
    /// The port it announced (REPLCONF listening-port).
    port: u16,
    online: AtomicBool,
    /// The stream's offset it has been sent up to; until its file is
    /// sent, where its stream starts (None before that is known).
    sent: Mutex<Option<u64>>,
    /// The offset it acknowledged, and when.
    acked: AtomicI64,
    acked_at: Mutex<Instant>,
}

impl Default for Master {
    fn default() -> Master {
        Master {
            streaming: AtomicBool::new(false),
            changes: Mutex::new(Changes::default()),
            changed: Condvar::new(),
            stream: Mutex::new(Stream {
                replid: random_hex(),
                replid2: None,
                backlog: Backlog::default(),
                replicas: Vec::new(),
                drained: std::collections::VecDeque::new(),
                last_ping: Instant::now(),
                alone_since: None,
                getack: false,
                select: false,
            }),
            draining: Mutex::new(()),
            end: watch::Sender::new(0),
            backlog_bytes: AtomicUsize::new(DEFAULT_BACKLOG_BYTES),
            min_replicas_to_write: AtomicU64::new(0),
            min_replicas_max_lag: AtomicU64::new(10),
            waiting: Mutex::new(Vec::new()),
            drainer: Mutex::new(None),
            stop: AtomicBool::new(false),
            frozen: AtomicBool::new(false),
            committing: tokio::sync::Mutex::new(()),
            syncs: Default::default(),
            expired_following: Mutex::new(std::collections::VecDeque::new()),
        }
    }
}

/// What a note says of a key: read it at the drain's snapshot.
const READ: u8 = 0;
/// What a note says of a key: this command makes it what the batch left.
const INLINE: u8 = 1;
/// A note's mark for "every key was deleted" (FLUSHALL).
const FLUSH: u8 = 2;
/// What a note says of a key: these commands change a big collection
/// there from what the batch found to what it left (`Delta`), after the
/// key's earlier notes.
const DELTA: u8 = 3;

/// The commands of a DELTA note: the changes, which follow the key's
/// earlier ones, and the state they leave that no change says (an expiry
/// time, a stream's counters), which replaces an earlier note's: a drain
/// sends only the last.
struct Delta {
    changes: Vec<u8>,
    tail: Vec<u8>,
}

/// The name a note gives the function libraries (FUNCTION LOAD, DELETE,
/// FLUSH, RESTORE): a server key, so no client key, and FLUSHALL keeps
/// it, as it keeps the libraries.
const FUNCTIONS: &[u8] = b"\xff\xff\x00functions";

/// The note of a batch that makes the function libraries `codes` (each a
/// library's code): the command that makes a replica's libraries these,
/// as a state (latest wins in a drain).
pub fn functions_note(codes: &[&[u8]]) -> Vec<u8> {
    let mut command = Vec::new();
    match codes {
        [] => put_request(&mut command, &[b"FUNCTION", b"FLUSH"]),
        _ => {
            let payload = crate::commands::dump::serialize_functions(codes.iter().copied());
            put_request(&mut command, &[b"FUNCTION", b"RESTORE", &payload, b"FLUSH"]);
        }
    }
    let mut note = vec![INLINE];
    for part in [FUNCTIONS, &command] {
        note.extend_from_slice(&(part.len() as u32).to_le_bytes());
        note.extend_from_slice(part);
    }
    note
}

/// The note of a batch whose commands noted `events`: for each key they
/// changed, the command that makes a replica's key what the batch leaves
/// it where the batch holds the key's last entry and it is a string's
/// (SET ... PXAT) or a delete (DEL); for a big hash, set or sorted set
/// the batch changed in place (`tables`: the stubs its commands found
/// before writing their keys, `Writes::note_table_read`), the commands
/// for its fields the batch wrote (HSET/HDEL, SADD/SREM, ZADD/ZREM), for
/// a big list what its changes did (`lists`, by table), for a stream its
/// entries (`stream_commands`); else a mark to
/// read the key at the drain's snapshot (a collection: its fields are
/// other entries); a flush. None if they name no key.
///
/// Why inline: a drain of strings then reads nothing and takes no
/// snapshot (the re-read and the index merge a snapshot forces were the
/// drain's cost), and the note's commands are states the batch made, in
/// commit order. Why field deltas: a write to a big collection would
/// otherwise send it whole once per drain (HSETs into a hash of 10,000
/// fields with a replica ran at 0.23x a Redis pair).
pub fn note_of(
    events: &[Event],
    batch: &scaledkv::WriteBatch,
    tables: &[crate::keyspace::TableRead],
    lists: &[(u64, Option<Vec<ListOp>>)],
) -> Option<Vec<u8>> {
    let named = || events.iter().filter(|e| e.class != crate::notify::MISS);
    named().next()?;
    let mut keys: std::collections::HashMap<&[u8], Seen<'_>> = std::collections::HashMap::with_capacity(batch.len());
    // The last entry of each field of the tables read, by table.
    let mut fields: std::collections::HashMap<u64, Fields<'_>> = tables.iter().map(|t| (t.id, Fields::new())).collect();
    for entry in batch.entries() {
        if !crate::keyspace::is_reserved(entry.0) {
            keys.entry(entry.0).or_default().entry = Some(entry);
        } else if let Some((id, field)) = crate::commands::table::split_member_key(entry.0) {
            if let Some(changes) = fields.get_mut(&id) {
                changes.insert(field, entry.1.map(|(value, _)| value));
            }
        }
    }
    let mut note = Vec::new();
    for event in named() {
        if event.class == crate::notify::FLUSHED {
            note.push(FLUSH);
            keys.values_mut().for_each(|seen| seen.noted = false);
            continue;
        }
        let key = &event.key[..];
        let seen = keys.entry(key).or_default();
        if std::mem::replace(&mut seen.noted, true) {
            continue;
        }
        let entry = seen.entry.as_ref();
        let (kind, parts) = match entry.and_then(|&(_, put)| inline_command(key, put)) {
            Some(command) => (INLINE, vec![command]),
            None => match tables.iter().find(|t| t.key == key).and_then(|t| match t.tag {
                crate::keyspace::TYPE_LIST_TABLE => list_commands(t, entry, lists, !fields[&t.id].is_empty()),
                crate::keyspace::TYPE_STREAM_TABLE => stream_commands(t, entry, &fields[&t.id], tables),
                _ => delta_commands(t, entry, &fields[&t.id]),
            }) {
                Some(delta) => (DELTA, vec![delta.changes, delta.tail]),
                None => (READ, Vec::new()),
            },
        };
        note.push(kind);
        for part in std::iter::once(key).chain(parts.iter().map(Vec::as_slice)) {
            note.extend_from_slice(&(part.len() as u32).to_le_bytes());
            note.extend_from_slice(part);
        }
    }
    Some(note)
}

/// A key the batch changed that no event names (so no replica would
/// hear of it): a client's key it wrote, or the key of a table it read
/// and wrote fields of. None after a flush, which names every key. For
/// debug builds' check at commit: a command that writes without noting
/// its key is a replication bug (XACK's was).
pub fn unnamed_change<'b>(
    events: &[Event],
    batch: &'b scaledkv::WriteBatch,
    tables: &'b [crate::keyspace::TableRead],
) -> Option<&'b [u8]> {
    if events.iter().any(|e| e.class == crate::notify::FLUSHED) {
        return None;
    }
    let named: std::collections::HashSet<&[u8]> =
        events.iter().filter(|e| e.class != crate::notify::MISS).map(|e| &e.key[..]).collect();
    batch.entries().find_map(|(key, _)| {
        let key = match crate::commands::table::split_member_key(key) {
            Some((id, _)) if crate::keyspace::is_reserved(key) => &tables.iter().find(|t| t.id == id)?.key[..],
            _ if crate::keyspace::is_reserved(key) => return None,
            _ => key,
        };
        (!named.contains(key)).then_some(key)
    })
}

/// The commands that change a replica's big list `read` (as the batch
/// found it) into what the batch left at its key (`stub`, as for
/// `delta_commands`): what the batch's changes of the list did
/// (`lists`, by table), then its expiry time if that changed. None if the
/// key no longer holds that list, or a change did something these do not
/// say, or the batch wrote the list's entries (`written`) with no change
/// said (a list kept in the older layout, an entry per element).
fn list_commands(
    read: &crate::keyspace::TableRead,
    stub: Option<&scaledkv::BatchEntry<'_>>,
    lists: &[(u64, Option<Vec<ListOp>>)],
    written: bool,
) -> Option<Delta> {
    let expiry = stub_expiry(read, stub)?;
    let key = &read.key[..];
    let mut commands = Vec::new();
    let mut said = false;
    for (_, ops) in lists.iter().filter(|(id, _)| *id == read.id) {
        let ops = ops.as_ref()?;
        said = true;
        let mut at = 0;
        while at < ops.len() {
            // A run of pushes (or pops) at one end goes as one command.
            let run = ops[at..].iter().take_while(|op| same_run(&ops[at], op)).count();
            match &ops[at] {
                ListOp::Push { front, .. } => {
                    let mut args: Vec<&[u8]> = vec![if *front { b"LPUSH" } else { b"RPUSH" }, key];
                    for op in &ops[at..at + run] {
                        if let ListOp::Push { element, .. } = op {
                            args.push(element);
                        }
                    }
                    put_request(&mut commands, &args);
                }
                ListOp::Pop { front } => {
                    let name: &[u8] = if *front { b"LPOP" } else { b"RPOP" };
                    match run {
                        1 => put_request(&mut commands, &[name, key]),
                        _ => put_request(&mut commands, &[name, key, run.to_string().as_bytes()]),
                    }
                }
                ListOp::Set { index, element } => {
                    put_request(&mut commands, &[b"LSET", key, index.to_string().as_bytes(), element])
                }
                ListOp::Insert { after, pivot, element } => {
                    let place: &[u8] = if *after { b"AFTER" } else { b"BEFORE" };
                    put_request(&mut commands, &[b"LINSERT", key, place, pivot, element])
                }
                ListOp::Remove { count, element } => {
                    put_request(&mut commands, &[b"LREM", key, count.to_string().as_bytes(), element])
                }
                ListOp::Trim { start, n } => {
                    // `LTRIM k 1 0` empties it, as a trim to nothing does.
                    let (first, last) = if *n == 0 { (1, 0) } else { (*start, start + n - 1) };
                    put_request(
                        &mut commands,
                        &[b"LTRIM", key, first.to_string().as_bytes(), last.to_string().as_bytes()],
                    );
                }
            }
            at += run;
        }
    }
    if written && !said {
        return None;
    }
    let mut tail = Vec::new();
    put_expiry(&mut tail, read, expiry);
    Some(Delta { changes: commands, tail })
}

/// The commands that change a replica's stream `read` (as the batch
/// found it) into what the batch left at its key (`stub`, as for
/// `delta_commands`): its new entries (XADD with their IDs); its consumer
/// groups' changes against their records as the batch first read them
/// (noted on `tables`: XGROUP CREATE, SETID, CREATECONSUMER, DELCONSUMER,
/// DESTROY), each pending entry it set as Redis propagates one (XCLAIM
/// ... TIME RETRYCOUNT FORCE JUSTID) and those it dropped (XACK); its
/// deleted entries (XDEL: a trim's too) after the claims, which need
/// them; then XSETID with the stub's last ID, entries-added counter and
/// greatest deleted ID, which a replica's XADD and XDEL would not all
/// set alike. None if the key no longer holds that stream, or the batch
/// changed a group whose first read it does not know (the replicas read
/// it whole).
fn stream_commands(
    read: &crate::keyspace::TableRead,
    stub: Option<&scaledkv::BatchEntry<'_>>,
    fields: &Fields<'_>,
    tables: &[crate::keyspace::TableRead],
) -> Option<Delta> {
    use crate::stream::{decode_pairs, split_nack_field, Group, Meta, Nack, StreamId, ENTRY, GROUP, NACK};
    let expiry = stub_expiry(read, stub)?;
    let key = &read.key[..];
    let mut commands = Vec::new();
    let mut deleted: Vec<Vec<u8>> = Vec::new();
    let mut entries_changed = false;
    // After the entries: groups made or moved, then the pending entries
    // set and dropped, then consumers and groups that went.
    let (mut groups, mut claims, mut gone) = (Vec::new(), Vec::new(), Vec::new());
    let mut acks: Vec<(&[u8], Vec<Vec<u8>>)> = Vec::new();
    for (&field, &value) in fields {
        match *field.first()? {
            ENTRY => {
                entries_changed = true;
                let id = StreamId::from_bytes(&field[1..]).ok()?.to_string().into_bytes();
                match value {
                    Some(value) => {
                        let pairs = decode_pairs(value.get(1..)?).ok()?;
                        let mut args: Vec<&[u8]> = vec![b"XADD", key, &id];
                        args.extend(pairs);
                        put_request(&mut commands, &args);
                    }
                    None => deleted.push(id),
                }
            }
            GROUP => {
                let name = &field[1..];
                let before = match group_before(tables, read, name)? {
                    crate::keyspace::GroupBefore::Held(record) => Some(Group::decode(record).ok()?),
                    _ => None,
                };
                let after = match value {
                    Some(value) => Some(Group::decode(value.get(1..)?).ok()?),
                    None => None,
                };
                group_commands(&mut groups, &mut gone, key, name, before.as_ref(), after.as_ref());
            }
            NACK => {
                let (group, id) = split_nack_field(field).ok()?;
                let id = id.to_string().into_bytes();
                match value {
                    Some(value) => {
                        let nack = Nack::decode(value.get(1..)?).ok()?;
                        let (at, count) = (nack.delivered_ms.to_string(), nack.deliveries.to_string());
                        put_request(
                            &mut claims,
                            &[
                                b"XCLAIM",
                                key,
                                group,
                                &nack.consumer,
                                b"0",
                                &id,
                                b"TIME",
                                at.as_bytes(),
                                b"RETRYCOUNT",
                                count.as_bytes(),
                                b"FORCE",
                                b"JUSTID",
                            ],
                        );
                    }
                    None => match acks.last_mut() {
                        Some((last, ids)) if *last == group => ids.push(id),
                        _ => acks.push((group, vec![id])),
                    },
                }
            }
            _ => return None,
        }
    }
    commands.append(&mut groups);
    commands.append(&mut claims);
    for (group, ids) in &acks {
        put_in_chunks(&mut commands, &[b"XACK", key, group], &ids.iter().map(Vec::as_slice).collect::<Vec<_>>(), 1);
    }
    commands.append(&mut gone);
    put_in_chunks(&mut commands, &[b"XDEL", key], &deleted.iter().map(Vec::as_slice).collect::<Vec<_>>(), 1);
    let mut tail = Vec::new();
    match stub {
        Some((_, Some((value, _)))) => {
            let meta = Meta::decode(value.get(1..)?).ok()?;
            let (last, added, max_deleted) =
                (meta.last_id.to_string(), meta.entries_added.to_string(), meta.max_deleted.to_string());
            let counters: [&[u8]; 7] = [
                b"XSETID",
                key,
                last.as_bytes(),
                b"ENTRIESADDED",
                added.as_bytes(),
                b"MAXDELETEDID",
                max_deleted.as_bytes(),
            ];
            put_request(&mut tail, &counters);
            // The whole tail is a state (it replaces an earlier one, which
            // may have moved the expiry time): the time too, moved or not.
            match expiry {
                Some(at) => put_request(&mut tail, &[b"PEXPIREAT", key, at.to_string().as_bytes()]),
                None => put_request(&mut tail, &[b"PERSIST", key]),
            }
        }
        // Entries changed with the counters as they were: not a state this
        // says (an earlier note's XSETID would follow them). A change to
        // groups alone leaves the stub as it was.
        _ if entries_changed => return None,
        _ => put_expiry(&mut tail, read, expiry),
    }
    Some(Delta { changes: commands, tail })
}

/// How the batch's first read found group `name` of stream `read` (its
/// notes are on every read of that stub in `tables`: a transaction's
/// command notes its own); None if none knows.
fn group_before<'r>(
    tables: &'r [crate::keyspace::TableRead],
    read: &crate::keyspace::TableRead,
    name: &[u8],
) -> Option<&'r crate::keyspace::GroupBefore> {
    tables
        .iter()
        .filter(|noted| noted.key == read.key && noted.id == read.id)
        .flat_map(|noted| &noted.groups)
        .find(|(noted, before)| noted == name && *before != crate::keyspace::GroupBefore::Unknown)
        .map(|(_, before)| before)
}

/// The commands that make a replica's group `name` (`before`, None: not
/// there) what the batch left (`after`, None: destroyed): made (XGROUP
/// CREATE) or moved (SETID) with its entries-read counter, its new
/// consumers made (into `groups`); its consumers that went, or the group
/// (into `gone`, which follows the claims and acknowledgements). A
/// consumer's pending count follows from its pending entries; its seen
/// time is the replica's own (as a Redis replica's is).
fn group_commands(
    groups: &mut Vec<u8>,
    gone: &mut Vec<u8>,
    key: &[u8],
    name: &[u8],
    before: Option<&crate::stream::Group>,
    after: Option<&crate::stream::Group>,
) {
    let Some(after) = after else {
        if before.is_some() {
            put_request(gone, &[b"XGROUP", b"DESTROY", key, name]);
        }
        return;
    };
    let (id, read) = (after.last_id.to_string(), after.entries_read.map_or(-1, |n| n as i64).to_string());
    let moved =
        before.is_none_or(|before| (before.last_id, before.entries_read) != (after.last_id, after.entries_read));
    if moved {
        let verb: &[u8] = if before.is_some() { b"SETID" } else { b"CREATE" };
        put_request(groups, &[b"XGROUP", verb, key, name, id.as_bytes(), b"ENTRIESREAD", read.as_bytes()]);
    }
    let had = |consumer: &[u8]| before.is_some_and(|b| b.consumers.iter().any(|c| c.name == consumer));
    for consumer in after.consumers.iter().filter(|c| !had(&c.name)) {
        put_request(groups, &[b"XGROUP", b"CREATECONSUMER", key, name, &consumer.name]);
    }
    for consumer in before.iter().flat_map(|b| &b.consumers) {
        if !after.consumers.iter().any(|c| c.name == consumer.name) {
            put_request(gone, &[b"XGROUP", b"DELCONSUMER", key, name, &consumer.name]);
        }
    }
}

/// Whether `op` goes in one command with the run `first` starts.
fn same_run(first: &ListOp, op: &ListOp) -> bool {
    match (first, op) {
        (ListOp::Push { front: a, .. }, ListOp::Push { front: b, .. }) => a == b,
        (ListOp::Pop { front: a }, ListOp::Pop { front: b }) => a == b,
        _ => std::ptr::eq(first, op),
    }
}

/// The expiry time of the table `read` after the batch, whose last entry
/// at its key is `stub` (None: the batch did not write the key); None if
/// the key no longer holds that table.
fn stub_expiry(read: &crate::keyspace::TableRead, stub: Option<&scaledkv::BatchEntry<'_>>) -> Option<Option<u64>> {
    match stub {
        None => Some(read.expiry),
        Some((_, Some((value, expiry)))) => {
            let same = value.first() == Some(&read.tag)
                && value.get(1..9).is_some_and(|id| id == read.id.to_le_bytes().as_slice());
            same.then_some(*expiry)
        }
        Some((_, None)) => None,
    }
}

/// Appends the command that moves the key's expiry time from `read`'s
/// to `expiry`, if it moved.
fn put_expiry(commands: &mut Vec<u8>, read: &crate::keyspace::TableRead, expiry: Option<u64>) {
    if expiry != read.expiry {
        match expiry {
            Some(at) => put_request(commands, &[b"PEXPIREAT", &read.key, at.to_string().as_bytes()]),
            None => put_request(commands, &[b"PERSIST", &read.key]),
        }
    }
}

/// A key of a batch's note: its last entry in the batch (None: the
/// batch wrote none), and whether the note named it since the last flush:
/// each key goes once, as what the note says of it is the whole batch's
/// doing, and a change (a list's pushes) must not go twice.
#[derive(Default)]
struct Seen<'b> {
    entry: Option<scaledkv::BatchEntry<'b>>,
    noted: bool,
}

/// A table's fields a batch wrote: each one's last value (with its type
/// byte), None where it was deleted; in field order.
type Fields<'b> = std::collections::BTreeMap<&'b [u8], Option<&'b [u8]>>;

/// The commands that change a replica's big collection `read` (as the
/// batch found it) into what the batch left at its key, whose last entry
/// there is `stub` (None: the batch did not write the key): the writes
/// of its `fields`, additions before removals (so it never empties on the
/// way, which would drop its expiry time), then its expiry time if that
/// changed. None if the key no longer holds that table (the batch
/// replaced or moved it) or a field does not read as one.
fn delta_commands(
    read: &crate::keyspace::TableRead,
    stub: Option<&scaledkv::BatchEntry<'_>>,
    fields: &Fields<'_>,
) -> Option<Delta> {
    use crate::keyspace::{TYPE_HASH_TABLE, TYPE_SET_TABLE, TYPE_ZSET_TABLE};
    let expiry = stub_expiry(read, stub)?;
    let key = &read.key[..];
    let (add, remove): (&[u8], &[u8]) = match read.tag {
        TYPE_HASH_TABLE => (b"HSET", b"HDEL"),
        TYPE_SET_TABLE => (b"SADD", b"SREM"),
        TYPE_ZSET_TABLE => (b"ZADD", b"ZREM"),
        _ => return None,
    };
    // Borrowed from the batch but for a score's text.
    let mut added: Vec<std::borrow::Cow<'_, [u8]>> = Vec::new();
    let mut removed: Vec<&[u8]> = Vec::new();
    for (&field, &value) in fields {
        match read.tag {
            TYPE_ZSET_TABLE => {
                // Its index and rank-block fields follow from the scores.
                let Some(member) = crate::commands::zsets::member_of_field(field) else { continue };
                match value {
                    Some(value) => {
                        let score = f64::from_le_bytes(value.get(1..)?.try_into().ok()?);
                        added.push(crate::zset::format_score(score).into_bytes().into());
                        added.push(member.into());
                    }
                    None => removed.push(member),
                }
            }
            _ => match value {
                Some(value) => {
                    added.push(field.into());
                    if read.tag == TYPE_HASH_TABLE {
                        added.push(value.get(1..)?.into());
                    }
                }
                None => removed.push(field),
            },
        }
    }
    let per_element = if read.tag == TYPE_SET_TABLE { 1 } else { 2 };
    let mut commands = Vec::new();
    put_in_chunks(&mut commands, &[add, key], &added.iter().map(|arg| &arg[..]).collect::<Vec<_>>(), per_element);
    put_in_chunks(&mut commands, &[remove, key], &removed, 1);
    let mut tail = Vec::new();
    put_expiry(&mut tail, read, expiry);
    Some(Delta { changes: commands, tail })
}

/// The most arguments (and about the most bytes) one command of a delta
/// carries after its key: a replica reads each command whole.
const DELTA_ARGS: usize = 1024;
const DELTA_BYTES: usize = 256 << 10;

/// Appends `head... args...` (a name and key, XACK's group too) as
/// commands of at most `DELTA_ARGS` arguments or about `DELTA_BYTES`, cut
/// between elements of `per_element` arguments each.
fn put_in_chunks(commands: &mut Vec<u8>, head: &[&[u8]], args: &[&[u8]], per_element: usize) {
    let mut rest = args;
    while !rest.is_empty() {
        let (mut count, mut bytes) = (0, 0);
        while count < rest.len() && count < DELTA_ARGS && bytes < DELTA_BYTES {
            bytes += rest[count..count + per_element].iter().map(|arg| arg.len()).sum::<usize>();
            count += per_element;
        }
        let mut command = head.to_vec();
        command.extend_from_slice(&rest[..count]);
        put_request(commands, &command);
        rest = &rest[count..];
    }
}

/// The command for a key whose last entry is `put` (None: a delete),
/// where that entry alone is its state: a string or a delete.
fn inline_command(key: &[u8], put: Option<(&[u8], Option<u64>)>) -> Option<Vec<u8>> {
    let mut command = Vec::new();
    let Some((value, expiry)) = put else {
        put_request(&mut command, &[b"DEL", key]);
        return Some(command);
    };
    let data = match *value.first()? {
        TYPE_STRING => &value[1..],
        TYPE_ITEM => value.get(1 + crate::keyspace::ITEM_META_BYTES..)?,
        _ => return None,
    };
    match expiry {
        Some(at) => put_request(&mut command, &[b"SET", key, data, b"PXAT", at.to_string().as_bytes()]),
        None => put_request(&mut command, &[b"SET", key, data]),
    }
    Some(command)
}

/// What a drain writes for a changed key.
#[derive(Debug, PartialEq)]
enum Word<'n> {
    /// Read it at the drain's snapshot: that covers every note before.
    Read,
    /// These commands, in order: a state (INLINE) and the changes to it
    /// after (DELTA), then the last change's tail (`Delta`).
    Commands(Vec<&'n [u8]>, Option<&'n [u8]>),
}

/// Each changed key of a drain and what to write for it.
type Changed<'n> = std::collections::BTreeMap<&'n [u8], Word<'n>>;

/// Adds a note's keys to `keys` (a state replaces what an earlier note
/// said of a key, a change follows it, a read covers both); true if it
/// holds a flush, which drops the keys before it.
fn read_note<'n>(mut note: &'n [u8], keys: &mut Changed<'n>) -> bool {
    let mut flushed = false;
    while let Some((&kind, rest)) = note.split_first() {
        if kind == FLUSH {
            keys.retain(|&key, _| key == FUNCTIONS);
            flushed = true;
            note = rest;
            continue;
        }
        let Some((key, rest)) = length_prefixed(rest) else { break };
        let parts = match kind {
            INLINE => 1,
            DELTA => 2,
            _ => 0,
        };
        let (mut read, mut rest) = ([&[][..]; 2], rest);
        for part in read.iter_mut().take(parts) {
            let Some((bytes, after)) = length_prefixed(rest) else { return flushed };
            (*part, rest) = (bytes, after);
        }
        match kind {
            INLINE => drop(keys.insert(key, Word::Commands(vec![read[0]], None))),
            DELTA => {
                if let Word::Commands(commands, tail) = keys.entry(key).or_insert(Word::Commands(Vec::new(), None)) {
                    if !read[0].is_empty() {
                        commands.push(read[0]);
                    }
                    if !read[1].is_empty() {
                        *tail = Some(read[1]);
                    }
                }
            }
            _ => drop(keys.insert(key, Word::Read)),
        }
        note = rest;
    }
    flushed
}

/// The keys `notes` (in order) and `loose` keys (read, whatever a note
/// says) changed; whether the notes held a flush.
fn changed<'n>(notes: &'n [Vec<u8>], loose: &'n [Vec<u8>]) -> (Changed<'n>, bool) {
    let mut keys = Changed::new();
    let mut flushed = false;
    for note in notes {
        flushed |= read_note(note, &mut keys);
    }
    for key in loose {
        keys.insert(key, Word::Read);
    }
    (keys, flushed)
}

/// Whether a drain of `keys` (and a flush) writes at most one command:
/// it needs no transaction around it.
fn one_command(keys: &Changed<'_>, flushed: bool) -> bool {
    let mut total = usize::from(flushed);
    for word in keys.values() {
        total += match word {
            Word::Read => 1,
            Word::Commands(pieces, tail) => {
                pieces.iter().chain(tail).map(|piece| commands_in(piece).unwrap_or(2)).sum()
            }
        };
        if total > 1 {
            return false;
        }
    }
    true
}

/// How many commands `bytes` holds (as `put_command` writes them).
fn commands_in(mut bytes: &[u8]) -> Option<usize> {
    let mut count = 0;
    let line = |bytes: &[u8], mark: u8| -> Option<(usize, usize)> {
        let end = bytes.windows(2).position(|w| w == b"\r\n")?;
        (bytes.first() == Some(&mark)).then_some(())?;
        Some((std::str::from_utf8(&bytes[1..end]).ok()?.parse().ok()?, end + 2))
    };
    while !bytes.is_empty() {
        let (args, mut at) = line(bytes, b'*')?;
        for _ in 0..args {
            let (len, header) = line(bytes.get(at..)?, b'$')?;
            at += header + len + 2;
        }
        bytes = bytes.get(at..)?;
        count += 1;
    }
    Some(count)
}

fn length_prefixed(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = bytes.split_first_chunk::<4>()?;
    rest.split_at_checked(u32::from_le_bytes(*len) as usize)
}

impl Master {
    /// Whether writes are streamed (some replica connected within the
    /// backlog's time to live): commands then note the keys they change.
    pub fn streaming(&self) -> bool {
        self.streaming.load(Ordering::Relaxed)
    }

    pub fn replid(&self) -> String {
        self.stream.lock().replid.clone()
    }

    /// Keys the server deleted outside commands (`notify::publish`: active
    /// expiry, eviction), already visible; while `following` a master,
    /// the expired ones are kept for a promotion.
    pub fn note_loose(&self, events: &[Event], following: bool) {
        if !self.streaming() && following {
            let mut kept = self.expired_following.lock();
            for event in events.iter().filter(|e| e.writer == 0 && e.class == crate::notify::EXPIRED) {
                if kept.len() == EXPIRED_KEPT {
                    kept.pop_front();
                }
                kept.push_back(event.key.clone());
            }
        }
        if !self.streaming() || events.is_empty() {
            return;
        }
        let mut changes = self.changes.lock();
        for event in events.iter().filter(|e| e.writer == 0) {
            if matches!(event.class, crate::notify::EXPIRED | crate::notify::EVICTED) {
                changes.loose.push(event.key.clone());
            }
        }
        self.changed.notify_one();
    }

    /// Evictions outran their announcements (`maxmemory`): which keys went
    /// is not known, so the replicas sync again in full.
    pub fn lost_track(&self) {
        if self.streaming() {
            self.changes.lock().lost_track = true;
            self.changed.notify_one();
        }
    }

    /// Starts streaming if it is not on: under every key's lock, so every
    /// command that did not note its keys has queued its batch, which the
    /// barrier after it makes visible (before any full sync's snapshot).
    /// A replica that finds it on waits for the same barrier: the one that
    /// turned it on may still be waiting for it.
    async fn start(self: &Arc<Self>, shared: &Arc<Shared>) -> Result<(), String> {
        if shared.replication.following() {
            // The link relays its master's stream (`relay`).
            return Ok(());
        }
        if self.streaming() {
            return crate::commands::barrier(shared).await.map_err(|error| error.to_string());
        }
        let guards = shared.locks.lock(&KeyLocks::all()).await;
        if !self.streaming() {
            self.begin(shared)?;
            // A change of the libraries that began unnoted has installed
            // them (a full sync's file takes them as they are then).
            drop(shared.functions.begin());
            tracing::info!("streaming writes to replicas");
        }
        drop(guards);
        crate::commands::barrier(shared).await.map_err(|error| error.to_string())
    }

    /// Has the engine hand over the batches' notes and starts the
    /// drainer: with no command running, or every key's lock held.
    fn begin(self: &Arc<Self>, shared: &Arc<Shared>) -> Result<(), String> {
        let observer = Arc::downgrade(self);
        shared.db.set_commit_observer(Some(Arc::new(move |seq, note: Vec<u8>| {
            if let Some(master) = observer.upgrade() {
                master.changes.lock().batches.push_back((seq, note));
                master.changed.notify_one();
            }
        })));
        self.streaming.store(true, Ordering::Relaxed);
        self.stop.store(false, Ordering::Relaxed);
        let mut drainer = self.drainer.lock();
        if drainer.is_none() {
            let (master, shared) = (self.clone(), shared.clone());
            *drainer = Some(
                std::thread::Builder::new()
                    .name("scaledkv-replication".into())
                    .spawn(move || master.drain_loop(&shared))
                    .map_err(|error| format!("the replication thread did not start: {error}"))?,
            );
        }
        Ok(())
    }

    /// Takes up the history a clean shutdown kept (`History::take`):
    /// its replication ID and backlog, streaming from the start (before
    /// any client or expiry changes a key), so replicas resume with a
    /// partial resync.
    pub fn resume(self: &Arc<Self>, shared: &Arc<Shared>, history: History) -> Result<(), String> {
        let end = history.start + history.backlog.len() as u64;
        {
            let mut stream = self.stream.lock();
            stream.replid = history.replid;
            stream.backlog = Backlog::starting_at(history.start);
            stream.backlog.push(history.backlog);
            stream.drained.push_back((history.seq, end));
            stream.alone_since = Some(Instant::now());
        }
        self.end.send_replace(end);
        self.begin(shared)?;
        tracing::info!(offset = end, "replicas can resume where the last run left them (partial resync)");
        Ok(())
    }

    /// A replica promoted (REPLICAOF NO ONE) with its data set at `offset`
    /// of its master's history `replid`: its own history goes on from that
    /// offset under a new ID, the master's kept as its second (PSYNC2),
    /// with the master's stream it relayed up to there, so that the
    /// master's other replicas at that offset or behind it (within the
    /// backlog) go on with a partial resync when they follow it (Redis's
    /// `shiftReplicationId`); its own replicas are disconnected to learn
    /// the new ID. Streaming starts here, before the first write of its
    /// own (writes wait for the promotion): the backlog holds every one.
    pub fn promote(self: &Arc<Self>, shared: &Arc<Shared>, replid: String, offset: u64) -> Result<(), String> {
        {
            let _draining = self.draining.lock();
            let mut changes = self.changes.lock();
            changes.batches.clear();
            changes.loose.clear();
            drop(changes);
            let mut stream = self.stream.lock();
            // The master's stream up to here stays (`relay`): replicas
            // behind this one go on from it.
            if stream.replid != replid || stream.end() != offset {
                stream.backlog = Backlog::starting_at(offset);
            }
            stream.replid2 = Some((replid, offset + 1));
            stream.replid = random_hex();
            // Its replicas learn the new ID, and go on.
            stream.disconnect_replicas();
            stream.drained.clear();
            stream.drained.push_back((shared.db.stats().last_seq, offset));
            stream.alone_since = Some(Instant::now());
            // The replicas' links begin with database 0 chosen, as after a
            // full sync.
            stream.select = true;
        }
        self.end.send_replace(offset);
        if !self.streaming() {
            if let Err(error) = self.begin(shared) {
                // Writes from here would not be in the backlog.
                let mut stream = self.stream.lock();
                (stream.replid, stream.replid2) = (random_hex(), None);
                return Err(error);
            }
        }
        // Keys it expired itself while following: read and drained as
        // the deletions (or, written again since, the values) they are.
        let expired = std::mem::take(&mut *self.expired_following.lock());
        if !expired.is_empty() {
            self.changes.lock().loose.extend(expired);
            self.changed.notify_one();
        }
        tracing::info!(offset, "promoted: the old master's other replicas can go on from here (partial resync)");
        Ok(())
    }

    /// While this server follows a master, its stream is the master's, as
    /// Redis's replica proxies it: the link's PSYNC was answered
    /// (`continued`: +CONTINUE, else +FULLRESYNC) with the master's
    /// `replid`, the stream going on after `offset`. Its own history, if
    /// it streamed one, stops; it stays the second (PSYNC2) where the
    /// master goes on from its end (a demotion's partial resync). The
    /// replicas of this server are disconnected if the ID changed, to
    /// learn it: they come back and go on where the backlog holds them.
    pub fn followed(&self, shared: &Shared, replid: &str, offset: u64, continued: bool) {
        let _draining = self.draining.lock();
        if self.streaming.swap(false, Ordering::AcqRel) {
            shared.db.set_commit_observer(None);
        }
        *self.changes.lock() = Changes::default();
        self.frozen.store(false, Ordering::Release);
        let mut stream = self.stream.lock();
        let changed = stream.replid != replid || stream.end() != offset;
        if continued && stream.end() == offset {
            if stream.replid != replid {
                let old = std::mem::replace(&mut stream.replid, replid.to_owned());
                stream.replid2 = Some((old, offset + 1));
            }
        } else {
            stream.replid = replid.to_owned();
            stream.replid2 = None;
            stream.backlog = Backlog::starting_at(offset);
        }
        if !continued {
            // A full sync: the data set is the master's from here.
            self.expired_following.lock().clear();
        }
        stream.drained.clear();
        (stream.getack, stream.select) = (false, false);
        if changed {
            stream.disconnect_replicas();
        }
        drop(stream);
        self.end.send_replace(offset);
    }

    /// A replica's link runs and commits what it read of its master's
    /// stream: the guard it holds until it has relayed those bytes (a
    /// fair lock: a full sync waiting for it gets it next).
    pub async fn committing(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.committing.lock().await
    }

    /// Appends to the stream `bytes` of the followed master's, which the
    /// link committed up to `end` (`followed`); replicas of this server
    /// get them as they get a master's own.
    pub fn relay(&self, end: u64, bytes: Vec<u8>) {
        let mut stream = self.stream.lock();
        let start = end - bytes.len() as u64;
        if stream.end() != start {
            // Not where the stream stood (it cannot be): start over there.
            tracing::warn!(at = stream.end(), start, "the relayed stream has a gap; its replicas sync again");
            stream.backlog = Backlog::starting_at(start);
            stream.disconnect_replicas();
        }
        stream.backlog.push(bytes);
        self.trim(&mut stream);
        drop(stream);
        self.end.send_replace(end);
    }

    /// A snapshot of the data set and the offset of the followed master's
    /// stream it is at: taken between two of the link's runs.
    fn snapshot_between_runs<'d>(&self, db: &'d scaledkv::Db) -> (scaledkv::Snapshot<'d>, u64) {
        let _between = self.committing.blocking_lock();
        (db.snapshot(), self.offset())
    }

    /// For a master that becomes a replica, with clients' writes stopped
    /// (the write gate closed): drains every write queued so far and
    /// returns the replication ID and the offset its data set is now at,
    /// which the new master goes on from if it holds this history up to
    /// there (PSYNC2: the replica it promoted, or that a failover
    /// promotes). The stream stands still from here (`frozen`): a drain
    /// after it (expiries, pings) would move its end past what the data
    /// set was told to be. With `ask`, a drain that moved the end asks the
    /// replicas to acknowledge the new one at once (a failover waits for
    /// its target's); without, nothing is added that a replica promoted
    /// already could lack. None while not streaming (no history to go on
    /// from).
    pub async fn capture(self: &Arc<Self>, shared: &Arc<Shared>, ask: bool) -> Option<(String, u64)> {
        if !self.streaming() {
            return None;
        }
        if let Err(error) = crate::commands::barrier(shared).await {
            tracing::error!(%error, "the writes queued before becoming a replica did not commit");
            return None;
        }
        let (master, shared) = (self.clone(), shared.clone());
        tokio::task::spawn_blocking(move || {
            let _draining = master.draining.lock();
            master.frozen.store(true, Ordering::Release);
            let before = master.offset();
            let loose = std::mem::take(&mut master.changes.lock().loose);
            let mut end = master.drain(&shared, None, loose);
            if ask && end > before {
                master.stream.lock().getack = true;
                end = master.drain(&shared, None, Vec::new());
            }
            (master.replid(), end)
        })
        .await
        .ok()
    }

    /// Whether the stream stands still (`capture`): a replica may not
    /// start its sync meanwhile.
    pub fn frozen(&self) -> bool {
        self.frozen.load(Ordering::Acquire)
    }

    /// The stream goes on (the new master answered, or the server is a
    /// master again).
    pub fn thaw(&self) {
        if self.frozen.swap(false, Ordering::AcqRel) {
            self.changed.notify_one();
        }
    }

    /// The drainer thread: a drain whenever something changed (at most
    /// one per `DRAIN_EVERY`), pings every `PING_EVERY` while replicas
    /// are connected; stops streaming once the backlog outlived its time.
    fn drain_loop(&self, shared: &Shared) {
        let mut last = Instant::now();
        loop {
            {
                let mut changes = self.changes.lock();
                let idle = changes.batches.is_empty() && changes.loose.is_empty() && !changes.lost_track;
                if idle || self.frozen() {
                    self.changed.wait_for(&mut changes, Duration::from_millis(100));
                }
            }
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            if !self.streaming() {
                continue;
            }
            let since = last.elapsed();
            if since < DRAIN_EVERY {
                std::thread::sleep(DRAIN_EVERY - since);
            }
            last = Instant::now();
            let _draining = self.draining.lock();
            if self.frozen() {
                continue;
            }
            if std::mem::take(&mut self.changes.lock().lost_track) {
                self.restart_history();
                continue;
            }
            let loose = std::mem::take(&mut self.changes.lock().loose);
            self.drain(shared, None, loose);
            if self.expired() {
                self.streaming.store(false, Ordering::Relaxed);
                shared.db.set_commit_observer(None);
                *self.changes.lock() = Changes::default();
                let mut stream = self.stream.lock();
                stream.replid = random_hex();
                stream.replid2 = None;
                stream.backlog.clear();
                tracing::info!("no replica for an hour: the backlog is freed");
            }
        }
    }

    /// Starts a new history (replication ID, an empty backlog) and
    /// disconnects the replicas, which then sync in full: what they hold
    /// can no longer be brought up to date by the stream. The notes so far
    /// are dropped (a full sync reads the data set as it is).
    fn restart_history(&self) {
        tracing::warn!("evicted keys were not all announced: replicas sync again in full");
        let mut stream = self.stream.lock();
        stream.replid = random_hex();
        stream.replid2 = None;
        stream.backlog.clear();
        stream.disconnect_replicas();
        drop(stream);
        let mut changes = self.changes.lock();
        changes.batches.clear();
        changes.loose.clear();
    }

    /// Whether streaming should stop: no replica for `BACKLOG_TTL`.
    fn expired(&self) -> bool {
        let stream = self.stream.lock();
        stream.replicas.is_empty() && stream.alone_since.is_some_and(|since| since.elapsed() >= BACKLOG_TTL)
    }

    /// Takes the notes of batches up to sequence number `upto` into
    /// `notes`; returns the last one's sequence number.
    fn take_notes(&self, upto: u64, notes: &mut Vec<Vec<u8>>) -> Option<u64> {
        let mut last = None;
        let mut changes = self.changes.lock();
        while changes.batches.front().is_some_and(|(at, _)| *at <= upto) {
            let (at, note) = changes.batches.pop_front().expect("a front");
            notes.push(note);
            last = Some(at);
        }
        last
    }

    /// A snapshot at sequence number `at_least` or later: a batch's note
    /// comes just before readers see it.
    fn snapshot_from<'d>(db: &'d scaledkv::Db, at_least: u64) -> scaledkv::Snapshot<'d> {
        loop {
            let snapshot = db.snapshot();
            if snapshot.seq() >= at_least {
                return snapshot;
            }
            drop(snapshot);
            std::thread::yield_now();
        }
    }

    /// Appends to the stream the changes up to one moment (with
    /// `draining` held): that of `given` (a full sync's file), else that
    /// of the last note taken if every key's command is in its note, else
    /// that of a snapshot taken after them, where the other keys are read.
    /// `loose`: keys deleted outside commands, taken before (so deleted by
    /// that moment), always read. Returns the stream's end.
    fn drain(&self, shared: &Shared, given: Option<&scaledkv::Snapshot<'_>>, loose: Vec<Vec<u8>>) -> u64 {
        let (mut notes, mut later) = (Vec::new(), Vec::new());
        let last = self.take_notes(given.map_or(u64::MAX, |s| s.seq()), &mut notes);
        let (mut keys, mut flushed) = changed(&notes, &loose);
        let read = |keys: &Changed<'_>| keys.values().any(|word| *word == Word::Read);
        // Without notes, a snapshot gives the moment (WAIT's offsets).
        let reads = last.is_none() || read(&keys);
        let taken;
        let snapshot = match given {
            Some(snapshot) => Some(snapshot),
            None if reads => {
                taken = Self::snapshot_from(&shared.db, last.unwrap_or(0));
                // Notes that came meanwhile, up to its moment: the keys read
                // there must not sit beside older states of others.
                if self.take_notes(taken.seq(), &mut later).is_some() {
                    for note in &later {
                        flushed |= read_note(note, &mut keys);
                    }
                    for key in &loose {
                        keys.insert(key, Word::Read);
                    }
                }
                Some(&taken)
            }
            None => None,
        };
        let seq = snapshot.map_or_else(|| last.expect("notes without reads"), |s| s.seq());
        let mut commands = Transactions::new(!one_command(&keys, flushed));
        if std::mem::take(&mut self.stream.lock().select) {
            put_request(&mut commands.out, &[b"SELECT", b"0"]);
        }
        if flushed {
            commands.open();
            put_request(&mut commands.out, &[b"FLUSHALL"]);
        }
        for word in keys.values() {
            if let Word::Commands(pieces, tail) = word {
                for piece in pieces.iter().chain(tail) {
                    commands.open();
                    commands.out.extend_from_slice(piece);
                }
            }
        }
        if let Some(snapshot) = snapshot.filter(|_| read(&keys)) {
            let mut conn = ConnState::detached(0, Peer::LOOPBACK, Peer::LOOPBACK);
            conn.authenticated = true;
            let mut out = Out::new(Protocol::Resp2);
            let mut writes = Writes::new(false);
            let mut ctx = crate::commands::Ctx {
                shared,
                conn: &mut conn,
                out: &mut out,
                writes: &mut writes,
                reads_count: false,
            };
            snapshot.view(|| {
                for &key in keys.iter().filter(|(_, word)| **word == Word::Read).map(|(key, _)| key) {
                    commands.open();
                    let at = commands.out.len();
                    if let Err(error) = command_of(&mut ctx, key, &mut commands.out) {
                        commands.out.truncate(at);
                        tracing::error!(
                            key = %String::from_utf8_lossy(key),
                            error = %error.text(),
                            "a changed key could not be read for the replicas"
                        );
                    }
                    ctx.out.buf.clear();
                }
            });
        }
        let mut commands = commands.finish();
        let mut stream = self.stream.lock();
        let now = Instant::now();
        if !stream.replicas.is_empty() && now.duration_since(stream.last_ping) >= PING_EVERY {
            put_request(&mut commands, &[b"PING"]);
            stream.last_ping = now;
        }
        if std::mem::take(&mut stream.getack) {
            put_request(&mut commands, &[b"REPLCONF", b"GETACK", b"*"]);
        }
        stream.backlog.push(commands);
        let end = stream.end();
        if stream.drained.len() >= DRAINS_KEPT {
            stream.drained.pop_front();
        }
        stream.drained.push_back((seq, end));
        self.trim(&mut stream);
        drop(stream);
        self.end.send_if_modified(|at| std::mem::replace(at, end) != end);
        end
    }

    /// Drops what no replica needs beyond the backlog's size; a replica
    /// more than `MAX_LAG_BYTES` behind is disconnected.
    fn trim(&self, stream: &mut Stream) {
        let end = stream.end();
        let mut keep_from = end.saturating_sub(self.backlog_bytes.load(Ordering::Relaxed) as u64);
        for replica in &stream.replicas {
            let Some(sent) = *replica.sent.lock() else { continue };
            if end - sent > MAX_LAG_BYTES {
                if !replica.client.killed.swap(true, Ordering::AcqRel) {
                    tracing::warn!(client = replica.client.id, "a replica fell too far behind; disconnected");
                }
                replica.client.wake.notify_one();
            } else {
                keep_from = keep_from.min(sent);
            }
        }
        stream.backlog.trim(keep_from);
    }

    /// Bytes of the stream after `from` (those of one drain, or of
    /// several small ones up to `SEND_BYTES`, copied once so that a
    /// replica behind gets them in one write); None if they are no longer
    /// kept.
    fn read(&self, from: u64) -> Option<Bytes> {
        let stream = self.stream.lock();
        let first = stream.backlog.read(from)?;
        if first.is_empty() || first.len() >= SEND_BYTES / 16 {
            return Some(first);
        }
        let mut joined = first.to_vec();
        while joined.len() < SEND_BYTES {
            match stream.backlog.read(from + joined.len() as u64) {
                Some(more) if !more.is_empty() => joined.extend_from_slice(&more),
                _ => break,
            }
        }
        Some(Bytes::from(joined))
    }

    /// The end of the first drain that covers the engine's sequence
    /// number `seq` (WAIT's offset); None until it ran. If it is older
    /// than those remembered, the oldest's end (later, so enough).
    pub fn offset_covering(&self, seq: u64) -> Option<u64> {
        let stream = self.stream.lock();
        stream.drained.iter().find(|(at, _)| *at >= seq).map(|(_, end)| *end)
    }

    /// Has the next drain ask the replicas for acknowledgements (REPLCONF
    /// GETACK), as Redis does for a client in WAIT.
    pub fn ask_for_acks(&self) {
        self.stream.lock().getack = true;
        self.changed.notify_one();
    }

    /// Asks for acknowledgements if the last ask (`asked`) is
    /// `ASK_EVERY` old: for a wait on the replicas (a failover's, a
    /// shutdown's), which unasked acknowledge once a second.
    pub fn ask_for_acks_if_due(&self, asked: &mut Option<Instant>) {
        if asked.is_none_or(|at| at.elapsed() >= ASK_EVERY) {
            self.ask_for_acks();
            *asked = Some(Instant::now());
        }
    }

    /// Replicas that acknowledged `offset`.
    pub fn acked(&self, offset: u64) -> usize {
        let stream = self.stream.lock();
        stream.replicas.iter().filter(|r| r.acked.load(Ordering::Acquire) >= offset as i64).count()
    }

    pub fn replicas(&self) -> usize {
        self.stream.lock().replicas.len()
    }

    /// Online replicas that acknowledged within `max_lag_secs` seconds
    /// (Redis's good replicas).
    fn good_replicas(&self, max_lag_secs: u64) -> usize {
        let stream = self.stream.lock();
        let online = stream.replicas.iter().filter(|r| r.online.load(Ordering::Acquire));
        online.filter(|r| r.acked_at.lock().elapsed().as_secs() <= max_lag_secs).count()
    }

    /// The good replicas INFO shows, while `min-replicas-to-write` rules.
    fn good_replicas_rule(&self) -> Option<usize> {
        let (to_write, max_lag) = self.min_replicas();
        (to_write > 0 && max_lag > 0).then(|| self.good_replicas(max_lag))
    }

    fn min_replicas(&self) -> (u64, u64) {
        (self.min_replicas_to_write.load(Ordering::Relaxed), self.min_replicas_max_lag.load(Ordering::Relaxed))
    }

    /// Whether a master (not `following` one) refuses writes for want of
    /// good replicas, as Redis's `min-replicas-to-write`.
    pub fn refuses_writes(&self, following: bool) -> bool {
        let (to_write, max_lag) = self.min_replicas();
        to_write > 0 && max_lag > 0 && !following && (self.good_replicas(max_lag) as u64) < to_write
    }

    /// `master_repl_offset`: the stream's end.
    pub fn offset(&self) -> u64 {
        self.stream.lock().end()
    }

    /// The replica at `host` (its address) that announced `port`: whether
    /// it is online, and the offset it acknowledged.
    pub fn replica_ack(&self, host: &str, port: u16) -> Option<(bool, i64)> {
        let stream = self.stream.lock();
        let replica =
            stream.replicas.iter().find(|r| r.port == port && r.client.addr.host().eq_ignore_ascii_case(host))?;
        Some((replica.online.load(Ordering::Acquire), replica.acked.load(Ordering::Acquire)))
    }

    /// Online replicas that have not acknowledged `offset`.
    pub fn lagging(&self, offset: u64) -> usize {
        let stream = self.stream.lock();
        let online = stream.replicas.iter().filter(|r| r.online.load(Ordering::Acquire));
        online.filter(|r| r.acked.load(Ordering::Acquire) < offset as i64).count()
    }

    /// An online replica that acknowledged `offset`: its address and port.
    pub fn replica_at(&self, offset: u64) -> Option<(String, u16)> {
        let stream = self.stream.lock();
        stream
            .replicas
            .iter()
            .find(|r| r.online.load(Ordering::Acquire) && r.acked.load(Ordering::Acquire) >= offset as i64)
            .map(|r| (r.client.addr.host(), r.port))
    }

    /// Adds `client` to those woken by acknowledgements (WAIT).
    pub fn wake_on_ack(&self, client: &Arc<ClientInfo>) {
        let mut waiting = self.waiting.lock();
        if !waiting.iter().any(|c| c.id == client.id) {
            waiting.push(client.clone());
        }
    }

    pub fn stop_waking(&self, id: u64) {
        self.waiting.lock().retain(|c| c.id != id);
    }

    fn register(&self, replica: Arc<Replica>) {
        let mut stream = self.stream.lock();
        stream.replicas.push(replica);
        stream.alone_since = None;
    }

    fn unregister(&self, id: u64) {
        let mut stream = self.stream.lock();
        stream.replicas.retain(|r| r.client.id != id);
        if stream.replicas.is_empty() {
            stream.alone_since = Some(Instant::now());
        }
    }

    /// ROLE's list: each replica's address, port and acknowledged offset.
    pub fn role(&self) -> (u64, Vec<(String, u16, i64)>) {
        let stream = self.stream.lock();
        let replicas = stream
            .replicas
            .iter()
            .filter(|r| r.online.load(Ordering::Acquire))
            .map(|r| (r.client.addr.host(), r.port, r.acked.load(Ordering::Acquire).max(0)))
            .collect();
        (stream.end(), replicas)
    }

    /// INFO replication from `connected_slaves` on: this server's
    /// replicas and its stream (its own history, or, `relaying` while it
    /// follows a master, the master's).
    pub fn info(&self, failover: crate::failover::Phase, relaying: bool) -> String {
        use std::fmt::Write;
        // Counted before the stream's lock, which counting takes.
        let good = self.good_replicas_rule();
        let stream = self.stream.lock();
        let mut text = format!("connected_slaves:{}\r\n", stream.replicas.len());
        if let Some(good) = good {
            let _ = write!(text, "min_slaves_good_slaves:{good}\r\n");
        }
        for (i, replica) in stream.replicas.iter().enumerate() {
            let state = if replica.online.load(Ordering::Acquire) { "online" } else { "wait_bgsave" };
            let _ = write!(
                text,
                "slave{i}:ip={},port={},state={state},offset={},lag={}\r\n",
                replica.client.addr.host(),
                replica.port,
                replica.acked.load(Ordering::Acquire).max(0),
                replica.acked_at.lock().elapsed().as_secs(),
            );
        }
        let active = self.streaming() || relaying;
        let _ = write!(
            text,
            "master_failover_state:{}\r\nmaster_replid:{}\r\n\
             master_replid2:{}\r\nmaster_repl_offset:{}\r\n\
             second_repl_offset:{}\r\nrepl_backlog_active:{}\r\nrepl_backlog_size:{}\r\n\
             repl_backlog_first_byte_offset:{}\r\nrepl_backlog_histlen:{}\r\n",
            failover.name(),
            stream.replid,
            stream.replid2.as_ref().map_or("0000000000000000000000000000000000000000", |(id, _)| id.as_str()),
            stream.end(),
            stream.replid2.as_ref().map_or(-1, |(_, second)| *second as i64),
            u8::from(active),
            self.backlog_bytes.load(Ordering::Relaxed),
            if active { stream.backlog.start + 1 } else { 0 },
            stream.backlog.len,
        );
        text
    }

    /// Stops the drainer (shutdown, once no command runs), after a last
    /// drain of what is left: the backlog then ends at the data's moment
    /// (`keep_history`).
    pub fn shut_down(&self, shared: &Shared) {
        self.stop.store(true, Ordering::Relaxed);
        self.changed.notify_one();
        if let Some(thread) = self.drainer.lock().take() {
            let _ = thread.join();
        }
        if self.streaming() {
            let _draining = self.draining.lock();
            {
                // No ping or GETACK in the last drain: no replica would
                // have it, and the kept history would end past them.
                let mut stream = self.stream.lock();
                stream.getack = false;
                stream.last_ping = Instant::now();
            }
            let loose = std::mem::take(&mut self.changes.lock().loose);
            self.drain(shared, None, loose);
        }
    }

    /// Keeps the replication history beside the data (`dir`), once the
    /// engine is closed at sequence number `seq`: a restart takes it up
    /// (`History::take`, `resume`) and replicas resume from the backlog,
    /// as Redis keeps its replication ID and offset in its RDB file.
    /// Nothing while not streaming.
    pub fn keep_history(&self, dir: &std::path::Path, seq: u64) {
        if !self.streaming() {
            return;
        }
        let stream = self.stream.lock();
        let mut backlog = Vec::with_capacity(stream.backlog.len as usize);
        for (_, piece) in &stream.backlog.pieces {
            backlog.extend_from_slice(piece);
        }
        let history = History { replid: stream.replid.clone(), start: stream.backlog.start, seq, backlog };
        drop(stream);
        let path = dir.join(HISTORY_FILE);
        let temp = dir.join(format!("{HISTORY_FILE}.tmp"));
        let written = std::fs::File::create(&temp).and_then(|mut file| {
            std::io::Write::write_all(&mut file, &history.encode())?;
            file.sync_all()?;
            std::fs::rename(&temp, &path)
        });
        match written {
            Ok(()) => tracing::info!(offset = history.start + history.backlog.len() as u64, "replication history kept"),
            Err(error) => tracing::warn!(%error, "the replication history was not kept: replicas will sync in full"),
        }
    }
}

/// Appends to `command` the command that makes a replica's `key` what it
/// is now (in the current view): DEL, SET ... PXAT, or RESTORE ... REPLACE
/// ABSTTL.
fn command_of(
    ctx: &mut crate::commands::Ctx<'_>,
    key: &[u8],
    command: &mut Vec<u8>,
) -> Result<(), crate::commands::CmdError> {
    let Some(value) = ctx.writes.get_untouched(&ctx.shared.db, key)? else {
        put_request(command, &[b"DEL", key]);
        return Ok(());
    };
    let at = value.expiry_ms();
    match value.tag() {
        TYPE_STRING | TYPE_ITEM => {
            let data = value.string()?;
            match at {
                Some(at) => put_request(command, &[b"SET", key, data, b"PXAT", at.to_string().as_bytes()]),
                None => put_request(command, &[b"SET", key, data]),
            }
        }
        _ => {
            let payload = crate::commands::dump::serialize(ctx, key, &value)?;
            let ttl = at.unwrap_or(0).to_string();
            put_request(command, &[b"RESTORE", key, ttl.as_bytes(), &payload, b"REPLACE", b"ABSTTL"]);
        }
    }
    Ok(())
}

/// A drain's commands as transactions (MULTI ... EXEC) of up to
/// `TRANSACTION_BYTES` each, written in place; a drain of one command
/// goes as itself. A ScaledKV replica commits a transaction as one engine
/// batch, which has a limit (and a big one would hold its other clients
/// up meanwhile).
struct Transactions {
    out: Vec<u8>,
    /// Whether the commands go in transactions (more than one).
    wrapped: bool,
    /// Where the open transaction's commands start (None: none is open).
    opened: Option<usize>,
}

/// The most commands of a drain go in one transaction.
const TRANSACTION_BYTES: usize = 1 << 20;

impl Transactions {
    fn new(wrapped: bool) -> Transactions {
        Transactions { out: Vec::new(), wrapped, opened: None }
    }

    /// Called before each command: opens a transaction, or closes a full
    /// one and opens the next.
    fn open(&mut self) {
        if !self.wrapped {
            return;
        }
        if self.opened.is_some_and(|at| self.out.len() - at >= TRANSACTION_BYTES) {
            put_request(&mut self.out, &[b"EXEC"]);
            self.opened = None;
        }
        if self.opened.is_none() {
            put_request(&mut self.out, &[b"MULTI"]);
            self.opened = Some(self.out.len());
        }
    }

    fn finish(mut self) -> Vec<u8> {
        if self.opened.is_some() {
            put_request(&mut self.out, &[b"EXEC"]);
        }
        self.out
    }
}

/// The file, in the data directory, where a master stopped cleanly keeps
/// its replication history for the next start.
const HISTORY_FILE: &str = "replication-history";
const HISTORY_MAGIC: &[u8; 8] = b"SKVREPL1";

/// A master's replication history as a clean shutdown left it: the
/// replication ID, the backlog and the offset of the byte before it, and
/// the engine's sequence number the stream's end stands for.
#[derive(Debug, Clone, PartialEq)]
pub struct History {
    replid: String,
    start: u64,
    seq: u64,
    backlog: Vec<u8>,
}

impl History {
    fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(28 + self.replid.len() + self.backlog.len());
        body.extend_from_slice(&self.seq.to_le_bytes());
        body.extend_from_slice(&self.start.to_le_bytes());
        body.extend_from_slice(&(self.replid.len() as u32).to_le_bytes());
        body.extend_from_slice(self.replid.as_bytes());
        body.extend_from_slice(&self.backlog);
        let mut file = HISTORY_MAGIC.to_vec();
        file.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        file.extend_from_slice(&body);
        file
    }

    fn decode(file: &[u8]) -> Result<History, &'static str> {
        let rest = file.strip_prefix(HISTORY_MAGIC).ok_or("not a replication history")?;
        let (crc, body) = rest.split_first_chunk::<4>().ok_or("cut short")?;
        if crc32c::crc32c(body) != u32::from_le_bytes(*crc) {
            return Err("its checksum does not match");
        }
        let word = |at: usize| body.get(at..at + 8).map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")));
        let (seq, start) = (word(0).ok_or("cut short")?, word(8).ok_or("cut short")?);
        let len = body.get(16..20).map(|l| u32::from_le_bytes(l.try_into().expect("4 bytes")) as usize);
        let replid = len.and_then(|len| body.get(20..20 + len)).ok_or("cut short")?;
        let replid = std::str::from_utf8(replid).map_err(|_| "a bad replication ID")?.to_owned();
        let backlog = body[20 + replid.len()..].to_vec();
        Ok(History { replid, start, seq, backlog })
    }

    /// The history the last run kept in `dir`, if it describes the data
    /// as opened (the engine's sequence number is the one it was kept
    /// at) and the server starts as a master (`master`: no REPLICAOF or
    /// import first). The file goes either way: once anything is written,
    /// it no longer describes the data.
    pub fn take(dir: &std::path::Path, seq: u64, master: bool) -> Option<History> {
        let path = dir.join(HISTORY_FILE);
        let file = std::fs::read(&path).ok()?;
        if let Err(error) = std::fs::remove_file(&path) {
            tracing::warn!(%error, "cannot remove the replication history; not used");
            return None;
        }
        let history = match History::decode(&file) {
            Ok(history) => history,
            Err(error) => {
                tracing::warn!(error, "the replication history is unreadable: replicas will sync in full");
                return None;
            }
        };
        if history.seq != seq {
            tracing::warn!(
                kept_at = history.seq,
                now = seq,
                "the data changed after the replication history was kept: replicas will sync in full"
            );
            return None;
        }
        master.then_some(history)
    }
}

/// What PSYNC (or SYNC) from a replica asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Psync {
    /// The replication ID and the offset it wants next; None for SYNC.
    pub from: Option<(String, i64)>,
    pub port: u16,
}

/// Serves a replica on its connection until it ends: the file (or the
/// backlog from where it stopped), then the stream, reading its
/// acknowledgements meanwhile.
pub async fn serve(
    shared: Arc<Shared>,
    client: &Arc<ClientInfo>,
    stream: &mut socket::Stream,
    psync: Psync,
) -> std::io::Result<()> {
    let master = shared.master.clone();
    // A replica that asked this one to take over (`PSYNC ... FAILOVER`)
    // is answered from the history the promotion keeps.
    let promoted_by = Instant::now() + Duration::from_secs(10);
    while shared.replication.promoting() && Instant::now() < promoted_by {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    if let Err(error) = master.start(&shared).await {
        let line = format!("-ERR streaming to replicas failed: {error}\r\n");
        return stream.write_all(line.as_bytes()).await;
    }
    let replica = Arc::new(Replica {
        client: client.clone(),
        port: psync.port,
        online: AtomicBool::new(false),
        sent: Mutex::new(None),
        acked: AtomicI64::new(-1),
        acked_at: Mutex::new(Instant::now()),
    });
    client.replica.store(true, Ordering::Relaxed);
    master.register(replica.clone());
    let served = serve_registered(&shared, &replica, stream, psync).await;
    master.unregister(client.id);
    tracing::info!(client = client.id, addr = %client.addr, "replica disconnected");
    served
}

async fn serve_registered(
    shared: &Arc<Shared>,
    replica: &Arc<Replica>,
    stream: &mut socket::Stream,
    psync: Psync,
) -> std::io::Result<()> {
    let master = &shared.master;
    let resumed = psync.from.as_ref().and_then(|(replid, next)| {
        let kept = master.stream.lock();
        let from = u64::try_from(*next).ok()?.checked_sub(1)?;
        // The history before a promotion, up to where this one began.
        let earlier = kept.replid2.as_ref().is_some_and(|(id, second)| id == replid && from < *second);
        ((*replid == kept.replid || earlier) && kept.backlog.read(from).is_some()).then_some(from)
    });
    let counted = match (resumed, &psync.from) {
        (Some(_), _) => 1,
        // Redis counts a PSYNC it could not serve from the backlog twice.
        (None, Some((replid, _))) if replid != "?" => 2,
        _ => 0,
    };
    master.syncs[counted].fetch_add(1, Ordering::Relaxed);
    if counted == 2 {
        master.syncs[0].fetch_add(1, Ordering::Relaxed);
    }
    let full = resumed.is_none();
    let from = match resumed {
        Some(from) => {
            *replica.sent.lock() = Some(from);
            let line = format!("+CONTINUE {}\r\n", master.replid());
            stream.write_all(line.as_bytes()).await?;
            tracing::info!(client = replica.client.id, from, "replica resumed (partial resync)");
            from
        }
        None => match full_sync(shared, replica, stream, psync.from.is_some()).await? {
            Some(from) => from,
            None => return Ok(()),
        },
    };
    follow(shared, replica, stream, from, full).await
}

/// Sends the file of one moment and returns where the replica's stream
/// starts (None if the transfer was cut short).
async fn full_sync(
    shared: &Arc<Shared>,
    replica: &Arc<Replica>,
    stream: &mut socket::Stream,
    psync: bool,
) -> std::io::Result<Option<u64>> {
    let (pieces, arriving) = tokio::sync::mpsc::channel::<Vec<u8>>(2);
    let (start, started) = tokio::sync::oneshot::channel::<u64>();
    let exporting = shared.clone();
    let registered = replica.clone();
    let job = tokio::task::spawn_blocking(move || {
        let master = &exporting.master;
        let (snapshot, from) = if exporting.replication.following() {
            // The stream is the followed master's, relayed by the link.
            let (snapshot, from) = master.snapshot_between_runs(&exporting.db);
            *registered.sent.lock() = Some(from);
            (snapshot, from)
        } else {
            let _draining = master.draining.lock();
            let loose = std::mem::take(&mut master.changes.lock().loose);
            let snapshot = exporting.db.snapshot();
            let from = master.drain(&exporting, Some(&snapshot), loose);
            master.stream.lock().select = true;
            *registered.sent.lock() = Some(from);
            (snapshot, from)
        };
        let _ = start.send(from);
        crate::commands::dump::export::export(&exporting, &snapshot, 1 << 20, true, |piece| {
            pieces.blocking_send(piece).is_ok()
        })
    });
    let Ok(from) = started.await else {
        return Err(std::io::Error::other("the full sync's drain failed"));
    };
    let mark = random_hex();
    let mut head = String::new();
    if psync {
        head.push_str(&format!("+FULLRESYNC {} {from}\r\n", shared.master.replid()));
    }
    head.push_str(&format!("$EOF:{mark}\r\n"));
    stream.write_all(head.as_bytes()).await?;
    let client = &replica.client;
    let sent = crate::rdb_sync::forward_file(shared, client, stream, arriving, job, &mark).await?;
    Ok(sent.map(|exported| {
        tracing::info!(
            client = client.id,
            keys = exported.keys,
            bytes = exported.bytes,
            from,
            "sent a replica the data set (full sync)"
        );
        from
    }))
}

/// Streams from `from` and reads the replica's acknowledgements. After
/// a full sync, only once the replica acknowledged (it has loaded the
/// file), as Redis does: a diskless file ends at its mark, which a
/// replica finds at the end of what it read, so nothing may follow the
/// mark before the replica has read it.
async fn follow(
    shared: &Shared,
    replica: &Replica,
    stream: &mut socket::Stream,
    mut from: u64,
    after_file: bool,
) -> std::io::Result<()> {
    let master = &shared.master;
    let mut ends = master.end.subscribe();
    let mut shutdown = shared.shutdown.subscribe();
    let (mut reader, mut writer) = tokio::io::split(stream);
    let mut input = BytesMut::with_capacity(4096);
    let client = &replica.client;
    loop {
        let sending = !after_file || replica.acked.load(Ordering::Acquire) >= 0;
        if sending {
            replica.online.store(true, Ordering::Release);
            let Some(bytes) = master.read(from) else {
                tracing::warn!(client = client.id, "a replica's place in the stream is no longer kept; disconnected");
                return Ok(());
            };
            if !bytes.is_empty() {
                tokio::select! {
                    written = writer.write_all(&bytes) => written?,
                    _ = shutdown.changed() => return Ok(()),
                    _ = until_killed(client) => return Ok(()),
                }
                from += bytes.len() as u64;
                *replica.sent.lock() = Some(from);
                shared.stats.net_output_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                continue;
            }
            ends.borrow_and_update();
            if master.read(from).is_some_and(|more| !more.is_empty()) {
                continue;
            }
        }
        tokio::select! {
            _ = ends.changed(), if sending => {}
            read = reader.read_buf(&mut input) => {
                if read? == 0 {
                    return Ok(());
                }
                acknowledgements(master, replica, &mut input);
            }
            _ = shutdown.changed() => return Ok(()),
            _ = until_killed(client) => return Ok(()),
        }
    }
}

/// Takes the replica's REPLCONF ACKs out of `input`.
fn acknowledgements(master: &Master, replica: &Replica, input: &mut BytesMut) {
    let limits =
        crate::resp::Limits { max_bulk_bytes: 1 << 10, max_args: 16, max_request_bytes: 1 << 12, authenticated: true };
    let mut acked = false;
    loop {
        let args = match crate::resp::parse(input, &limits) {
            Ok(Some(args)) => args,
            Ok(None) => break,
            // Nothing a replica sends: dropped, as the rest of this read.
            Err(_) => {
                input.clear();
                break;
            }
        };
        let ack = args.len() >= 3 && args[0].eq_ignore_ascii_case(b"replconf") && args[1].eq_ignore_ascii_case(b"ack");
        if let Some(offset) = ack.then(|| std::str::from_utf8(&args[2]).ok()?.parse::<i64>().ok()).flatten() {
            replica.acked.fetch_max(offset, Ordering::AcqRel);
            *replica.acked_at.lock() = Instant::now();
            acked = true;
        }
    }
    if acked {
        for client in master.waiting.lock().iter() {
            client.wake.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(args: &[&[u8]]) -> Vec<u8> {
        let mut buf = Vec::new();
        put_request(&mut buf, args);
        buf
    }

    #[test]
    fn notes_carry_each_changed_key_with_its_command_where_the_batch_has_it() {
        let event = |class, key: &[u8]| Event { class, name: "x", key: key.to_vec(), writer: 1 };
        let mut batch = scaledkv::WriteBatch::new();
        batch.put(b"a", b"\x00old");
        batch.put(b"a", b"\x00new");
        batch.put_with_expiry(b"e", b"\x00soon", 1234);
        batch.put(b"h", b"\x04a small hash");
        batch.put(b"\xff\xff\x01field of a table", b"\x01v");
        batch.delete(b"d");
        let mut item = vec![crate::keyspace::TYPE_ITEM];
        item.extend_from_slice(&[7; crate::keyspace::ITEM_META_BYTES]);
        item.extend_from_slice(b"memcached");
        batch.put(b"m", &item);
        let events = [
            event(crate::notify::STRING, b"a"),
            event(crate::notify::NEW, b"a"),
            event(crate::notify::MISS, b"read only"),
            event(crate::notify::STRING, b"e"),
            event(crate::notify::HASH, b"h"),
            event(crate::notify::GENERIC, b"d"),
            event(crate::notify::STRING, b"m"),
            event(crate::notify::HASH, b"table"),
        ];
        let note = note_of(&events, &batch, &[], &[]).unwrap();
        let mut keys = Changed::new();
        assert!(!read_note(&note, &mut keys));
        let (set_a, del_d) = (command(&[b"SET", b"a", b"new"]), command(&[b"DEL", b"d"]));
        let (set_e, set_m) =
            (command(&[b"SET", b"e", b"soon", b"PXAT", b"1234"]), command(&[b"SET", b"m", b"memcached"]));
        let expected: Changed = [
            (&b"a"[..], Word::Commands(vec![&set_a[..]], None)),
            (b"d", Word::Commands(vec![&del_d], None)),
            (b"e", Word::Commands(vec![&set_e], None)),
            (b"h", Word::Read),
            (b"m", Word::Commands(vec![&set_m], None)),
            (b"table", Word::Read),
        ]
        .into_iter()
        .collect();
        assert_eq!(keys, expected);
        assert_eq!(note_of(&[event(crate::notify::MISS, b"k")], &batch, &[], &[]), None);
        // A flush drops what came before it, in the note and before; a
        // loose key is read whatever a note says.
        let flush =
            note_of(&[event(crate::notify::FLUSHED, b""), event(crate::notify::STRING, b"a")], &batch, &[], &[])
                .unwrap();
        let loose = [b"e".to_vec()];
        let notes = [note.clone(), flush];
        let (keys, flushed) = changed(&notes, &loose);
        assert!(flushed);
        assert_eq!(
            keys.into_iter().collect::<Vec<_>>(),
            [(&b"a"[..], Word::Commands(vec![&set_a[..]], None)), (b"e", Word::Read)]
        );
        let mut keys = Changed::new();
        read_note(&note[..note.len() - 2], &mut keys);
        assert_eq!(keys.len(), 5, "a cut note reads what is whole");
        // FLUSHALL keeps the function libraries.
        let (library, flush) = (
            functions_note(&[b"#!lua name=x\n"]),
            note_of(&[event(crate::notify::FLUSHED, b"")], &batch, &[], &[]).unwrap(),
        );
        let notes = [library, flush];
        let (keys, flushed) = changed(&notes, &[]);
        assert!(flushed);
        let Some(Word::Commands(pieces, None)) = keys.get(FUNCTIONS) else { panic!("{keys:?}") };
        assert!(pieces[0].starts_with(b"*4\r\n$8\r\nFUNCTION\r\n$7\r\nRESTORE\r\n"));
        let notes = [functions_note(&[])];
        let (keys, _) = changed(&notes, &[]);
        assert_eq!(keys[FUNCTIONS], Word::Commands(vec![&b"*2\r\n$8\r\nFUNCTION\r\n$5\r\nFLUSH\r\n"[..]], None));
    }

    #[test]
    fn notes_carry_the_field_changes_of_big_collections_changed_in_place() {
        use crate::commands::table::member_key;
        use crate::keyspace::{TYPE_HASH_TABLE, TYPE_SET_TABLE, TYPE_ZSET_TABLE};
        let event = |key: &[u8]| Event { class: crate::notify::HASH, name: "x", key: key.to_vec(), writer: 1 };
        let read = table_read;
        let stub = |tag: u8, id: u64| [&[tag][..], &id.to_le_bytes(), &5u64.to_le_bytes()].concat();
        let tables = [
            read(b"h", TYPE_HASH_TABLE, 7, None),
            read(b"s", TYPE_SET_TABLE, 9, Some(50)),
            read(b"z", TYPE_ZSET_TABLE, 10, None),
            read(b"replaced", TYPE_HASH_TABLE, 11, None),
            read(b"gone", TYPE_SET_TABLE, 13, None),
            read(b"unwritten", TYPE_HASH_TABLE, 14, None),
        ];
        let mut batch = scaledkv::WriteBatch::new();
        batch.put(&member_key(7, b"f1"), b"\x01v1");
        batch.delete(&member_key(7, b"f2"));
        batch.put(&member_key(7, b"f1"), b"\x01v1b");
        batch.put(&member_key(8, b"other table"), b"\x01x");
        batch.put_with_expiry(b"h", &stub(TYPE_HASH_TABLE, 7), 99);
        batch.put(&member_key(9, b"m1"), b"\x01");
        batch.delete(&member_key(9, b"m2"));
        let score = [&[crate::commands::table::TYPE_FIELD][..], &1.5f64.to_le_bytes()].concat();
        batch.put(&member_key(10, b"\x00m"), &score);
        batch.put(&member_key(10, b"\x01index entry"), b"\x01");
        batch.put(&member_key(11, b"f"), b"\x01v");
        batch.put(b"replaced", &stub(TYPE_HASH_TABLE, 12));
        batch.delete(b"gone");
        let events: Vec<Event> =
            [&b"h"[..], b"s", b"z", b"replaced", b"gone", b"unwritten", b"small"].into_iter().map(event).collect();
        let note = note_of(&events, &batch, &tables, &[]).unwrap();
        let mut keys = Changed::new();
        read_note(&note, &mut keys);
        let h = [command(&[b"HSET", b"h", b"f1", b"v1b"]), command(&[b"HDEL", b"h", b"f2"])].concat();
        let h_expiry = command(&[b"PEXPIREAT", b"h", b"99"]);
        let s = [command(&[b"SADD", b"s", b"m1"]), command(&[b"SREM", b"s", b"m2"])].concat();
        let z = command(&[b"ZADD", b"z", b"1.5", b"m"]);
        let gone = command(&[b"DEL", b"gone"]);
        let expected: Changed = [
            (&b"h"[..], Word::Commands(vec![&h[..]], Some(&h_expiry))),
            (b"s", Word::Commands(vec![&s], None)),
            (b"z", Word::Commands(vec![&z], None)),
            (b"replaced", Word::Read),
            (b"gone", Word::Commands(vec![&gone], None)),
            (b"unwritten", Word::Commands(Vec::new(), None)),
            (b"small", Word::Read),
        ]
        .into_iter()
        .collect();
        assert_eq!(keys, expected);
        assert_eq!(commands_in(&h), Some(2));
        assert!(!one_command(&keys, false));

        // A state then changes to it go in order; a read covers both.
        let state = note_of(
            &[event(b"h")],
            &{
                let mut b = scaledkv::WriteBatch::new();
                b.delete(b"h");
                b
            },
            &[],
            &[],
        )
        .unwrap();
        let change = note_of(&[event(b"h")], &batch, &tables[..1], &[]).unwrap();
        let read_h = note_of(&[event(b"h")], &scaledkv::WriteBatch::new(), &[], &[]).unwrap();
        let words = |notes: &[&Vec<u8>]| {
            let notes: Vec<Vec<u8>> = notes.iter().map(|n| n.to_vec()).collect();
            let (keys, _) = changed(&notes, &[]);
            let words: Vec<Vec<Vec<u8>>> = keys
                .into_values()
                .map(|word| match word {
                    Word::Read => Vec::new(),
                    Word::Commands(pieces, tail) => pieces.into_iter().chain(tail).map(<[u8]>::to_vec).collect(),
                })
                .collect();
            words.into_iter().next().unwrap()
        };
        let del_h = command(&[b"DEL", b"h"]);
        // The expiry time (a tail) goes once, after the changes.
        assert_eq!(words(&[&state, &change, &change]), [del_h.clone(), h.clone(), h.clone(), h_expiry]);
        assert_eq!(words(&[&change, &state]), [del_h]);
        assert!(words(&[&change, &read_h]).is_empty());
        assert!(words(&[&read_h, &change]).is_empty());
    }

    /// A table's stub as a batch found it, no group noted.
    fn table_read(key: &[u8], tag: u8, id: u64, expiry: Option<u64>) -> crate::keyspace::TableRead {
        crate::keyspace::TableRead { key: key.to_vec(), tag, id, expiry, groups: Vec::new() }
    }

    #[test]
    fn notes_carry_what_changes_of_big_lists_did() {
        use crate::commands::table::member_key;
        use crate::keyspace::TYPE_LIST_TABLE;
        let event = |key: &[u8]| Event { class: crate::notify::LIST, name: "x", key: key.to_vec(), writer: 1 };
        let read = |key: &[u8], id| table_read(key, TYPE_LIST_TABLE, id, None);
        let push = |front, element: &[u8]| ListOp::Push { front, element: element.to_vec() };
        let tables = [read(b"l", 4), read(b"untold", 5), read(b"old-layout", 6), read(b"expiring", 7)];
        let lists = [
            (4, Some(vec![push(false, b"a"), push(false, b"b"), push(true, b"c"), ListOp::Pop { front: true }])),
            (9, Some(vec![push(false, b"another list")])),
            (
                4,
                Some(vec![
                    ListOp::Pop { front: false },
                    ListOp::Pop { front: false },
                    ListOp::Set { index: 2, element: b"s".to_vec() },
                ]),
            ),
            (4, Some(vec![ListOp::Trim { start: 1, n: 3 }, ListOp::Trim { start: 0, n: 0 }])),
            (
                4,
                Some(vec![
                    ListOp::Insert { after: true, pivot: b"p".to_vec(), element: b"i".to_vec() },
                    ListOp::Insert { after: false, pivot: b"p".to_vec(), element: b"j".to_vec() },
                    ListOp::Remove { count: -2, element: b"i".to_vec() },
                ]),
            ),
            (5, Some(vec![push(true, b"x")])),
            (5, None),
        ];
        let mut batch = scaledkv::WriteBatch::new();
        batch.put(&member_key(4, b"chunk"), b"\x01...");
        batch.put(&member_key(5, b"chunk"), b"\x01...");
        batch.put(&member_key(6, b"element"), b"\x01...");
        let stub = [&[TYPE_LIST_TABLE][..], &7u64.to_le_bytes(), &[0; 24]].concat();
        batch.put_with_expiry(b"expiring", &stub, 500);
        // A key's events apart (LPUSH, then a write of another key, then
        // LPOP): its changes still go once.
        let events: Vec<Event> =
            [&b"l"[..], b"untold", b"l", b"old-layout", b"expiring", b"l"].into_iter().map(event).collect();
        let note = note_of(&events, &batch, &tables, &lists).unwrap();
        let mut keys = Changed::new();
        read_note(&note, &mut keys);
        let l = [
            command(&[b"RPUSH", b"l", b"a", b"b"]),
            command(&[b"LPUSH", b"l", b"c"]),
            command(&[b"LPOP", b"l"]),
            command(&[b"RPOP", b"l", b"2"]),
            command(&[b"LSET", b"l", b"2", b"s"]),
            command(&[b"LTRIM", b"l", b"1", b"3"]),
            command(&[b"LTRIM", b"l", b"1", b"0"]),
            command(&[b"LINSERT", b"l", b"AFTER", b"p", b"i"]),
            command(&[b"LINSERT", b"l", b"BEFORE", b"p", b"j"]),
            command(&[b"LREM", b"l", b"-2", b"i"]),
        ]
        .concat();
        let expiring = command(&[b"PEXPIREAT", b"expiring", b"500"]);
        let expected: Changed = [
            (&b"l"[..], Word::Commands(vec![&l[..]], None)),
            (b"untold", Word::Read),
            (b"old-layout", Word::Read),
            (b"expiring", Word::Commands(Vec::new(), Some(&expiring[..]))),
        ]
        .into_iter()
        .collect();
        assert_eq!(keys, expected);
    }

    #[test]
    fn notes_carry_a_streams_new_and_deleted_entries_and_its_counters() {
        use crate::commands::table::member_key;
        use crate::keyspace::{TableRead, TYPE_STREAM_TABLE};
        use crate::stream::{encode_pairs, entry_field, group_field, Meta, StreamId};
        let event = |key: &[u8]| Event { class: crate::notify::STREAM, name: "xadd", key: key.to_vec(), writer: 1 };
        let read = |key: &[u8], id| table_read(key, TYPE_STREAM_TABLE, id, None);
        let tables = [read(b"s", 3), read(b"grouped", 4)];
        let mut batch = scaledkv::WriteBatch::new();
        let entry = [&[crate::commands::table::TYPE_FIELD][..], &encode_pairs(&[&b"f"[..], b"v"])].concat();
        batch.put(&member_key(3, &entry_field(StreamId::new(7, 1))), &entry);
        batch.delete(&member_key(3, &entry_field(StreamId::new(1, 0))));
        let meta = Meta {
            table: 3,
            length: 5,
            last_id: StreamId::new(7, 1),
            first_id: StreamId::new(2, 0),
            max_deleted: StreamId::new(1, 0),
            entries_added: 9,
            groups: 0,
        };
        batch.put(b"s", &[&[TYPE_STREAM_TABLE][..], &meta.encode()].concat());
        batch.put(&member_key(4, &group_field(b"readers")), b"\x01group");
        let note = note_of(&[event(b"s"), event(b"grouped")], &batch, &tables, &[]).unwrap();
        let mut keys = Changed::new();
        read_note(&note, &mut keys);
        let s = [command(&[b"XADD", b"s", b"7-1", b"f", b"v"]), command(&[b"XDEL", b"s", b"1-0"])].concat();
        let counters = [
            command(&[b"XSETID", b"s", b"7-1", b"ENTRIESADDED", b"9", b"MAXDELETEDID", b"1-0"]),
            command(&[b"PERSIST", b"s"]),
        ]
        .concat();
        let expected: Changed =
            [(&b"s"[..], Word::Commands(vec![&s[..]], Some(&counters[..]))), (b"grouped", Word::Read)]
                .into_iter()
                .collect();
        assert_eq!(keys, expected, "a consumer group's change: the stream is read whole");
        // An expiry time set by one batch survives the next one's tail.
        let mut expire = scaledkv::WriteBatch::new();
        expire.put_with_expiry(b"s", &[&[TYPE_STREAM_TABLE][..], &meta.encode()].concat(), 900);
        let first = note_of(&[event(b"s")], &expire, &tables[..1], &[]).unwrap();
        let read_then = TableRead { expiry: Some(900), ..tables[0].clone() };
        let mut add = scaledkv::WriteBatch::new();
        add.put(&member_key(3, &entry_field(StreamId::new(8, 0))), &entry);
        add.put_with_expiry(
            b"s",
            &[&[TYPE_STREAM_TABLE][..], &Meta { last_id: StreamId::new(8, 0), ..meta }.encode()].concat(),
            900,
        );
        let second = note_of(&[event(b"s")], &add, &[read_then], &[]).unwrap();
        let notes = [first, second];
        let (keys, _) = changed(&notes, &[]);
        let Some(Word::Commands(_, Some(tail))) = keys.get(&b"s"[..]) else { panic!("{keys:?}") };
        assert!(tail.ends_with(&command(&[b"PEXPIREAT", b"s", b"900"])), "{:?}", String::from_utf8_lossy(tail));
    }

    #[test]
    fn notes_carry_consumer_group_changes_against_their_first_reads() {
        use crate::commands::table::{member_key, TYPE_FIELD};
        use crate::keyspace::{GroupBefore, TableRead, TYPE_STREAM_TABLE};
        use crate::stream::{group_field, nack_field, Consumer, Group, Nack, StreamId};
        let consumer = |name: &[u8]| Consumer { name: name.to_vec(), seen_ms: 5, pending: 1 };
        let group = |last, read, consumers: &[&[u8]]| Group {
            last_id: StreamId::new(last, 0),
            entries_read: read,
            consumers: consumers.iter().map(|name| consumer(name)).collect(),
        };
        let field = |data: Vec<u8>| [&[TYPE_FIELD][..], &data].concat();
        let befores = vec![
            (b"g".to_vec(), GroupBefore::Held(group(1, Some(1), &[b"alice", b"bob"]).encode())),
            (b"new".to_vec(), GroupBefore::Absent),
            (b"old".to_vec(), GroupBefore::Held(group(1, None, &[]).encode())),
        ];
        let tables = [TableRead { key: b"q".to_vec(), tag: TYPE_STREAM_TABLE, id: 5, expiry: None, groups: befores }];
        let mut batch = scaledkv::WriteBatch::new();
        batch.put(&member_key(5, &group_field(b"g")), &field(group(3, Some(3), &[b"alice", b"carol"]).encode()));
        batch.put(&member_key(5, &group_field(b"new")), &field(group(0, None, &[b"x"]).encode()));
        batch.delete(&member_key(5, &group_field(b"old")));
        let nack = Nack { delivered_ms: 1000, deliveries: 2, consumer: b"carol".to_vec() };
        batch.put(&member_key(5, &nack_field(b"g", StreamId::new(2, 0))), &field(nack.encode()));
        batch.delete(&member_key(5, &nack_field(b"g", StreamId::new(1, 0))));
        batch.delete(&member_key(5, &nack_field(b"old", StreamId::new(1, 0))));
        let event = Event { class: crate::notify::UNPUBLISHED, name: "", key: b"q".to_vec(), writer: 1 };
        let note = note_of(std::slice::from_ref(&event), &batch, &tables, &[]).unwrap();
        let mut keys = Changed::new();
        read_note(&note, &mut keys);
        let q = [
            command(&[b"XGROUP", b"SETID", b"q", b"g", b"3-0", b"ENTRIESREAD", b"3"]),
            command(&[b"XGROUP", b"CREATECONSUMER", b"q", b"g", b"carol"]),
            command(&[b"XGROUP", b"CREATE", b"q", b"new", b"0-0", b"ENTRIESREAD", b"-1"]),
            command(&[b"XGROUP", b"CREATECONSUMER", b"q", b"new", b"x"]),
            command(&[
                b"XCLAIM",
                b"q",
                b"g",
                b"carol",
                b"0",
                b"2-0",
                b"TIME",
                b"1000",
                b"RETRYCOUNT",
                b"2",
                b"FORCE",
                b"JUSTID",
            ]),
            command(&[b"XACK", b"q", b"g", b"1-0"]),
            command(&[b"XACK", b"q", b"old", b"1-0"]),
            command(&[b"XGROUP", b"DELCONSUMER", b"q", b"g", b"bob"]),
            command(&[b"XGROUP", b"DESTROY", b"q", b"old"]),
        ]
        .concat();
        let expected: Changed = [(&b"q"[..], Word::Commands(vec![&q[..]], None))].into_iter().collect();
        assert_eq!(keys, expected);

        // A group first read after the batch wrote it: the stream goes whole.
        let unknown = [TableRead { groups: vec![(b"g".to_vec(), GroupBefore::Unknown)], ..tables[0].clone() }];
        let mut batch = scaledkv::WriteBatch::new();
        batch.put(&member_key(5, &group_field(b"g")), &field(group(3, Some(3), &[]).encode()));
        let note = note_of(std::slice::from_ref(&event), &batch, &unknown, &[]).unwrap();
        let mut keys = Changed::new();
        read_note(&note, &mut keys);
        assert_eq!(keys, [(&b"q"[..], Word::Read)].into_iter().collect::<Changed>());
        // Another read of the stub, as a transaction's command notes, knows it.
        let both = [unknown[0].clone(), tables[0].clone()];
        let note = note_of(std::slice::from_ref(&event), &batch, &both, &[]).unwrap();
        let mut keys = Changed::new();
        read_note(&note, &mut keys);
        let setid = command(&[b"XGROUP", b"SETID", b"q", b"g", b"3-0", b"ENTRIESREAD", b"3"]);
        let gone = [
            command(&[b"XGROUP", b"DELCONSUMER", b"q", b"g", b"alice"]),
            command(&[b"XGROUP", b"DELCONSUMER", b"q", b"g", b"bob"]),
        ]
        .concat();
        let whole = [setid, gone].concat();
        assert_eq!(keys, [(&b"q"[..], Word::Commands(vec![&whole[..]], None))].into_iter().collect::<Changed>());
    }

    #[test]
    fn a_big_delta_goes_as_several_commands_and_one_command_goes_alone() {
        use crate::commands::table::member_key;
        use crate::keyspace::TYPE_SET_TABLE;
        let mut batch = scaledkv::WriteBatch::new();
        for i in 0..2500 {
            batch.put(&member_key(3, format!("m{i:05}").as_bytes()), b"\x01");
        }
        let tables = [table_read(b"s", TYPE_SET_TABLE, 3, None)];
        let event = Event { class: crate::notify::SET, name: "sadd", key: b"s".to_vec(), writer: 1 };
        let note = note_of(&[event], &batch, &tables, &[]).unwrap();
        let mut keys = Changed::new();
        read_note(&note, &mut keys);
        let Word::Commands(pieces, None) = &keys[&b"s"[..]] else { panic!("a delta") };
        assert_eq!(commands_in(pieces[0]), Some(3), "1024 + 1024 + 452 members");
        assert!(pieces[0].starts_with(b"*1026\r\n$4\r\nSADD\r\n$1\r\ns\r\n$6\r\nm00000\r\n"));
        assert!(!one_command(&keys, false));
        let mut one = Changed::new();
        let set = command(&[b"SET", b"k", b"v"]);
        one.insert(b"k", Word::Commands(vec![&set], None));
        assert!(one_command(&one, false));
        assert!(!one_command(&one, true), "with a flush: two");
        one.insert(b"k", Word::Read);
        assert!(one_command(&one, false));
        assert_eq!(commands_in(b"*1\r\n$4\r\nPING"), None, "cut");
    }

    proptest::proptest! {
        /// A note (the server's own bytes, but read back after the engine
        /// held them) never panics the drain, whatever its bytes.
        #[test]
        fn any_bytes_read_as_a_note_without_a_panic(bytes in proptest::collection::vec(0u8..4, 0..64)) {
            let mut keys = Changed::new();
            read_note(&bytes, &mut keys);
        }

        /// Every key a batch's events name comes back from its note, with
        /// the last command for it; strings inline, others to read.
        #[test]
        fn notes_name_every_changed_key(writes in proptest::collection::vec((0u8..6, 0u8..3, 0usize..40), 1..20)) {
            let mut batch = scaledkv::WriteBatch::new();
            let mut events = Vec::new();
            let mut expected = std::collections::BTreeMap::new();
            for (key, kind, len) in writes {
                let key = vec![b'k', key];
                let value: Vec<u8> = std::iter::once(if kind == 1 { 4 } else { 0 }).chain(vec![b'v'; len]).collect();
                match kind {
                    2 => batch.delete(&key),
                    _ => batch.put(&key, &value),
                }
                events.push(Event { class: crate::notify::GENERIC, name: "x", key: key.clone(), writer: 1 });
                let mut command = Vec::new();
                match kind {
                    0 => put_request(&mut command, &[b"SET", &key, &value[1..]]),
                    2 => put_request(&mut command, &[b"DEL", &key]),
                    _ => {}
                }
                expected.insert(key, (kind != 1).then_some(command));
            }
            let note = note_of(&events, &batch, &[], &[]).unwrap();
            let mut keys = Changed::new();
            proptest::prop_assert!(!read_note(&note, &mut keys));
            let got: std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>> = keys
                .into_iter()
                .map(|(k, word)| match word {
                    Word::Read => (k.to_vec(), None),
                    Word::Commands(pieces, tail) => (k.to_vec(), Some([pieces.concat(), tail.unwrap_or_default().to_vec()].concat())),
                })
                .collect();
            proptest::prop_assert_eq!(got, expected);
        }
    }

    #[test]
    fn a_kept_history_is_taken_once_and_only_where_it_describes_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let history =
            History { replid: "a".repeat(40), start: 1000, seq: 77, backlog: b"*1\r\n$4\r\nPING\r\n".to_vec() };
        let file = history.encode();
        assert_eq!(History::decode(&file), Ok(history.clone()));
        let path = dir.path().join(HISTORY_FILE);
        let keep = |bytes: &[u8]| std::fs::write(&path, bytes).unwrap();
        keep(&file);
        assert_eq!(History::take(dir.path(), 77, true), Some(history.clone()));
        assert!(!path.exists(), "taken once");
        assert_eq!(History::take(dir.path(), 77, true), None);
        keep(&file);
        assert_eq!(History::take(dir.path(), 78, true), None, "the data moved on");
        assert!(!path.exists());
        keep(&file);
        assert_eq!(History::take(dir.path(), 77, false), None, "a replica or an import starts a history of its own");
        for cut in [0, 8, 12, 20, 31, file.len() - 1] {
            keep(&file[..cut]);
            assert_eq!(History::take(dir.path(), 77, true), None, "cut at {cut}");
        }
        for at in 8..file.len() {
            let mut bad = file.clone();
            bad[at] ^= 0x10;
            assert!(History::decode(&bad).is_err(), "a flipped bit at {at}");
        }
    }

    #[test]
    fn the_backlog_keeps_pieces_and_reads_from_any_offset_it_holds() {
        let mut backlog = Backlog::default();
        backlog.push(b"abc".to_vec());
        backlog.push(Vec::new());
        backlog.push(b"defgh".to_vec());
        assert_eq!((backlog.start, backlog.end()), (0, 8));
        assert_eq!(&backlog.read(0).unwrap()[..], b"abc");
        assert_eq!(&backlog.read(2).unwrap()[..], b"c");
        assert_eq!(&backlog.read(3).unwrap()[..], b"defgh");
        assert_eq!(&backlog.read(6).unwrap()[..], b"gh");
        assert_eq!(backlog.read(8).unwrap().len(), 0, "the end: nothing yet");
        assert!(backlog.read(9).is_none());
        backlog.trim(4);
        assert_eq!(backlog.start, 3, "only whole pieces go");
        assert!(backlog.read(2).is_none());
        assert_eq!(&backlog.read(4).unwrap()[..], b"efgh");
        backlog.trim(8);
        assert_eq!((backlog.start, backlog.len), (8, 0));
        backlog.push(b"ij".to_vec());
        assert_eq!(&backlog.read(8).unwrap()[..], b"ij");
        backlog.clear();
        assert_eq!((backlog.start, backlog.end()), (10, 10));
    }

    #[test]
    fn a_drain_goes_in_transactions_of_bounded_size() {
        let add = |commands: &mut Transactions, n: usize| {
            commands.open();
            put_request(&mut commands.out, &[b"SET", b"k", &vec![b'v'; n]]);
        };
        let mut one = Transactions::new(false);
        add(&mut one, 10);
        let alone = one.finish();
        assert!(alone.starts_with(b"*3\r\n$3\r\nSET"), "a command alone needs no MULTI");
        let mut many = Transactions::new(true);
        for _ in 0..5 {
            add(&mut many, TRANSACTION_BYTES / 3);
        }
        add(&mut many, 2 * TRANSACTION_BYTES);
        let text = many.finish();
        let count = |word: &[u8]| text.windows(word.len()).filter(|w| w == &word).count();
        // Three commands fill the first (it closes once past the size),
        // then two and the big one.
        assert_eq!((count(b"MULTI"), count(b"EXEC")), (2, 2));
        assert!(text.ends_with(b"\r\n*1\r\n$4\r\nEXEC\r\n"));
    }
}
