//! The command table and the executor: arity, authentication, MULTI
//! queueing, key locks, one atomic batch per command, and replies sent only
//! once that batch is durable.

pub mod acl;
mod bits;
mod diagnostics;
pub mod dump;
pub mod functions;
mod geo;
mod hashes;
mod hll;
mod keys;
pub(crate) mod list_chunks;
mod lists;
mod migrate;
pub mod picks;
mod pubsub;
pub mod ranks;
pub mod redis_commands;
mod redis_docs;
pub mod scripting;
mod server;
mod sets;
mod sort;
mod standalone;
mod streams;
mod strings;
pub mod table;
mod tx;
pub(crate) mod zsets;

use bytes::Bytes;
use smallvec::SmallVec;
use tokio::runtime::RuntimeFlavor;

use crate::conn::ConnState;
use crate::keyspace::{FenceEdit, KeyLocks, Ready, Stripe, Writer, Writes};
use crate::pending::Pending;
use crate::resp::Out;
use crate::server::Shared;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub use keys::Cursors;
pub use server::{clear_all, config_set, config_set_at_start, cpu_seconds, REDIS_VERSION};
pub use streams::read_keys as stream_read_keys;
pub use tx::exec;

/// A command's failure, replied as a RESP error.
#[derive(Debug)]
pub enum CmdError {
    Msg(String),
    Syntax,
    NotInteger,
    NotFloat,
    WrongType,
    TooBig,
    Engine(scaledkv::Error),
    /// A blocking command found nothing to take: the connection waits (at
    /// most this long; None: until something comes) and runs it again.
    /// Inside MULTI it answers at once: a null bulk string where the flag
    /// says so (BRPOPLPUSH, BLMOVE), else a null array.
    Blocked(Option<std::time::Duration>, bool),
    /// A container's unknown subcommand, or a subcommand given the wrong
    /// number of arguments: what Redis refuses before the command runs
    /// (SLOWLOG leaves it out).
    Refused(String),
    /// A write in a run of a pipeline's writes found its change too big
    /// for one engine batch (an XADD whose MAXLEN trims a million
    /// entries): undone, it runs again alone, where it may commit in
    /// pieces (`Writes::piece_due`). Never a reply.
    RunAlone,
}

impl CmdError {
    pub fn text(&self) -> String {
        match self {
            CmdError::Msg(text) | CmdError::Refused(text) => text.clone(),
            CmdError::Syntax => "ERR syntax error".into(),
            CmdError::NotInteger => "ERR value is not an integer or out of range".into(),
            CmdError::NotFloat => "ERR value is not a valid float".into(),
            CmdError::WrongType => "WRONGTYPE Operation against a key holding the wrong kind of value".into(),
            CmdError::TooBig => "ERR string exceeds maximum allowed size (proto-max-bulk-len)".into(),
            CmdError::Engine(error) => engine_error_text(error),
            CmdError::Blocked(..) => "ERR nothing to pop".into(),
            CmdError::RunAlone => "ERR the command must run alone".into(),
        }
    }
}

/// Redis's refusal of a write on a read-only replica.
pub const READ_ONLY_ERROR: &str = "READONLY You can't write against a read only replica.";
/// memcached's words for it.
pub const READ_ONLY_MEMCACHED: &str = "SERVER_ERROR read only replica";

/// Redis's refusal of a write while `min-replicas-to-write` is not met.
pub const NO_REPLICAS_ERROR: &str = "NOREPLICAS Not enough good replicas to write.";

/// The refusal of a write on a read-only replica, in a connection's
/// protocol.
fn read_only_error(memcached: bool) -> &'static str {
    if memcached {
        READ_ONLY_MEMCACHED
    } else {
        READ_ONLY_ERROR
    }
}

/// Why a batch did not commit.
#[derive(Debug)]
pub enum CommitError {
    Engine(scaledkv::Error),
    /// A client's batch met the closed write gate (`crate::write_gate`):
    /// the server became a replica while it waited.
    ReadOnly,
}

impl From<scaledkv::Error> for CommitError {
    fn from(error: scaledkv::Error) -> Self {
        CommitError::Engine(error)
    }
}

impl From<crate::write_gate::Closed> for CommitError {
    fn from(_: crate::write_gate::Closed) -> Self {
        CommitError::ReadOnly
    }
}

impl From<CommitError> for CmdError {
    fn from(error: CommitError) -> Self {
        match error {
            CommitError::Engine(error) => CmdError::Engine(error),
            CommitError::ReadOnly => err(READ_ONLY_ERROR),
        }
    }
}

impl std::fmt::Display for CommitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommitError::Engine(error) => error.fmt(f),
            CommitError::ReadOnly => f.write_str("refused: the server follows a master"),
        }
    }
}

impl CommitError {
    /// The error reply, in `out`'s protocol.
    pub fn text_for(&self, out: &Out) -> String {
        match self {
            CommitError::Engine(error) => engine_error_text(error),
            CommitError::ReadOnly => read_only_error(out.memcached).into(),
        }
    }
}

pub fn engine_error_text(error: &scaledkv::Error) -> String {
    match error {
        scaledkv::Error::KeyTooLarge { max, .. } => format!("ERR key is too large (max {max} bytes)"),
        scaledkv::Error::ValueTooLarge { .. } => CmdError::TooBig.text(),
        other => format!("ERR storage error: {other}"),
    }
}

/// A collection's stored bytes that are not in its layout (a damaged
/// value, which the log's checksums leave to a bug): an error, not a panic.
impl From<crate::hash::Corrupt> for CmdError {
    fn from(_: crate::hash::Corrupt) -> Self {
        err("ERR corrupt value (the stored bytes are not in the layout of their type)")
    }
}

impl From<scaledkv::Error> for CmdError {
    fn from(error: scaledkv::Error) -> Self {
        CmdError::Engine(error)
    }
}

pub fn err(text: impl Into<String>) -> CmdError {
    CmdError::Msg(text.into())
}

/// Redis's reply to an unknown subcommand of `container` (CLIENT, CONFIG ...,
/// named in lower case).
pub fn unknown_subcommand(container: &str, sub: &[u8]) -> CmdError {
    let sub: String = String::from_utf8_lossy(sub).chars().take(128).collect();
    CmdError::Refused(format!("ERR unknown subcommand '{sub}'. Try {} HELP.", container.to_ascii_uppercase()))
}

/// Redis's `addReplySubcommandSyntaxError`: a subcommand its container
/// (named in upper case) does not know, or given the wrong number of
/// arguments.
pub fn subcommand_syntax(container: &str, sub: &[u8]) -> CmdError {
    let sub: String = String::from_utf8_lossy(sub).chars().take(128).collect();
    err(format!("ERR unknown subcommand or wrong number of arguments for '{sub}'. Try {container} HELP."))
}

/// A container's subcommand, checked against `table` (name, Redis's
/// arity) as Redis checks it before the command runs: the subcommand in
/// lower case, or Redis's unknown-subcommand or arity error.
pub fn subcommand(container: &str, args: &[Bytes], table: &[(&str, i32)]) -> Result<String, CmdError> {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    let Some(&(_, arity)) = table.iter().find(|(name, _)| *name == sub) else {
        return Err(unknown_subcommand(container, &args[1]));
    };
    if !arity_ok(arity, args.len()) {
        return Err(subcommand_arity(container, &sub));
    }
    Ok(sub)
}

/// Redis's arity rule: exactly `arity` arguments, or at least `-arity`.
pub fn arity_ok(arity: i32, argc: usize) -> bool {
    let argc = argc as i32;
    if arity >= 0 {
        argc == arity
    } else {
        argc >= -arity
    }
}

/// Redis's reply to a known subcommand given the wrong number of arguments.
pub fn subcommand_arity(container: &str, sub: &str) -> CmdError {
    CmdError::Refused(format!("ERR wrong number of arguments for '{container}|{sub}' command"))
}

pub type CmdResult = Result<(), CmdError>;

/// ScaledKV has one database, as Redis with `databases 1`: any other index
/// (SELECT, COPY ... DB, MOVE, SWAPDB) gets Redis's error.
pub fn only_database_zero(index: i64) -> CmdResult {
    if index != 0 {
        return Err(err("ERR DB index is out of range"));
    }
    Ok(())
}

/// Writes keys (takes their locks; its batch is committed before replying).
pub const WRITE: u32 = 1;
/// Allowed before AUTH when a password is set.
pub const NO_AUTH: u32 = 1 << 1;
/// Runs at once inside MULTI instead of being queued.
pub const TX_CONTROL: u32 = 1 << 2;
/// Touches every key (FLUSHALL): locks every stripe.
pub const ALL_KEYS: u32 = 1 << 3;
pub const READONLY: u32 = 1 << 4;
pub const ADMIN: u32 = 1 << 5;
pub const FAST: u32 = 1 << 6;
/// Not allowed inside MULTI (Redis's CMD_NO_MULTI).
pub const NO_MULTI: u32 = 1 << 7;
/// May wait for another client's write (BLPOP ...); never part of a run.
pub const BLOCKING: u32 = 1 << 8;
/// A write that reads nothing (memcached's `set`): it joins a run sharing
/// its stripes (`is_blind`).
pub const BLIND: u32 = 1 << 9;
/// Blocks when given a BLOCK option (XREAD, XREADGROUP): never part of a
/// run then. Not BLOCKING, which would keep it out of scripts.
pub const BLOCK_OPTION: u32 = 1 << 10;
/// Refused before it runs or is queued, as Redis refuses its protected
/// commands when their `enable-<name>-command` is off (DEBUG).
pub const PROTECTED: u32 = 1 << 11;
/// A write whose reads of keys count as keyspace hits and misses (INFO's
/// `keyspace_hits`): Redis counts the lookups of the keys a command reads
/// (`lookupKeyRead`), not those of the keys a write changes
/// (`lookupKeyWrite`), so a read-only command's lookups count, a write's
/// do not, but for these (GETSET, the sources of SINTERSTORE, COPY or
/// SORT ... STORE); their reads of a key they only write are peeks
/// (`Ctx::peek`).
pub const READS_KEYS: u32 = 1 << 12;

pub type Handler = fn(&mut Ctx<'_>, &[Bytes]) -> CmdResult;

pub struct Command {
    /// Lower case, as Redis names commands in errors and COMMAND replies.
    pub name: &'static str,
    /// Redis's convention: `n` exactly n arguments (name included), `-n` at
    /// least n.
    pub arity: i32,
    pub flags: u32,
    /// First key, last key (negative: from the end), step; 0 = no keys.
    pub keys: (i32, i32, i32),
    pub group: &'static str,
    pub summary: &'static str,
    pub run: Handler,
}

impl Command {
    pub fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    /// Runs the command's handler over `writes`.
    pub fn call(
        &self,
        shared: &Shared,
        conn: &mut ConnState,
        out: &mut Out,
        writes: &mut Writes,
        args: &[Bytes],
    ) -> CmdResult {
        let reads_count = !self.has(WRITE) || self.has(READS_KEYS);
        let new_keys = crate::notify::before_write(shared, writes, self, args);
        let result = (self.run)(&mut Ctx { shared, conn, out, writes, reads_count }, args);
        if let (Ok(()), Some(new_keys)) = (&result, new_keys) {
            crate::notify::after_write(shared, writes, new_keys, conn.info.id);
        }
        result
    }

    fn arity_ok(&self, argc: usize) -> bool {
        arity_ok(self.arity, argc)
    }

    /// The key arguments of `args`, by the table's key positions.
    pub fn key_args<'a>(&self, args: &'a [Bytes]) -> impl Iterator<Item = &'a Bytes> + 'a {
        let (first, last, step) = self.keys;
        let len = args.len() as i32;
        let last = if last < 0 { len + last } else { last.min(len - 1) };
        let (first, step) = if first > 0 && step > 0 { (first, step) } else { (len, 1) };
        (first..=last).step_by(step as usize).map(move |i| &args[i as usize])
    }

    /// Sorted, distinct lock stripes of this invocation's keys.
    pub fn stripes(&self, args: &[Bytes], into: &mut impl Extend<Stripe>) {
        if self.has(ALL_KEYS) {
            into.extend(KeyLocks::all());
        } else {
            into.extend(self.key_args(args).map(|key| KeyLocks::stripe(key)));
        }
    }
}

/// What a handler works with.
pub struct Ctx<'a> {
    pub shared: &'a Shared,
    pub conn: &'a mut ConnState,
    pub out: &'a mut Out,
    pub writes: &'a mut Writes,
    /// Whether `read` counts keyspace hits and misses (`READS_KEYS`).
    pub reads_count: bool,
}

impl Ctx<'_> {
    pub fn db(&self) -> &scaledkv::Db {
        &self.shared.db
    }

    /// Notes keyspace notification `name` of `class` for `key`, published
    /// once this command's writes commit (nothing unless
    /// `notify-keyspace-events` asks for the class), and the change for
    /// clients that track keys (`crate::tracking`).
    pub fn notify(&mut self, class: u32, name: &'static str, key: &[u8]) {
        let flags = self.shared.notify_flags.load(Ordering::Relaxed);
        // Debug builds note every event, for commit's check.
        if crate::notify::wanted(flags, class)
            || self.shared.tracking.active()
            || self.shared.master.streaming()
            || cfg!(debug_assertions)
        {
            self.writes.note_event(class, name, key, self.conn.info.id);
        }
    }

    /// Notes a change to `key` that Redis publishes no keyspace event for
    /// (`notify::UNPUBLISHED`), so that it reaches the replicas: they learn
    /// what a batch changed from the keys its events name.
    pub fn note_unpublished(&mut self, key: &[u8]) {
        if self.shared.master.streaming() || cfg!(debug_assertions) {
            self.writes.note_event(crate::notify::UNPUBLISHED, "", key, self.conn.info.id);
        }
    }

    /// A *STORE's result at `key` (SINTERSTORE, ZUNIONSTORE, SORT ...
    /// STORE, BITOP): event `event` of `class` and `store` where the result
    /// is not `empty`; else `del` and `store` (which deletes) where a key
    /// was, and nothing where none was, as Redis tells and writes.
    pub fn store_result(
        &mut self,
        key: &[u8],
        empty: bool,
        class: u32,
        event: &'static str,
        store: impl FnOnce(&mut Self) -> CmdResult,
    ) -> CmdResult {
        if !empty {
            self.notify(class, event, key);
        } else if self.peek(key)?.is_some() {
            self.notify(crate::notify::GENERIC, "del", key);
        } else {
            return Ok(());
        }
        store(self)
    }

    /// Runs `store`, which writes a collection back to `key`, between its
    /// keyspace events, in Redis's order: `event` of `class`, then `del`
    /// when the collection is left `emptied` (and so removed).
    pub fn store_noting(
        &mut self,
        class: u32,
        event: &'static str,
        key: &[u8],
        emptied: bool,
        store: impl FnOnce(&mut Self) -> CmdResult,
    ) -> CmdResult {
        self.notify(class, event, key);
        store(self)?;
        if emptied {
            self.notify(crate::notify::GENERIC, "del", key);
        }
        Ok(())
    }

    /// Whether a blocking command may take from `key` now: clients
    /// blocked on it are served in the order they blocked
    /// (`crate::waiters`).
    pub fn may_take(&self, key: &[u8]) -> bool {
        self.shared.waiters.may_take(key, self.conn.ticket)
    }
}

macro_rules! commands {
    ($($name:literal, $arity:expr, $flags:expr, $keys:expr, $group:literal, $run:path, $summary:literal;)*) => {
        pub static TABLE: &[Command] = &[
            $(Command { name: $name, arity: $arity, flags: $flags, keys: $keys, group: $group, summary: $summary, run: $run },)*
        ];
    };
}

const NONE: (i32, i32, i32) = (0, 0, 0);
const ONE: (i32, i32, i32) = (1, 1, 1);
const ALL_ARGS: (i32, i32, i32) = (1, -1, 1);

commands! {
    "ping", -1, FAST, NONE, "connection", server::ping, "Returns the server's liveliness response.";
    "echo", 2, FAST, NONE, "connection", server::echo, "Returns the given string.";
    "quit", -1, NO_AUTH | TX_CONTROL | FAST, NONE, "connection", server::quit, "Closes the connection.";
    "hello", -1, NO_AUTH | FAST, NONE, "connection", server::hello, "Handshakes with the server.";
    "auth", -2, NO_AUTH | FAST | NO_MULTI, NONE, "connection", server::auth, "Authenticates the connection.";
    "select", 2, FAST, NONE, "connection", server::select, "Changes the selected database.";
    "swapdb", 3, WRITE | FAST, NONE, "server", server::swapdb, "Swaps two Redis databases.";
    "client", -2, 0, NONE, "connection", server::client, "A container for client connection commands.";
    "reset", 1, NO_AUTH | TX_CONTROL | FAST, NONE, "connection", server::reset, "Resets the connection.";
    "dbsize", 1, READONLY | FAST, NONE, "server", server::dbsize, "Returns the number of keys in the database.";
    "flushdb", -1, WRITE | ALL_KEYS, NONE, "server", server::flushall, "Removes all keys from the current database.";
    "flushall", -1, WRITE | ALL_KEYS, NONE, "server", server::flushall, "Removes all keys from all databases.";
    "info", -1, 0, NONE, "server", server::info, "Returns information and statistics about the server.";
    "config", -2, ADMIN, NONE, "server", server::config, "A container for server configuration commands.";
    "memory", -2, 0, NONE, "server", server::memory, "A container for memory diagnostics commands.";
    "command", -1, 0, NONE, "server", server::command, "Returns detailed information about all commands.";
    "time", 1, FAST, NONE, "server", server::time, "Returns the server time.";
    "role", 1, FAST, NONE, "server", server::role, "Returns the replication role.";
    "shutdown", -1, ADMIN | NO_MULTI, NONE, "server", server::shutdown, "Synchronously saves the database(s) to disk and shuts down the Redis server.";
    "save", 1, ADMIN | NO_MULTI, NONE, "server", server::save, "Synchronously saves the database(s) to disk.";
    "bgsave", -1, ADMIN, NONE, "server", server::save, "Asynchronously saves the database(s) to disk.";
    "wait", 3, BLOCKING, NONE, "generic", server::wait, "Blocks until the asynchronous replication of all preceding write commands sent by the connection is completed.";
    "lastsave", 1, FAST, NONE, "server", server::lastsave, "Returns the Unix timestamp of the last successful save to disk.";
    "get", 2, READONLY | FAST, ONE, "string", strings::get, "Returns the string value of a key.";
    "set", -3, WRITE | READS_KEYS, ONE, "string", strings::set, "Sets the string value of a key, ignoring its type.";
    "setnx", 3, WRITE | FAST, ONE, "string", strings::setnx, "Set the string value of a key only when the key doesn't exist.";
    "setex", 4, WRITE, ONE, "string", strings::setex, "Sets the string value and expiration time of a key.";
    "psetex", 4, WRITE, ONE, "string", strings::psetex, "Sets both string value and expiration time in milliseconds of a key.";
    "getset", 3, WRITE | READS_KEYS | FAST, ONE, "string", strings::getset, "Returns the previous string value of a key after setting it to a new value.";
    "getdel", 2, WRITE | READS_KEYS | FAST, ONE, "string", strings::getdel, "Returns the string value of a key after deleting the key.";
    "getex", -2, WRITE | READS_KEYS | FAST, ONE, "string", strings::getex, "Returns the string value of a key after setting its expiration time.";
    "mget", -2, READONLY | FAST, ALL_ARGS, "string", strings::mget, "Atomically returns the string values of one or more keys.";
    "mset", -3, WRITE, (1, -1, 2), "string", strings::mset, "Atomically creates or modifies the string values of one or more keys.";
    "msetnx", -3, WRITE, (1, -1, 2), "string", strings::msetnx, "Atomically modifies the string values of one or more keys only when all keys don't exist.";
    "append", 3, WRITE, ONE, "string", strings::append, "Appends a string to the value of a key. Creates the key if it doesn't exist.";
    "strlen", 2, READONLY | FAST, ONE, "string", strings::strlen, "Returns the length of a string value.";
    "incr", 2, WRITE | FAST, ONE, "string", strings::incr, "Increments the integer value of a key by one.";
    "decr", 2, WRITE | FAST, ONE, "string", strings::decr, "Decrements the integer value of a key by one.";
    "incrby", 3, WRITE | FAST, ONE, "string", strings::incrby, "Increments the integer value of a key by a number.";
    "decrby", 3, WRITE | FAST, ONE, "string", strings::decrby, "Decrements a number from the integer value of a key.";
    "incrbyfloat", 3, WRITE | FAST, ONE, "string", strings::incrbyfloat, "Increment the floating point value of a key by a number.";
    "getrange", 4, READONLY, ONE, "string", strings::getrange, "Returns a substring of the string stored at a key.";
    "substr", 4, READONLY, ONE, "string", strings::getrange, "Returns a substring from a string value.";
    "setrange", 4, WRITE, ONE, "string", strings::setrange, "Overwrites a part of a string value with another by an offset.";
    "lcs", -3, READONLY, (1, 2, 1), "string", strings::lcs, "Finds the longest common substring.";
    "setbit", 4, WRITE, ONE, "bitmap", bits::setbit, "Sets or clears the bit at offset of the string value. Creates the key if it doesn't exist.";
    "getbit", 3, READONLY | FAST, ONE, "bitmap", bits::getbit, "Returns a bit value by offset.";
    "bitcount", -2, READONLY, ONE, "bitmap", bits::bitcount, "Counts the number of set bits (population counting) in a string.";
    "bitpos", -3, READONLY, ONE, "bitmap", bits::bitpos, "Finds the first set (1) or clear (0) bit in a string.";
    "bitop", -4, WRITE | READS_KEYS, (2, -1, 1), "bitmap", bits::bitop, "Performs bitwise operations on multiple strings, and stores the result.";
    "bitfield", -2, WRITE | READS_KEYS, ONE, "bitmap", bits::bitfield, "Performs arbitrary bitfield integer operations on strings.";
    "bitfield_ro", -2, READONLY | FAST, ONE, "bitmap", bits::bitfield_ro, "Performs arbitrary read-only bitfield integer operations on strings.";
    "hset", -4, WRITE | FAST, ONE, "hash", hashes::hset, "Creates or modifies the value of a field in a hash.";
    "hsetnx", 4, WRITE | FAST, ONE, "hash", hashes::hsetnx, "Sets the value of a field in a hash only when the field doesn't exist.";
    "hmset", -4, WRITE | FAST, ONE, "hash", hashes::hmset, "Sets the values of multiple fields.";
    "hget", 3, READONLY | FAST, ONE, "hash", hashes::hget, "Returns the value of a field in a hash.";
    "hmget", -3, READONLY | FAST, ONE, "hash", hashes::hmget, "Returns the values of all fields in a hash.";
    "hgetall", 2, READONLY, ONE, "hash", hashes::hgetall, "Returns all fields and values in a hash.";
    "hkeys", 2, READONLY, ONE, "hash", hashes::hkeys, "Returns all fields in a hash.";
    "hvals", 2, READONLY, ONE, "hash", hashes::hvals, "Returns all values in a hash.";
    "hdel", -3, WRITE | FAST, ONE, "hash", hashes::hdel, "Deletes one or more fields and their values from a hash. Deletes the hash if no fields remain.";
    "hlen", 2, READONLY | FAST, ONE, "hash", hashes::hlen, "Returns the number of fields in a hash.";
    "hstrlen", 3, READONLY | FAST, ONE, "hash", hashes::hstrlen, "Returns the length of the value of a field.";
    "hexists", 3, READONLY | FAST, ONE, "hash", hashes::hexists, "Determines whether a field exists in a hash.";
    "hincrby", 4, WRITE | FAST, ONE, "hash", hashes::hincrby, "Increments the integer value of a field in a hash by a number. Uses 0 as initial value if the field doesn't exist.";
    "hincrbyfloat", 4, WRITE | FAST, ONE, "hash", hashes::hincrbyfloat, "Increments the floating point value of a field by a number. Uses 0 as initial value if the field doesn't exist.";
    "hrandfield", -2, READONLY, ONE, "hash", hashes::hrandfield, "Returns one or more random fields from a hash.";
    "hscan", -3, READONLY, ONE, "hash", hashes::hscan, "Iterates over fields and values of a hash.";
    "lpush", -3, WRITE | FAST, ONE, "list", lists::lpush, "Prepends one or more elements to a list. Creates the key if it doesn't exist.";
    "rpush", -3, WRITE | FAST, ONE, "list", lists::rpush, "Appends one or more elements to a list. Creates the key if it doesn't exist.";
    "lpushx", -3, WRITE | FAST, ONE, "list", lists::lpushx, "Prepends one or more elements to a list only when the list exists.";
    "rpushx", -3, WRITE | FAST, ONE, "list", lists::rpushx, "Appends an element to a list only when the list exists.";
    "lpop", -2, WRITE | FAST, ONE, "list", lists::lpop, "Returns the first elements in a list after removing it. Deletes the list if the last element was popped.";
    "rpop", -2, WRITE | FAST, ONE, "list", lists::rpop, "Returns and removes the last elements of a list. Deletes the list if the last element was popped.";
    "llen", 2, READONLY | FAST, ONE, "list", lists::llen, "Returns the length of a list.";
    "lrange", 4, READONLY, ONE, "list", lists::lrange, "Returns a range of elements from a list.";
    "lindex", 3, READONLY, ONE, "list", lists::lindex, "Returns an element from a list by its index.";
    "lset", 4, WRITE, ONE, "list", lists::lset, "Sets the value of an element in a list by its index.";
    "ltrim", 4, WRITE, ONE, "list", lists::ltrim, "Removes elements from both ends a list. Deletes the list if all elements were trimmed.";
    "lrem", 4, WRITE, ONE, "list", lists::lrem, "Removes elements from a list. Deletes the list if the last element was removed.";
    "linsert", 5, WRITE, ONE, "list", lists::linsert, "Inserts an element before or after another element in a list.";
    "rpoplpush", 3, WRITE, (1, 2, 1), "list", lists::rpoplpush, "Returns the last element of a list after removing and pushing it to another list. Deletes the list if the last element was popped.";
    "lmove", 5, WRITE, (1, 2, 1), "list", lists::lmove, "Returns an element after popping it from one list and pushing it to another. Deletes the list if the last element was moved.";
    "lpos", -3, READONLY, ONE, "list", lists::lpos, "Returns the index of matching elements in a list.";
    // Its keys move with numkeys: every argument's stripe is locked.
    "lmpop", -4, WRITE, ALL_ARGS, "list", lists::lmpop, "Returns multiple elements from a list after removing them. Deletes the list if the last element was popped.";
    "blmpop", -5, WRITE | BLOCKING, ALL_ARGS, "list", lists::blmpop, "Pops the first element from one of multiple lists. Blocks until an element is available otherwise. Deletes the list if the last element was popped.";
    "blpop", -3, WRITE | BLOCKING, (1, -2, 1), "list", lists::blpop, "Removes and returns the first element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.";
    "brpop", -3, WRITE | BLOCKING, (1, -2, 1), "list", lists::brpop, "Removes and returns the last element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.";
    "brpoplpush", 4, WRITE | BLOCKING, (1, 2, 1), "list", lists::brpoplpush, "Pops an element from a list, pushes it to another list and returns it. Block until an element is available otherwise. Deletes the list if the last element was popped.";
    "blmove", 6, WRITE | BLOCKING, (1, 2, 1), "list", lists::blmove, "Pops an element from a list, pushes it to another list and returns it. Blocks until an element is available otherwise. Deletes the list if the last element was moved.";
    "sadd", -3, WRITE | FAST, ONE, "set", sets::sadd, "Adds one or more members to a set. Creates the key if it doesn't exist.";
    "srem", -3, WRITE | FAST, ONE, "set", sets::srem, "Removes one or more members from a set. Deletes the set if the last member was removed.";
    "smembers", 2, READONLY, ONE, "set", sets::smembers, "Returns all members of a set.";
    "sismember", 3, READONLY | FAST, ONE, "set", sets::sismember, "Determines whether a member belongs to a set.";
    "smismember", -3, READONLY | FAST, ONE, "set", sets::smismember, "Determines whether multiple members belong to a set.";
    "scard", 2, READONLY | FAST, ONE, "set", sets::scard, "Returns the number of members in a set.";
    "spop", -2, WRITE | FAST, ONE, "set", sets::spop, "Returns one or more random members from a set after removing them. Deletes the set if the last member was popped.";
    "srandmember", -2, READONLY, ONE, "set", sets::srandmember, "Get one or multiple random members from a set";
    "sinter", -2, READONLY, ALL_ARGS, "set", sets::sinter, "Returns the intersect of multiple sets.";
    "sintercard", -3, READONLY, NONE, "set", sets::sintercard, "Returns the number of members of the intersect of multiple sets.";
    "sinterstore", -3, WRITE | READS_KEYS, ALL_ARGS, "set", sets::sinterstore, "Stores the intersect of multiple sets in a key.";
    "sunion", -2, READONLY, ALL_ARGS, "set", sets::sunion, "Returns the union of multiple sets.";
    "sunionstore", -3, WRITE | READS_KEYS, ALL_ARGS, "set", sets::sunionstore, "Stores the union of multiple sets in a key.";
    "sdiff", -2, READONLY, ALL_ARGS, "set", sets::sdiff, "Returns the difference of multiple sets.";
    "sdiffstore", -3, WRITE | READS_KEYS, ALL_ARGS, "set", sets::sdiffstore, "Stores the difference of multiple sets in a key.";
    "smove", 4, WRITE | FAST, (1, 2, 1), "set", sets::smove, "Moves a member from one set to another.";
    "sscan", -3, READONLY, ONE, "set", sets::sscan, "Iterates over members of a set.";
    "zadd", -4, WRITE | FAST, ONE, "sorted-set", zsets::zadd, "Adds one or more members to a sorted set, or updates their scores. Creates the key if it doesn't exist.";
    "zincrby", 4, WRITE | FAST, ONE, "sorted-set", zsets::zincrby, "Increments the score of a member in a sorted set.";
    "zrem", -3, WRITE | FAST, ONE, "sorted-set", zsets::zrem, "Removes one or more members from a sorted set. Deletes the sorted set if all members were removed.";
    "zcard", 2, READONLY | FAST, ONE, "sorted-set", zsets::zcard, "Returns the number of members in a sorted set.";
    "zscore", 3, READONLY | FAST, ONE, "sorted-set", zsets::zscore, "Returns the score of a member in a sorted set.";
    "zmscore", -3, READONLY | FAST, ONE, "sorted-set", zsets::zmscore, "Returns the score of one or more members in a sorted set.";
    "zcount", 4, READONLY | FAST, ONE, "sorted-set", zsets::zcount, "Returns the count of members in a sorted set that have scores within a range.";
    "zlexcount", 4, READONLY | FAST, ONE, "sorted-set", zsets::zlexcount, "Returns the number of members in a sorted set within a lexicographical range.";
    "zrank", 3, READONLY | FAST, ONE, "sorted-set", zsets::zrank, "Returns the index of a member in a sorted set ordered by ascending scores.";
    "zrevrank", 3, READONLY | FAST, ONE, "sorted-set", zsets::zrevrank, "Returns the index of a member in a sorted set ordered by descending scores.";
    "zrange", -4, READONLY, ONE, "sorted-set", zsets::zrange, "Returns members in a sorted set within a range of indexes.";
    "zrangestore", -5, WRITE | READS_KEYS, (1, 2, 1), "sorted-set", zsets::zrangestore, "Stores a range of members from sorted set in a key.";
    "zrevrange", -4, READONLY, ONE, "sorted-set", zsets::zrevrange, "Returns members in a sorted set within a range of indexes in reverse order.";
    "zrangebyscore", -4, READONLY, ONE, "sorted-set", zsets::zrangebyscore, "Returns members in a sorted set within a range of scores.";
    "zrevrangebyscore", -4, READONLY, ONE, "sorted-set", zsets::zrevrangebyscore, "Returns members in a sorted set within a range of scores in reverse order.";
    "zrangebylex", -4, READONLY, ONE, "sorted-set", zsets::zrangebylex, "Returns members in a sorted set within a lexicographical range.";
    "zrevrangebylex", -4, READONLY, ONE, "sorted-set", zsets::zrevrangebylex, "Returns members in a sorted set within a lexicographical range in reverse order.";
    "zremrangebyrank", 4, WRITE, ONE, "sorted-set", zsets::zremrangebyrank, "Removes members in a sorted set within a range of indexes. Deletes the sorted set if all members were removed.";
    "zremrangebyscore", 4, WRITE, ONE, "sorted-set", zsets::zremrangebyscore, "Removes members in a sorted set within a range of scores. Deletes the sorted set if all members were removed.";
    "zremrangebylex", 4, WRITE, ONE, "sorted-set", zsets::zremrangebylex, "Removes members in a sorted set within a lexicographical range. Deletes the sorted set if all members were removed.";
    "zpopmin", -2, WRITE | FAST, ONE, "sorted-set", zsets::zpopmin, "Returns the lowest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.";
    "zpopmax", -2, WRITE | FAST, ONE, "sorted-set", zsets::zpopmax, "Returns the highest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.";
    "bzpopmin", -3, WRITE | BLOCKING, (1, -2, 1), "sorted-set", zsets::bzpopmin, "Removes and returns the member with the lowest score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.";
    "bzpopmax", -3, WRITE | BLOCKING, (1, -2, 1), "sorted-set", zsets::bzpopmax, "Removes and returns the member with the highest score from one or more sorted sets. Blocks until a member available otherwise. Deletes the sorted set if the last element was popped.";
    // Its keys move with numkeys: every argument's stripe is locked.
    "zmpop", -4, WRITE, ALL_ARGS, "sorted-set", zsets::zmpop, "Returns the highest- or lowest-scoring members from one or more sorted sets after removing them. Deletes the sorted set if the last member was popped.";
    "bzmpop", -5, WRITE | BLOCKING, ALL_ARGS, "sorted-set", zsets::bzmpop, "Removes and returns a member by score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.";
    "zrandmember", -2, READONLY, ONE, "sorted-set", zsets::zrandmember, "Returns one or more random members from a sorted set.";
    "zscan", -3, READONLY, ONE, "sorted-set", zsets::zscan, "Iterates over members and scores of a sorted set.";
    "zunion", -3, READONLY, ALL_ARGS, "sorted-set", zsets::zunion, "Returns the union of multiple sorted sets.";
    "zinter", -3, READONLY, ALL_ARGS, "sorted-set", zsets::zinter, "Returns the intersect of multiple sorted sets.";
    "zdiff", -3, READONLY, ALL_ARGS, "sorted-set", zsets::zdiff, "Returns the difference between multiple sorted sets.";
    "zunionstore", -4, WRITE | READS_KEYS, ALL_ARGS, "sorted-set", zsets::zunionstore, "Stores the union of multiple sorted sets in a key.";
    "zinterstore", -4, WRITE | READS_KEYS, ALL_ARGS, "sorted-set", zsets::zinterstore, "Stores the intersect of multiple sorted sets in a key.";
    "zdiffstore", -4, WRITE | READS_KEYS, ALL_ARGS, "sorted-set", zsets::zdiffstore, "Stores the difference of multiple sorted sets in a key.";
    "zintercard", -3, READONLY, NONE, "sorted-set", zsets::zintercard, "Returns the number of members of the intersect of multiple sorted sets.";
    "geoadd", -5, WRITE, ONE, "geo", geo::geoadd, "Adds one or more members to a geospatial index. The key is created if it doesn't exist.";
    "geopos", -2, READONLY, ONE, "geo", geo::geopos, "Returns the longitude and latitude of members from a geospatial index.";
    "geohash", -2, READONLY, ONE, "geo", geo::geohash, "Returns members from a geospatial index as geohash strings.";
    "geodist", -4, READONLY, ONE, "geo", geo::geodist, "Returns the distance between two members of a geospatial index.";
    // Its STORE key follows a keyword: every argument's stripe is locked.
    "georadius", -6, WRITE | READS_KEYS, ALL_ARGS, "geo", geo::georadius, "Queries a geospatial index for members within a distance from a coordinate, optionally stores the result.";
    "georadius_ro", -6, READONLY, ONE, "geo", geo::georadius_ro, "Returns members from a geospatial index that are within a distance from a coordinate.";
    "georadiusbymember", -5, WRITE | READS_KEYS, ALL_ARGS, "geo", geo::georadiusbymember, "Queries a geospatial index for members within a distance from a member, optionally stores the result.";
    "georadiusbymember_ro", -5, READONLY, ONE, "geo", geo::georadiusbymember_ro, "Returns members from a geospatial index that are within a distance from a member.";
    "geosearch", -7, READONLY, ONE, "geo", geo::geosearch, "Queries a geospatial index for members inside an area of a box or a circle.";
    "geosearchstore", -8, WRITE | READS_KEYS, (1, 2, 1), "geo", geo::geosearchstore, "Queries a geospatial index for members inside an area of a box or a circle, optionally stores the result.";
    "xadd", -5, WRITE | FAST, ONE, "stream", streams::xadd, "Appends a new message to a stream. Creates the key if it doesn't exist.";
    "xlen", 2, READONLY | FAST, ONE, "stream", streams::xlen, "Return the number of messages in a stream.";
    "xrange", -4, READONLY, ONE, "stream", streams::xrange, "Returns the messages from a stream within a range of IDs.";
    "xrevrange", -4, READONLY, ONE, "stream", streams::xrevrange, "Returns the messages from a stream within a range of IDs in reverse order.";
    "xdel", -3, WRITE | FAST, ONE, "stream", streams::xdel, "Returns the number of messages after removing them from a stream.";
    "xtrim", -4, WRITE, ONE, "stream", streams::xtrim, "Deletes messages from the beginning of a stream.";
    "xsetid", -3, WRITE | FAST, ONE, "stream", streams::xsetid, "An internal command for replicating stream values.";
    // Its keys follow STREAMS; a read takes no locks.
    "xread", -4, READONLY | BLOCK_OPTION, NONE, "stream", streams::xread, "Returns messages from multiple streams with IDs greater than the ones requested. Blocks until a message is available otherwise.";
    // Its keys follow STREAMS: every argument's stripe is locked.
    "xreadgroup", -7, WRITE | READS_KEYS | BLOCK_OPTION, ALL_ARGS, "stream", streams::xreadgroup, "Returns new or historical messages from a stream for a consumer in a group. Blocks until a message is available otherwise.";
    "xack", -4, WRITE | FAST, ONE, "stream", streams::xack, "Returns the number of messages that were successfully acknowledged by the consumer group member of a stream.";
    "xpending", -3, READONLY, ONE, "stream", streams::xpending, "Returns the information and entries from a stream consumer group's pending entries list.";
    "xclaim", -6, WRITE | FAST, ONE, "stream", streams::xclaim, "Changes, or acquires, ownership of a message in a consumer group, as if the message was delivered a consumer group member.";
    "xautoclaim", -6, WRITE | FAST, ONE, "stream", streams::xautoclaim, "Changes, or acquires, ownership of messages in a consumer group, as if the messages were delivered to as consumer group member.";
    "xgroup", -2, WRITE, (2, 2, 1), "stream", streams::xgroup, "A container for consumer groups commands.";
    "xinfo", -2, READONLY, (2, 2, 1), "stream", streams::xinfo, "A container for stream introspection commands.";
    "pfadd", -2, WRITE | FAST, ONE, "hyperloglog", hll::pfadd, "Adds elements to a HyperLogLog key. Creates the key if it doesn't exist.";
    // A write here: it caches the count in the value, as Redis does.
    "pfcount", -2, WRITE | READS_KEYS, ALL_ARGS, "hyperloglog", hll::pfcount, "Returns the approximated cardinality of the set(s) observed by the HyperLogLog key(s).";
    "pfmerge", -2, WRITE | READS_KEYS, ALL_ARGS, "hyperloglog", hll::pfmerge, "Merges one or more HyperLogLog values into a single key.";
    "pfdebug", 3, WRITE | ADMIN, (2, 2, 1), "hyperloglog", hll::pfdebug, "Internal commands for debugging HyperLogLog values.";
    "pfselftest", 1, ADMIN, NONE, "hyperloglog", hll::pfselftest, "An internal command for testing HyperLogLog values.";
    "del", -2, WRITE, ALL_ARGS, "generic", keys::del, "Deletes one or more keys.";
    "unlink", -2, WRITE | FAST, ALL_ARGS, "generic", keys::del, "Asynchronously deletes one or more keys.";
    "exists", -2, READONLY | FAST, ALL_ARGS, "generic", keys::exists, "Determines whether one or more keys exist.";
    "type", 2, READONLY | FAST, ONE, "generic", keys::type_, "Determines the type of value stored at a key.";
    "expire", -3, WRITE | FAST, ONE, "generic", keys::expire, "Sets the expiration time of a key in seconds.";
    "pexpire", -3, WRITE | FAST, ONE, "generic", keys::pexpire, "Sets the expiration time of a key in milliseconds.";
    "expireat", -3, WRITE | FAST, ONE, "generic", keys::expireat, "Sets the expiration time of a key to a Unix timestamp.";
    "pexpireat", -3, WRITE | FAST, ONE, "generic", keys::pexpireat, "Sets the expiration time of a key to a Unix milliseconds timestamp.";
    "ttl", 2, READONLY | FAST, ONE, "generic", keys::ttl, "Returns the expiration time in seconds of a key.";
    "pttl", 2, READONLY | FAST, ONE, "generic", keys::pttl, "Returns the expiration time in milliseconds of a key.";
    "expiretime", 2, READONLY | FAST, ONE, "generic", keys::expiretime, "Returns the expiration time of a key as a Unix timestamp.";
    "pexpiretime", 2, READONLY | FAST, ONE, "generic", keys::pexpiretime, "Returns the expiration time of a key as a Unix milliseconds timestamp.";
    "persist", 2, WRITE | FAST, ONE, "generic", keys::persist, "Removes the expiration time of a key.";
    "rename", 3, WRITE, (1, 2, 1), "generic", keys::rename, "Renames a key and overwrites the destination.";
    "renamenx", 3, WRITE | FAST, (1, 2, 1), "generic", keys::renamenx, "Renames a key only when the target key name doesn't exist.";
    "copy", -3, WRITE | READS_KEYS, (1, 2, 1), "generic", keys::copy, "Copies the value of a key to a new key.";
    "move", 3, WRITE | FAST, ONE, "generic", keys::move_, "Moves a key to another database.";
    "keys", 2, READONLY, NONE, "generic", keys::keys, "Returns all key names that match a pattern.";
    "scan", -2, READONLY, NONE, "generic", keys::scan, "Iterates over the key names in the database.";
    "randomkey", 1, READONLY, NONE, "generic", keys::randomkey, "Returns a random key name from the database.";
    // Its BY and GET patterns name keys, STORE one: every argument's
    // stripe is locked.
    "sort", -2, WRITE | READS_KEYS, ALL_ARGS, "generic", sort::sort, "Sorts the elements in a list, a set, or a sorted set, optionally storing the result.";
    "sort_ro", -2, READONLY, ONE, "generic", sort::sort_ro, "Returns the sorted elements of a list, a set, or a sorted set.";
    "dump", 2, READONLY, ONE, "generic", dump::dump, "Returns a serialized representation of the value stored at a key.";
    "restore", -4, WRITE, ONE, "generic", dump::restore, "Creates a key from the serialized representation of a value.";
    // What MIGRATE sends in a cluster: outside one, Redis runs it as RESTORE.
    "restore-asking", -4, WRITE, ONE, "server", dump::restore, "An internal command for migrating keys in a cluster.";
    // Its keys follow KEYS when the key argument is empty: every
    // argument's stripe is locked.
    "migrate", -6, WRITE, ALL_ARGS, "generic", migrate::migrate, "Atomically transfers a key from one Redis instance to another.";
    "object", -2, READONLY, NONE, "generic", keys::object, "A container for object introspection commands.";
    "touch", -2, READONLY | FAST, ALL_ARGS, "generic", keys::exists, "Returns the number of existing keys out of those specified after updating the time they were last accessed.";
    "multi", 1, TX_CONTROL | FAST, NONE, "transactions", tx::multi, "Starts a transaction.";
    "exec", 1, TX_CONTROL, NONE, "transactions", tx::exec_placeholder, "Executes all commands in a transaction.";
    "discard", 1, TX_CONTROL | FAST, NONE, "transactions", tx::discard, "Discards a transaction.";
    "watch", -2, TX_CONTROL | FAST, ALL_ARGS, "transactions", tx::watch, "Monitors changes to keys to determine the execution of a transaction.";
    "unwatch", 1, FAST, NONE, "transactions", tx::unwatch, "Forgets about watched keys of a transaction.";
    "monitor", 1, ADMIN, NONE, "server", server::monitor, "Listens for all requests received by the server in real-time.";
    "subscribe", -2, 0, NONE, "pubsub", pubsub::subscribe, "Listens for messages published to channels.";
    "psubscribe", -2, 0, NONE, "pubsub", pubsub::psubscribe, "Listens for messages published to channels that match one or more patterns.";
    "ssubscribe", -2, 0, ALL_ARGS, "pubsub", pubsub::ssubscribe, "Listens for messages published to shard channels.";
    "unsubscribe", -1, 0, NONE, "pubsub", pubsub::unsubscribe, "Stops listening to messages posted to channels.";
    "punsubscribe", -1, 0, NONE, "pubsub", pubsub::punsubscribe, "Stops listening to messages published to channels that match one or more patterns.";
    "sunsubscribe", -1, 0, ALL_ARGS, "pubsub", pubsub::sunsubscribe, "Stops listening to messages posted to shard channels.";
    "eval", -3, 0, NONE, "scripting", scripting::eval_in_transaction, "Executes a server-side Lua script.";
    "evalsha", -3, 0, NONE, "scripting", scripting::eval_in_transaction, "Executes a server-side Lua script by SHA1 digest.";
    "eval_ro", -3, READONLY, NONE, "scripting", scripting::eval_in_transaction, "Executes a read-only server-side Lua script.";
    "evalsha_ro", -3, READONLY, NONE, "scripting", scripting::eval_in_transaction, "Executes a read-only server-side Lua script by SHA1 digest.";
    "script", -2, 0, NONE, "scripting", scripting::script, "A container for Lua scripts management commands.";
    "slowlog", -2, 0, NONE, "server", diagnostics::slowlog, "A container for slow log commands.";
    "latency", -2, 0, NONE, "server", diagnostics::latency, "A container for latency diagnostics commands.";
    "acl", -2, 0, NONE, "server", acl::acl, "A container for Access List Control commands.";
    "bgrewriteaof", 1, ADMIN, NONE, "server", standalone::bgrewriteaof, "Asynchronously rewrites the append-only file to disk.";
    "sync", 1, ADMIN | NO_MULTI, NONE, "server", crate::rdb_sync::sync, "An internal command used in replication.";
    "psync", -3, ADMIN | NO_MULTI, NONE, "server", crate::rdb_sync::sync, "An internal command used in replication.";
    "replconf", -1, ADMIN, NONE, "server", crate::rdb_sync::replconf, "An internal command for configuring the replication stream.";
    "replicaof", 3, ADMIN, NONE, "server", standalone::replicaof, "Configures a server as replica of another, or promotes it to a master.";
    "slaveof", 3, ADMIN, NONE, "server", standalone::replicaof, "Sets a Redis server as a replica of another, or promotes it to being a master.";
    "failover", -1, ADMIN, NONE, "server", standalone::failover, "Starts a coordinated failover from a server to one of its replicas.";
    "debug", -2, ADMIN | PROTECTED, NONE, "server", standalone::debug, "A container for debugging commands.";
    "module", -2, 0, NONE, "server", standalone::module, "A container for module commands.";
    "lolwut", -1, READONLY | FAST, NONE, "server", standalone::lolwut, "Displays computer art and the Redis version";
    "cluster", -2, 0, NONE, "cluster", standalone::cluster, "A container for Redis Cluster commands.";
    "readonly", 1, FAST, NONE, "cluster", standalone::cluster_disabled, "Enables read-only queries for a connection to a Redis Cluster replica node.";
    "readwrite", 1, FAST, NONE, "cluster", standalone::cluster_disabled, "Enables read-write queries for a connection to a Reids Cluster replica node.";
    "asking", 1, FAST, NONE, "cluster", standalone::cluster_disabled, "Signals that a cluster client is following an -ASK redirect.";
    "fcall", -3, 0, NONE, "scripting", scripting::eval_in_transaction, "Invokes a function.";
    "fcall_ro", -3, READONLY, NONE, "scripting", scripting::eval_in_transaction, "Invokes a read-only function.";
    "function", -2, 0, NONE, "scripting", functions::function, "A container for function commands.";
    "publish", 3, FAST, NONE, "pubsub", pubsub::publish, "Posts a message to a channel.";
    "spublish", 3, FAST, ONE, "pubsub", pubsub::spublish, "Post a message to a shard channel";
    "pubsub", -2, 0, NONE, "pubsub", pubsub::pubsub, "A container for Pub/Sub commands.";
}

/// The command named `name`, in any case, without allocating. Hashed by
/// foldhash: SipHash was 1.5% of a GET's CPU.
pub fn lookup(name: &[u8]) -> Option<&'static Command> {
    type ByName = HashMap<&'static [u8], &'static Command, foldhash::fast::FixedState>;
    static BY_NAME: std::sync::OnceLock<ByName> = std::sync::OnceLock::new();
    let by_name = BY_NAME.get_or_init(|| TABLE.iter().map(|c| (c.name.as_bytes(), c)).collect());
    let mut lower = [0u8; 32];
    let lower = lower.get_mut(..name.len())?;
    for (to, from) in lower.iter_mut().zip(name) {
        *to = from.to_ascii_lowercase();
    }
    by_name.get(&*lower).copied()
}

/// A command's position in `TABLE`, then in the memcached protocol's
/// table (for compact per-client records; `by_index` reads it back).
pub fn index_of(command: &'static Command) -> usize {
    let position = |table: &'static [Command]| {
        let at = (command as *const Command as usize).checked_sub(table.as_ptr() as usize)?;
        Some(at / std::mem::size_of::<Command>()).filter(|&i| i < table.len())
    };
    position(TABLE)
        .or_else(|| position(crate::memcache::commands::TABLE).map(|i| TABLE.len() + i))
        .unwrap_or(usize::MAX)
}

/// The command `index_of` gave `index`.
pub fn by_index(index: usize) -> Option<&'static Command> {
    TABLE.get(index).or_else(|| crate::memcache::commands::TABLE.get(index.checked_sub(TABLE.len())?))
}

/// Redis's reply to a command it does not know, args quoted as it quotes them.
fn unknown_command(args: &[Bytes]) -> String {
    let mut quoted = String::new();
    for arg in &args[1..] {
        if quoted.len() >= 128 {
            break;
        }
        let room = 128 - quoted.len();
        let text = String::from_utf8_lossy(arg);
        let cut: String = text.chars().take(room).collect();
        quoted.push_str(&format!("'{cut}' "));
    }
    let name: String = String::from_utf8_lossy(&args[0]).chars().take(128).collect();
    format!("ERR unknown command '{name}', with args beginning with: {quoted}")
}

/// Consecutive writes of one connection's pipeline, gathered into one
/// engine batch: one commit for the run instead of one per command. Their
/// key locks are held until the run is committed, and their replies wait in
/// the output buffer until then. Blind writes (SET, MSET ..., which read
/// nothing) share their stripes with other connections' blind writes; a
/// read-modify-write (INCR, HSET ...) locks its stripes and reads the run's
/// earlier writes from its overlay, which a run of blind writes does
/// without. Anything else (reads, transactions) commits the run first, so
/// every command still sees the writes before it.
///
/// Why read-modify-writes join: each used to wait for its own commit
/// before the next command of the pipeline ran, so `INCR` at `-P 16` made
/// 16 commits per pipeline (0.38x Redis's rate at 100,000 keys).
pub struct Run<'s> {
    writes: Writes,
    guards: Vec<(Stripe, Guard<'s>)>,
    /// Where the run's replies start in the output buffer.
    mark: usize,
    commands: usize,
}

enum Guard<'s> {
    Shared(#[allow(dead_code)] tokio::sync::RwLockReadGuard<'s, ()>),
    Exclusive(#[allow(dead_code)] tokio::sync::RwLockWriteGuard<'s, ()>),
}

impl Default for Run<'_> {
    fn default() -> Self {
        Run { writes: Writes::new(false), guards: Vec::new(), mark: 0, commands: 0 }
    }
}

/// A run is committed when it holds this many bytes or commands.
const RUN_MAX_BYTES: usize = 1 << 20;
const RUN_MAX_COMMANDS: usize = 512;

impl<'s> Run<'s> {
    /// Whether the run holds writes its next commit makes durable.
    pub fn has_writes(&self) -> bool {
        self.commands > 0
    }

    /// A run of the master's stream on a replica's link.
    pub fn for_master() -> Self {
        Run { writes: Writes::new(false).by(Writer::Master), ..Run::default() }
    }

    /// Adds one of the server's settings (under `keyspace::SETTINGS`) to
    /// the run's batch, committed with its writes; `new`: counted among the
    /// reserved entries.
    pub fn put_setting(&mut self, key: &[u8], value: &[u8], new: bool) {
        debug_assert!(key.starts_with(crate::keyspace::SETTINGS));
        // Far below any size limit.
        let _ = self.writes.put_internal(key, crate::keyspace::TYPE_STRING, value, None);
        if new {
            self.writes.note_reserved(1);
        }
    }

    /// Commits the run; on failure every reply of the run becomes the error
    /// (and false is returned).
    pub async fn commit(&mut self, shared: &'s Shared, out: &mut Out) -> bool {
        // (A setting put without a command is committed too.)
        if self.commands == 0 && !self.writes.read_pending() && self.writes.batch.is_empty() {
            // A failed command may have left locks behind, and key misses.
            self.guards.clear();
            let misses = self.writes.take_misses();
            if !misses.is_empty() {
                crate::notify::publish(shared, &misses);
            }
            return true;
        }
        let ready = self.writes.take_run_batch();
        let stripes: SmallVec<[Stripe; 16]> = self.guards.iter().map(|(stripe, _)| *stripe).collect();
        let exclusive = self.guards.iter().all(|(_, guard)| matches!(guard, Guard::Exclusive(_)));
        // Drained, not taken: the next run reuses the vector.
        let result = commit(shared, ready, &stripes, exclusive, self.guards.drain(..)).await;
        if let Err(error) = &result {
            out.truncate(self.mark);
            out.failed_run(self.commands, &error.text_for(out));
        }
        self.commands = 0;
        result.is_ok()
    }

    /// Takes the locks of `stripes` (sorted) that the run does not hold yet,
    /// `exclusive` ones for a read-modify-write. Waiting while holding
    /// locks could deadlock, so if one is taken (or held only shared where
    /// an exclusive one is needed) the run is committed first and the locks
    /// are then taken in order.
    async fn lock(&mut self, shared: &'s Shared, out: &mut Out, stripes: &[Stripe], exclusive: bool) {
        for &stripe in stripes {
            let held = self.guards.iter().find(|(held, _)| *held == stripe).map(|(_, guard)| guard);
            let guard = match held {
                Some(Guard::Exclusive(_)) => continue,
                Some(Guard::Shared(_)) if !exclusive => continue,
                Some(Guard::Shared(_)) => None,
                None if exclusive => shared.locks.try_lock(stripe).map(Guard::Exclusive),
                None => shared.locks.try_share(stripe).map(Guard::Shared),
            };
            match guard {
                Some(guard) => self.guards.push((stripe, guard)),
                None => {
                    self.commit(shared, out).await;
                    if exclusive {
                        let guards = shared.locks.lock(stripes).await;
                        self.guards.extend(stripes.iter().copied().zip(guards.into_iter().map(Guard::Exclusive)));
                    } else {
                        let guards = shared.locks.share(stripes).await;
                        self.guards.extend(stripes.iter().copied().zip(guards.into_iter().map(Guard::Shared)));
                    }
                    return;
                }
            }
        }
    }
}

/// Makes `ready`'s batch durable and visible and lets its writer's locks
/// (`guards`, of `stripes`) go: as soon as the batch is queued if the
/// writer holds them all exclusively and another command waits for one
/// (the batch is then published for the next holder to read,
/// `crate::pending`), else once the batch is durable. Then wakes blocked
/// pops and counts the server's own entries the batch added or removed.
///
/// A batch held to the end first forgets older published writes of its
/// keys (they are older than it). Shared locks never release early: two
/// blind writers of one key publishing in another order than the log's
/// would leave the older value for the next reader.
///
/// The batch's keyspace notifications go out last, once it is durable
/// (an event of a command that changed nothing, as LTRIM keeping all,
/// once what it read is), then the messages a transaction or a script
/// published.
pub async fn commit<G>(
    shared: &Shared,
    mut ready: Ready,
    stripes: &[Stripe],
    exclusive: bool,
    guards: G,
) -> Result<(), CommitError> {
    let events = std::mem::take(&mut ready.events);
    // Debug builds (every test) check that every change names its key,
    // replicas or not: one that does not would not reach them.
    if cfg!(debug_assertions) {
        if let Some(key) = crate::master::unnamed_change(&events, &ready.batch, &ready.table_reads) {
            let named: Vec<_> = events.iter().map(|e| (e.name, String::from_utf8_lossy(&e.key).into_owned())).collect();
            let written: Vec<_> = ready
                .batch
                .entries()
                .map(|(key, put)| (String::from_utf8_lossy(key).into_owned(), put.map(|(value, _)| value.to_vec())))
                .collect();
            panic!(
                "a change to {:?} names no key for the replicas: events {named:?}, entries {written:?}",
                String::from_utf8_lossy(key)
            );
        }
    }
    if shared.master.streaming() {
        if let Some(note) = crate::master::note_of(&events, &ready.batch, &ready.table_reads, &ready.list_ops) {
            ready.batch.set_note(note);
        }
    }
    let messages = std::mem::take(&mut ready.messages);
    let (all_deleted, expiries) = (ready.all_deleted, std::mem::take(&mut ready.expiries));
    let result = commit_batch(shared, ready, stripes, exclusive, guards).await;
    if result.is_ok() {
        shared.volatile.apply(all_deleted, expiries);
    }
    if result.is_ok() && !events.is_empty() {
        crate::notify::publish(shared, &events);
    }
    if result.is_ok() && !messages.is_empty() {
        pubsub::send_held(shared, &messages);
    }
    result
}

async fn commit_batch<G>(
    shared: &Shared,
    ready: Ready,
    stripes: &[Stripe],
    exclusive: bool,
    guards: G,
) -> Result<(), CommitError> {
    let Ready {
        writer,
        mut batch,
        reserved_delta,
        pushed,
        fence_edits,
        read_pending,
        written_tables,
        new_tables,
        events: _,
        messages: _,
        expiries: _,
        all_deleted: _,
        table_reads: _,
        list_ops: _,
    } = ready;
    let fences = (!fence_edits.is_empty()).then_some(&fence_edits[..]);
    // Refused before any table is written ahead; `admit` below decides.
    if !batch.is_empty() && writer == Writer::Client && shared.replication.gate.is_closed() {
        return Err(CommitError::ReadOnly);
    }
    // Counted among the server's entries as they are written (DBSIZE
    // never counts them as keys), so not again below.
    let written_ahead = write_new_tables_ahead(shared, &mut batch, &new_tables, writer).await?;
    let reserved_delta = reserved_delta - written_ahead as i64;
    if batch.is_empty() {
        drop(guards);
        // It read others' queued writes: tell no one before they are durable.
        return if read_pending { Ok(barrier(shared).await?) } else { Ok(()) };
    }
    let early = exclusive
        && batch.size_bytes() <= PUBLISH_MAX_BYTES
        && stripes.iter().any(|&stripe| shared.locks.is_awaited(stripe));
    let staged = early.then(|| Pending::stage(&batch));
    // The keys pushed to: their first blocked clients look again once the
    // batch is visible. Taken whether or not anyone waits now: a client
    // that blocks while the batch is in flight may have looked before it
    // was visible, and waits in line by the time it is.
    let pushed_keys: Vec<Vec<u8>> = if pushed {
        batch
            .entries()
            .map(|(key, _)| key)
            .filter(|key| !crate::keyspace::is_reserved(key))
            .map(<[u8]>::to_vec)
            .collect()
    } else {
        Vec::new()
    };
    let forget = if !early && !shared.pending.is_empty() { shared.pending.published_of(&batch) } else { Vec::new() };
    // Readers without locks read these sorted sets from a snapshot from
    // here until the batch is visible (`ranks.rs`), and random picks count
    // the writes (`picks.rs`).
    let _writing = (!written_tables.is_empty()).then(|| shared.rank_sums.writing(written_tables));
    let done = {
        // Held until the batch has its place in the log.
        let _admitted = shared.replication.gate.admit(writer)?;
        enqueue(shared, batch)
    };
    let ticket = staged.filter(|_| !done.is_refused()).map(|staged| shared.pending.publish(staged));
    let mut guards = Some(guards);
    if ticket.is_some() {
        release(shared, stripes, fences, guards.take());
        shared.stats.early_lock_releases.fetch_add(1, Ordering::Relaxed);
    }
    lead(shared);
    let result = done.await;
    if result.is_ok() && !forget.is_empty() {
        shared.pending.forget(forget.iter().map(|key| &key[..]));
    }
    if guards.is_some() && result.is_ok() {
        release(shared, stripes, fences, guards.take());
    }
    if result.is_err() && fences.is_some() {
        // Released early with edits for blocks that did not change after all.
        shared.rank_fences.lock().clear();
    }
    drop(guards);
    // Its entries are the engine's now (or failed with it).
    drop(ticket);
    result?;
    shared.waiters.wake_first(pushed_keys.iter().map(|key| &key[..]));
    if reserved_delta != 0 {
        let count = &shared.reserved_entries;
        let _ =
            count.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_add_signed(reserved_delta)));
    }
    Ok(())
}

/// A batch past the engine's limit that creates tables (RESTORE of a big
/// stream, COPY or a STORE of a big collection) has their fields and owner
/// records written first, in batches of half the limit, while the command
/// holds its keys' locks: no key points to those tables before the rest
/// of the batch (their stubs) is written, and a crash in between leaves
/// them to the sweep. Returns how many entries went ahead.
async fn write_new_tables_ahead(
    shared: &Shared,
    batch: &mut scaledkv::WriteBatch,
    new_tables: &[u64],
    writer: Writer,
) -> Result<u64, CommitError> {
    let limit = shared.db.max_batch_bytes();
    if batch.size_bytes() <= limit || new_tables.is_empty() {
        return Ok(0);
    }
    let ahead = batch.split_off(|key| new_tables.iter().any(|&id| table::holds(id, key)), limit / 2);
    shared.stats.tables_written_ahead.fetch_add(1, Ordering::Relaxed);
    let mut written = 0;
    for part in ahead {
        let count = part.len() as u64;
        let done = {
            let _admitted = shared.replication.gate.admit(writer)?;
            enqueue(shared, part)
        };
        lead(shared);
        done.await?;
        shared.reserved_entries.fetch_add(count, Ordering::Relaxed);
        written += count;
    }
    Ok(written)
}

/// The largest batch published for early lock release: the copy bounds
/// the map's memory (a FLUSHALL of millions of keys keeps its locks).
const PUBLISH_MAX_BYTES: usize = 4 << 20;

/// Lets a committing writer's locks go: WATCH sees its keys changed, and
/// the next writer of a sorted set whose blocks it changed finds their
/// new fences cached (`fences`: the blocks it split off or dropped).
fn release<G>(shared: &Shared, stripes: &[Stripe], fences: Option<&[FenceEdit]>, guards: Option<G>) {
    if let Some(edits) = fences {
        edit_fences(&mut shared.rank_fences.lock(), edits);
    }
    for &stripe in stripes {
        shared.locks.bump(stripe);
    }
    drop(guards);
}

/// Waits until every write queued so far is durable and visible.
pub(crate) async fn barrier(shared: &Shared) -> scaledkv::Result<()> {
    let done = shared.db.enqueue_barrier();
    lead(shared);
    done.await
}

/// For a command that holds every key's lock (FLUSHALL) and reads the
/// engine directly: waits for every published write, then clears them.
async fn settle_published(shared: &Shared) -> scaledkv::Result<()> {
    if !shared.pending.is_empty() {
        barrier(shared).await?;
        shared.pending.clear();
    }
    Ok(())
}

/// Clears every key outside any command (a delayed memcached flush_all):
/// with every key's lock, as FLUSHALL.
pub async fn flush_everything(shared: &Shared) -> Result<(), CommitError> {
    let stripes = KeyLocks::all();
    let guards = shared.locks.lock(&stripes).await;
    settle_published(shared).await?;
    let mut writes = Writes::new(false);
    clear_all(shared, &mut writes)?;
    commit(shared, writes.take_batch(), &stripes, true, guards).await
}

/// Queues `batch` in the engine.
fn enqueue(shared: &Shared, batch: scaledkv::WriteBatch) -> scaledkv::WriteFuture {
    // While GC is far behind, queueing a write first collects a piece of it
    // (tens of milliseconds).
    if shared.db.gc_is_behind() {
        blocking(|| shared.db.enqueue_write(batch))
    } else {
        shared.db.enqueue_write(batch)
    }
}

/// Runs `work`, which may block for milliseconds or more, on this thread:
/// on an I/O thread's runtime `block_in_place` first hands its other
/// connections to another worker, where blocking would hold up every
/// client it serves.
pub fn blocking<T>(work: impl FnOnce() -> T) -> T {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|runtime| runtime.runtime_flavor() == RuntimeFlavor::MultiThread);
    if multi_thread {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

/// Has what is queued committed. Where each group commit waits for the
/// device, the commit thread leads it (`committer.rs`), so no worker
/// blocks in fdatasync; elsewhere this task leads its own group (or joins
/// the one in flight), which costs no hand-off.
fn lead(shared: &Shared) {
    match &shared.commit_thread {
        Some(signal) => signal.queued(&shared.db),
        None => shared.db.commit_queued(),
    }
}

/// A write that reads nothing: it joins a run sharing its stripes.
fn is_blind(command: &Command, args: &[Bytes]) -> bool {
    if command.has(BLIND) {
        return true;
    }
    match command.name {
        "mset" | "setex" | "psetex" => true,
        "set" => !args[3..].iter().any(|a| ["nx", "xx", "get", "keepttl"].iter().any(|w| args::eq(a, w))),
        _ => false,
    }
}

/// Refuses a command before it runs (arity, AUTH, OOM ...): a transaction
/// it was queued for fails at EXEC, and a refused EXEC ends the
/// transaction with Redis's EXECABORT naming why. It leaves `args` empty
/// and marks the connection, so the command counts as rejected in INFO
/// commandstats and SLOWLOG leaves it out (Redis logs only what ran).
fn reject(conn: &mut ConnState, out: &mut Out, command: &Command, args: &mut Vec<Bytes>, error: &str) {
    args.clear();
    conn.refused = true;
    if command.name == "exec" {
        conn.reset_transaction();
        let why = error.strip_prefix("ERR ").unwrap_or(error);
        out.error(&format!("EXECABORT Transaction discarded because of: {why}"));
        return;
    }
    conn.flag_transaction_error();
    out.error(error);
}

/// Runs one request from a connection, appending its reply to `out`.
pub async fn execute<'s>(shared: &'s Shared, conn: &mut ConnState, out: &mut Out, args: Vec<Bytes>, run: &mut Run<'s>) {
    if args.is_empty() {
        return;
    }
    // CLIENT REPLY OFF or SKIP: the reply is dropped once the command ran.
    // Its run is settled on both sides, so a failed commit's errors cannot
    // land among replies that were dropped; messages before it still go.
    let silenced = conn.reply_off || conn.reply_skip;
    if silenced {
        run.commit(shared, out).await;
        conn.deliver(out);
    }
    let mark = out.len();
    execute_one(shared, conn, out, args, run).await;
    if silenced && (conn.reply_off || conn.reply_skip) {
        run.commit(shared, out).await;
        out.truncate(mark);
    }
}

async fn execute_one<'s>(
    shared: &'s Shared,
    conn: &mut ConnState,
    out: &mut Out,
    mut args: Vec<Bytes>,
    run: &mut Run<'s>,
) {
    conn.counts.commands += 1;
    let Some(command) = lookup(&args[0]) else {
        conn.flag_transaction_error();
        out.error(&unknown_command(&args));
        return;
    };
    wait_while_paused(shared, conn, out, command, run).await;
    let started = shared.slowlog.now();
    let errors = crate::commandstats::errors_sent();
    conn.refused = false;
    run_command(shared, conn, out, command, &mut args, run).await;
    // CLIENT CACHING counts for the next command (or transaction) only.
    if conn.caching && conn.multi.is_none() && command.name != "client" {
        conn.caching = false;
    }
    if conn.refused {
        crate::commandstats::rejected(index_of(command));
    } else if !args.is_empty() {
        // (Taken when queued in MULTI or blocked: counted when they run.)
        let failed = crate::commandstats::errors_sent() > errors;
        command_ran(shared, started, command, &args, failed, || conn.info.peer_and_name());
    }
}

/// Holds `command` while CLIENT PAUSE holds it (`crate::pause`), its
/// connection's run of writes settled first.
async fn wait_while_paused<'s>(
    shared: &'s Shared,
    conn: &ConnState,
    out: &mut Out,
    command: &'static Command,
    run: &mut Run<'s>,
) {
    if !shared.pause.set() {
        return;
    }
    let may_write = |command: &Command| {
        command.has(WRITE) || scripting::is_script(command) || matches!(command.name, "publish" | "spublish")
    };
    let writes = may_write(command)
        || (command.name == "exec"
            && conn.multi.as_ref().is_some_and(|queued| queued.iter().any(|(c, _)| may_write(c))));
    loop {
        // Listening before looking: an UNPAUSE after the look wakes it.
        let unpaused = shared.pause.unpaused.notified();
        tokio::pin!(unpaused);
        unpaused.as_mut().enable();
        let Some(wait) = shared.pause.wait(writes) else { return };
        run.commit(shared, out).await;
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = &mut unpaused => {}
        }
    }
}

/// Counts `command`, which ran since `started` (`SlowLog::now`) for the
/// client `peer` names, in INFO commandstats, and gives it to SLOWLOG and
/// the latency monitor (its event `fast-command` or `command`, as Redis's).
pub fn command_ran(
    shared: &Shared,
    started: u64,
    command: &'static Command,
    args: &[Bytes],
    failed: bool,
    peer: impl FnOnce() -> (String, String),
) {
    let nanos = shared.slowlog.nanos_since(started);
    let micros = nanos / 1000;
    crate::commandstats::ran(index_of(command), nanos, failed);
    shared.slowlog.record(micros, args, peer);
    shared.latency.record(if command.has(FAST) { "fast-command" } else { "command" }, micros / 1000);
}

/// How many Redis commands there are (`index_of` gives each a place).
pub fn command_count() -> usize {
    TABLE.len()
}

/// What the connection's user may not do running `args` (the command's
/// name first), noted in ACL LOG under `context` ("toplevel", "multi",
/// "lua"); None when it may.
pub fn refused_by_acl(
    shared: &Shared,
    conn: &ConnState,
    command: &'static Command,
    args: &[Bytes],
    context: &'static str,
) -> Option<acl::Denied> {
    // memcached's commands have no permissions of their own: its
    // connections are let in whole or not at all (`memcache::open`).
    if conn.user.is_none() && shared.users.default_unrestricted() || index_of(command) >= TABLE.len() {
        return None;
    }
    let user = conn.user.as_deref().unwrap_or(b"default");
    let denied = shared.users.denied(user, command, args)?;
    let (reason, object) = denied.logged();
    shared.acl_log.refused(reason, context, &object, user, conn.info.describe());
    Some(denied)
}

/// Runs `command`, which `args` invoke, appending its reply to `out`: a
/// Redis command `execute` looked up, or a memcached protocol command.
/// It leaves `args` empty when it keeps them (queued in MULTI, blocked) or
/// refuses the command.
pub async fn run_command<'s>(
    shared: &'s Shared,
    conn: &mut ConnState,
    out: &mut Out,
    command: &'static Command,
    args: &mut Vec<Bytes>,
    run: &mut Run<'s>,
) {
    if !command.arity_ok(args.len()) {
        return reject(
            conn,
            out,
            command,
            args,
            &format!("ERR wrong number of arguments for '{}' command", command.name),
        );
    }
    if !conn.authenticated && !command.has(NO_AUTH) && !shared.users.default_open() {
        return reject(conn, out, command, args, "NOAUTH Authentication required.");
    }
    let context = if conn.multi.is_some() { "multi" } else { "toplevel" };
    if let Some(denied) = refused_by_acl(shared, conn, command, args, context) {
        return reject(conn, out, command, args, &denied.error());
    }
    if conn.listens() {
        if !conn.subscriptions.is_empty()
            && conn.protocol == crate::resp::Protocol::Resp2
            && !pubsub::allowed_while_subscribed(command.name)
        {
            return reject(conn, out, command, args, &pubsub::not_while_subscribed(command.name, args));
        }
        // A monitor is a replica to Redis, which keeps replicas' hands off
        // the keys.
        if conn.monitors() && (command.has(WRITE) || command.has(READONLY)) {
            return reject(conn, out, command, args, "ERR Replica can't interact with the keyspace");
        }
        if conn.info.mail.has_mail() {
            // Published before this command arrived: sent before its
            // reply. The run is settled first, as a failed commit rewrites
            // every reply after its start.
            run.commit(shared, out).await;
            conn.deliver(out);
        }
    }
    if command.has(PROTECTED) {
        return reject(conn, out, command, args, &standalone::protected_refusal(command.name));
    }
    if !conn.master_link && shared.replication.read_only() {
        let memcached = command.group == "memcached";
        if command.has(WRITE) {
            return reject(conn, out, command, args, read_only_error(memcached));
        }
        if command.has(READONLY) && shared.replication.loading.load(Ordering::Acquire) {
            let error = match memcached {
                true => "SERVER_ERROR loading the master's data set",
                false => "LOADING Redis is loading the dataset in memory",
            };
            return reject(conn, out, command, args, error);
        }
    }
    // A replica takes its master's writes whatever its own memory limit
    // (Redis's `replica-ignore-maxmemory yes`).
    if command.has(WRITE) && !conn.master_link && shared.config.memory.refuses(command.name, &shared.db) {
        let error = match command.group {
            "memcached" => "SERVER_ERROR out of memory storing object",
            _ => crate::maxmemory::OOM_ERROR,
        };
        return reject(conn, out, command, args, error);
    }
    // `min-replicas-to-write`: EXEC counts as a write if it holds one.
    let writes = command.has(WRITE)
        || (command.name == "exec" && conn.multi.as_ref().is_some_and(|q| q.iter().any(|(c, _)| c.has(WRITE))));
    if writes && !conn.master_link && shared.master.refuses_writes(shared.replication.following()) {
        let error = match command.group {
            "memcached" => "SERVER_ERROR not enough good replicas to write",
            _ => NO_REPLICAS_ERROR,
        };
        return reject(conn, out, command, args, error);
    }
    if conn.multi.is_some() {
        if command.has(NO_MULTI) {
            conn.flag_transaction_error();
            out.error("ERR Command not allowed inside a transaction");
            return;
        }
        if !command.has(TX_CONTROL) {
            let queued = conn.multi.as_mut().expect("checked");
            queued.push((command, std::mem::take(args)));
            conn.info.queued.store(queued.len() as i64, Ordering::Relaxed);
            out.simple("QUEUED");
            return;
        }
    }
    conn.info.last_command(command);
    // Most writes name one or two keys: no allocation for their stripes.
    let mut stripes: SmallVec<[Stripe; 4]> = SmallVec::new();
    if command.has(WRITE) {
        command.stripes(args, &mut stripes);
        stripes.sort_unstable();
        stripes.dedup();
    }
    // Every write but FLUSHALL's (which locks every stripe) and a blocking
    // one (BLPOP, XREADGROUP ... BLOCK) keeps its effects in its batch, so
    // it can join a run. One that finds its change too big for a batch
    // there runs again alone (`CmdError::RunAlone`).
    if conn.multi.is_none()
        && command.has(WRITE)
        && !command.has(ALL_KEYS | BLOCKING)
        && !(command.has(BLOCK_OPTION) && streams::may_block(args))
    {
        // With `new` events on, a write must see whether its keys exist:
        // the run keeps an overlay for blind writes too.
        let blind = is_blind(command, args)
            && !crate::notify::wanted(shared.notify_flags.load(Ordering::Relaxed), crate::notify::NEW);
        if !blind && run.commands > 0 && !run.writes.has_overlay() {
            // Blind writes kept no overlay for this one to read.
            run.commit(shared, out).await;
        }
        run.lock(shared, out, &stripes, !blind).await;
        if run.commands == 0 {
            run.mark = out.len();
        }
        let before = out.len();
        let result = if blind {
            // It validates before it writes: a failure leaves nothing.
            command.call(shared, conn, out, &mut run.writes, args)
        } else {
            run.writes.see_pending(&shared.pending);
            let point = run.writes.savepoint();
            run.writes.set_retry_alone(true);
            let result = command.call(shared, conn, out, &mut run.writes, args);
            run.writes.set_retry_alone(false);
            match result {
                Ok(()) => run.writes.release(point),
                Err(_) => run.writes.rollback(point),
            }
            result
        };
        // Undone: it runs again below, alone (and is shown once there).
        let again_alone = matches!(result, Err(CmdError::RunAlone));
        if !again_alone {
            crate::monitor::feed(shared, conn, command, args);
        }
        match result {
            Ok(()) => run.commands += 1,
            Err(CmdError::RunAlone) => out.truncate(before),
            Err(error) => {
                // The failed command wrote nothing; settle the run before
                // its reply so a commit failure cannot overwrite it.
                out.truncate(before);
                run.commit(shared, out).await;
                out.error(&error.text());
            }
        }
        if !again_alone {
            if run.commands >= RUN_MAX_COMMANDS || run.writes.batch.size_bytes() >= RUN_MAX_BYTES {
                run.commit(shared, out).await;
            }
            return;
        }
    }
    if scripting::is_script(command) {
        // Before the commands it runs, as Redis shows them.
        crate::monitor::feed(shared, conn, command, args);
        scripting::eval(shared, conn, out, command, args, run).await;
        return;
    }
    run.commit(shared, out).await;
    if command.name == "exec" {
        exec(shared, conn, out).await;
        // After the commands it ran, as Redis shows them.
        crate::monitor::feed(shared, conn, command, args);
        return;
    }
    let guards = shared.locks.lock(&stripes).await;
    let mark = out.len();
    if command.has(ALL_KEYS) {
        if let Err(error) = settle_published(shared).await {
            out.error(&engine_error_text(&error));
            return;
        }
    }
    let mut writes = Writes::new(false).by(Writer::of(conn));
    if command.has(WRITE) {
        writes.see_pending(&shared.pending);
    }
    conn.block_args = None;
    if conn.tracking.is_some() {
        crate::tracking::remember_reads(shared, conn, command, args);
    }
    let result = command.call(shared, conn, out, &mut writes, args);
    // A blocking command is shown once it ends (`conn::wait_blocked`), and
    // its looks again while it waits not at all.
    if !matches!(result, Err(CmdError::Blocked(..))) && !conn.info.blocked.load(Ordering::Relaxed) {
        crate::monitor::feed(shared, conn, command, args);
    }
    if let Err(CmdError::Blocked(timeout, _)) = result {
        // The connection waits and runs it again (`conn::wait_blocked`).
        out.truncate(mark);
        // XREAD's `$` stands for the IDs it had when it blocked.
        conn.blocked = Some((conn.block_args.take().unwrap_or(std::mem::take(args)), timeout));
        return;
    }
    if let Err(error) = result {
        out.truncate(mark);
        if matches!(error, CmdError::Refused(_)) {
            args.clear();
            conn.refused = true;
        }
        let misses = writes.take_misses();
        if !misses.is_empty() {
            crate::notify::publish(shared, &misses);
        }
        // The error may tell what it read: not before that is durable.
        if writes.read_pending() {
            drop(guards);
            if let Err(error) = barrier(shared).await {
                out.error(&engine_error_text(&error));
                return;
            }
        }
        out.error(&error.text());
        return;
    }
    // A read has nothing to commit: no commit future to build and move
    // (its memmoves were 5% of a GET's CPU with 3-byte values).
    if writes.nothing_to_commit() {
        return;
    }
    if let Err(error) = commit(shared, writes.take_batch(), &stripes, true, guards).await {
        out.truncate(mark);
        out.error(&error.text_for(out));
    }
}

/// HRANDFIELD's and SRANDMEMBER's picks among `size` entries, in the
/// collection's order: for a positive `count`, distinct ones (all of them
/// once it reaches `size`), for a negative one, `-count` with repeats.
pub fn random_picks(size: usize, count: i64) -> Vec<usize> {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    if size == 0 {
        Vec::new()
    } else if count < 0 {
        (0..count.unsigned_abs()).map(|_| rng.gen_range(0..size)).collect()
    } else if count as u64 >= size as u64 {
        (0..size).collect()
    } else {
        let mut picks = rand::seq::index::sample(&mut rng, size, count as usize).into_vec();
        picks.sort_unstable();
        picks
    }
}

/// Argument helpers with Redis's parsing rules and error texts.
pub mod args {
    use super::CmdError;
    use bytes::Bytes;

    /// Redis's `string2ll`: no spaces, no '+', no leading zeros.
    pub fn int(arg: &[u8]) -> Result<i64, CmdError> {
        parse_i64(arg).ok_or(CmdError::NotInteger)
    }

    /// Redis's `getIntFromObjectOrReply`: an integer that fits 32 bits,
    /// with Redis's own text (and typo) for one that does not.
    pub fn int32(arg: &[u8]) -> Result<i32, CmdError> {
        let n = int(arg)?;
        i32::try_from(n).map_err(|_| {
            super::err(format!("ERR value is out of range, value must between {} and {}", i32::MIN, i32::MAX))
        })
    }

    /// Most picks a negative random-pick count (repeats allowed) asks for.
    /// Redis streams such a reply and takes as long as it must; here the
    /// picks and the reply are built first, and a count of -10^13 kept an
    /// I/O thread filling memory (250 MB/s, no client of it answered)
    /// until the kernel would kill the server.
    pub const MOST_REPEATED_PICKS: i64 = 1 << 24;

    /// A random-pick count (HRANDFIELD, SRANDMEMBER, ZRANDMEMBER): any
    /// 64-bit integer but the one whose negation does not fit, with Redis's
    /// range text, down to -`MOST_REPEATED_PICKS` (`ERR value is out of
    /// range` below).
    pub fn random_count(arg: &[u8]) -> Result<i64, CmdError> {
        match int(arg)? {
            i64::MIN => {
                Err(super::err(format!("ERR value is out of range, value must between {} and {}", -i64::MAX, i64::MAX)))
            }
            n if n < -MOST_REPEATED_PICKS => Err(super::err("ERR value is out of range")),
            n => Ok(n),
        }
    }

    pub fn parse_i64(text: &[u8]) -> Option<i64> {
        if text.is_empty() || text.len() > 20 {
            return None;
        }
        let (negative, digits) = match text[0] {
            b'-' => (true, &text[1..]),
            _ => (false, text),
        };
        if digits.is_empty() || (digits[0] == b'0' && digits.len() > 1) || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        if negative && digits == b"0" {
            return None;
        }
        let mut value: i64 = 0;
        for &d in digits {
            let d = (d - b'0') as i64;
            value = value.checked_mul(10)?;
            value = if negative { value.checked_sub(d)? } else { value.checked_add(d)? };
        }
        Some(value)
    }

    /// Redis's `string2ld`: a finite number, no spaces.
    pub fn float(arg: &[u8]) -> Result<f64, CmdError> {
        let text = std::str::from_utf8(arg).map_err(|_| CmdError::NotFloat)?;
        if text.is_empty() || text.starts_with(char::is_whitespace) || text.ends_with(char::is_whitespace) {
            return Err(CmdError::NotFloat);
        }
        let value: f64 = text.parse().map_err(|_| CmdError::NotFloat)?;
        if value.is_nan() {
            return Err(CmdError::NotFloat);
        }
        Ok(value)
    }

    pub fn eq(arg: &[u8], word: &str) -> bool {
        arg.eq_ignore_ascii_case(word.as_bytes())
    }

    /// A blocking command's timeout in seconds, as Redis reads it: a
    /// non-negative decimal; 0 waits for ever.
    pub fn timeout(arg: &[u8]) -> Result<Option<std::time::Duration>, CmdError> {
        let seconds = float(arg).map_err(|_| super::err("ERR timeout is not a float or out of range"))?;
        if seconds < 0.0 {
            return Err(super::err("ERR timeout is negative"));
        }
        let millis = (seconds * 1000.0).round();
        // float() refuses NaN, so this is the only way out of range.
        if millis >= i64::MAX as f64 / 2.0 {
            return Err(super::err("ERR timeout is out of range"));
        }
        Ok((millis > 0.0).then(|| std::time::Duration::from_millis(millis as u64)))
    }

    /// LMPOP's and ZMPOP's arguments from numkeys on (`args[0]`): the keys,
    /// whether the first of `ends` (LEFT, MIN) was named, and the count.
    pub fn mpop_args<'a>(args: &'a [Bytes], ends: [&str; 2]) -> Result<(&'a [Bytes], bool, usize), CmdError> {
        let numkeys =
            int(&args[0]).ok().filter(|&n| n > 0).ok_or_else(|| super::err("ERR numkeys should be greater than 0"))?;
        let end_at =
            (numkeys as u64).checked_add(1).filter(|&at| at < args.len() as u64).ok_or(CmdError::Syntax)? as usize;
        let first = match &args[end_at] {
            end if eq(end, ends[0]) => true,
            end if eq(end, ends[1]) => false,
            _ => return Err(CmdError::Syntax),
        };
        let count = match &args[end_at + 1..] {
            [] => 1,
            [option, value] if eq(option, "count") => {
                int(value).ok().filter(|&n| n > 0).ok_or_else(|| super::err("ERR count should be greater than 0"))?
                    as usize
            }
            _ => return Err(CmdError::Syntax),
        };
        Ok((&args[1..end_at], first, count))
    }
}

/// Brings the cached fences of big sorted sets up to date with `edits`
/// (re-reading them took a key walk after every block split, ~1 in 512
/// new members). A table whose cached fences do not match an edit is
/// forgotten and read again when next needed.
pub(crate) fn edit_fences(cache: &mut HashMap<u64, Arc<Vec<Vec<u8>>>>, edits: &[FenceEdit]) {
    for edit in edits {
        let Some(fences) = cache.get_mut(&edit.table) else { continue };
        let at = fences.partition_point(|fence| fence.as_slice() < edit.fence.as_slice());
        let present = fences.get(at) == Some(&edit.fence);
        match (edit.added, present) {
            (true, false) => Arc::make_mut(fences).insert(at, edit.fence.clone()),
            (false, true) if at > 0 => {
                Arc::make_mut(fences).remove(at);
            }
            _ => {
                cache.remove(&edit.table);
            }
        }
    }
}
