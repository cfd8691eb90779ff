//! One run of the checker over a [`DrawConfig`], and a counterexample in words.

use std::fmt::Write as _;
use std::time::Instant;

use stateright::{Checker, Expectation, HasDiscoveries, Model, Path};

use super::config::DrawConfig;
use super::system::{Action, Actor, DrawSystem, Restore, State, Svc};
use crate::check::Report;

/// Explores breadth first (the draw's state space is small); `first_failure`: stop at the
/// first broken `always` (the mutants).
pub fn run(cfg: DrawConfig, threads: usize, first_failure: bool) -> Report {
    let started = Instant::now();
    let mut builder = DrawSystem::new(cfg).checker().threads(threads);
    if first_failure {
        builder = builder.finish_when(HasDiscoveries::AnyFailures);
    }
    let checker = builder.spawn_bfs().join();
    let took = started.elapsed();
    let mut broken = Vec::new();
    for p in checker.model().properties() {
        match (p.expectation, checker.discovery(p.name)) {
            (Expectation::Always | Expectation::Eventually, Some(path)) => {
                broken.push((p.name, render(checker.model(), &path)));
            }
            (Expectation::Sometimes, None) if !first_failure => {
                broken.push((p.name, "never reached".to_owned()));
            }
            _ => {}
        }
    }
    Report {
        states: checker.state_count(),
        unique: checker.unique_state_count(),
        depth: checker.max_depth(),
        took,
        broken,
    }
}

pub fn render(m: &DrawSystem, path: &Path<State, Action>) -> String {
    let mut out = String::new();
    let steps = path.clone().into_vec();
    for (i, (before, a)) in steps.iter().enumerate() {
        if let Some(a) = a {
            let _ = writeln!(out, "{:>3}. {}", i + 1, describe(m, before, a));
        }
    }
    if let Some((last, _)) = steps.last() {
        for (s, n) in last.nodes.iter().enumerate() {
            let _ = writeln!(
                out,
                "     shard {s}: replid {} state {:?} entrants {:?} top-K {:?} stream {:?}, ledger place {:?}",
                n.replid,
                n.master.state(),
                n.master.entrants,
                n.master.topk,
                n.master.stream.iter().map(|(id, e)| (*id, e.user)).collect::<Vec<_>>(),
                last.ledger.places[s],
            );
        }
        let _ = writeln!(
            out,
            "     ledger: entries {:?} ranks {:?} (from {}) granted {} claims {:?}; acknowledged {:?}; settle timed out {}; seed revealed {}; violations {:?}",
            last.ledger.entries.keys().collect::<Vec<_>>(),
            last.ledger.ranks,
            last.ledger.entrants,
            last.ledger.granted,
            last.ledger.claims,
            last.acked,
            last.timed_out,
            last.revealed,
            last.violations
        );
    }
    out
}

fn describe(m: &DrawSystem, st: &State, a: &Action) -> String {
    match *a {
        Action::Enter(u) => format!(
            "u{u} enters on its home shard {} (priority {})",
            m.cfg.home(u),
            m.cfg.prio(u)
        ),
        Action::Tick => "the draw time passes".to_owned(),
        Action::Read { reader, shard } => {
            let r = m.read_of(st, shard).expect("listed");
            format!(
                "reader {reader} reads shard {shard}'s entries from place {:?}: users {:?}, to {:?}",
                r.from,
                r.rows.iter().map(|x| x.0).collect::<Vec<_>>(),
                r.to
            )
        }
        Action::Commit(r) => {
            let read = st.readers[usize::from(r)].as_ref().expect("listed");
            let at = st.ledger.places[usize::from(read.shard)];
            format!(
                "reader {r} commits shard {}'s users {:?}, place {:?} -> {:?} (the place is {at:?})",
                read.shard,
                read.rows.iter().map(|x| x.0).collect::<Vec<_>>(),
                read.from,
                read.to
            )
        }
        Action::Trim(s) => format!("reader trims shard {s}'s stream to the place"),
        Action::Replicate(s) => format!("shard {s}'s replica catches up"),
        Action::Service => format!(
            "draw service: {}",
            match &st.svc {
                Svc::Idle => "starts a pass".to_owned(),
                Svc::Closing { next, .. } => format!("closes shard {next} and counts its entrants"),
                Svc::Last { next, .. } => {
                    let n = &st.nodes[usize::from(*next)];
                    format!(
                        "reads shard {next}'s stream's last id {:?} under replid {} (target kept: {:?}) and the ledger's place {:?}",
                        n.master.stream.keys().next_back(),
                        n.replid,
                        st.targets[usize::from(*next)],
                        st.ledger.places[usize::from(*next)]
                    )
                }
                Svc::Settle { accepted, unread } => format!(
                    "compares the ledger's {} entries with the {accepted} accepted, a shard unread: {unread} (waits if either) and ranks the ledger's best",
                    st.ledger.entries.len()
                ),
                Svc::Record { ranks, total } => format!("records the ranks {ranks:?} drawn from {total} entries (refused if the ledger holds {})", st.ledger.entries.len()),
                Svc::Marking { next, .. } => format!("reads shard {next}'s state (closes it if open)"),
                Svc::Wins { next, .. } => format!("writes shard {next}'s wins from the ledger's grants"),
                Svc::Mark { next, .. } => format!("marks shard {next}'s ranks"),
                Svc::Reveal { any } => format!("writes the seed into the metadata if a shard was marked ({any}) or it is hidden ({})", !st.revealed),
                Svc::Granting { next } => format!("claims a unit for rank {next}"),
                Svc::Won { user, claim, .. } => format!("marks u{user}'s win {claim:?}"),
                Svc::Granted { rank } => format!("sets granted_rank to {rank}"),
            }
        ),
        Action::SettleTimeout => "draw service: the settle wait runs out".to_owned(),
        Action::Restore => format!(
            "restore loop: {}",
            match st.restore {
                Restore::Idle => "finds a shard whose draw is missing and reads the ledger's draw state".to_owned(),
                Restore::Found { shard, .. } => format!("opens shard {shard}'s draw held (no state) under a new token"),
                Restore::Opened { shard, .. } => format!("puts the ledger's entries back on shard {shard}"),
                Restore::Wins { shard, .. } => format!("writes the ledger's grants on shard {shard} as wins"),
                Restore::Marks { shard, .. } => format!("marks shard {shard}'s ranks (held)"),
                Restore::Publish { shard, drawn, token, n } => format!("opens shard {shard}'s draw as {} if its hold is token {token}'s with {n} writes", if drawn { "drawn" } else if st.past { "closed" } else { "open" }),
            }
        ),
        Action::Release(id) => format!("operator releases claim {id}"),
        Action::Lose(s) => format!("FAULT: shard {s} loses master and replica"),
        Action::Failover(s) => format!("FAULT: shard {s} fails over to its replica"),
        Action::Crash(Actor::Service) => "FAULT: the draw service crashes".to_owned(),
        Action::Crash(Actor::Restore) => "FAULT: the restore loop crashes".to_owned(),
        Action::Crash(Actor::Reader(r)) => format!("FAULT: reader {r} dies before its commit"),
    }
}
