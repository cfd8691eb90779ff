//! The draw model (`model::draw`): the CI form exhaustively, each mutant caught with a
//! trace, and the forms where the checker found bugs in the draw code (ignored until
//! fixed; `cargo test -p model --test draw -- --ignored --nocapture` prints the traces).

use model::draw::{check, DrawConfig, DrawMutant, DrawOps};

/// Faults the draw code survives: crashes of the service, the restore loop or a reader
/// between steps, and the settle's timeout (with a release of a granted unit).
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

fn explore(form: &str, cfg: DrawConfig) {
    let report = check::run(cfg, 2, false);
    println!("draw model, {form}: {}", report.summary());
    for (name, trace) in &report.broken {
        println!("BROKEN {name}\n{trace}");
    }
    assert!(report.broken.is_empty(), "{}", report.summary());
}

#[test]
fn the_draw_with_a_crash_breaks_nothing() {
    let mut cfg = ci();
    cfg.ops.timeout = false;
    explore("CI form (two readers, a crash, a release)", cfg);
}

#[test]
fn the_draw_with_a_settle_timeout_breaks_nothing() {
    let mut cfg = ci();
    cfg.ops.crash = false;
    explore(
        "CI form (two readers, the settle's timeout, a release)",
        cfg,
    );
}

/// Found by the checker: the service dies between marking two shards of a draw with
/// nothing to grant (here the timeout drew from an empty ledger): `due` never lists it
/// again, so the unmarked shard stays `closed` and its entrants are told "not drawn yet"
/// for good.
#[test]
#[ignore = "a bug in campaign-ops/src/draw/run.rs / ledger draws::due: marks not finished"]
fn a_crash_between_marks_leaves_no_shard_unmarked() {
    explore("a crash and the settle's timeout", ci());
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

/// Found by the checker: the settle compares counts, and a ledger that holds an entry the
/// shard no longer has (committed, then lost with the shard, or rolled back by a failover
/// to a replica that lacked it) covers for an acknowledged entry not committed yet: the
/// draw is recorded without it.
#[test]
#[ignore = "a bug in campaign-ops/src/draw/run.rs: the settle counts entries"]
///
/// Also found in this form: a failover to a replica that had neither the close nor the mark
/// leaves the shard `open` after the draw; the service marks only `closed` shards and the
/// restore only missing ones, so its entrants never learn their standing
/// (`answers-final`).
fn a_loss_or_failover_does_not_make_the_draw_miss_an_entry() {
    explore(
        "one loss or failover",
        DrawConfig {
            readers: 1,
            ops: DrawOps {
                crash: false,
                timeout: false,
                ..DrawOps::ALL
            },
            ..DrawConfig::ci()
        },
    );
}
