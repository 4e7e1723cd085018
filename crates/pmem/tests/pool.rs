//! Pools, the allocator and transactions through the public API: what a
//! user sees on success, on error, on panic and on a damaged file.

use scaledkv_pmem::collections::{PHashMap, PVec};
use scaledkv_pmem::{Durability, Error, PPtr, Pod, Pool, PoolOptions, Zeroable};

#[derive(Clone, Copy, Pod, Zeroable, Debug, PartialEq)]
#[repr(C)]
struct Root {
    counter: u64,
    list: PPtr<Node>,
    items: PVec<u64>,
}

#[derive(Clone, Copy, Pod, Zeroable, Debug, PartialEq)]
#[repr(C)]
struct Node {
    value: u64,
    next: PPtr<Node>,
}

/// `sync` on the disk (tempdir): transactions take the redo-log path.
fn options() -> PoolOptions {
    PoolOptions::new("pool-test", 3).size_bytes(4 << 20).durability(Durability::Sync)
}

fn list(pool: &Pool, mut at: PPtr<Node>) -> Vec<u64> {
    let mut values = Vec::new();
    while !at.is_null() {
        let node = pool.get(at).unwrap();
        values.push(node.value);
        at = node.next;
    }
    values
}

#[test]
fn committed_changes_survive_reopen_and_typed_pointers_stay_valid() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool");
    {
        let mut pool = Pool::create::<Root>(&path, &options()).unwrap();
        let root = pool.root::<Root>().unwrap();
        for value in 1..=5u64 {
            pool.transaction(|tx| {
                let head = tx.get(root)?.list;
                let node = tx.alloc(Node { value, next: head })?;
                let r = tx.get_mut(root)?;
                r.list = node;
                r.counter += value;
                Ok::<_, Error>(())
            })
            .unwrap();
        }
        pool.transaction(|tx| {
            let items = PVec::<u64>::new(tx)?;
            for i in 0..100 {
                items.push(tx, i * i)?;
            }
            tx.get_mut(root)?.items = items;
            Ok::<_, Error>(())
        })
        .unwrap();
    }
    let pool = Pool::open(&path, &options()).unwrap();
    assert_eq!(pool.recovery().rolled_back_entries, 0);
    let root = *pool.get(pool.root::<Root>().unwrap()).unwrap();
    assert_eq!(root.counter, 15);
    assert_eq!(list(&pool, root.list), vec![5, 4, 3, 2, 1]);
    assert_eq!(root.items.len(&pool).unwrap(), 100);
    assert_eq!(root.items.get(&pool, 9).unwrap(), Some(81));
    assert_eq!(root.items.as_slice(&pool).unwrap().iter().sum::<u64>(), (0..100u64).map(|i| i * i).sum());
}

#[test]
fn an_error_or_a_panic_rolls_the_whole_transaction_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut pool = Pool::create::<Root>(&dir.path().join("pool"), &options()).unwrap();
    let root = pool.root::<Root>().unwrap();
    let before = pool.stats();

    let result: Result<(), Error> = pool.transaction(|tx| {
        tx.get_mut(root)?.counter = 99;
        let node = tx.alloc(Node { value: 1, next: PPtr::null() })?;
        tx.get_mut(root)?.list = node;
        Err(Error::Alignment { align: 0 }) // any error aborts
    });
    assert!(result.is_err());
    assert_eq!(*pool.get(root).unwrap(), Root::zeroed());
    assert_eq!(pool.stats(), before, "the allocation was rolled back");

    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _: Result<(), Error> = pool.transaction(|tx| {
            tx.get_mut(root)?.counter = 7;
            tx.alloc(Node { value: 2, next: PPtr::null() })?;
            panic!("in the middle of a transaction");
        });
    }));
    assert!(panicked.is_err());
    assert_eq!(pool.get(root).unwrap().counter, 0);
    assert_eq!(pool.stats(), before);
    // The pool is still usable.
    pool.transaction(|tx| tx.set(root, Root { counter: 1, ..Root::zeroed() })).unwrap();
    assert_eq!(pool.get(root).unwrap().counter, 1);
}

#[test]
fn allocator_reuses_freed_blocks_reports_stats_and_runs_out_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let mut pool = Pool::create::<Root>(&dir.path().join("pool"), &options()).unwrap();
    let empty = pool.stats();
    let a = pool.transaction(|tx| tx.alloc([7u64; 8])).unwrap();
    assert_eq!(*pool.get(a).unwrap(), [7u64; 8]);
    let used = pool.stats();
    assert_eq!(used.allocated_bytes, empty.allocated_bytes + 64);
    assert_eq!(used.allocated_objects, empty.allocated_objects + 1);
    pool.transaction(|tx| tx.free(a)).unwrap();
    assert_eq!(pool.stats().allocated_bytes, empty.allocated_bytes);
    let b = pool.transaction(|tx| tx.alloc([1u64; 8])).unwrap();
    assert_eq!(a, b, "a freed block is reused");

    // Freeing twice, or freeing what is not an object, is a clear error.
    pool.transaction(|tx| tx.free(b)).unwrap();
    let again = pool.transaction(|tx| tx.free(b)).unwrap_err();
    assert!(matches!(again, Error::InvalidFree { .. }), "{again}");
    let inside = pool.transaction(|tx| tx.free(PPtr::<u8>::from_offset(b.offset() + 8))).unwrap_err();
    assert!(matches!(inside, Error::InvalidFree { .. }), "{inside}");

    // Large objects take runs of chunks; a request bigger than the heap fails.
    let big = pool.transaction(|tx| tx.alloc_slice_zeroed::<u64>(40_000)).unwrap();
    assert_eq!(pool.get_slice(big, 40_000).unwrap().len(), 40_000);
    let too_big = pool.transaction(|tx| tx.alloc_slice_zeroed::<u64>(1 << 20)).unwrap_err();
    assert!(matches!(too_big, Error::OutOfSpace { .. }), "{too_big}");
    assert!(too_big.to_string().contains("out of space"), "{too_big}");
    let stats = pool.stats();
    assert!(stats.free_bytes + stats.allocated_bytes == stats.heap_bytes);
    assert!((0.0..=1.0).contains(&stats.fragmentation));

    // Fill with small objects until the heap is full: an error, not a crash.
    let mut count = 0u64;
    let error = loop {
        match pool.transaction(|tx| tx.alloc([0u64; 125])) {
            Ok(_) => count += 1,
            Err(error) => break error,
        }
    };
    assert!(matches!(error, Error::OutOfSpace { .. }), "{error}");
    assert!(count > 1000, "{count}");
}

#[test]
fn pointers_outside_the_heap_and_wrong_root_types_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut pool = Pool::create::<Root>(&dir.path().join("pool"), &options()).unwrap();
    for offset in [0u64, 8, 1 << 40, u64::MAX - 3] {
        let error = pool.get(PPtr::<u64>::from_offset(offset)).unwrap_err();
        assert!(matches!(error, Error::BadPointer { .. }), "{error}");
    }
    let root = pool.root::<Root>().unwrap();
    let misaligned = PPtr::<u64>::from_offset(root.offset() + 1);
    assert!(matches!(pool.get(misaligned), Err(Error::BadPointer { .. })));
    assert!(matches!(pool.root::<u8>(), Err(Error::RootMismatch { .. })));
    let error = pool.transaction(|tx| tx.set(misaligned, 1)).unwrap_err();
    assert!(matches!(error, Error::BadPointer { .. }));
}

#[test]
fn a_transaction_larger_than_the_log_is_refused_and_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut pool = Pool::create::<Root>(&dir.path().join("pool"), &options().log_bytes(64 << 10)).unwrap();
    let data = pool.transaction(|tx| tx.alloc_slice_zeroed::<u64>(20_000)).unwrap();
    let error = pool
        .transaction(|tx| {
            for value in tx.get_slice_mut(data, 20_000)? {
                *value = 1;
            }
            Ok::<_, Error>(())
        })
        .unwrap_err();
    assert!(matches!(error, Error::TxLogFull { .. }), "{error}");
    assert!(pool.get_slice(data, 20_000).unwrap().iter().all(|v| *v == 0));
}

#[test]
fn open_refuses_other_layouts_versions_and_non_pools_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool");
    drop(Pool::create::<Root>(&path, &options()).unwrap());
    let other = PoolOptions::new("other", 3).durability(Durability::Sync);
    let error = Pool::open(&path, &other).unwrap_err();
    assert!(error.to_string().contains("pool layout is `pool-test v3`, the program expects `other v3`"), "{error}");
    let newer = PoolOptions::new("pool-test", 4).durability(Durability::Sync);
    assert!(matches!(Pool::open(&path, &newer), Err(Error::LayoutMismatch { .. })));

    let not_pool = dir.path().join("not-a-pool");
    std::fs::write(&not_pool, vec![1u8; 1 << 20]).unwrap();
    assert!(matches!(Pool::open(&not_pool, &options()), Err(Error::NotAPool { .. })));
    let missing = Pool::open(&dir.path().join("missing"), &options()).unwrap_err();
    assert!(missing.to_string().contains("missing"), "{missing}");
    assert!(matches!(Pool::create::<Root>(&path, &options()), Err(Error::Io { .. })));
    assert!(matches!(
        Pool::create::<Root>(&dir.path().join("tiny"), &options().size_bytes(4096)),
        Err(Error::PoolTooSmall { .. })
    ));
}

#[test]
fn hash_map_inserts_updates_removes_grows_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("map");
    let mut model = std::collections::HashMap::new();
    {
        let mut map = PHashMap::create(&path, 16 << 20, Durability::Buffered).unwrap();
        let mut x = 12345u64;
        for i in 0..5000u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let key = (x >> 40) as u32 % 3000;
            let old = if i % 3 == 0 { map.insert_tx(key, i).unwrap() } else { map.insert(key, i).unwrap() };
            assert_eq!(old, model.insert(key, i));
            if i % 7 == 0 {
                let gone = (x >> 20) as u32 % 3000;
                assert_eq!(map.remove(gone).unwrap(), model.remove(&gone));
            }
        }
        assert_eq!(map.len(), model.len() as u64);
        assert!(map.capacity() > 1024, "grew");
    }
    let map = PHashMap::open(&path, Durability::Buffered).unwrap();
    assert_eq!(map.len(), model.len() as u64);
    for (key, value) in &model {
        assert_eq!(map.get(*key).unwrap(), Some(*value));
    }
    assert_eq!(map.get(4000).unwrap(), None);
    let mut entries = map.entries().unwrap();
    entries.sort();
    let mut expected: Vec<_> = model.into_iter().collect();
    expected.sort();
    assert_eq!(entries, expected);
}

/// `create` builds the pool under a staging name and publishes it whole:
/// a staging file left by a crash is not a pool anyone opens, the next
/// `create` replaces it, and an existing pool is never overwritten.
#[test]
fn create_publishes_a_whole_pool_and_never_replaces_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool");
    // What a crash halfway through an earlier create leaves behind.
    let staging = dir.path().join(".pool.creating");
    std::fs::write(&staging, vec![0xAB; 8192]).unwrap();
    {
        let mut pool = Pool::create::<Root>(&path, &options()).unwrap();
        let root = pool.root::<Root>().unwrap();
        pool.transaction(|tx| {
            tx.get_mut(root)?.counter = 41;
            Ok::<_, Error>(())
        })
        .unwrap();
    }
    assert!(!staging.exists(), "the staging file took the pool's name");
    match Pool::create::<Root>(&path, &options()) {
        Err(Error::Io { source, .. }) => assert_eq!(source.kind(), std::io::ErrorKind::AlreadyExists),
        other => panic!("create over an existing pool: {other:?}"),
    }
    let pool = Pool::open(&path, &options()).unwrap();
    assert_eq!(pool.get(pool.root::<Root>().unwrap()).unwrap().counter, 41);
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names, vec!["pool".to_string()]);
}

#[test]
fn a_created_pool_takes_its_name_only_once_initialised() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool");
    // An init that fails (as a crash would stop it): no pool at the name,
    // no staging file left.
    let failed = Pool::create_with::<Root>(&path, &options(), |_| Err(Error::Empty { path: "init".into() }));
    assert!(matches!(failed, Err(Error::Empty { .. })));
    assert!(!path.exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the staging file is removed");
    let pool = Pool::create_with::<Root>(&path, &options(), |pool| {
        let root = pool.root::<Root>()?;
        pool.transaction(|tx| {
            tx.get_mut(root)?.counter = 7;
            Ok::<_, Error>(())
        })
    })
    .unwrap();
    drop(pool);
    let pool = Pool::open(&path, &options()).unwrap();
    assert_eq!(pool.get(pool.root::<Root>().unwrap()).unwrap().counter, 7);
}
