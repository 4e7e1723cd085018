//! Sorted set commands, with Redis 7.0's replies and errors. A sorted set
//! is one engine value (`crate::zset`) while Redis would keep it a
//! listpack (128 members of up to 64 bytes) or while it is at most 8 KiB;
//! past both it becomes a table (`table`) with two entries per member and
//! one per block of members:
//! - `MEMBER member` → its score (8 bytes), for ZSCORE and updates;
//! - `INDEX score_key member` → nothing, in Redis's order (score, then
//!   member), for ranges by score, rank and member;
//! - `BLOCK fence` → how many index entries lie from `INDEX fence` up to
//!   the next block's fence (the first block's fence is empty): ranks.
//!
//! The stub's count is the table's entries, its third word the members. A
//! range by score or member starts with one seek; a rank (ZRANK, ZRANGE
//! from a far index) sums the counts of the blocks before it and counts
//! within its block: O(n / 512 + 1024) entries where Redis's skiplist
//! takes O(log n) steps. A block splits in two past 1,024 members; one
//! left empty goes.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use rand::Rng;

use super::args::{eq, int};
use super::ranks::BlockSums;
use super::table::{self, Table};
use super::{err, CmdError, CmdResult, Ctx};
use crate::fences::FenceChanges;
use crate::hash::Corrupt;
use crate::keyspace::{expiry_of, prefix_end, Value, TYPE_SET, TYPE_SET_TABLE, TYPE_ZSET, TYPE_ZSET_TABLE};
use crate::resp::{Out, Protocol};
use crate::zset::{self, format_score, order, parse_bound, parse_score, score_from_key, score_key, Lex};

const MEMBER: u8 = 0;
const INDEX: u8 = 1;
const BLOCK: u8 = 2;
/// A block holds at most this many members; past it, it splits in two.
const BLOCK_MOST: u64 = 1024;
/// Ranks below this are walked to from the end; farther ones are found
/// through the blocks.
const RANK_SEEK: u64 = 256;

fn member_field(member: &[u8]) -> Vec<u8> {
    [&[MEMBER], member].concat()
}

/// The member whose score a big sorted set's field holds (None for its
/// index and block fields).
pub fn member_of_field(field: &[u8]) -> Option<&[u8]> {
    field.strip_prefix(&[MEMBER])
}

/// Where a member sorts in the index (its entry's key after `INDEX`).
fn place(score: f64, member: &[u8]) -> Vec<u8> {
    [&score_key(score)[..], member].concat()
}

fn index_field(score: f64, member: &[u8]) -> Vec<u8> {
    [&[INDEX][..], &place(score, member)].concat()
}

fn block_field(fence: &[u8]) -> Vec<u8> {
    [&[BLOCK], fence].concat()
}

fn block_count(bytes: &[u8]) -> Result<u64, Corrupt> {
    Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| Corrupt)?))
}

fn stored_score(bytes: &[u8]) -> Result<f64, Corrupt> {
    let score = f64::from_le_bytes(bytes.try_into().map_err(|_| Corrupt)?);
    if score.is_nan() {
        return Err(Corrupt);
    }
    Ok(score)
}

/// What a value's bytes cost in the one-value encoding, near enough to
/// decide when it outgrows it (`table::stays_one_value`).
fn entry_bytes(member: &[u8]) -> usize {
    member.len() + 10
}

const NOT_FLOAT_RANGE: &str = "ERR min or max is not a float";
const NOT_LEX_RANGE: &str = "ERR min or max not valid string range item";

fn range_bound(arg: &[u8]) -> Result<(f64, bool), CmdError> {
    parse_bound(arg).ok_or_else(|| err(NOT_FLOAT_RANGE))
}

fn lex_bound(arg: &[u8]) -> Result<Lex, CmdError> {
    Lex::parse(arg).ok_or_else(|| err(NOT_LEX_RANGE))
}

fn score_arg(arg: &[u8]) -> Result<f64, CmdError> {
    parse_score(arg).ok_or(CmdError::NotFloat)
}

/// The sorted set at `key`: None if missing, WRONGTYPE for another type.
pub(super) fn read_zset(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Value>, CmdError> {
    ctx.read_collection(key, TYPE_ZSET, TYPE_ZSET_TABLE)
}

/// Members with their scores, owned.
type Scored = Vec<(Vec<u8>, f64)>;

/// Where a walk over a sorted set starts, in its direction.
#[derive(Clone, Copy)]
enum From<'a> {
    /// The `n`th member from the walk's end (0: the first).
    Rank(u64),
    /// The first score at or past this one (past it when exclusive).
    Score(f64, bool),
    /// The first member within this end of a range by member, as Redis
    /// finds it (a range by member assumes equal scores).
    Lex(&'a Lex),
}

/// A sorted set a command reads or changes, in either encoding (a missing
/// key is an empty one).
pub(super) enum Open<'v> {
    /// In Redis's order; `bytes` estimates its encoding's size.
    Value {
        entries: Vec<(Cow<'v, [u8]>, f64)>,
        skiplist: bool,
        bytes: usize,
    },
    Table(Table),
}

impl<'v> Open<'v> {
    pub(super) fn of(value: Option<&'v Value>) -> Result<Open<'v>, CmdError> {
        Ok(match value {
            Some(value) if value.tag() == TYPE_ZSET_TABLE => Open::Table(Table::of(value)?),
            Some(value) => {
                let (entries, skiplist) = zset::decode(value.data())?;
                let bytes = entries.iter().map(|(m, _)| entry_bytes(m)).sum();
                let entries = entries.into_iter().map(|(m, s)| (Cow::Borrowed(m), s)).collect();
                Open::Value { entries, skiplist, bytes }
            }
            None => Open::Value { entries: Vec::new(), skiplist: false, bytes: 0 },
        })
    }

    fn len(&self) -> usize {
        match self {
            Open::Value { entries, .. } => entries.len(),
            Open::Table(table) => table.head as usize,
        }
    }

    pub(super) fn score(&self, ctx: &mut Ctx<'_>, member: &[u8]) -> Result<Option<f64>, CmdError> {
        match self {
            Open::Value { entries, .. } => Ok(entries.iter().find(|(m, _)| m[..] == *member).map(|&(_, s)| s)),
            Open::Table(table) => match table::get(ctx, table, &member_field(member))? {
                Some(bytes) => Ok(Some(stored_score(&bytes)?)),
                None => Ok(None),
            },
        }
    }

    /// Gives `member` the score `score`; `old` is its score now (None: it
    /// is new). A value grown past its limits becomes a table here, so a
    /// big ZADD costs O(log n) per member, not O(n).
    fn put(&mut self, ctx: &mut Ctx<'_>, key: &[u8], member: &'v [u8], score: f64, old: Option<f64>) -> CmdResult {
        // -0 is kept as 0, as Redis's listpack keeps it.
        let score = if score == 0.0 { 0.0 } else { score };
        if old.is_none() {
            // A client blocked in BZPOPMIN may take it.
            ctx.writes.note_pushed();
        }
        match self {
            Open::Value { entries, skiplist, bytes } => {
                match old {
                    Some(old) => {
                        let at = position(entries, old, member).ok_or(Corrupt)?;
                        entries.remove(at);
                    }
                    None => *bytes += entry_bytes(member),
                }
                let at = entries.partition_point(|(m, s)| order((*s, m), (score, member)) == Ordering::Less);
                entries.insert(at, (Cow::Borrowed(member), score));
                *skiplist |= entries.len() > zset::LISTPACK_ENTRIES || member.len() > zset::LISTPACK_VALUE;
                if !table::stays_one_value(*skiplist, *bytes) {
                    self.make_table(ctx, key)?;
                }
            }
            Open::Table(table) => {
                match old {
                    Some(old) => {
                        table::delete(ctx, table, &index_field(old, member));
                        table::overwrite(ctx, table, &member_field(member), &score.to_le_bytes())?;
                        table::insert(ctx, table, &index_field(score, member), b"")?;
                        // A member that stays in its block leaves the
                        // counts as they were (and the log without two
                        // records of garbage).
                        let from = block_of(ctx, table, &place(old, member))?;
                        let to = block_of(ctx, table, &place(score, member))?;
                        if from.0 != to.0 {
                            count_into(ctx, table, from, -1)?;
                            count_into(ctx, table, to, 1)?;
                        }
                    }
                    None => {
                        table::insert(ctx, table, &member_field(member), &score.to_le_bytes())?;
                        table.head += 1;
                        table::insert(ctx, table, &index_field(score, member), b"")?;
                        count_in_block(ctx, table, &place(score, member), 1)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Removes `member`, whose score is `score`.
    fn remove(&mut self, ctx: &mut Ctx<'_>, member: &[u8], score: f64) -> CmdResult {
        match self {
            Open::Value { entries, bytes, .. } => {
                let at = position(entries, score, member).ok_or(Corrupt)?;
                entries.remove(at);
                *bytes -= entry_bytes(member);
            }
            Open::Table(table) => {
                table::delete(ctx, table, &member_field(member));
                table::delete(ctx, table, &index_field(score, member));
                count_in_block(ctx, table, &place(score, member), -1)?;
                table.head -= 1;
            }
        }
        Ok(())
    }

    fn make_table(&mut self, ctx: &mut Ctx<'_>, key: &[u8]) -> CmdResult {
        let Open::Value { entries, .. } = self else { return Ok(()) };
        *self = Open::Table(new_table(ctx, key, entries)?);
        Ok(())
    }

    /// Calls `visit` with each member and score from `from` on, in Redis's
    /// order or (`reverse`) against it, until it returns false; `wanted`
    /// guesses how many it will take (a table reads that many at first).
    fn walk(
        &self,
        ctx: &mut Ctx<'_>,
        from: From<'_>,
        reverse: bool,
        wanted: usize,
        mut visit: impl FnMut(&[u8], f64) -> bool,
    ) -> CmdResult {
        let entries = match self {
            Open::Value { entries, .. } => entries,
            Open::Table(table) => return walk_table(ctx, table, from, reverse, wanted, visit),
        };
        let n = entries.len();
        // The position to start from, counted from the front.
        let start = match (from, reverse) {
            (From::Rank(k), false) => Some(k.min(n as u64) as usize),
            (From::Rank(k), true) => (n as u64).checked_sub(k + 1).map(|at| at as usize),
            (From::Score(s, ex), false) => Some(entries.partition_point(|e| if ex { e.1 <= s } else { e.1 < s })),
            (From::Score(s, ex), true) => {
                entries.partition_point(|e| if ex { e.1 < s } else { e.1 <= s }).checked_sub(1)
            }
            (From::Lex(end), false) => Some(entries.iter().position(|e| end.below(&e.0)).unwrap_or(n)),
            (From::Lex(end), true) => entries.iter().rposition(|e| end.above(&e.0)),
        };
        let Some(start) = start else { return Ok(()) };
        // A reverse start is a member's position, a forward one at most n.
        let walk: Box<dyn Iterator<Item = &(Cow<'_, [u8]>, f64)>> =
            if reverse { Box::new(entries[..=start].iter().rev()) } else { Box::new(entries[start..].iter()) };
        for (m, s) in walk {
            if !visit(m, *s) {
                break;
            }
        }
        Ok(())
    }

    /// Up to `limit` members from `from` while `within` holds, after
    /// skipping `offset` of them.
    fn collect(
        &self,
        ctx: &mut Ctx<'_>,
        from: From<'_>,
        reverse: bool,
        mut offset: u64,
        limit: usize,
        within: impl Fn(&[u8], f64) -> bool,
    ) -> Result<Scored, CmdError> {
        let mut found = Vec::new();
        if limit == 0 {
            return Ok(found);
        }
        // A table reads the members asked for at first (each is a read of
        // the log), or a first chunk when the end is a score or member.
        let wanted = if limit == usize::MAX { 64 } else { limit.saturating_add(offset as usize) };
        self.walk(ctx, from, reverse, wanted, |m, s| {
            if !within(m, s) {
                return false;
            }
            if offset > 0 {
                offset -= 1;
                return true;
            }
            found.push((m.to_vec(), s));
            found.len() < limit
        })?;
        Ok(found)
    }

    fn all(&self, ctx: &mut Ctx<'_>) -> Result<Scored, CmdError> {
        self.collect(ctx, From::Rank(0), false, 0, usize::MAX, |_, _| true)
    }

    /// `member`'s rank (its score is `score`) from the low end or the high.
    /// None if a reader without locks finds it gone in the snapshot it
    /// reads a big set's ranks from (`table_rank`).
    fn rank(
        &self,
        ctx: &mut Ctx<'_>,
        key: &[u8],
        member: &[u8],
        score: f64,
        reverse: bool,
    ) -> Result<Option<u64>, CmdError> {
        let (at, len) = match self {
            Open::Value { entries, .. } => {
                (position(entries, score, member).ok_or(Corrupt)? as u64, entries.len() as u64)
            }
            Open::Table(table) => match table_rank(ctx, key, table, member, score)? {
                Some(found) => found,
                None => return Ok(None),
            },
        };
        Ok(Some(if reverse { len.checked_sub(at + 1).ok_or(Corrupt)? } else { at }))
    }

    /// Where the command's writes so far are a whole state of the set: a
    /// table's commit as a piece when due (`table::piece_point`).
    fn piece_point(&mut self, ctx: &mut Ctx<'_>, key: &[u8], expiry: Option<u64>, pieces: bool) -> CmdResult {
        match self {
            Open::Table(table) => table::piece_point(ctx, key, table, expiry, pieces),
            Open::Value { .. } => Ok(()),
        }
    }

    /// `store` after noting keyspace event `event` (and `del` when the set
    /// is left empty), in Redis's order.
    fn store_noting(self, ctx: &mut Ctx<'_>, key: &[u8], expiry: Option<u64>, event: &'static str) -> CmdResult {
        let emptied = self.len() == 0;
        ctx.store_noting(crate::notify::ZSET, event, key, emptied, |ctx| self.store(ctx, key, expiry))
    }

    /// Writes the set back to `key` with `expiry`; an empty set goes.
    fn store(self, ctx: &mut Ctx<'_>, key: &[u8], expiry: Option<u64>) -> CmdResult {
        match self {
            Open::Table(mut table) => {
                if table.head == 0 {
                    // The first block stays while any member does.
                    table::delete(ctx, &mut table, &block_field(b""));
                }
                table::store(ctx, key, &table, expiry)
            }
            Open::Value { entries, .. } if entries.is_empty() => {
                ctx.writes.delete(key);
                Ok(())
            }
            Open::Value { entries, skiplist, .. } => {
                let data = zset::encode(entries.iter().map(|(m, s)| (&m[..], *s)), skiplist);
                if table::stays_one_value(skiplist, data.len()) {
                    return ctx.writes.put(key, TYPE_ZSET, &data, expiry);
                }
                let table = new_table(ctx, key, &entries)?;
                table::store(ctx, key, &table, expiry)
            }
        }
    }
}

/// Where `member` with `score` sits in `entries`.
fn position(entries: &[(Cow<'_, [u8]>, f64)], score: f64, member: &[u8]) -> Option<usize> {
    let at = entries.partition_point(|(m, s)| order((*s, m), (score, member)) == Ordering::Less);
    entries.get(at).filter(|(m, _)| m[..] == *member).map(|_| at)
}

/// A new table at `key` holding `entries` (in order), without its stub:
/// two entries per member, and blocks half full.
fn new_table(ctx: &mut Ctx<'_>, key: &[u8], entries: &[(Cow<'_, [u8]>, f64)]) -> Result<Table, CmdError> {
    let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(entries.len() * 2 + 1);
    for (at, (member, score)) in entries.iter().enumerate() {
        fields.push((member_field(member), score.to_le_bytes().to_vec()));
        fields.push((index_field(*score, member), Vec::new()));
        if (at as u64).is_multiple_of(BLOCK_MOST / 2) {
            let fence = if at == 0 { Vec::new() } else { place(*score, member) };
            let count = (entries.len() - at).min(BLOCK_MOST as usize / 2) as u64;
            fields.push((block_field(&fence), count.to_le_bytes().to_vec()));
        }
    }
    let mut table = table::fill(ctx, key, TYPE_ZSET_TABLE, fields.iter().map(|(f, v)| (&f[..], &v[..])))?;
    table.head = entries.len() as i64;
    // Its blocks, as edits: later writes of the same batch find them there
    // (`block_of`), with nothing committed to read.
    for (at, (member, score)) in entries.iter().enumerate().step_by(BLOCK_MOST as usize / 2) {
        let fence = if at == 0 { Vec::new() } else { place(*score, member) };
        ctx.writes.note_fence(table.id, &fence, true);
    }
    Ok(table)
}

/// The block whose range holds the index entry at `place`: its fence and
/// count. Its fence comes from the fences cached for the table (read whole
/// once after every change to them) and, where these writes changed them,
/// their edits: a walk of the blocks' keys costs a pass over the engine's
/// unmerged index updates (a ZADD of 1,000 members into a sorted set of
/// 30,000, which splits a block half-way, took 70 ms after the split).
fn block_of(ctx: &mut Ctx<'_>, table: &Table, place: &[u8]) -> Result<(Vec<u8>, u64), CmdError> {
    let fences = known_fences(ctx, table)?;
    let fence = fences.map(|fences| ctx.writes.fence_changes(table.id, |changes| changes.fence_of(&fences, place)));
    if let Some(fence) = fence {
        let key = table::member_key(table.id, &block_field(&fence));
        if let Some(count) = ctx.writes.get_internal(ctx.db(), &key)? {
            return Ok((fence, block_count(count.data())?));
        }
        // Not as cached (never so unless the cache is wrong): the engine's.
        ctx.shared.rank_fences.lock().clear();
    }
    let first = table::member_key(table.id, &[BLOCK]);
    let at = table::member_key(table.id, &block_field(place));
    let bounds = (Bound::Included(&first[..]), Bound::Included(&at[..]));
    let key = ctx.writes.last_in_range(ctx.db(), bounds).ok_or(Corrupt)?;
    let count = ctx.writes.get_internal(ctx.db(), &key)?.ok_or(Corrupt)?;
    Ok((key[first.len()..].to_vec(), block_count(count.data())?))
}

/// The committed fences of `table`'s blocks that these writes' fence
/// changes apply to (`Writes::fence_changes`), if known without a walk of
/// the blocks' keys merged with these writes: the cached ones while these
/// writes changed no block (read whole once after every change).
fn known_fences(ctx: &mut Ctx<'_>, table: &Table) -> Result<Option<Arc<Vec<Vec<u8>>>>, CmdError> {
    if !ctx.writes.blocks_changed() {
        return cached_fences(ctx, table).map(Some);
    }
    if ctx.writes.is_branch() {
        // A branch (a script's command) holds its own edits, not its
        // bases': the engine's walk sees them all.
        return Ok(None);
    }
    // A table these writes create has no committed blocks: if `new_table`
    // made it, its edits name them all (its first, empty fence among
    // them); if a COPY did, the walk finds them.
    Ok(match ctx.writes.is_new_table(table.id) {
        true => ctx.writes.fence_changes(table.id, FenceChanges::added_first).then(|| Arc::new(Vec::new())),
        false => ctx.shared.rank_fences.lock().get(&table.id).cloned(),
    })
}

/// The fences of `table`'s blocks, in order (the first, empty, included).
fn cached_fences(ctx: &mut Ctx<'_>, table: &Table) -> Result<std::sync::Arc<Vec<Vec<u8>>>, CmdError> {
    /// Tables whose fences are kept at most (ids of deleted ones linger).
    const TABLES_MOST: usize = 4096;
    if let Some(fences) = ctx.shared.rank_fences.lock().get(&table.id) {
        return Ok(fences.clone());
    }
    // The blocks' keys from the index: no snapshot, no log reads.
    let first = table::member_key(table.id, &[BLOCK]);
    let end = prefix_end(&first).expect("ends below 0xFF");
    let mut fences = Vec::new();
    ctx.writes.walk_keys(ctx.db(), (Bound::Included(&first[..]), Bound::Excluded(&end[..])), false, |key| {
        fences.push(key[first.len()..].to_vec());
        true
    });
    if fences.first().is_none_or(|first| !first.is_empty()) {
        return Err(Corrupt.into());
    }
    let fences = std::sync::Arc::new(fences);
    let mut cache = ctx.shared.rank_fences.lock();
    if cache.len() >= TABLES_MOST {
        cache.clear();
    }
    cache.insert(table.id, fences.clone());
    Ok(fences)
}

/// Counts the index entry at `place` into its block (`delta` 1, after
/// inserting it) or out of it (-1): a block grown past `BLOCK_MOST`
/// splits at its middle entry, one left empty goes (but the first).
fn count_in_block(ctx: &mut Ctx<'_>, table: &mut Table, place: &[u8], delta: i64) -> CmdResult {
    let block = block_of(ctx, table, place)?;
    count_into(ctx, table, block, delta)
}

/// `count_in_block` for the block (fence, count) already found.
fn count_into(ctx: &mut Ctx<'_>, table: &mut Table, (fence, count): (Vec<u8>, u64), delta: i64) -> CmdResult {
    let count = count.checked_add_signed(delta).ok_or(Corrupt)?;
    let field = block_field(&fence);
    if count == 0 && !fence.is_empty() {
        table::delete(ctx, table, &field);
        ctx.writes.note_fence(table.id, &fence, false);
        return Ok(());
    }
    if count <= BLOCK_MOST {
        return table::overwrite(ctx, table, &field, &count.to_le_bytes());
    }
    let half = count / 2;
    let index = table::member_key(table.id, &[INDEX]);
    let start = [&index[..], &fence].concat();
    // The walk to the middle merges these writes' entries from its start
    // to its end: the block's end where known (a split during a ZADD of
    // 300,000 members gathered all those past it, 27% of its time).
    let next = known_fences(ctx, table)?
        .and_then(|fences| ctx.writes.fence_changes(table.id, |changes| changes.next_fence(&fences, &fence)));
    let end = match next {
        Some(next) => [&index[..], &next].concat(),
        None => prefix_end(&index).expect("ends below 0xFF"),
    };
    let bounds = (Bound::Included(&start[..]), Bound::Excluded(&end[..]));
    let middle = ctx.writes.nth_in_range(ctx.db(), bounds, half as usize).ok_or(Corrupt)?[index.len()..].to_vec();
    table::overwrite(ctx, table, &field, &half.to_le_bytes())?;
    ctx.writes.note_fence(table.id, &middle, true);
    table::insert(ctx, table, &block_field(&middle), &(count - half).to_le_bytes())
}

/// The blocks in order (fence, count), until `visit` says stop.
fn each_block(ctx: &mut Ctx<'_>, table: &Table, mut visit: impl FnMut(&[u8], u64) -> bool) -> CmdResult {
    const CHUNK: usize = 1024;
    let first = table::member_key(table.id, &[BLOCK]);
    let end = prefix_end(&first).expect("ends below 0xFF");
    let mut lower = Bound::Included(first.clone());
    loop {
        let found = ctx.writes.scan_range(ctx.db(), (as_ref(&lower), Bound::Excluded(&end[..])), false, CHUNK)?;
        for (key, count) in &found {
            if !visit(&key[first.len()..], block_count(count)?) {
                return Ok(());
            }
        }
        match found.into_iter().next_back() {
            Some((key, _)) => lower = Bound::Excluded(key),
            None => return Ok(()),
        }
    }
}

/// A reader without locks (`reads_engine_only`) of a big set's ranks:
/// its several reads (block counts, then index entries) must see one
/// state, or a rank mixing two was off by one under concurrent writes.
/// While no write to the table is in flight, the blocks' fences and
/// running counts kept across commands serve (`ranks.rs`; the tag says
/// whether that still held at the end); otherwise all of it is read from
/// one engine snapshot. Writers hold the key's lock and see a stable
/// table through their pending writes: the blocks as they are.
fn quiet_sums(ctx: &mut Ctx<'_>, table: &Table) -> Result<Option<(u64, Arc<BlockSums>)>, CmdError> {
    if !ctx.writes.reads_engine_only() {
        return Ok(None);
    }
    let Some(tag) = ctx.shared.rank_sums.quiet(table.id) else { return Ok(None) };
    if let Some(sums) = ctx.shared.rank_sums.get(table.id, tag) {
        return Ok(Some((tag, sums)));
    }
    let (mut fences, mut counts) = (Vec::new(), Vec::new());
    each_block(ctx, table, |fence, count| {
        fences.push(fence.to_vec());
        counts.push(count);
        true
    })?;
    Ok(Some((tag, ctx.shared.rank_sums.put(table.id, tag, fences, &counts).ok_or(Corrupt)?)))
}

fn still_quiet(ctx: &Ctx<'_>, table: &Table, tag: u64) -> bool {
    ctx.shared.rank_sums.quiet(table.id) == Some(tag)
}

/// `member`'s forward rank and the member count, for a reader without
/// locks while a write to the table is in flight: from one snapshot
/// (None if the member is not there in it).
fn snapshot_rank(ctx: &Ctx<'_>, key: &[u8], table: &Table, member: &[u8]) -> Result<Option<(u64, u64)>, CmdError> {
    let snapshot = ctx.db().snapshot();
    let stub = match snapshot.get(key)? {
        Some(stub) if stub.first() == Some(&TYPE_ZSET_TABLE) => Table::decode(stub[0], &stub[1..])?,
        _ => return Ok(None),
    };
    let Some(bytes) = snapshot.get(&table::member_key(table.id, &member_field(member)))? else { return Ok(None) };
    if stub.id != table.id {
        return Ok(None);
    }
    let place = place(stored_score(bytes.get(1..).unwrap_or_default())?, member);
    // The blocks up to the member's.
    let first = table::member_key(table.id, &[BLOCK]);
    let last = table::member_key(table.id, &block_field(&place));
    let mut blocks = BlocksBefore::default();
    for item in snapshot.range(first.as_slice()..=last.as_slice()) {
        let (block, count) = item?;
        blocks.take(&block[first.len()..], block_count(count.get(1..).unwrap_or_default())?, &place);
    }
    let (before, fence, _) = blocks.found()?;
    let index = table::member_key(table.id, &[INDEX]);
    let (from, to) = ([&index[..], &fence].concat(), [&index[..], &place].concat());
    let within = snapshot.count_keys(from.as_slice()..to.as_slice()) as u64;
    Ok(Some((before + within, stub.head as u64)))
}

/// The blocks' sums as of `snapshot`.
fn snapshot_sums(snapshot: &scaledkv::Snapshot<'_>, table: &Table) -> Result<BlockSums, CmdError> {
    let first = table::member_key(table.id, &[BLOCK]);
    let end = prefix_end(&first).expect("ends below 0xFF");
    let (mut fences, mut counts) = (Vec::new(), Vec::new());
    for item in snapshot.range(first.as_slice()..end.as_slice()) {
        let (key, value) = item?;
        fences.push(key[first.len()..].to_vec());
        counts.push(block_count(value.get(1..).unwrap_or_default())?);
    }
    Ok(BlockSums::new(0, fences, &counts).ok_or(Corrupt)?)
}

/// `member`'s forward rank (its score is `score`) and the member count.
fn table_rank(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    table: &Table,
    member: &[u8],
    score: f64,
) -> Result<Option<(u64, u64)>, CmdError> {
    if let Some((tag, sums)) = quiet_sums(ctx, table)? {
        // The score again inside the quiet window: the one the caller read
        // may predate it.
        let now = match table::get(ctx, table, &member_field(member))? {
            Some(bytes) => Some(place(stored_score(&bytes)?, member)),
            None => None,
        };
        let rank = now.map(|place| {
            let block = sums.block_of(&place);
            sums.before[block] + count_before(ctx, table, &sums.fences[block], &place)
        });
        if still_quiet(ctx, table, tag) {
            return Ok(rank.map(|rank| (rank, sums.total)));
        }
    }
    if ctx.writes.reads_engine_only() {
        return snapshot_rank(ctx, key, table, member);
    }
    let place = place(score, member);
    let mut blocks = BlocksBefore::default();
    each_block(ctx, table, |fence, count| blocks.take(fence, count, &place))?;
    let (before, fence, count) = blocks.found()?;
    let within = count_before(ctx, table, &fence, &place);
    if within > count {
        return Err(Corrupt.into());
    }
    Ok(Some((before + within, table.head as u64)))
}

/// The blocks before the one that holds a place, taken in order: their
/// counts summed, and that block's fence and count.
#[derive(Default)]
struct BlocksBefore {
    before: u64,
    own: Option<(Vec<u8>, u64)>,
}

impl BlocksBefore {
    /// Takes the next block; false once it starts past `place`.
    fn take(&mut self, fence: &[u8], count: u64, place: &[u8]) -> bool {
        if fence > place {
            return false;
        }
        if let Some((_, previous)) = self.own.replace((fence.to_vec(), count)) {
            self.before += previous;
        }
        true
    }

    /// The counts before the block, its fence and its count.
    fn found(self) -> Result<(u64, Vec<u8>, u64), Corrupt> {
        let (fence, count) = self.own.ok_or(Corrupt)?;
        Ok((self.before, fence, count))
    }
}

/// For a reader without locks while no write to the table is in flight:
/// how many index entries lie from `low` up to `high` (places), as the
/// difference of their ranks, each the blocks' sums before it and a count
/// within its block. ZCOUNT counted every entry in its range, O(range)
/// where Redis's skiplist spans take O(log n): 0.41x Redis's rate for a
/// range of 1,000. None otherwise (the caller counts the range).
fn ranks_between(ctx: &mut Ctx<'_>, table: &Table, low: &[u8], high: &[u8]) -> Result<Option<u64>, CmdError> {
    let Some((tag, sums)) = quiet_sums(ctx, table)? else { return Ok(None) };
    let rank = |place: &[u8]| {
        let block = sums.block_of(place);
        sums.before[block] + count_before(ctx, table, &sums.fences[block], place)
    };
    let between = rank(high).saturating_sub(rank(low));
    Ok(still_quiet(ctx, table, tag).then_some(between))
}

/// The index entries from `fence` (a block's) up to `place`.
fn count_before(ctx: &Ctx<'_>, table: &Table, fence: &[u8], place: &[u8]) -> u64 {
    let index = table::member_key(table.id, &[INDEX]);
    let (from, to) = ([&index[..], fence].concat(), [&index[..], place].concat());
    let bounds = (Bound::Included(&from[..]), Bound::Excluded(&to[..]));
    ctx.writes.count_range(ctx.db(), bounds) as u64
}

/// Where the member of forward rank `rank` (below the member count) sorts.
fn place_of_rank(ctx: &mut Ctx<'_>, table: &Table, rank: u64) -> Result<Vec<u8>, CmdError> {
    if let Some((tag, sums)) = quiet_sums(ctx, table)? {
        let block = sums.before.partition_point(|&before| before <= rank).max(1) - 1;
        let place = nth_from(ctx, table, &sums.fences[block], rank - sums.before[block]);
        if still_quiet(ctx, table, tag) {
            return place;
        }
    }
    if ctx.writes.reads_engine_only() {
        let snapshot = ctx.db().snapshot();
        let sums = snapshot_sums(&snapshot, table)?;
        let block = sums.before.partition_point(|&before| before <= rank).max(1) - 1;
        let index = table::member_key(table.id, &[INDEX]);
        let from = [&index[..], &sums.fences[block]].concat();
        let end = prefix_end(&index).expect("ends below 0xFF");
        let offset = (rank - sums.before[block]) as usize;
        let key = snapshot.nth_key(from.as_slice()..end.as_slice(), offset).ok_or(Corrupt)?;
        return Ok(key[index.len()..].to_vec());
    }
    let (mut before, mut found) = (0u64, None::<(Vec<u8>, u64)>);
    each_block(ctx, table, |fence, count| {
        if before + count > rank {
            found = Some((fence.to_vec(), rank - before));
            return false;
        }
        before += count;
        true
    })?;
    let (fence, offset) = found.ok_or(Corrupt)?;
    nth_from(ctx, table, &fence, offset)
}

/// Where the `offset`th index entry from `fence` (a block's) sorts.
fn nth_from(ctx: &Ctx<'_>, table: &Table, fence: &[u8], offset: u64) -> Result<Vec<u8>, CmdError> {
    let index = table::member_key(table.id, &[INDEX]);
    let from = [&index[..], fence].concat();
    let end = prefix_end(&index).expect("ends below 0xFF");
    let bounds = (Bound::Included(&from[..]), Bound::Excluded(&end[..]));
    let key = ctx.writes.nth_in_range(ctx.db(), bounds, offset as usize).ok_or(Corrupt)?;
    Ok(key[index.len()..].to_vec())
}

fn walk_table(
    ctx: &mut Ctx<'_>,
    table: &Table,
    from: From<'_>,
    reverse: bool,
    wanted: usize,
    mut visit: impl FnMut(&[u8], f64) -> bool,
) -> CmdResult {
    let prefix = table::member_key(table.id, &[INDEX]);
    let end = prefix_end(&prefix).expect("ends below 0xFF");
    let mut lower = Bound::Included(prefix.clone());
    let mut upper = Bound::Excluded(end);
    let mut skip = 0u64;
    let at_score = |score: f64| [&prefix[..], &score_key(score)].concat();
    match from {
        From::Rank(n) if n < RANK_SEEK => skip = n,
        From::Rank(n) => {
            let Some(forward) = (table.head as u64).checked_sub(n + 1) else { return Ok(()) };
            let rank = if reverse { forward } else { n };
            let at = [&prefix[..], &place_of_rank(ctx, table, rank)?].concat();
            if reverse {
                upper = Bound::Included(at);
            } else {
                lower = Bound::Included(at);
            }
        }
        From::Score(score, exclusive) => {
            let at = at_score(score);
            let after = prefix_end(&at).expect("ends below 0xFF");
            match (reverse, exclusive) {
                (false, false) => lower = Bound::Included(at),
                (false, true) => lower = Bound::Included(after),
                (true, false) => upper = Bound::Excluded(after),
                (true, true) => upper = Bound::Excluded(at),
            }
        }
        From::Lex(end) => {
            // The score of the first entry in the walk's direction: every
            // member has it if the range by member means anything.
            let first = ctx.writes.keys_within(ctx.db(), (as_ref(&lower), as_ref(&upper)), reverse, 1);
            let Some(key) = first.first() else { return Ok(()) };
            let score_at = key.get(prefix.len()..prefix.len() + 8).ok_or(Corrupt)?;
            let at = |member: &[u8]| [&prefix[..], score_at, member].concat();
            match (reverse, end) {
                (false, Lex::Max) | (true, Lex::Min) => return Ok(()),
                (false, Lex::Min) | (true, Lex::Max) => {}
                (false, Lex::Inclusive(m)) => lower = Bound::Included(at(m)),
                (false, Lex::Exclusive(m)) => lower = Bound::Excluded(at(m)),
                (true, Lex::Inclusive(m)) => upper = Bound::Included(at(m)),
                (true, Lex::Exclusive(m)) => upper = Bound::Excluded(at(m)),
            }
        }
    }
    const MOST: usize = 4096;
    let mut chunk = skip.saturating_add(wanted as u64).clamp(1, MOST as u64) as usize;
    loop {
        // The index entries' keys hold all a walk needs: score and member.
        let found = ctx.writes.keys_within(ctx.db(), (as_ref(&lower), as_ref(&upper)), reverse, chunk);
        for key in &found {
            let rest = key.get(prefix.len()..).ok_or(Corrupt)?;
            let (score, member) = rest.split_at_checked(8).ok_or(Corrupt)?;
            if skip > 0 {
                skip -= 1;
                continue;
            }
            if !visit(member, score_from_key(score.try_into().expect("8 bytes"))) {
                return Ok(());
            }
        }
        if found.len() < chunk {
            return Ok(());
        }
        let last = found.into_iter().next_back().expect("a full chunk");
        if reverse {
            upper = Bound::Excluded(last);
        } else {
            lower = Bound::Excluded(last);
        }
        chunk = (chunk * 4).min(MOST).max(skip.min(MOST as u64) as usize);
    }
}

fn as_ref(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match bound {
        Bound::Included(key) => Bound::Included(key),
        Bound::Excluded(key) => Bound::Excluded(key),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Members with their scores if asked: flat in RESP2, [member, score]
/// pairs in RESP3.
fn reply_members(out: &mut Out, items: &[(Vec<u8>, f64)], with_scores: bool) {
    let nested = with_scores && out.protocol == Protocol::Resp3;
    out.array(if with_scores && !nested { items.len() * 2 } else { items.len() });
    for (member, score) in items {
        if nested {
            out.array(2);
        }
        out.bulk(member);
        if with_scores {
            out.double(*score);
        }
    }
}

/// ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...].
pub fn zadd(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (mut nx, mut xx, mut gt, mut lt, mut ch, mut incr) = (false, false, false, false, false, false);
    let mut at = 2;
    while let Some(arg) = args.get(at) {
        let flag = match () {
            _ if eq(arg, "nx") => &mut nx,
            _ if eq(arg, "xx") => &mut xx,
            _ if eq(arg, "gt") => &mut gt,
            _ if eq(arg, "lt") => &mut lt,
            _ if eq(arg, "ch") => &mut ch,
            _ if eq(arg, "incr") => &mut incr,
            _ => break,
        };
        *flag = true;
        at += 1;
    }
    let pairs = &args[at..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return Err(CmdError::Syntax);
    }
    if incr && pairs.len() > 2 {
        return Err(err("ERR INCR option supports a single increment-element pair"));
    }
    if nx && xx {
        return Err(err("ERR XX and NX options at the same time are not compatible"));
    }
    if (nx && (gt || lt)) || (gt && lt) {
        return Err(err("ERR GT, LT, and/or NX options at the same time are not compatible"));
    }
    let scores: Vec<f64> = pairs.chunks(2).map(|pair| score_arg(&pair[0])).collect::<Result<_, _>>()?;
    let key = &args[1];
    let pieces = ctx.writes.may_commit_in_pieces();
    if pieces {
        // A member's longest field: its place in the index.
        let before = index_field(0.0, b"").len();
        pairs.chunks(2).try_for_each(|pair| table::check_field_len(before + pair[1].len()))?;
    }
    let value = read_zset(ctx, key)?;
    let mut set = Open::of(value.as_ref())?;
    let expiry = expiry_of(&value);
    let (mut added, mut updated, mut last) = (0, 0, None);
    if value.is_some() || !xx {
        for (pair, &score) in pairs.chunks(2).zip(&scores) {
            let member = &pair[1];
            let mut score = score;
            let old = set.score(ctx, member)?;
            match old {
                Some(_) if nx => continue,
                Some(current) => {
                    if incr {
                        score += current;
                        if score.is_nan() {
                            return Err(err("ERR resulting score is not a number (NaN)"));
                        }
                    }
                    if (lt && score >= current) || (gt && score <= current) {
                        continue;
                    }
                    if score != current {
                        set.put(ctx, key, member, score, old)?;
                        updated += 1;
                    }
                }
                None if xx => continue,
                None => {
                    set.put(ctx, key, member, score, None)?;
                    added += 1;
                }
            }
            last = Some(score);
            set.piece_point(ctx, key, expiry, pieces)?;
        }
    }
    if added + updated > 0 {
        set.store_noting(ctx, key, expiry, if incr { "zincr" } else { "zadd" })?;
    }
    match (incr, last) {
        (true, Some(score)) => ctx.out.double(score),
        (true, None) => ctx.out.null(),
        (false, _) => ctx.out.int(if ch { added + updated } else { added }),
    }
    Ok(())
}

pub fn zincrby(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let increment = score_arg(&args[2])?;
    let value = read_zset(ctx, &args[1])?;
    let mut set = Open::of(value.as_ref())?;
    let old = set.score(ctx, &args[3])?;
    let score = old.unwrap_or(0.0) + increment;
    if score.is_nan() {
        return Err(err("ERR resulting score is not a number (NaN)"));
    }
    if old != Some(score) {
        set.put(ctx, &args[1], &args[3], score, old)?;
        set.store_noting(ctx, &args[1], expiry_of(&value), "zincr")?;
    }
    ctx.out.double(score);
    Ok(())
}

pub fn zrem(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let pieces = ctx.writes.may_commit_in_pieces();
    let value = read_zset(ctx, &args[1])?;
    let mut set = Open::of(value.as_ref())?;
    let expiry = expiry_of(&value);
    let mut removed = 0;
    for member in &args[2..] {
        if let Some(score) = set.score(ctx, member)? {
            set.remove(ctx, member, score)?;
            set.piece_point(ctx, &args[1], expiry, pieces)?;
            removed += 1;
        }
    }
    if removed > 0 {
        set.store_noting(ctx, &args[1], expiry, "zrem")?;
    }
    ctx.out.int(removed);
    Ok(())
}

pub fn zcard(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let value = read_zset(ctx, &args[1])?;
    let len = Open::of(value.as_ref())?.len();
    ctx.out.int(len as i64);
    Ok(())
}

pub fn zscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let value = read_zset(ctx, &args[1])?;
    match Open::of(value.as_ref())?.score(ctx, &args[2])? {
        Some(score) => ctx.out.double(score),
        None => ctx.out.null(),
    }
    Ok(())
}

pub fn zmscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let value = read_zset(ctx, &args[1])?;
    let set = Open::of(value.as_ref())?;
    let mut scores = Vec::with_capacity(args.len() - 2);
    for member in &args[2..] {
        scores.push(set.score(ctx, member)?);
    }
    ctx.out.array(scores.len());
    for score in scores {
        match score {
            Some(score) => ctx.out.double(score),
            None => ctx.out.null(),
        }
    }
    Ok(())
}

impl Open<'_> {
    /// Calls `visit` with each member whose score is in each of `ranges`
    /// (`[min, max)`), range after range, each in Redis's order, until it
    /// returns false (GEO's box searches). A table's come from one engine
    /// snapshot, so that a search of several ranges sees one state of the
    /// set though it holds no lock (a member moved between two ranges
    /// during the search is seen once), and from the index alone: no log
    /// read per entry. Ranges that this command's own writes touch (in a
    /// transaction, a script, a run) are read merged with them.
    pub(super) fn walk_score_ranges(
        &self,
        ctx: &mut Ctx<'_>,
        ranges: &[(f64, f64)],
        mut visit: impl FnMut(&[u8], f64) -> bool,
    ) -> CmdResult {
        let table = match self {
            Open::Table(table) => table,
            Open::Value { entries, .. } => {
                for &(min, max) in ranges {
                    let start = entries.partition_point(|e| e.1 < min);
                    for (member, score) in entries[start..].iter().take_while(|e| e.1 < max) {
                        if !visit(member, *score) {
                            return Ok(());
                        }
                    }
                }
                return Ok(());
            }
        };
        let prefix = table::member_key(table.id, &[INDEX]);
        let at_score = |score: f64| [&prefix[..], &score_key(score)].concat();
        let snapshot = ctx.db().snapshot();
        // One range's keys, end to end: copied out under the index's read
        // lock, looked at after it.
        let (mut keys, mut ends) = (Vec::new(), Vec::new());
        for &(min, max) in ranges {
            let (low, high) = (at_score(min), at_score(max));
            let bounds = (Bound::Included(&low[..]), Bound::Excluded(&high[..]));
            if ctx.writes.holds_pending_in(bounds) {
                let (mut going, mut damaged) = (true, false);
                ctx.writes.visit_range(ctx.db(), bounds, usize::MAX, |key, _| {
                    going = match index_entry(prefix.len(), key) {
                        Ok((score, member)) => visit(member, score),
                        Err(Corrupt) => {
                            damaged = true;
                            false
                        }
                    };
                    going
                })?;
                if damaged {
                    return Err(Corrupt.into());
                }
                if !going {
                    return Ok(());
                }
                continue;
            }
            keys.clear();
            ends.clear();
            snapshot.visit_keys::<&[u8], _>(bounds, |key| {
                keys.extend_from_slice(key);
                ends.push(keys.len());
                true
            });
            let mut start = 0;
            for &end in &ends {
                let (score, member) = index_entry(prefix.len(), &keys[start..end])?;
                start = end;
                if !visit(member, score) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

/// The score and member of an index entry's key (the index's prefix is
/// `prefix_len` bytes).
fn index_entry(prefix_len: usize, key: &[u8]) -> Result<(f64, &[u8]), Corrupt> {
    let (score, member) = key.get(prefix_len..).and_then(|rest| rest.split_at_checked(8)).ok_or(Corrupt)?;
    Ok((score_from_key(score.try_into().expect("8 bytes")), member))
}

/// A range's members, its limits parsed: by score, by member or by rank.
enum Range {
    Rank(i64, i64),
    Score((f64, bool), (f64, bool)),
    Lex(Lex, Lex),
}

impl Range {
    /// The members in the range (given low end first), from the low end
    /// or (`reverse`) the high one, skipping `offset`, at most `limit`
    /// (negative: all).
    fn members(
        &self,
        ctx: &mut Ctx<'_>,
        set: &Open<'_>,
        reverse: bool,
        offset: i64,
        limit: i64,
    ) -> Result<Scored, CmdError> {
        // Redis skips a negative offset's worth for ever: nothing.
        if offset < 0 {
            return Ok(Vec::new());
        }
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let offset = offset as u64;
        match self {
            &Range::Rank(start, end) => {
                let Some((start, end)) = rank_range(start, end, set.len()) else { return Ok(Vec::new()) };
                set.collect(ctx, From::Rank(start), reverse, 0, (end - start + 1) as usize, |_, _| true)
            }
            &Range::Score(min, max) if zset::empty_range(min, max) => Ok(Vec::new()),
            &Range::Score(min, max) => {
                let (from, to) = if reverse { (max, min) } else { (min, max) };
                let within = |_: &[u8], s: f64| match (reverse, to.1) {
                    (false, false) => s <= to.0,
                    (false, true) => s < to.0,
                    (true, false) => s >= to.0,
                    (true, true) => s > to.0,
                };
                set.collect(ctx, From::Score(from.0, from.1), reverse, offset, limit, within)
            }
            Range::Lex(min, max) if zset::empty_lex(min, max) => Ok(Vec::new()),
            Range::Lex(min, max) => {
                let (from, to) = if reverse { (max, min) } else { (min, max) };
                let within = |m: &[u8], _: f64| if reverse { to.below(m) } else { to.above(m) };
                set.collect(ctx, From::Lex(from), reverse, offset, limit, within)
            }
        }
    }
}

/// Redis's reading of a rank range over `len` members: negative ranks
/// count from the end; None when it holds nothing.
fn rank_range(start: i64, end: i64, len: usize) -> Option<(u64, u64)> {
    let len = len as i64;
    let start = if start < 0 { (len + start).max(0) } else { start };
    let end = if end < 0 { len + end } else { end };
    if start > end || start >= len {
        return None;
    }
    Some((start as u64, end.min(len - 1) as u64))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum By {
    Rank,
    Score,
    Lex,
}

/// What a ZRANGE-family command fixes before its options.
struct RangeCommand {
    /// Where the source key is (the destination is before it).
    source: usize,
    store: bool,
    by: Option<By>,
    reverse: Option<bool>,
}

/// Redis's `zrangeGenericCommand`: ZRANGE, ZRANGESTORE and the older forms.
fn range_command(ctx: &mut Ctx<'_>, args: &[Bytes], command: RangeCommand) -> CmdResult {
    let RangeCommand { source, store, mut by, mut reverse } = command;
    let (mut with_scores, mut offset, mut limit) = (false, 0i64, None::<i64>);
    let mut at = source + 3;
    while at < args.len() {
        let left = args.len() - at - 1;
        let arg = &args[at];
        if !store && eq(arg, "withscores") {
            with_scores = true;
        } else if eq(arg, "limit") && left >= 2 {
            offset = int(&args[at + 1])?;
            limit = Some(int(&args[at + 2])?);
            at += 2;
        } else if reverse.is_none() && eq(arg, "rev") {
            reverse = Some(true);
        } else if by.is_none() && eq(arg, "bylex") {
            by = Some(By::Lex);
        } else if by.is_none() && eq(arg, "byscore") {
            by = Some(By::Score);
        } else {
            return Err(CmdError::Syntax);
        }
        at += 1;
    }
    let reverse = reverse.unwrap_or(false);
    let by = by.unwrap_or(By::Rank);
    if limit.is_some() && by == By::Rank {
        return Err(err("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"));
    }
    if with_scores && by == By::Lex {
        return Err(err("ERR syntax error, WITHSCORES not supported in combination with BYLEX"));
    }
    let (mut low, mut high) = (&args[source + 1], &args[source + 2]);
    if reverse && by != By::Rank {
        // Given as [max, min].
        std::mem::swap(&mut low, &mut high);
    }
    let range = match by {
        By::Rank => Range::Rank(int(low)?, int(high)?),
        By::Score => Range::Score(range_bound(low)?, range_bound(high)?),
        By::Lex => Range::Lex(lex_bound(low)?, lex_bound(high)?),
    };
    let value = read_zset(ctx, &args[source])?;
    let set = Open::of(value.as_ref())?;
    let found =
        if value.is_none() { Vec::new() } else { range.members(ctx, &set, reverse, offset, limit.unwrap_or(-1))? };
    if store {
        store_new_noting(ctx, &args[1], &found, "zrangestore")?;
        ctx.out.int(found.len() as i64);
    } else {
        reply_members(ctx.out, &found, with_scores);
    }
    Ok(())
}

/// `store_new` after noting keyspace event `event`, or `del` when
/// nothing is stored where a key was, as Redis tells of a *STORE.
pub(super) fn store_new_noting(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    members: &[(Vec<u8>, f64)],
    event: &'static str,
) -> CmdResult {
    ctx.store_result(key, members.is_empty(), crate::notify::ZSET, event, |ctx| store_new(ctx, key, members))
}

/// A fresh sorted set at `key` holding `members` (distinct), or none.
fn store_new(ctx: &mut Ctx<'_>, key: &[u8], members: &[(Vec<u8>, f64)]) -> CmdResult {
    store_members(ctx, key, members, None)
}

/// A fresh sorted set at `key` with `expiry` (also RESTORE's), or none.
pub fn store_members(ctx: &mut Ctx<'_>, key: &[u8], members: &[(Vec<u8>, f64)], expiry: Option<u64>) -> CmdResult {
    let mut set = Open::Value { entries: Vec::new(), skiplist: false, bytes: 0 };
    for (member, score) in members {
        set.put(ctx, key, member, *score, None)?;
    }
    set.store(ctx, key, expiry)
}

fn range_of(source: usize, by: Option<By>, reverse: Option<bool>) -> RangeCommand {
    RangeCommand { source, store: false, by, reverse }
}

pub fn zrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    range_command(ctx, args, range_of(1, None, None))
}

pub fn zrangestore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    ctx.writes.note_pushed();
    range_command(ctx, args, RangeCommand { source: 2, store: true, by: None, reverse: None })
}

pub fn zrevrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    range_command(ctx, args, range_of(1, Some(By::Rank), Some(true)))
}

pub fn zrangebyscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    range_command(ctx, args, range_of(1, Some(By::Score), Some(false)))
}

pub fn zrevrangebyscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    range_command(ctx, args, range_of(1, Some(By::Score), Some(true)))
}

pub fn zrangebylex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    range_command(ctx, args, range_of(1, Some(By::Lex), Some(false)))
}

pub fn zrevrangebylex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    range_command(ctx, args, range_of(1, Some(By::Lex), Some(true)))
}

/// How many members a range holds (ZCOUNT, ZLEXCOUNT).
fn count_range(ctx: &mut Ctx<'_>, key: &[u8], range: Range) -> CmdResult {
    let value = read_zset(ctx, key)?;
    let set = Open::of(value.as_ref())?;
    let mut count = 0;
    let within = |m: &[u8], s: f64| match &range {
        Range::Score(_, (max, true)) => s < *max,
        Range::Score(_, (max, false)) => s <= *max,
        Range::Lex(_, max) => max.above(m),
        Range::Rank(..) => true,
    };
    let empty = match &range {
        Range::Score(min, max) => zset::empty_range(*min, *max),
        Range::Lex(min, max) => zset::empty_lex(min, max),
        Range::Rank(..) => true,
    };
    let from = match &range {
        Range::Score((min, exclusive), _) => From::Score(*min, *exclusive),
        Range::Lex(min, _) => From::Lex(min),
        Range::Rank(..) => From::Rank(0),
    };
    if let (false, Open::Table(table), Range::Score(min, max)) = (empty, &set, &range) {
        // From the index alone: the scores bound the index's keys.
        let index = table::member_key(table.id, &[INDEX]);
        let at = |score: f64| [&index[..], &score_key(score)].concat();
        let past = |score: f64| prefix_end(&at(score)).expect("ends below 0xFF");
        let lower = if min.1 { past(min.0) } else { at(min.0) };
        let upper = if max.1 { at(max.0) } else { past(max.0) };
        count = match ranks_between(ctx, table, &lower[index.len()..], &upper[index.len()..])? {
            Some(count) => count as i64,
            None => ctx.writes.count_range(ctx.db(), (Bound::Included(&lower[..]), Bound::Excluded(&upper[..]))) as i64,
        };
    } else if !empty {
        set.walk(ctx, from, false, 64, |m, s| {
            let inside = within(m, s);
            count += inside as i64;
            inside
        })?;
    }
    ctx.out.int(count);
    Ok(())
}

pub fn zcount(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let range = Range::Score(range_bound(&args[2])?, range_bound(&args[3])?);
    count_range(ctx, &args[1], range)
}

pub fn zlexcount(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let range = Range::Lex(lex_bound(&args[2])?, lex_bound(&args[3])?);
    count_range(ctx, &args[1], range)
}

fn rank_command(ctx: &mut Ctx<'_>, args: &[Bytes], reverse: bool) -> CmdResult {
    let value = read_zset(ctx, &args[1])?;
    let set = Open::of(value.as_ref())?;
    match set.score(ctx, &args[2])? {
        Some(score) => match set.rank(ctx, &args[1], &args[2], score, reverse)? {
            Some(rank) => ctx.out.int(rank as i64),
            None => ctx.out.null(),
        },
        None => ctx.out.null(),
    }
    Ok(())
}

pub fn zrank(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    rank_command(ctx, args, false)
}

pub fn zrevrank(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    rank_command(ctx, args, true)
}

/// Removes `members` from `set` (at `key`, expiring at `expiry`). A big
/// set left empty becomes an empty one, which its store deletes; other
/// removals past a piece (`Writes::piece_bytes`) are committed as
/// they go where the command runs alone (`pieces`: it was
/// `Writes::may_commit_in_pieces` before its first write), each piece
/// with the stub's new count, so a removal of any size fits and a crash
/// leaves the set as a smaller one would; in a pipeline's run the command
/// gives up to run again alone (`CmdError::RunAlone`). In a transaction
/// or a script it stays one batch.
fn remove_members(
    ctx: &mut Ctx<'_>,
    set: &mut Open<'_>,
    members: &[(Vec<u8>, f64)],
    (key, expiry): (&[u8], Option<u64>),
    pieces: bool,
) -> CmdResult {
    if matches!(set, Open::Table(_)) && members.len() == set.len() {
        // All of a table's members: its stub goes, as DEL's does, and the
        // sweep deletes its entries in the background (`table::sweep`):
        // one write, whole at once.
        *set = Open::Value { entries: Vec::new(), skiplist: false, bytes: 0 };
        return Ok(());
    }
    for (member, score) in members {
        set.remove(ctx, member, *score)?;
        set.piece_point(ctx, key, expiry, pieces)?;
    }
    Ok(())
}

/// ZREMRANGEBYRANK, ZREMRANGEBYSCORE, ZREMRANGEBYLEX.
fn remove_range(ctx: &mut Ctx<'_>, args: &[Bytes], range: Range) -> CmdResult {
    let pieces = ctx.writes.may_commit_in_pieces();
    let value = read_zset(ctx, &args[1])?;
    let mut set = Open::of(value.as_ref())?;
    let found = range.members(ctx, &set, false, 0, -1)?;
    remove_members(ctx, &mut set, &found, (&args[1], expiry_of(&value)), pieces)?;
    if !found.is_empty() {
        let event = match range {
            Range::Rank(..) => "zremrangebyrank",
            Range::Score(..) => "zremrangebyscore",
            Range::Lex(..) => "zremrangebylex",
        };
        set.store_noting(ctx, &args[1], expiry_of(&value), event)?;
    }
    ctx.out.int(found.len() as i64);
    Ok(())
}

pub fn zremrangebyrank(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let range = Range::Rank(int(&args[2])?, int(&args[3])?);
    remove_range(ctx, args, range)
}

pub fn zremrangebyscore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let range = Range::Score(range_bound(&args[2])?, range_bound(&args[3])?);
    remove_range(ctx, args, range)
}

pub fn zremrangebylex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let range = Range::Lex(lex_bound(&args[2])?, lex_bound(&args[3])?);
    remove_range(ctx, args, range)
}

/// Removes and returns up to `count` of the lowest (or, `max`, highest)
/// members of the set at `key` (None: missing).
fn pop(ctx: &mut Ctx<'_>, key: &[u8], max: bool, count: usize) -> Result<Option<Scored>, CmdError> {
    let pieces = ctx.writes.may_commit_in_pieces();
    let value = read_zset(ctx, key)?;
    if value.is_none() {
        return Ok(None);
    }
    let mut set = Open::of(value.as_ref())?;
    let popped = set.collect(ctx, From::Rank(0), max, 0, count, |_, _| true)?;
    remove_members(ctx, &mut set, &popped, (key, expiry_of(&value)), pieces)?;
    set.store_noting(ctx, key, expiry_of(&value), if max { "zpopmax" } else { "zpopmin" })?;
    Ok(Some(popped))
}

fn positive_count(arg: &[u8]) -> Result<i64, CmdError> {
    int(arg).ok().filter(|&n| n >= 0).ok_or_else(|| err("ERR value is out of range, must be positive"))
}

/// ZPOPMIN and ZPOPMAX key [count]: [member, score] for one, members with
/// scores (pairs in RESP3) for a count.
fn pop_command(ctx: &mut Ctx<'_>, args: &[Bytes], max: bool) -> CmdResult {
    let count = match args.len() {
        2 => None,
        3 => Some(positive_count(&args[2])?),
        _ => return Err(CmdError::Syntax),
    };
    if count == Some(0) {
        read_zset(ctx, &args[1])?;
        ctx.out.array(0);
        return Ok(());
    }
    let popped = pop(ctx, &args[1], max, count.unwrap_or(1) as usize)?.unwrap_or_default();
    match count {
        None => {
            ctx.out.array(popped.len() * 2);
            for (member, score) in &popped {
                ctx.out.bulk(member);
                ctx.out.double(*score);
            }
        }
        Some(_) => reply_members(ctx.out, &popped, true),
    }
    Ok(())
}

pub fn zpopmin(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    pop_command(ctx, args, false)
}

pub fn zpopmax(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    pop_command(ctx, args, true)
}

/// BZPOPMIN and BZPOPMAX key [key ...] timeout: [key, member, score] from
/// the first non-empty set.
fn blocking_pop(ctx: &mut Ctx<'_>, args: &[Bytes], max: bool) -> CmdResult {
    let timeout = super::args::timeout(&args[args.len() - 1])?;
    for key in &args[1..args.len() - 1] {
        if !ctx.may_take(key) {
            continue;
        }
        if let Some(popped) = pop(ctx, key, max, 1)? {
            let (member, score) = popped.first().ok_or(Corrupt)?;
            ctx.out.array(3);
            ctx.out.bulk(key);
            ctx.out.bulk(member);
            ctx.out.double(*score);
            return Ok(());
        }
    }
    Err(CmdError::Blocked(timeout, false))
}

pub fn bzpopmin(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    blocking_pop(ctx, args, false)
}

pub fn bzpopmax(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    blocking_pop(ctx, args, true)
}

/// ZMPOP numkeys key [key ...] MIN|MAX [COUNT count].
pub fn zmpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    mpop(ctx, &args[1..], None)
}

/// BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT count].
pub fn bzmpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let timeout = super::args::timeout(&args[1])?;
    mpop(ctx, &args[2..], Some(timeout))
}

/// ZMPOP's work from its numkeys on (`args[0]`): [key, [[member, score]
/// ...]] from the first non-empty set; with `block`, nothing to pop blocks.
fn mpop(ctx: &mut Ctx<'_>, args: &[Bytes], block: Option<Option<std::time::Duration>>) -> CmdResult {
    let (keys, min, count) = super::args::mpop_args(args, ["min", "max"])?;
    let max = !min;
    for key in keys {
        if block.is_some() && !ctx.may_take(key) {
            continue;
        }
        if let Some(popped) = pop(ctx, key, max, count)? {
            ctx.out.array(2);
            ctx.out.bulk(key);
            ctx.out.array(popped.len());
            for (member, score) in &popped {
                ctx.out.array(2);
                ctx.out.bulk(member);
                ctx.out.double(*score);
            }
            return Ok(());
        }
    }
    if let Some(timeout) = block {
        return Err(CmdError::Blocked(timeout, false));
    }
    ctx.out.null_array();
    Ok(())
}

/// ZRANDMEMBER key [count [WITHSCORES]]: as HRANDFIELD.
pub fn zrandmember(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let count = match args.len() {
        2 => None,
        _ => Some(super::args::random_count(&args[2])?),
    };
    let with_scores = match args.len() {
        2 | 3 => false,
        4 if eq(&args[3], "withscores") => true,
        _ => return Err(CmdError::Syntax),
    };
    if let Some(count) = count {
        if with_scores && !(-i64::MAX / 2..=i64::MAX / 2).contains(&count) {
            return Err(err("ERR value is out of range"));
        }
    }
    let value = read_zset(ctx, &args[1])?;
    let set = Open::of(value.as_ref())?;
    if let Some(picked) = table_picks(ctx, &set, count)? {
        match count {
            None => ctx.out.bulk(&picked[0].0),
            Some(_) => reply_members(ctx.out, &picked, with_scores),
        }
        return Ok(());
    }
    let members = if count == Some(0) { Vec::new() } else { set.all(ctx)? };
    let Some(count) = count else {
        match members.get(rand::thread_rng().gen_range(0..members.len().max(1))) {
            Some((member, _)) => ctx.out.bulk(member),
            None => ctx.out.null(),
        }
        return Ok(());
    };
    let picked: Scored = if count >= members.len() as i64 {
        // The whole set, from the highest score down, as Redis replies it.
        members.into_iter().rev().collect()
    } else {
        super::random_picks(members.len(), count).into_iter().map(|at| members[at].clone()).collect()
    };
    reply_members(ctx.out, &picked, with_scores);
    Ok(())
}

/// ZRANDMEMBER's picks from a table, for no count or a count below the
/// member count (all of them come by score): members
/// picked at random among their `MEMBER` entries (`picks::random_fields`), each
/// with its score. None where the pick must list the set instead, or a
/// reader without locks finds the table changed meanwhile.
fn table_picks(ctx: &mut Ctx<'_>, set: &Open<'_>, count: Option<i64>) -> Result<Option<Scored>, CmdError> {
    let Open::Table(table) = set else { return Ok(None) };
    let size = table.head as u64;
    if count.is_some_and(|count| count >= 0 && count as u64 >= size) {
        return Ok(None);
    }
    let Some(members) = super::picks::random_fields(ctx, table, &[MEMBER], size, count)? else { return Ok(None) };
    let mut picked = Vec::with_capacity(members.len());
    for member in members {
        let Some(bytes) = table::get(ctx, table, &member_field(&member))? else { return Ok(None) };
        let score = stored_score(&bytes)?;
        picked.push((member, score));
    }
    Ok(Some(picked))
}

/// ZSCAN key cursor [MATCH pattern] [COUNT count]: a set kept as one value
/// comes whole with cursor 0, a table in pages of COUNT members.
pub fn zscan(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let cursor = super::keys::scan_cursor(&args[2])?;
    let value = read_zset(ctx, &args[1])?;
    if value.is_none() {
        super::keys::scan_reply(ctx.out, 0, 0, []);
        return Ok(());
    }
    let options = super::keys::scan_options(&args[3..], false)?;
    let (next, members): (u64, Scored) = match Open::of(value.as_ref())? {
        Open::Table(table) => {
            let (next, page) = table::page(ctx, &table, &[MEMBER], cursor, options.count)?;
            let members = page.into_iter().map(|(m, s)| Ok((m, stored_score(&s)?))).collect::<Result<_, Corrupt>>()?;
            (next, members)
        }
        set => (0, set.all(ctx)?),
    };
    let matched: Vec<(&[u8], String)> = members
        .iter()
        .filter(|(m, _)| options.pattern.is_none_or(|p| crate::keyspace::glob_match(p, m)))
        .map(|(m, s)| (&m[..], format_score(*s)))
        .collect();
    let items = matched.iter().flat_map(|(m, s)| [*m, s.as_bytes()]);
    super::keys::scan_reply(ctx.out, next, matched.len() * 2, items);
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

/// The members and scores of a sorted set or a set (whose members score
/// 1) at `key`; WRONGTYPE for any other type.
fn scored_members(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Scored, CmdError> {
    let Some(value) = ctx.read(key)? else { return Ok(Vec::new()) };
    match value.tag() {
        TYPE_ZSET | TYPE_ZSET_TABLE => Open::of(Some(&value))?.all(ctx),
        TYPE_SET | TYPE_SET_TABLE => {
            Ok(super::sets::members_of(ctx, &value)?.into_iter().map(|member| (member, 1.0)).collect())
        }
        _ => Err(CmdError::WrongType),
    }
}

/// ZUNION, ZINTER, ZDIFF and their STORE forms (`store`: the destination
/// comes first) and ZINTERCARD (`card`: its LIMIT, 0 for none): Redis's
/// `zunionInterDiffGenericCommand`.
fn combine_command(ctx: &mut Ctx<'_>, args: &[Bytes], op: SetOp, store: bool) -> CmdResult {
    let mut card = (args[0].eq_ignore_ascii_case(b"zintercard")).then_some(0u64);
    let numkeys_at = if store { 2 } else { 1 };
    let name = args[0].to_ascii_lowercase();
    let numkeys = int(&args[numkeys_at])?;
    if numkeys < 1 {
        return Err(err(format!(
            "ERR at least 1 input key is needed for '{}' command",
            String::from_utf8_lossy(&name)
        )));
    }
    if numkeys as u64 > (args.len() - numkeys_at - 1) as u64 {
        return Err(CmdError::Syntax);
    }
    let keys = &args[numkeys_at + 1..numkeys_at + 1 + numkeys as usize];
    let mut inputs = Vec::with_capacity(keys.len());
    for key in keys {
        inputs.push(scored_members(ctx, key)?);
    }
    let mut weights = vec![1.0; keys.len()];
    let (mut aggregate, mut with_scores) = (Aggregate::Sum, false);
    let mut at = numkeys_at + 1 + keys.len();
    while at < args.len() {
        let left = args.len() - at - 1;
        let arg = &args[at];
        if card.is_some() && eq(arg, "limit") && left >= 1 {
            let n = int(&args[at + 1]).ok().filter(|&n| n >= 0).ok_or_else(|| err("ERR LIMIT can't be negative"))?;
            card = Some(n as u64);
            at += 1;
        } else if card.is_none() && op != SetOp::Diff && eq(arg, "weights") && left >= keys.len() {
            for (i, weight) in weights.iter_mut().enumerate() {
                *weight = parse_score(&args[at + 1 + i]).ok_or_else(|| err("ERR weight value is not a float"))?;
            }
            at += keys.len();
        } else if card.is_none() && op != SetOp::Diff && eq(arg, "aggregate") && left >= 1 {
            aggregate = match &args[at + 1] {
                a if eq(a, "sum") => Aggregate::Sum,
                a if eq(a, "min") => Aggregate::Min,
                a if eq(a, "max") => Aggregate::Max,
                _ => return Err(CmdError::Syntax),
            };
            at += 1;
        } else if !store && card.is_none() && eq(arg, "withscores") {
            with_scores = true;
        } else {
            return Err(CmdError::Syntax);
        }
        at += 1;
    }
    let result = combine(inputs, &weights, aggregate, op);
    if let Some(limit) = card {
        let count = result.len() as u64;
        ctx.out.int(if limit > 0 { count.min(limit) } else { count } as i64);
    } else if store {
        let event = match op {
            SetOp::Union => "zunionstore",
            SetOp::Inter => "zinterstore",
            SetOp::Diff => "zdiffstore",
        };
        store_new_noting(ctx, &args[1], &result, event)?;
        ctx.out.int(result.len() as i64);
    } else {
        reply_members(ctx.out, &result, with_scores);
    }
    Ok(())
}

/// The combined set, in Redis's order. A weighted score that is NaN
/// (0 x inf), or a sum that is (inf - inf), counts as 0, as in Redis.
fn combine(inputs: Vec<Scored>, weights: &[f64], aggregate: Aggregate, op: SetOp) -> Scored {
    use std::collections::HashMap;
    let weighted = |score: f64, weight: f64| {
        let product = score * weight;
        if product.is_nan() {
            0.0
        } else {
            product
        }
    };
    let fold = |acc: f64, score: f64| match aggregate {
        Aggregate::Sum => {
            let sum = acc + score;
            if sum.is_nan() {
                0.0
            } else {
                sum
            }
        }
        Aggregate::Min => acc.min(score),
        Aggregate::Max => acc.max(score),
    };
    let mut inputs = inputs.into_iter().zip(weights.iter().copied());
    let Some((first, first_weight)) = inputs.next() else { return Vec::new() };
    let mut result: Scored = match op {
        SetOp::Diff => {
            let others: std::collections::HashSet<Vec<u8>> =
                inputs.flat_map(|(set, _)| set.into_iter().map(|(m, _)| m)).collect();
            first.into_iter().filter(|(m, _)| !others.contains(m)).collect()
        }
        SetOp::Union | SetOp::Inter => {
            let mut scores: HashMap<Vec<u8>, (f64, usize)> = HashMap::new();
            let mut first_seen = Vec::new();
            for (member, score) in first {
                scores.insert(member.clone(), (weighted(score, first_weight), 1));
                first_seen.push(member);
            }
            let mut sets = 1;
            for (set, weight) in inputs {
                sets += 1;
                for (member, score) in set {
                    let score = weighted(score, weight);
                    match scores.get_mut(&member) {
                        Some((acc, seen)) => {
                            *acc = fold(*acc, score);
                            *seen += 1;
                        }
                        None if op == SetOp::Union => {
                            scores.insert(member.clone(), (score, 1));
                            first_seen.push(member);
                        }
                        None => {}
                    }
                }
            }
            first_seen
                .into_iter()
                .filter_map(|member| {
                    let (score, seen) = scores[&member];
                    (op == SetOp::Union || seen == sets).then_some((member, score))
                })
                .collect()
        }
    };
    // A -0 is stored as 0 (as `Open::put` does), so it is replied so too.
    for (_, score) in &mut result {
        if *score == 0.0 {
            *score = 0.0;
        }
    }
    result.sort_by(|a, b| order((a.1, &a.0), (b.1, &b.0)));
    result
}

pub fn zunion(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    combine_command(ctx, args, SetOp::Union, false)
}

pub fn zinter(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    combine_command(ctx, args, SetOp::Inter, false)
}

pub fn zdiff(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    combine_command(ctx, args, SetOp::Diff, false)
}

pub fn zunionstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    ctx.writes.note_pushed();
    combine_command(ctx, args, SetOp::Union, true)
}

pub fn zinterstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    ctx.writes.note_pushed();
    combine_command(ctx, args, SetOp::Inter, true)
}

pub fn zdiffstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    ctx.writes.note_pushed();
    combine_command(ctx, args, SetOp::Diff, true)
}

/// ZINTERCARD numkeys key [key ...] [LIMIT limit].
pub fn zintercard(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    combine_command(ctx, args, SetOp::Inter, false)
}

/// Every member and score of the sorted set `value`, in order (DUMP).
pub fn members_of(ctx: &mut Ctx<'_>, value: &Value) -> Result<Scored, CmdError> {
    Open::of(Some(value))?.all(ctx)
}

/// A sorted set's encoding as one value, for RESTORE: None for an empty
/// set, a member given twice or a NaN score (Redis refuses all three).
pub fn encode_members(members: &[(Vec<u8>, f64)]) -> Option<Vec<u8>> {
    if members.is_empty() || members.iter().any(|(_, s)| s.is_nan()) {
        return None;
    }
    let mut sorted: Vec<(&[u8], f64)> =
        members.iter().map(|(m, s)| (&m[..], if *s == 0.0 { 0.0 } else { *s })).collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    if sorted.windows(2).any(|pair| pair[0].0 == pair[1].0) {
        return None;
    }
    sorted.sort_by(|a, b| order((a.1, a.0), (b.1, b.0)));
    let skiplist = sorted.len() > zset::LISTPACK_ENTRIES || sorted.iter().any(|(m, _)| m.len() > zset::LISTPACK_VALUE);
    Some(zset::encode(sorted.into_iter(), skiplist))
}

/// What OBJECT ENCODING answers for a sorted set.
pub fn encoding(value: &Value) -> Result<&'static str, CmdError> {
    let skiplist = value.tag() == TYPE_ZSET_TABLE || crate::hash::is_hashtable(value.data())?;
    Ok(if skiplist { "skiplist" } else { "listpack" })
}
