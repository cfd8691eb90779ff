//! The draw model (`model::draw`): its forms exhaustively, and each catchable mutant
//! caught with a trace (`cargo test -p model --release --test draw -- --nocapture`
//! prints them).

use model::draw::{check, DrawConfig, DrawMutant, DrawOps};

/// Crashes of the service, the restore loop or a reader between steps, and the settle's
/// timeout (with a release of a granted unit); no loss or failover.
fn ci() -> DrawConfig {
    DrawConfig {
        ops: DrawOps {
            loss: false,
            failover: false,
            ..DrawOps::ALL
        },
        ..DrawConfig::ci()
    }
}

/// One loss or one failover, one entries reader, a release.
fn loss_or_failover() -> DrawConfig {
    DrawConfig {
        readers: 1,
        ops: DrawOps {
            crash: false,
            timeout: false,
            ..DrawOps::ALL
        },
        ..DrawConfig::ci()
    }
}

fn explore(form: &str, cfg: DrawConfig) {
    let report = check::run(cfg, 2, false);
    println!("draw model, {form}: {}", report.summary());
    for (name, trace) in &report.broken {
        println!("BROKEN {name}\n{trace}");
    }
    assert!(report.broken.is_empty(), "{}", report.summary());
}

#[test]
fn the_draw_with_a_crash_or_a_settle_timeout_breaks_nothing() {
    explore(
        "two readers, a crash or the settle's timeout, a release",
        ci(),
    );
}

/// Where the checker found the count-based settle fooled by an entry the ledger holds and
/// the shard lost, and a shard left `open` or `closed` after the draw (both fixed).
#[test]
fn a_loss_or_failover_does_not_make_the_draw_miss_an_entry() {
    explore(
        "one reader, one loss or failover, a release",
        loss_or_failover(),
    );
}

/// A master after a loss hands out stream ids below the place.
#[test]
fn a_loss_with_ids_restarting_below_the_place_breaks_nothing() {
    explore(
        "one reader, one loss, ids restart",
        DrawConfig {
            ids_restart_after_loss: true,
            ops: DrawOps {
                failover: false,
                ..loss_or_failover().ops
            },
            ..loss_or_failover()
        },
    );
}

/// One reader, two losses of a shard, no failover.
fn two_losses() -> DrawConfig {
    DrawConfig {
        faults: 2,
        ops: DrawOps {
            failover: false,
            ..loss_or_failover().ops
        },
        ..loss_or_failover()
    }
}

/// Found by the checker (two losses of one shard): the restore reads the ledger's draw
/// (still open), the draw is recorded and u1 granted, the shard is lost again with the
/// grant's stored answer and its win, and the restore, going on with the draw it read,
/// puts the entries back without the wins or the marks. The draw loop then marked the
/// shard (`R|1`, never `W|`) and, its rank granted, never granted it again: the winner
/// was told `won_pending` for good. The draw loop's marks now write the ledger's wins
/// first (`campaign-ops/src/draw/mark.rs`, `mark_shard`).
#[test]
fn two_losses_leave_no_winner_pending() {
    explore("one reader, two losses", two_losses());
}

#[test]
fn marks_without_the_wins_are_caught() {
    caught(
        two_losses().with_mutant(DrawMutant::MarksWithoutWins),
        "answer-truth",
    );
}

fn caught(cfg: DrawConfig, expected: &str) {
    let m = cfg.mutant.expect("a mutant");
    let report = check::run(cfg, 2, true);
    println!("mutant {m:?}: {}", report.summary());
    for (name, trace) in &report.broken {
        println!("BROKEN {name}\n{trace}");
    }
    assert!(
        report.broken.iter().any(|(n, _)| *n == expected),
        "mutant {m:?} not caught by {expected}: {}",
        report.summary()
    );
}

#[test]
fn a_draw_that_does_not_wait_for_the_ledger_is_caught() {
    let cfg = DrawConfig {
        faults: 0,
        releases: 0,
        ..ci()
    };
    caught(
        cfg.with_mutant(DrawMutant::NoSettle),
        "draw-covers-committed",
    );
}

#[test]
fn a_settle_by_counts_is_caught() {
    caught(
        loss_or_failover().with_mutant(DrawMutant::SettleByCount),
        "draw-covers-committed",
    );
}

#[test]
fn grants_past_a_sold_out_rank_are_caught() {
    // A waitlist of two: rank 2 finds no unit, a release brings one back before rank 3.
    let cfg = DrawConfig {
        waitlist: 2,
        readers: 1,
        faults: 0,
        ..ci()
    };
    caught(
        cfg.with_mutant(DrawMutant::GrantsPastSoldOut),
        "waitlist-order",
    );
}

#[test]
fn a_restore_without_the_wins_is_caught() {
    caught(
        loss_or_failover().with_mutant(DrawMutant::RestoreWithoutWins),
        "answer-truth",
    );
}

#[test]
fn a_place_kept_across_a_new_master_is_caught() {
    let cfg = DrawConfig {
        ids_restart_after_loss: true,
        ops: DrawOps {
            failover: false,
            ..loss_or_failover().ops
        },
        ..loss_or_failover()
    };
    caught(
        cfg.with_mutant(DrawMutant::PlaceKeptAcrossNewMaster),
        "entries-reach-ledger",
    );
}

#[test]
fn entries_joining_a_drawn_draw_are_caught() {
    caught(
        ci().with_mutant(DrawMutant::EntriesAfterDrawJoin),
        "drawn-from-ledger",
    );
}

#[test]
fn a_record_without_the_count_is_caught() {
    caught(
        ci().with_mutant(DrawMutant::RecordWithoutCount),
        "drawn-from-ledger",
    );
}

#[test]
fn marks_of_due_draws_only_are_caught() {
    caught(ci().with_mutant(DrawMutant::MarkOnlyDue), "answers-final");
}

/// Not catchable, and the forms show it: the draw loop marks every drawn draw's `closed`
/// shards each pass, so a restore that does not mark leaves nothing wrong for long
/// (`answers-final` holds); and a read covers every entry after the place it started
/// from, so a place moved without the compare-and-set is only read again.
#[test]
#[ignore = "27 s: shows two mutants uncatchable, nothing to keep in CI"]
fn the_uncatchable_mutants_break_nothing() {
    for m in [
        DrawMutant::RestoreWithoutMark,
        DrawMutant::UnconditionalPlace,
    ] {
        let report = check::run(loss_or_failover().with_mutant(m), 2, true);
        println!("mutant {m:?}: {}", report.summary());
        assert!(report.broken.is_empty(), "{m:?}: {}", report.summary());
    }
}

#[test]
fn a_restore_that_opens_at_once_is_caught() {
    caught(
        loss_or_failover().with_mutant(DrawMutant::RestoreOpensAtOnce),
        "answer-truth",
    );
}

/// A shard lost, then failed over while its restore runs: the replica holds a prefix of
/// the restore's writes (the hold, maybe the entries) and the restore's last step must not
/// give the state to a shard missing the rest (its wins and marks, or entries). Two users
/// and no waitlist keep two faults small; `always` properties only (no waitlist to serve).
#[test]
#[ignore = "open: the restore's writes of the wins (draw_won's HSET) are not counted in its hold, so a failover between the wins and the held marks publishes a shard whose winner is told won_pending (docs/DESIGN.md Draws \"Redis loss\")"]
fn a_failover_mid_restore_publishes_no_shard_missing_its_writes() {
    let cfg = DrawConfig {
        users: 2,
        waitlist: 0,
        faults: 2,
        releases: 0,
        ..loss_or_failover()
    };
    let report = check::run(cfg, 2, true);
    println!("draw model, a loss then a failover: {}", report.summary());
    for (name, trace) in &report.broken {
        println!("BROKEN {name}\n{trace}");
    }
    assert!(report.broken.is_empty(), "{}", report.summary());
}
