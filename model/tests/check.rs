//! The CI form of the model check, in two halves: every interleaving of 3 users through 2
//! gateways over 2 shards of a SKU of stock 2, limit 1, with at most one fault or operation
//! of every kind the model has; and the same with one user who sends its request twice
//! (after its answer, or while the first send still runs) and no fault. Exhaustive: each
//! fails on any broken invariant, and on any `sometimes` the model never reached (a model
//! that cannot reroute or sell out would check nothing). The deep form (both at once) is
//! run by hand: `cargo run -p model --release --bin model-check -- --deep`. The faults
//! outside the CI form have small forms of their own, at the end.

use model::{check, Config};

#[test]
fn every_interleaving_with_one_fault_breaks_nothing() {
    explore("faults", Config::ci(), 100_000);
}

#[test]
fn every_interleaving_with_a_retry_breaks_nothing() {
    explore("retries", Config::ci_retry(), 100_000);
}

/// The faults outside the CI form, each in a small form of its own: a master that restarts
/// from an older snapshot (the vouch fence and the watch's rebuild keep it from selling
/// what the ledger holds), and a database that refuses writes for a while (the consumer's
/// place does not move without its rows).
#[test]
fn a_master_back_from_an_older_snapshot_breaks_nothing() {
    explore("restore", Config::restore(), 100_000);
}

#[test]
fn a_retry_after_a_master_back_from_an_older_snapshot_breaks_nothing() {
    explore("restore with a retry", Config::restore_retry(), 50_000);
}

/// The same with the clock running: a hold can expire and be resolved by the consumer
/// before the restart brings it back.
#[test]
#[ignore = "fails on main: a first send stalled past its hold's expiry undoes that hold, resolved after the snapshot and brought back by the restart (the rebuild keeps holds, the undo names it by its generation), and answers 410 after the retry's 201"]
fn a_retry_with_holds_expiring_around_a_restart_breaks_nothing() {
    let cfg = Config {
        max_time: 4,
        ..Config::restore_retry()
    };
    explore("restore with a retry and the clock", cfg, 50_000);
}

#[test]
fn a_database_that_refuses_writes_breaks_nothing() {
    explore("database refuses", Config::db_refusal(), 20_000);
}

/// `least`: the unique states below which the form explored too little to mean anything.
fn explore(form: &str, cfg: Config, least: usize) {
    let report = check::run(cfg, 2, false, None);
    println!("model check ({form}): {}", report.summary());
    for (name, trace) in &report.broken {
        println!("BROKEN {name}\n{trace}");
    }
    assert!(report.broken.is_empty(), "{}", report.summary());
    assert!(
        report.unique > least,
        "the model explored too little: {}",
        report.summary()
    );
}
