//! Redis's partial quicksort, for the commands whose order among equal
//! items must be Redis's (GEO searches with COUNT, SORT with LIMIT).

/// Sorts `v` enough that positions `first..=last` hold what a full sort
/// would put there, as Redis's `pqsort` does when COUNT cuts a sorted GEO
/// search short or LIMIT a SORT by other keys: Bentley and McIlroy's
/// quicksort ("Engineering a Sort Function", 1993) that leaves alone the parts wholly outside those
/// positions. Which of several equal items land inside is the algorithm's
/// choice, so this follows it step for step (the same pivots, the same
/// swaps) to choose as Redis does.
pub fn partial_sort<T>(v: &mut [T], cmp: impl Fn(&T, &T) -> std::cmp::Ordering, first: usize, last: usize) {
    partial_sort_from(v, 0, &cmp, first, last);
}

fn partial_sort_from<T>(
    mut v: &mut [T],
    mut base: usize,
    cmp: &impl Fn(&T, &T) -> std::cmp::Ordering,
    first: usize,
    last: usize,
) {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let median = |v: &[T], a: usize, b: usize, c: usize| {
        if cmp(&v[a], &v[b]) == Less {
            if cmp(&v[b], &v[c]) == Less {
                b
            } else if cmp(&v[a], &v[c]) == Less {
                c
            } else {
                a
            }
        } else if cmp(&v[b], &v[c]) == Greater {
            b
        } else if cmp(&v[a], &v[c]) == Less {
            a
        } else {
            c
        }
    };
    let swap_runs = |v: &mut [T], a: usize, b: usize, n: usize| {
        for k in 0..n {
            v.swap(a + k, b + k);
        }
    };
    // Whether `len` items from absolute position `start` reach the range.
    let wanted = |start: usize, len: usize| !(last < start || first > start + len - 1);
    loop {
        let n = v.len();
        if n < 7 {
            for m in 1..n {
                let mut l = m;
                while l > 0 && cmp(&v[l - 1], &v[l]) == Greater {
                    v.swap(l, l - 1);
                    l -= 1;
                }
            }
            return;
        }
        let mut pivot = n / 2;
        if n > 7 {
            let (mut low, mut high) = (0, n - 1);
            if n > 40 {
                let d = n / 8;
                low = median(v, low, low + d, low + 2 * d);
                pivot = median(v, pivot - d, pivot, pivot + d);
                high = median(v, high - 2 * d, high - d, high);
            }
            pivot = median(v, low, pivot, high);
        }
        v.swap(0, pivot);
        // [0, a) and (d, n) equal the pivot, [a, b) are less, (c, d] more.
        let (mut a, mut b, mut c, mut d) = (1, 1, n - 1, n - 1);
        loop {
            while b <= c {
                match cmp(&v[b], &v[0]) {
                    Greater => break,
                    Equal => {
                        v.swap(a, b);
                        a += 1;
                    }
                    Less => {}
                }
                b += 1;
            }
            while b <= c {
                match cmp(&v[c], &v[0]) {
                    Less => break,
                    Equal => {
                        v.swap(c, d);
                        d -= 1;
                    }
                    Greater => {}
                }
                c -= 1;
            }
            if b > c {
                break;
            }
            v.swap(b, c);
            b += 1;
            c -= 1;
        }
        let r = a.min(b - a);
        swap_runs(v, 0, b - r, r);
        let r = (d - c).min(n - d - 1);
        swap_runs(v, b, n - r, r);
        let less = b - a;
        if less > 1 && wanted(base, less) {
            partial_sort_from(&mut v[..less], base, cmp, first, last);
        }
        let more = d - c;
        if more <= 1 || !wanted(base + n - more, more) {
            return;
        }
        base += n - more;
        v = &mut std::mem::take(&mut v)[n - more..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The cut positions hold what a full sort puts there.
        #[test]
        fn a_partial_sort_orders_its_range(mut v in proptest::collection::vec(0u8..20, 1..200), cut in 0usize..200) {
            let last = cut % v.len();
            let mut sorted = v.clone();
            sorted.sort();
            partial_sort(&mut v, |a, b| a.cmp(b), 0, last);
            prop_assert_eq!(&v[..=last], &sorted[..=last]);
        }

        /// With a range that starts past 0 too.
        #[test]
        fn a_partial_sort_orders_a_middle_range(mut v in proptest::collection::vec(0u8..20, 1..200), a in 0usize..200, b in 0usize..200) {
            let (first, last) = (a.min(b) % v.len(), a.max(b) % v.len());
            let (first, last) = (first.min(last), first.max(last));
            let mut sorted = v.clone();
            sorted.sort();
            partial_sort(&mut v, |a, b| a.cmp(b), first, last);
            prop_assert_eq!(&v[first..=last], &sorted[first..=last]);
        }
    }
}
