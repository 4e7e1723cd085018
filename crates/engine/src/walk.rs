//! Counting and picking keys over a walk: `Db::visit_keys`,
//! `Snapshot::visit_keys`, or a caller's own walk that merges its pending
//! writes into one of those. A walk calls its visitor with each key in
//! order until the visitor returns false.

/// How many keys the walk visits.
pub fn count(walk: impl FnOnce(&mut dyn FnMut(&[u8]) -> bool)) -> usize {
    let mut count = 0;
    walk(&mut |_| {
        count += 1;
        true
    });
    count
}

/// The `n`th key (from 0) the walk visits.
pub fn nth(n: usize, walk: impl FnOnce(&mut dyn FnMut(&[u8]) -> bool)) -> Option<Vec<u8>> {
    let (mut left, mut found) = (n, None);
    walk(&mut |key| {
        if left == 0 {
            found = Some(key.to_vec());
            return false;
        }
        left -= 1;
        true
    });
    found
}

/// The keys the walk visits at `ranks` (ascending, distinct, from 0), in
/// one pass: they stop where the walk ends or at a rank out of order.
pub fn at_ranks(ranks: &[usize], walk: impl FnOnce(&mut dyn FnMut(&[u8]) -> bool)) -> Vec<Vec<u8>> {
    let (mut rank, mut found) = (0, Vec::with_capacity(ranks.len()));
    if ranks.is_empty() {
        return found;
    }
    walk(&mut |key| {
        if rank == ranks[found.len()] {
            found.push(key.to_vec());
            if found.len() == ranks.len() {
                return false;
            }
        }
        rank += 1;
        true
    });
    found
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_and_picks_and_stops() {
        let keys: [&[u8]; 3] = [b"a", b"b", b"c"];
        let mut visited = 0;
        let walk = |visit: &mut dyn FnMut(&[u8]) -> bool| {
            for key in keys {
                if !visit(key) {
                    break;
                }
            }
        };
        assert_eq!(super::count(walk), 3);
        assert_eq!(super::nth(0, walk).as_deref(), Some(&b"a"[..]));
        assert_eq!(super::nth(2, walk).as_deref(), Some(&b"c"[..]));
        assert_eq!(super::nth(3, walk), None);
        super::nth(1, |visit| {
            for key in keys {
                visited += 1;
                if !visit(key) {
                    break;
                }
            }
        });
        assert_eq!(visited, 2, "stops at the key it picks");
        let at = |ranks: &[usize]| super::at_ranks(ranks, walk);
        assert_eq!(at(&[0, 2]), vec![b"a".to_vec(), b"c".to_vec()]);
        assert_eq!(at(&[1, 3]), vec![b"b".to_vec()], "stops where the walk ends");
        assert_eq!(at(&[2, 1]), vec![b"c".to_vec()], "stops at a rank out of order");
        assert!(at(&[]).is_empty());
    }
}
