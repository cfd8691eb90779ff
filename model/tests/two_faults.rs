//! A two-fault form the CI and deep forms do not reach (they allow one fault or operation
//! per run): a shard loss and a release of an unpaid claim in the same run, every
//! interleaving of the two with the claims of 3 users over 2 shards and the rebuild from
//! the ledger. Only those two kinds are in play, so it is exhaustive in about a minute.
//!
//! `cargo test -p model --release --test two_faults -- --nocapture`

use model::config::Ops;
use model::{check, Config};

fn loss_and_release() -> Config {
    Config {
        retrying: 0,
        faults: 2,
        ops: Ops {
            loss: true,
            releases: 1,
            ..Ops::NONE
        },
        ..Config::ci()
    }
}

#[test]
fn a_loss_and_a_release_break_nothing() {
    let report = check::run(loss_and_release(), 2, false, None);
    println!("model check, loss + release: {}", report.summary());
    for (name, trace) in &report.broken {
        println!("BROKEN {name}\n{trace}");
    }
    assert!(report.broken.is_empty(), "{}", report.summary());
}
