//! Runs the model checker by hand: the CI form, the deep form, or one mutant.
//!
//! `cargo run -p model --release --bin model-check -- --deep`

use clap::Parser;
use model::{Config, Mutant};

#[derive(Parser)]
#[command(about = "Explore every interleaving of the claim protocol within the form's bounds")]
struct Args {
    /// The deep form (a retrying user and a fault together; about 40 M states).
    #[arg(long)]
    deep: bool,
    /// The CI form's second half (a retrying user, no fault).
    #[arg(long, conflicts_with = "deep")]
    retry: bool,
    /// The older-snapshot form (a snapshot, then a restart from it; `--retry` for its
    /// retry form).
    #[arg(long, conflicts_with_all = ["deep", "db_refusal"])]
    restore: bool,
    /// The database-refusal form.
    #[arg(long, conflicts_with = "deep")]
    db_refusal: bool,
    /// Faults per run, over the form's own.
    #[arg(long)]
    faults: Option<u8>,
    /// Checker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Users (3 in both forms).
    #[arg(long)]
    users: Option<u8>,
    /// Gateways.
    #[arg(long)]
    gateways: Option<u8>,
    /// Sends per request id.
    #[arg(long)]
    attempts: Option<u8>,
    /// Users whose requests are retried.
    #[arg(long)]
    retrying: Option<u8>,
    /// Stop after this many states (a measure of growth, not a check).
    #[arg(long)]
    max_states: Option<usize>,
    /// Without the rebuild's stream floor: a lost stream's ids start again below the
    /// consumer's offset (see `Ops::rebuild_floor`).
    #[arg(long)]
    no_floor: bool,
    /// Check a mutant instead (its counterexample is printed).
    #[arg(long, value_parser = parse_mutant)]
    mutant: Option<Mutant>,
}

fn parse_mutant(s: &str) -> Result<Mutant, String> {
    Mutant::ALL
        .into_iter()
        .find(|m| format!("{m:?}").eq_ignore_ascii_case(s))
        .ok_or_else(|| format!("no mutant {s:?}; one of {:?}", Mutant::ALL))
}

fn main() {
    let args = Args::parse();
    let mut cfg = if args.deep {
        Config::deep()
    } else if args.restore && args.retry {
        Config::restore_retry()
    } else if args.restore {
        Config::restore()
    } else if args.db_refusal {
        Config::db_refusal()
    } else if args.retry {
        Config::ci_retry()
    } else {
        Config::ci()
    };
    if let Some(f) = args.faults {
        cfg.faults = f;
    }
    cfg.mutant = args.mutant;
    cfg.ops.rebuild_floor = !args.no_floor;
    if let Some(u) = args.users {
        cfg.users = u;
    }
    if let Some(g) = args.gateways {
        cfg.gateways = g;
    }
    if let Some(r) = args.retrying {
        cfg.retrying = r;
    }
    if let Some(a) = args.attempts {
        cfg.attempts = a;
    }
    let report = model::check::run(cfg, args.threads, args.mutant.is_some(), args.max_states);
    println!("{}", report.summary());
    for (name, trace) in &report.broken {
        println!("BROKEN {name}\n{trace}");
    }
    std::process::exit(i32::from(
        !report.broken.is_empty() && args.mutant.is_none(),
    ));
}
