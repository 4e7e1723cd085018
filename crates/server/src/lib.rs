//! `scaledkv-server`: the Redis protocol (RESP2 and RESP3) and, on a port
//! of its own, memcached's text and binary protocols over the ScaledKV
//! engine. Every write command's reply is sent only once the write is
//! durable (in `sync` and `pmem` modes); writes from all connections share
//! the engine's group commit.
//!
//! - `resp`: request parsing and reply encoding;
//! - `conn`: one connection's read–execute–reply loop (pipelining);
//! - `commands`: the command table, the executor and the commands;
//! - `keyspace`: value encoding, key locks for read-modify-write, globs;
//! - `pending`: queued writes the next lock holder reads (early lock release);
//! - `hash`: how a hash's fields sit in one engine value;
//! - `stream`: stream IDs and how a stream's parts are encoded;
//! - `committer`: the commit thread, where group commits wait for a disk;
//! - `io_threads`: the threads that serve connections;
//! - `waiters`: clients blocked in BLPOP and the like, in line per key;
//! - `pubsub`: channels, patterns and their subscribers' mailboxes;
//! - `notify`: keyspace notifications published through them;
//! - `tracking`: client-side caching's invalidations (CLIENT TRACKING);
//! - `monitor`: MONITOR's lines, sent through the same mailboxes;
//! - `memcache`: the memcached protocols (text, meta, binary) over the same keyspace;
//! - `script`: Lua scripting (EVAL), its sandbox and script cache;
//! - `expiry`: active expiry; `metrics`: the Prometheus endpoint;
//! - `server`: shared state, listeners, shutdown; `config`: flags and TOML.

pub mod commands;
pub mod commandstats;
pub mod committer;
pub mod config;
pub mod conn;
pub mod expiry;
pub mod failover;
pub mod fences;
pub mod geo;
pub mod hash;
pub mod histogram;
pub mod io_threads;
pub mod keyspace;
pub mod latency;
pub mod loglevel;
pub mod master;
pub mod maxmemory;
pub mod memcache;
pub mod memory;
pub mod metrics;
pub mod migrate;
pub mod monitor;
pub mod notify;
pub mod pause;
pub mod pending;
pub mod pqsort;
pub mod process;
pub mod pubsub;
pub mod rates;
pub mod rdb_import;
pub mod rdb_save;
pub mod rdb_sync;
pub mod redis_conf;
pub mod redis_configs;
pub mod replica;
pub mod resp;
pub mod script;
pub mod server;
pub mod shutdown;
pub mod slowlog;
pub mod socket;
pub mod stream;
pub mod tls;
pub mod tracking;
pub mod waiters;
pub mod write_gate;
pub mod zset;

pub use config::{Cli, Config};
pub use server::run;
