//! Row counts the ledger's multi-row INSERT is padded to, so that its statement text takes
//! one of a few dozen shapes.
//!
//! sqlx keeps prepared statements per connection, keyed by their SQL text. A batch's
//! `INSERT IGNORE … VALUES (…), (…), …` has one text per row count, so with batches of any
//! size between 1 and `batch_max_rows` nearly every batch missed the cache: a prepare round
//! trip in which MariaDB parses the statement and sends one definition packet per
//! placeholder (10 per row), and, once the cache was full, a close of the statement it
//! evicted. Padding a batch up to the next size of the form m·2^e (m in 4..=7), or the
//! default batch size where that comes first, keeps the texts to 36 up to 1 000 rows and
//! wastes under a quarter of a batch's rows, which `INSERT IGNORE` skips as duplicates of a
//! row of the same statement (`claims.rs`).

/// Rows an INSERT of `n` rows is sent with: `n` itself up to 4, else the smallest m·2^e
/// (m in 4..=7) that is at least `n`, or `cap` (at least `n`) when that would pass it. With
/// `cap` the default batch size ([`cap_for`]), a full batch, the common one under load,
/// wastes nothing.
pub(crate) fn padded_rows(n: usize, cap: usize) -> usize {
    debug_assert!(n <= cap);
    if n <= 4 {
        return n;
    }
    // The top three bits of n pick m; the bits below them are rounded up.
    let shift = usize::BITS - n.leading_zeros() - 3;
    (n.div_ceil(1 << shift) << shift).min(cap)
}

/// The cap [`padded_rows`] pads a batch of `n` rows to: the default batch size, so that a
/// full default batch is sent as it is, or past it (a configured larger batch, a rebuild's
/// page) the placeholder limit.
pub(crate) fn cap_for(n: usize) -> usize {
    use crate::rows::{DEFAULT_BATCH_MAX_ROWS, MAX_BATCH_ROWS};
    if n <= DEFAULT_BATCH_MAX_ROWS {
        DEFAULT_BATCH_MAX_ROWS
    } else {
        MAX_BATCH_ROWS
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
        for n in 1..=crate::rows::DEFAULT_BATCH_MAX_ROWS {
            let p = padded_rows(n, cap_for(n));
            assert!(p >= n, "{n} -> {p}");
            assert!(
                (p - n) * 4 < p.max(4),
                "{n} -> {p} wastes a quarter or more"
            );
            // m·2^e with m in 4..=7 (the odd part is at most 7), or the cap.
            assert!(
                p >> p.trailing_zeros() <= 7 || p == cap_for(n),
                "{n} -> {p}"
            );
            shapes.insert(p);
        }
        assert_eq!(shapes.len(), 36, "{shapes:?}");
        assert_eq!(padded_rows(9, 1000), 10);
        assert_eq!(padded_rows(33, 1000), 40);
        assert_eq!(padded_rows(171, 1000), 192);
        assert_eq!(padded_rows(1000, 1024), 1024);
    }

    #[test]
    fn never_past_the_cap() {
        assert_eq!(padded_rows(1000, 1000), 1000);
        assert_eq!(padded_rows(900, 1000), 1000);
        assert_eq!(padded_rows(6553, 6553), 6553);
        assert_eq!(padded_rows(6000, 6553), 6144);
        assert_eq!(padded_rows(6200, 6553), 6553);
    }

    #[test]
    fn a_full_default_batch_is_sent_as_it_is() {
        use crate::rows::{DEFAULT_BATCH_MAX_ROWS, MAX_BATCH_ROWS};
        let full = DEFAULT_BATCH_MAX_ROWS;
        assert_eq!(padded_rows(full, cap_for(full)), full);
        assert_eq!(
            padded_rows(MAX_BATCH_ROWS, cap_for(MAX_BATCH_ROWS)),
            MAX_BATCH_ROWS
        );
        for n in 1..=MAX_BATCH_ROWS {
            let p = padded_rows(n, cap_for(n));
            assert!(p >= n && p <= MAX_BATCH_ROWS, "{n} -> {p}");
        }
    }
}
