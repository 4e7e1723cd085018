//! Random picks from big tables without walking them.
//!
//! A set, hash or sorted set past 8 KiB is a table: one engine entry per
//! field (`table.rs`). The index keeps no counts per subtree, so a field
//! at a random rank was found by walking the table's keys up to it: half
//! the table per pick, 2,500-3,500 SRANDMEMBERs a second from a set of
//! 200,000 against Redis's 55,000-83,000 (a dict picks in O(1)), and 200
//! SPOPs (BENCHMARKS.md, forty-seventh session).
//!
//! Here each big table gets fences: the key of every `STEP`-th field, read
//! in one walk and kept across commands. A pick draws a slot among
//! `fences × STEP` and walks at most `STEP` keys from its block's fence. A
//! block holds `STEP` fields when its fences are read; fields removed since
//! leave empty slots, and a pick that lands on one is drawn again, so picks
//! stay uniform among the fields still there (rejection sampling). Fields
//! added since may lie beyond their block's `STEP` slots and go unpicked:
//! the fences are read again once the table's writes since (as the rank
//! counters of `ranks.rs` count them, shared by slot) pass a sixty-fourth
//! of its size, or a quarter of the slots are empty. The fences are
//! bounds, not members: a stale one still splits the table into disjoint
//! blocks, so a positive count's picks are distinct.

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::Arc;

use parking_lot::Mutex;
use rand::Rng;

use super::table::{self, Table};
use super::{CmdError, Ctx};

/// Fields per block: a pick walks up to this many keys in the index
/// (SRANDMEMBER of a set of 200,000: 63-72k/s with 128, 83-85k with 32).
const STEP: usize = 32;
/// Tables smaller than this are walked to their ranks directly
/// (`fields_at`), up to `PICKS_BY_RANK` picks in one walk of the index;
/// past it, such a pick lists the collection.
const FENCED_FROM: u64 = 1024;
const PICKS_BY_RANK: u64 = 1024;
/// Fences kept at most, all tables together (~60 MB of keys of 40 bytes;
/// the fences of deleted tables linger until then).
const FENCES_MOST: usize = 1 << 20;
/// Draws of the slots still wanted before a pick falls back to ranks:
/// with at most a quarter of the slots empty (or the fences are read
/// again), 1,024 picks are all found within 16 rounds but for odds below
/// 1e-6.
const ROUNDS: usize = 32;

/// One table's fences: the first is its fields' prefix, then the key of
/// every `STEP`-th field (a sorted set's `MEMBER` entries: a table's picks
/// are always under one prefix).
struct Fences {
    keys: Vec<Vec<u8>>,
    /// Where the fields' prefix ends: the last block's upper bound.
    end: Vec<u8>,
    /// The table's writes counted when they were read.
    written: u64,
    /// The table's field count then (at most `STEP` per fence).
    count: u64,
}

#[derive(Default)]
pub struct PickFences {
    tables: Mutex<Tables>,
}

#[derive(Default)]
struct Tables {
    by_id: HashMap<u64, Arc<Fences>>,
    /// Fences kept, summed over `by_id`.
    fences: usize,
}

/// The fields of `table` under `sub` (a sorted set's `MEMBER` entries, a
/// hash's or a set's fields with an empty one) that a pick of `count`
/// among its `size` takes, as `table::random_ranks` has it: one (None),
/// that many distinct (positive, below `size`), or that many with repeats
/// (negative). From the fences for up to half the table's size in
/// distinct picks, or its size with repeats (a pick of 5,000 from a set of
/// 200,000 listed it: 34 a second against Redis's 172); by rank for
/// smaller tables up to `PICKS_BY_RANK`; None where the pick must list
/// the collection instead, as for `fields_at`.
pub fn random_fields(
    ctx: &mut Ctx<'_>,
    table: &Table,
    sub: &[u8],
    size: u64,
    count: Option<i64>,
) -> Result<Option<Vec<Vec<u8>>>, CmdError> {
    if count == Some(0) {
        return Ok(Some(Vec::new()));
    }
    // More picks than that walk more than the table: listing it is cheaper.
    let fenced = size >= FENCED_FROM
        && match count {
            None => true,
            Some(n) if n < 0 => n.unsigned_abs() <= size,
            Some(n) => (n as u64) * 2 <= size,
        };
    if fenced {
        let fences = fences_of(ctx, table, sub, size);
        let picks = match count {
            Some(n) if n > 0 => distinct(ctx, &fences, n as usize),
            _ => with_repeats(ctx, &fences, count.map_or(1, |n| n.unsigned_abs() as usize)),
        };
        if let Some(picks) = picks {
            return Ok(Some(picks));
        }
    }
    let Some(ranks) = random_ranks(size, count) else { return Ok(None) };
    fields_at(ctx, table, sub, &ranks)
}

/// The ranks of a random pick of `count` (None: one) among `size` fields,
/// if it goes by rank: `super::random_picks` up to `PICKS_BY_RANK` picks;
/// None for an empty table or more picks.
fn random_ranks(size: u64, count: Option<i64>) -> Option<Vec<usize>> {
    match count {
        _ if size == 0 => None,
        None => Some(vec![rand::thread_rng().gen_range(0..size as usize)]),
        Some(count) if count.unsigned_abs() <= PICKS_BY_RANK => Some(super::random_picks(size as usize, count)),
        Some(_) => None,
    }
}

/// The fields of `table` under `sub` at `ranks` (below the table's count,
/// in any order, repeats allowed), in the order of `ranks`: found by rank
/// in the index alone, in one walk. Listing every field, read from the
/// log, to pick a few made HRANDFIELD, SRANDMEMBER and ZRANDMEMBER of a
/// collection of thousands run at 0.01-0.02x Redis's rate. None where the
/// table holds fewer fields than the ranks reach (a reader without locks
/// whose table shrank since it read the stub; the caller then lists it).
fn fields_at(ctx: &mut Ctx<'_>, table: &Table, sub: &[u8], ranks: &[usize]) -> Result<Option<Vec<Vec<u8>>>, CmdError> {
    let prefix = table::member_key(table.id, sub);
    let Some(end) = crate::keyspace::prefix_end(&prefix) else { return Ok(None) };
    let bounds = (Bound::Included(&prefix[..]), Bound::Excluded(&end[..]));
    let mut wanted = ranks.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    let keys = ctx.writes.keys_at_ranks(ctx.db(), bounds, &wanted);
    if keys.len() < wanted.len() {
        return Ok(None);
    }
    let field = |rank: &usize| wanted.binary_search(rank).ok().map(|at| keys[at][prefix.len()..].to_vec());
    Ok(ranks.iter().map(field).collect())
}

/// The table's fences as kept, or read again if missing or stale.
fn fences_of(ctx: &mut Ctx<'_>, table: &Table, sub: &[u8], size: u64) -> Arc<Fences> {
    let written = ctx.shared.rank_sums.finished(table.id);
    let kept = ctx.shared.pick_fences.tables.lock().by_id.get(&table.id).cloned();
    if let Some(fences) = kept {
        let since = written.wrapping_sub(fences.written);
        let slots = (fences.keys.len() * STEP) as u64;
        if since <= (fences.count / 64).max(64) && size <= fences.count + fences.count / 64 && size * 4 >= slots * 3 {
            return fences;
        }
    }
    let prefix = table::member_key(table.id, sub);
    let end = crate::keyspace::prefix_end(&prefix).expect("a table's prefix ends below 0xFF");
    let ranks: Vec<usize> = (STEP..size as usize).step_by(STEP).collect();
    let mut keys = ctx.writes.keys_at_ranks(ctx.db(), (Bound::Included(&prefix), Bound::Excluded(&end)), &ranks);
    keys.insert(0, prefix);
    // A reader without locks may find fewer fields than the stub it read
    // says (a write shrank the table meanwhile): the count the fences
    // cover, so that the stub's next reading has them read again.
    let count = size.min((keys.len() * STEP) as u64);
    let fences = Arc::new(Fences { keys, end, written, count });
    let mut tables = ctx.shared.pick_fences.tables.lock();
    if tables.fences + fences.keys.len() > FENCES_MOST {
        *tables = Tables::default();
    }
    tables.fences += fences.keys.len();
    if let Some(old) = tables.by_id.insert(table.id, fences.clone()) {
        tables.fences -= old.keys.len();
    }
    fences
}

/// `want` distinct fields, or None after `ROUNDS` draws that left some
/// wanting (a table emptied since its fences were read).
fn distinct(ctx: &mut Ctx<'_>, fences: &Fences, want: usize) -> Option<Vec<Vec<u8>>> {
    let slots = fences.keys.len() * STEP;
    let mut rng = rand::thread_rng();
    let mut tried = std::collections::HashSet::new();
    let mut found = Vec::with_capacity(want);
    for _ in 0..ROUNDS {
        let mut draw = Vec::with_capacity(want - found.len());
        while draw.len() < want - found.len() && tried.len() < slots {
            let slot = rng.gen_range(0..slots);
            if tried.insert(slot) {
                draw.push(slot);
            }
        }
        found.extend(resolve(ctx, fences, &draw).into_iter().flatten());
        if found.len() == want {
            return Some(found);
        }
    }
    None
}

/// `want` fields drawn independently.
fn with_repeats(ctx: &mut Ctx<'_>, fences: &Fences, want: usize) -> Option<Vec<Vec<u8>>> {
    let slots = fences.keys.len() * STEP;
    let mut rng = rand::thread_rng();
    let mut found = Vec::with_capacity(want);
    for _ in 0..ROUNDS {
        let draw: Vec<usize> = (found.len()..want).map(|_| rng.gen_range(0..slots)).collect();
        found.extend(resolve(ctx, fences, &draw).into_iter().flatten());
        if found.len() == want {
            return Some(found);
        }
    }
    None
}

/// The field in each slot, in the order given: None for an empty slot.
/// One walk per block drawn, of at most `STEP` keys from its fence.
fn resolve(ctx: &mut Ctx<'_>, fences: &Fences, slots: &[usize]) -> Vec<Option<Vec<u8>>> {
    let prefix_len = fences.keys[0].len();
    let mut order: Vec<usize> = (0..slots.len()).collect();
    order.sort_unstable_by_key(|&at| slots[at]);
    let mut fields = vec![None; slots.len()];
    for same_block in order.chunk_by(|&a, &b| slots[a] / STEP == slots[b] / STEP) {
        let block = slots[same_block[0]] / STEP;
        let mut offsets: Vec<usize> = same_block.iter().map(|&at| slots[at] % STEP).collect();
        offsets.dedup();
        let high = fences.keys.get(block + 1).unwrap_or(&fences.end);
        let bounds = (Bound::Included(&fences.keys[block][..]), Bound::Excluded(&high[..]));
        let keys = ctx.writes.keys_at_ranks(ctx.db(), bounds, &offsets);
        for &at in same_block {
            let found = offsets.binary_search(&(slots[at] % STEP)).ok().and_then(|i| keys.get(i));
            fields[at] = found.map(|key| key[prefix_len..].to_vec());
        }
    }
    fields
}
