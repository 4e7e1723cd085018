//! Transactions, the allocator and the example hash map under the crash
//! simulator: randomized workloads, then every crash image at every fence
//! is reopened and checked (no torn object, no leak, no double allocation,
//! every acknowledged change present, nothing unacknowledged half-visible).
//!
//! CI size is bounded; `SCALEDKV_PMEM_SIM_OPS=2000` runs a long mode.

use std::collections::{HashMap, HashSet};

use scaledkv_pmem::collections::hashmap::{self, MapRoot};
use scaledkv_pmem::collections::PHashMap;
use scaledkv_pmem::sim::SimMedia;
use scaledkv_pmem::{Durability, Error, PPtr, Pod, Pool, PoolOptions, Zeroable};

/// Transactions of the list workload (`SCALEDKV_PMEM_SIM_OPS`, default 65);
/// the hash-map workload runs 20 times as many (cheaper) operations.
fn ops() -> usize {
    std::env::var("SCALEDKV_PMEM_SIM_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(65)
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, Pod, Zeroable, Debug, PartialEq)]
#[repr(C)]
struct Root {
    count: u64,
    sum: u64,
    head: PPtr<Node>,
}

/// Nodes carry their value twice and padding to 3 cache lines, so a torn
/// node (lines from two versions) shows as a mismatch.
#[derive(Clone, Copy, Pod, Zeroable, Debug, PartialEq)]
#[repr(C)]
struct Node {
    value: u64,
    next: PPtr<Node>,
    payload: [u64; 20],
    value_again: u64,
}

impl Node {
    fn new(value: u64, next: PPtr<Node>) -> Node {
        Node { value, next, payload: [value; 20], value_again: value }
    }
}

fn options() -> PoolOptions {
    // Small, so each crash image is cheap to copy and reopen.
    PoolOptions::new("sim-list", 1).size_bytes(400 << 10)
}

// Each workload runs under both media models: `pmem` (a dirty cache line
// may reach the medium at any moment; transactions undo-log) and `sync`
// (the page cache: only written-back ranges may; transactions redo-log).

#[test]
fn every_crash_image_of_random_transactions_is_a_committed_state_without_leaks_pmem() {
    random_transactions_under(Durability::Pmem);
}

#[test]
fn every_crash_image_of_random_transactions_is_a_committed_state_without_leaks_page_cache() {
    random_transactions_under(Durability::Sync);
}

#[test]
fn every_crash_image_of_hash_map_inserts_keeps_each_acknowledged_key_pmem() {
    hash_map_inserts_under(Durability::Pmem);
}

#[test]
fn every_crash_image_of_hash_map_inserts_keeps_each_acknowledged_key_page_cache() {
    hash_map_inserts_under(Durability::Sync);
}

/// The committed state a crash image must equal: (count, sum).
type State = (u64, u64);

/// Walks the list, checking every node whole and distinct; returns the
/// state and the node offsets.
fn check_list(pool: &Pool) -> Result<(State, Vec<u64>), String> {
    let root = *pool.get(pool.root::<Root>().map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let mut at = root.head;
    let mut seen = HashSet::new();
    let (mut count, mut sum) = (0, 0);
    while !at.is_null() {
        if !seen.insert(at.offset()) || count > root.count {
            return Err("list has a cycle or is longer than its count".into());
        }
        let node = pool.get(at).map_err(|e| e.to_string())?;
        if node.value != node.value_again || node.payload != [node.value; 20] {
            return Err(format!("torn node at {:#x}: {node:?}", at.offset()));
        }
        count += 1;
        sum += node.value;
        at = node.next;
    }
    if (count, sum) != (root.count, root.sum) {
        return Err(format!("root says {:?}, list has {:?}", (root.count, root.sum), (count, sum)));
    }
    Ok(((count, sum), seen.into_iter().collect()))
}

fn random_transactions_under(durability: Durability) {
    let options = options().durability(durability);
    let mut pool = Pool::create_simulated::<Root>(&options).unwrap();
    let root = pool.root::<Root>().unwrap();
    pool.simulated().unwrap().start_recording();
    let mut rng = Rng(42);
    // For each transaction: the fences it spans and the states around it.
    let mut spans: Vec<(usize, usize, State, State)> = Vec::new();
    let mut state: State = (0, 0);
    for _ in 0..ops() {
        let first = pool.simulated().unwrap().fences();
        let op = rng.below(10);
        let value = rng.below(1000) + 1;
        let fail = rng.below(8) == 0;
        let index = rng.below(8);
        let result = pool.transaction(|tx| {
            let r = *tx.get(root)?;
            let mut r2 = r;
            match op {
                0..=4 => {
                    // push one or two nodes
                    for extra in 0..1 + op % 2 {
                        let node = tx.alloc(Node::new(value + extra, r2.head))?;
                        r2.head = node;
                        r2.count += 1;
                        r2.sum += value + extra;
                    }
                }
                5 | 6 if !r.head.is_null() => {
                    // pop the head
                    let node = *tx.get(r.head)?;
                    tx.free(r.head)?;
                    r2.head = node.next;
                    r2.count -= 1;
                    r2.sum -= node.value;
                }
                7 if !r.head.is_null() => {
                    // rewrite the value of the index-th node
                    let mut at = r.head;
                    for _ in 0..index {
                        let next = tx.get(at)?.next;
                        if next.is_null() {
                            break;
                        }
                        at = next;
                    }
                    let old = *tx.get(at)?;
                    tx.set(at, Node::new(value, old.next))?;
                    r2.sum = r2.sum - old.value + value;
                }
                _ => {
                    // a large scratch allocation, freed in the same transaction
                    let scratch = tx.alloc_slice_zeroed::<u64>(10_000)?;
                    tx.free(scratch)?;
                }
            }
            tx.set(root, r2)?;
            if fail {
                return Err(Error::Alignment { align: 0 });
            }
            Ok((r2.count, r2.sum))
        });
        let before = state;
        if let Ok(after) = result {
            state = after;
        }
        spans.push((first, pool.simulated().unwrap().fences(), before, state));
    }
    let images = pool.into_simulated().unwrap().crash_images();
    let mut checked = 0;
    // Images whose reopen had to finish a transaction: rolled back (undo)
    // or replayed (redo). Both paths must be exercised, not just pass.
    let mut repaired = 0;
    images.for_each(2, 7, |image| {
        // The transaction running at this fence, if any, decides the states
        // allowed: before it, or (if the crash hit its commit) after it.
        let allowed: Vec<State> =
            match spans.iter().find(|(first, end, _, _)| image.fence >= *first && image.fence < *end) {
                Some((_, _, before, after)) => vec![*before, *after],
                None => vec![spans.iter().rev().find(|s| s.1 <= image.fence).map_or((0, 0), |s| s.3)],
            };
        let mut pool = Pool::open_simulated(SimMedia::from_image(image.bytes), &options)
            .unwrap_or_else(|e| panic!("fence {}: reopen failed: {e}", image.fence));
        let recovery = pool.recovery();
        match durability {
            Durability::Sync => assert_eq!(recovery.rolled_back_entries, 0, "fence {}: undo in redo mode", image.fence),
            _ => assert_eq!(recovery.replayed_entries, 0, "fence {}: redo in undo mode", image.fence),
        }
        repaired += usize::from(recovery.rolled_back_entries + recovery.replayed_entries > 0);
        let (state, nodes) = check_list(&pool).unwrap_or_else(|e| panic!("fence {}: {e}", image.fence));
        assert!(allowed.contains(&state), "fence {}: state {state:?}, allowed {allowed:?}", image.fence);
        // No leak: every allocated object is the root or a list node.
        let stats = pool.stats();
        assert_eq!(stats.allocated_objects, 1 + nodes.len() as u64, "fence {}: leak", image.fence);
        // No double allocation: new objects never overlap live ones.
        let fresh: Vec<u64> =
            (0..3).map(|_| pool.transaction(|tx| tx.alloc(Node::new(1, PPtr::null()))).unwrap().offset()).collect();
        let node_bytes = std::mem::size_of::<Node>() as u64;
        for new in &fresh {
            for old in &nodes {
                assert!(
                    new + node_bytes <= *old || old + node_bytes <= *new,
                    "fence {}: double allocation",
                    image.fence
                );
            }
        }
        checked += 1;
    });
    assert!(checked > images.len(), "checked {checked} images over {} crash points", images.len());
    assert!(repaired > images.len() / 4, "only {repaired} of {checked} images needed recovery");
    eprintln!("checked {checked} crash images over {} crash points, {repaired} recovered a transaction", images.len());
}

fn hash_map_inserts_under(durability: Durability) {
    let options = PHashMap::options(600 << 10, durability);
    let mut map = PHashMap::init(Pool::create_simulated::<MapRoot>(&options).unwrap()).unwrap();
    map.pool_mut().simulated().unwrap().start_recording();
    let mut rng = Rng(7);
    // (fence after the op returned, key, Some(value) or None for removed)
    let mut acked: Vec<(usize, u32, Option<u32>)> = Vec::new();
    // Every value ever written per key, acknowledged or not.
    let mut written: HashMap<u32, HashSet<u32>> = HashMap::new();
    let fences = |map: &mut PHashMap| map.pool_mut().simulated().unwrap().fences();
    for i in 0..(ops() * 20) as u32 {
        let op = rng.below(10);
        // Removals and some updates hit keys already in the map.
        let key = match acked.len() {
            n if n > 0 && op <= 1 => acked[rng.below(n as u64) as usize].1,
            _ => rng.below(5000) as u32,
        };
        let value = i + 1;
        written.entry(key).or_default().insert(value);
        match op {
            0 => {
                map.remove(key).unwrap();
                acked.push((fences(&mut map), key, None));
            }
            1 => {
                map.insert_tx(key, value).unwrap();
                acked.push((fences(&mut map), key, Some(value)));
            }
            _ => {
                map.insert(key, value).unwrap();
                acked.push((fences(&mut map), key, Some(value)));
            }
        }
    }
    assert!(map.capacity() > 1024, "the workload must cover table growth");
    let images = map.into_pool().into_simulated().unwrap().crash_images();
    let mut checked = 0;
    images.for_each(1, 3, |image| {
        let pool = Pool::open_simulated(SimMedia::from_image(image.bytes), &options)
            .unwrap_or_else(|e| panic!("fence {}: reopen failed: {e}", image.fence));
        let map = PHashMap::attach(pool).unwrap_or_else(|e| panic!("fence {}: {e}", image.fence));
        // What was acknowledged by the time of this crash.
        let mut expected: HashMap<u32, Option<u32>> = HashMap::new();
        for (fence, key, value) in &acked {
            if *fence <= image.fence {
                expected.insert(*key, *value);
            }
        }
        let entries = map.entries().unwrap();
        let present: HashMap<u32, u32> = entries.iter().copied().collect();
        assert_eq!(present.len(), entries.len(), "fence {}: a key appears twice", image.fence);
        for (key, value) in &present {
            assert!(
                written.get(key).is_some_and(|v| v.contains(value)),
                "fence {}: {key} -> {value} never written",
                image.fence
            );
        }
        // The one operation in flight may or may not have landed; every
        // earlier one must have.
        let in_flight = acked.iter().find(|(fence, _, _)| *fence > image.fence).map(|(_, key, _)| *key);
        for (key, value) in &expected {
            if Some(*key) != in_flight {
                assert_eq!(present.get(key).copied(), *value, "fence {}: key {key}", image.fence);
            }
        }
        checked += 1;
    });
    eprintln!("checked {checked} crash images over {} crash points", images.len());
}

#[test]
fn hash_map_layout_is_checked_on_attach() {
    let pool = Pool::create_simulated::<Root>(&options()).unwrap();
    assert!(matches!(PHashMap::attach(pool), Err(Error::RootMismatch { .. })));
    assert_eq!(hashmap::LAYOUT, "scaledkv-hashmap-u32");
}
