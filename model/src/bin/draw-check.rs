//! Runs the draw model's checker by hand: `cargo run -p model --bin draw-check -- --help`.

use clap::Parser;
use model::draw::{check, DrawConfig, DrawMutant};

#[derive(Parser)]
#[command(about = "Explore every interleaving of the draw within the form's bounds")]
struct Args {
    #[arg(long)]
    users: Option<u8>,
    #[arg(long)]
    readers: Option<u8>,
    #[arg(long)]
    faults: Option<u8>,
    #[arg(long)]
    waitlist: Option<u32>,
    #[arg(long)]
    releases: Option<u8>,
    /// A master started after a loss hands out stream ids below the lost one's.
    #[arg(long)]
    ids_restart: bool,
    /// Faults and operations left out of the run.
    #[arg(long)]
    no_loss: bool,
    #[arg(long)]
    no_failover: bool,
    #[arg(long)]
    no_crash: bool,
    #[arg(long)]
    no_timeout: bool,
    #[arg(long, default_value_t = 2)]
    threads: usize,
    #[arg(long, value_parser = parse_mutant)]
    mutant: Option<DrawMutant>,
}

fn parse_mutant(s: &str) -> Result<DrawMutant, String> {
    DrawMutant::ALL
        .into_iter()
        .find(|m| format!("{m:?}").eq_ignore_ascii_case(s))
        .ok_or_else(|| format!("no mutant {s:?}; one of {:?}", DrawMutant::ALL))
}

fn main() {
    let a = Args::parse();
    let mut cfg = DrawConfig::ci();
    cfg.users = a.users.unwrap_or(cfg.users);
    cfg.readers = a.readers.unwrap_or(cfg.readers);
    cfg.faults = a.faults.unwrap_or(cfg.faults);
    cfg.waitlist = a.waitlist.unwrap_or(cfg.waitlist);
    cfg.releases = a.releases.unwrap_or(cfg.releases);
    cfg.ids_restart_after_loss |= a.ids_restart;
    cfg.ops.loss &= !a.no_loss;
    cfg.ops.failover &= !a.no_failover;
    cfg.ops.crash &= !a.no_crash;
    cfg.ops.timeout &= !a.no_timeout;
    cfg.mutant = a.mutant;
    let report = check::run(cfg, a.threads, a.mutant.is_some());
    println!("{}", report.summary());
    for (name, trace) in &report.broken {
        println!("BROKEN {name}\n{trace}");
    }
}
