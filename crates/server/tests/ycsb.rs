//! YCSB's workloads A-F (`scaledkv-bench ycsb`) through both protocols,
//! with each record read checked byte for byte: concurrent clients
//! updating, inserting, scanning (a sorted set of every key, hashes of 10
//! fields) through the Redis protocol, and items through memcached's. The
//! same workloads against the real Redis and memcached check the clients.

mod common;

use common::{start_with_memcached, MemcachedServer, RedisServer};

const RECORDS: u64 = 2_000;
const OPERATIONS: u64 = 1_000;

/// Runs load and workloads a-f against `target`; asserts every phase ran
/// all its operations and every read found its record intact.
fn run_ycsb(target: &str, expect_scans: bool) {
    let args = [
        "ycsb",
        "--target",
        target,
        "--records",
        &RECORDS.to_string(),
        "--operations",
        &OPERATIONS.to_string(),
        "--threads",
        "4",
        "--verify",
        "1",
        "--progress",
        "never",
    ];
    let phases = scaledkv_bench::ycsb::main(args.iter().map(|a| a.to_string()).collect())
        .unwrap_or_else(|e| panic!("YCSB against {target}: {e}"));
    let names: Vec<&str> = phases.iter().map(|p| p.name.as_str()).collect();
    let expected: &[&str] =
        if expect_scans { &["load", "a", "b", "c", "f", "d", "e"] } else { &["load", "a", "b", "c", "f", "d"] };
    assert_eq!(names, expected, "{target}: phases run");
    for phase in &phases {
        let wanted = if phase.name == "load" { RECORDS } else { OPERATIONS };
        assert_eq!(phase.operations, wanted, "{target}: operations of {}", phase.name);
        assert!(phase.throughput > 0.0);
    }
}

#[test]
fn ycsb_workloads_through_both_protocols() {
    let dir = tempfile::tempdir().unwrap();
    let (server, memcached_port) = start_with_memcached(dir.path(), &[]);
    run_ycsb(&format!("redis://127.0.0.1:{}", server.port), true);
    run_ycsb(&format!("memcached://127.0.0.1:{memcached_port}"), false);
}

#[test]
fn ycsb_workloads_against_the_real_peers() {
    if let Some(redis) = RedisServer::start() {
        run_ycsb(&format!("redis://127.0.0.1:{}", redis.port), true);
    }
    if let Some(memcached) = MemcachedServer::start() {
        run_ycsb(&format!("memcached://127.0.0.1:{}", memcached.port), false);
    }
}
