//! The faults outside the CI form, each in a small form of its own, exhaustively: a master
//! that restarts from an older snapshot (the vouch fence and the watch's rebuild keep it
//! from selling what the ledger holds), and a database that refuses writes for a while
//! (the consumer's place does not move without its rows).
//!
//! `cargo test -p model --test new_faults -- --nocapture`

use model::{check, Config};

#[test]
fn a_master_back_from_an_older_snapshot_breaks_nothing() {
    explore("restore", Config::restore());
}

#[test]
fn a_retry_after_a_master_back_from_an_older_snapshot_breaks_nothing() {
    explore("restore with a retry", Config::restore_retry());
}

#[test]
fn a_database_that_refuses_writes_breaks_nothing() {
    explore("database refuses", Config::db_refusal());
}

fn explore(form: &str, cfg: Config) {
    let report = check::run(cfg, 2, false, None);
    println!("model check, {form} form: {}", report.summary());
    for (name, trace) in &report.broken {
        println!("BROKEN {name}\n{trace}");
    }
    assert!(report.broken.is_empty(), "{}", report.summary());
}
