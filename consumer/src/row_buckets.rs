//! Row counts the ledger's multi-row INSERT is padded to, so that its statement text takes
//! one of a few dozen shapes.
//!
//! sqlx keeps prepared statements per connection, keyed by their SQL text. A batch's
//! `INSERT IGNORE … VALUES (…), (…), …` has one text per row count, so with batches of any
//! size between 1 and `batch_max_rows` nearly every batch missed the cache: a prepare round
//! trip in which MariaDB parses the statement and sends one definition packet per
//! placeholder (10 per row), and, once the cache was full, a close of the statement it
//! evicted. Padding a batch up to the next size of the form m·2^e (m in 4..=7) keeps the
//! texts to 36 up to 1 024 rows and wastes at most a quarter of a batch's rows, which
//! `INSERT IGNORE` skips as duplicates of a row of the same statement (`ledger.rs`).

/// Rows an INSERT of `n` rows is sent with: `n` itself up to 4, else the smallest m·2^e
/// (m in 4..=7) that is at least `n`; `n` itself when that would pass `max`.
pub(crate) fn padded_rows(n: usize, max: usize) -> usize {
    if n <= 4 {
        return n;
    }
    // The top three bits of n pick m; the bits below them are rounded up.
    let shift = usize::BITS - n.leading_zeros() - 3;
    let padded = n.div_ceil(1 << shift) << shift;
    if padded > max {
        n
    } else {
        padded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn small_batches_are_sent_as_they_are() {
        for n in 0..=8 {
            assert_eq!(padded_rows(n, 1000), n);
        }
    }

    #[test]
    fn sizes_are_few_and_waste_less_than_a_quarter() {
        let mut shapes = BTreeSet::new();
        for n in 1..=1024 {
            let p = padded_rows(n, 1024);
            assert!(p >= n, "{n} -> {p}");
            assert!(
                (p - n) * 4 < p.max(4),
                "{n} -> {p} wastes a quarter or more"
            );
            // m·2^e with m in 4..=7: the odd part is at most 7.
            assert!(p >> p.trailing_zeros() <= 7, "{n} -> {p}");
            shapes.insert(p);
        }
        assert_eq!(shapes.len(), 36, "{shapes:?}");
        assert_eq!(padded_rows(9, 1024), 10);
        assert_eq!(padded_rows(33, 1024), 40);
        assert_eq!(padded_rows(171, 1024), 192);
        assert_eq!(padded_rows(1000, 1024), 1024);
    }

    #[test]
    fn never_past_the_limit() {
        assert_eq!(padded_rows(1000, 1000), 1000);
        assert_eq!(padded_rows(6553, 6553), 6553);
        assert_eq!(padded_rows(6000, 6553), 6144);
        assert_eq!(padded_rows(6200, 6553), 6200);
    }
}
