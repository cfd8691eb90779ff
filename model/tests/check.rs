//! The CI form of the model check, in two halves: every interleaving of 3 users through 2
//! gateways over 2 shards of a SKU of stock 2, limit 1, with at most one fault or operation
//! of every kind the model has; and the same with one user who sends its request twice
//! (after its answer, or while the first send still runs) and no fault. Exhaustive: each
//! fails on any broken invariant, and on any `sometimes` the model never reached (a model
//! that cannot reroute or sell out would check nothing). The deep form (both at once) is
//! run by hand: `cargo run -p model --release --bin model-check -- --deep`.

use model::{check, Config};

#[test]
fn every_interleaving_with_one_fault_breaks_nothing() {
    explore("faults", Config::ci());
}

#[test]
fn every_interleaving_with_a_retry_breaks_nothing() {
    explore("retries", Config::ci_retry());
}

fn explore(form: &str, cfg: Config) {
    let report = check::run(cfg, 2, false, None);
    println!("model check, CI form ({form}): {}", report.summary());
    for (name, trace) in &report.broken {
        println!("BROKEN {name}\n{trace}");
    }
    assert!(report.broken.is_empty(), "{}", report.summary());
    assert!(
        report.unique > 100_000,
        "the model explored too little: {}",
        report.summary()
    );
}
