//! Random picks from big sets, hashes and sorted sets (tables), found from
//! fences kept across commands (`commands/picks.rs`): every pick is a
//! member there now, every member can be picked (also ones added after the
//! fences were read, and ones beside many removed), a positive count's
//! picks are distinct, and values and scores belong to their fields.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use common::Server;

/// A server on a fresh directory (kept while the test runs) and a client.
fn start() -> (tempfile::TempDir, Server, redis::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &[]);
    let con = redis::Client::open(server.url()).unwrap().get_connection().unwrap();
    con.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    (dir, server, con)
}

/// Picks counted by member: `rounds` requests of `SRANDMEMBER key -1000`
/// (or the hash's or sorted set's command).
fn tally(con: &mut redis::Connection, command: &str, key: &str, rounds: usize) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for _ in 0..rounds {
        let picks: Vec<String> = redis::cmd(command).arg(key).arg(-1000).query(con).unwrap();
        assert_eq!(picks.len(), 1000);
        for pick in picks {
            *counts.entry(pick).or_default() += 1;
        }
    }
    counts
}

/// Every member of `live` picked, nothing else, none far more often than
/// the mean (Poisson tails: at 20 per member, 60 has odds near 1e-13).
fn covers(counts: &HashMap<String, usize>, live: &BTreeSet<String>, what: &str) {
    let stray: Vec<&String> = counts.keys().filter(|m| !live.contains(*m)).take(5).collect();
    assert!(stray.is_empty(), "{what}: picks not in the collection: {stray:?}");
    let missed: Vec<&String> = live.iter().filter(|m| !counts.contains_key(*m)).take(5).collect();
    assert!(missed.is_empty(), "{what}: {} members never picked, such as {missed:?}", live.len() - counts.len());
    let picks: usize = counts.values().sum();
    let mean = picks as f64 / live.len() as f64;
    let most = *counts.values().max().unwrap() as f64;
    assert!(most < mean * 3.0, "{what}: a member picked {most} times, the mean {mean:.1}");
}

fn members(con: &mut redis::Connection, key: &str) -> BTreeSet<String> {
    redis::cmd("SMEMBERS").arg(key).query(con).unwrap()
}

#[test]
fn picks_from_a_big_set_stay_uniform_through_removals_and_additions() {
    let (_dir, _server, mut con) = start();
    let all: Vec<String> = (0..5000).map(|i| format!("member:{i:05}")).collect();
    let _: usize = redis::cmd("SADD").arg("s").arg(&all).query(&mut con).unwrap();
    let encoding: String = redis::cmd("OBJECT").arg("ENCODING").arg("s").query(&mut con).unwrap();
    assert_eq!(encoding, "hashtable");
    let mut live: BTreeSet<String> = all.iter().cloned().collect();
    covers(&tally(&mut con, "SRANDMEMBER", "s", 100), &live, "whole set");

    // Removed: the first 2,000 members whole (blocks left empty), then
    // every third (blocks left short): picks land in empty slots and are
    // drawn again.
    let mut removed: Vec<&String> = all[..2000].iter().collect();
    removed.extend(all[2000..].iter().step_by(3));
    let _: usize = redis::cmd("SREM").arg("s").arg(&removed).query(&mut con).unwrap();
    removed.iter().for_each(|m| assert!(live.remove(*m)));
    assert_eq!(members(&mut con, "s"), live);
    covers(&tally(&mut con, "SRANDMEMBER", "s", 60), &live, "after removals");

    // Added one by one, after the fences were read, past the last one:
    // found once the writes make the fences be read again.
    for i in 0..300 {
        let member = format!("new:{i:03}");
        let _: usize = redis::cmd("SADD").arg("s").arg(&member).query(&mut con).unwrap();
        live.insert(member);
    }
    covers(&tally(&mut con, "SRANDMEMBER", "s", 60), &live, "after additions");

    // Distinct picks, up to half the set (past that the set is listed).
    for count in [2, 10, 100, 1000, 1024, 1100] {
        let picks: Vec<String> = redis::cmd("SRANDMEMBER").arg("s").arg(count).query(&mut con).unwrap();
        let distinct: BTreeSet<&String> = picks.iter().collect();
        assert_eq!((picks.len(), distinct.len()), (count, count), "SRANDMEMBER s {count}");
        assert!(picks.iter().all(|m| live.contains(m)));
    }

    // SPOP: one, then counts; all distinct, all gone, the rest intact.
    let mut popped: Vec<String> = Vec::new();
    for _ in 0..50 {
        popped.push(redis::cmd("SPOP").arg("s").query(&mut con).unwrap());
    }
    for count in [5, 20, 100, 1030] {
        let more: Vec<String> = redis::cmd("SPOP").arg("s").arg(count).query(&mut con).unwrap();
        assert_eq!(more.len(), count);
        popped.extend(more);
    }
    let distinct: BTreeSet<String> = popped.iter().cloned().collect();
    assert_eq!(distinct.len(), popped.len(), "popped twice");
    assert!(distinct.is_subset(&live));
    let left = members(&mut con, "s");
    assert!(left.is_disjoint(&distinct));
    assert_eq!(left.len() + distinct.len(), live.len());
}

#[test]
fn picks_from_a_big_hash_and_sorted_set_carry_their_values_and_scores() {
    let (_dir, _server, mut con) = start();
    let fields: Vec<String> = (0..3000).map(|i| format!("field:{i:05}")).collect();
    let mut hset = redis::cmd("HSET");
    hset.arg("h");
    let mut zadd = redis::cmd("ZADD");
    zadd.arg("z");
    for (i, field) in fields.iter().enumerate() {
        hset.arg(field).arg(format!("value-of-{i}"));
        zadd.arg(i * 3).arg(field);
    }
    let _: usize = hset.query(&mut con).unwrap();
    let _: usize = zadd.query(&mut con).unwrap();
    let _: usize = redis::cmd("HDEL").arg("h").arg(&fields[..1500]).query(&mut con).unwrap();
    let _: usize = redis::cmd("ZREM").arg("z").arg(&fields[1000..2500]).query(&mut con).unwrap();
    let hash_live: BTreeSet<String> = fields[1500..].iter().cloned().collect();
    let zset_live: BTreeSet<String> = fields[..1000].iter().chain(&fields[2500..]).cloned().collect();
    covers(&tally(&mut con, "HRANDFIELD", "h", 40), &hash_live, "hash");
    covers(&tally(&mut con, "ZRANDMEMBER", "z", 40), &zset_live, "sorted set");

    let index = |field: &str| field["field:".len()..].parse::<usize>().unwrap();
    for count in [-300i64, 300, -1400, 700] {
        let want = count.unsigned_abs() as usize;
        let pairs: Vec<(String, String)> =
            redis::cmd("HRANDFIELD").arg("h").arg(count).arg("WITHVALUES").query(&mut con).unwrap();
        assert_eq!(pairs.len(), want);
        for (field, value) in &pairs {
            assert!(hash_live.contains(field), "{field}");
            assert_eq!(*value, format!("value-of-{}", index(field)));
        }
        let scored: Vec<(String, f64)> =
            redis::cmd("ZRANDMEMBER").arg("z").arg(count).arg("WITHSCORES").query(&mut con).unwrap();
        assert_eq!(scored.len(), want);
        for (member, score) in &scored {
            assert!(zset_live.contains(member), "{member}");
            assert_eq!(*score, (index(member) * 3) as f64);
        }
        if count > 0 {
            assert_eq!(pairs.iter().map(|p| &p.0).collect::<BTreeSet<_>>().len(), want, "distinct fields");
            assert_eq!(scored.iter().map(|p| &p.0).collect::<BTreeSet<_>>().len(), want, "distinct members");
        }
    }
}
