//! A counterexample as a reader wants it: one line per step, saying which actor did what.

use std::fmt::Write as _;

use stateright::Path;

use crate::keyspace::ShardId;
use crate::system::{Action, State, System};

pub fn render(_m: &System, path: &Path<State, Action>) -> String {
    let mut out = String::new();
    // Each state comes with the action taken from it; the last with none.
    let steps = path.clone().into_vec();
    for (i, pair) in steps.windows(2).enumerate() {
        let ((before, Some(a)), (after, _)) = (&pair[0], &pair[1]) else {
            continue;
        };
        let _ = write!(out, "{:>3}. {}", i + 1, describe(before, a));
        for answer in after.answers.iter().skip(before.answers.len()) {
            let _ = write!(
                out,
                " -> u{}/r{} answered {:?}",
                answer.0, answer.1, answer.2
            );
        }
        out.push('\n');
    }
    if let Some((last, _)) = steps.last() {
        let _ = writeln!(out, "     acknowledged: {:?}", last.acked);
        if !last.violations.is_empty() {
            let _ = writeln!(out, "     violations: {:?}", last.violations);
        }
        let _ = writeln!(
            out,
            "     ledger: {:?}",
            last.ledger
                .claims
                .iter()
                .map(|(id, r)| (id.shard, id.entry, r.rec.user, r.status))
                .collect::<Vec<_>>()
        );
        for (s, n) in last.nodes.iter().enumerate() {
            let _ = writeln!(
                out,
                "     shard {s}: process {} vouch {:?} gen {} replid {} slice {:?} debt {} users {:?} holds {:?} stream {:?} last id {}, ledger offset {:?} lease {}",
                n.run,
                n.master.vouch,
                n.master.gen(),
                n.replid,
                n.master.stock,
                n.master.debt,
                n.master.users,
                n.master.holds.keys().collect::<Vec<_>>(),
                n.master.stream.keys().collect::<Vec<_>>(),
                n.master.last_id,
                last.ledger.streams[s].offset,
                last.ledger.streams[s].epoch
            );
        }
    }
    out
}

/// One step in words: the actor first.
pub fn describe(before: &State, a: &Action) -> String {
    match *a {
        Action::Send { user, rid, gw } => {
            format!("client u{user} sends request r{rid} to gateway {gw}")
        }
        Action::Step { task, lag } => step(before, task, lag),
        Action::Deliver => format!(
            "gateways process their events {:?}",
            before.gateways.iter().map(|g| &g.inbox).collect::<Vec<_>>()
        ),
        Action::LoseEvent(g) => format!(
            "FAULT: event {:?} to gateway {g} is lost",
            before.gateways[usize::from(g)].inbox[0]
        ),
        Action::ReadFilter(g) => format!("gateway {g} reads the replay filter"),
        Action::RevalidateFilter(g) => format!("gateway {g} revalidates its replay filter"),
        Action::CrashGateway(g) => format!("FAULT: gateway {g} crashes"),
        Action::Consume { shard, crash } => consume(before, shard, crash),
        Action::Read(s) => paused_read(before, s),
        Action::Takeover(s) => {
            format!("the paused consumer's lease on shard {s} runs out; another consumer takes it")
        }
        Action::CommitStalled => paused_commit(before),
        Action::DropStalled => "FAULT: the paused consumer dies".to_owned(),
        Action::Trim(s) => format!(
            "consumer trims shard {s}'s stream below offset {:?}",
            before.ledger.streams[usize::from(s)].offset
        ),
        Action::ResolveHold { shard, user, seq } => {
            format!("consumer resolves u{user}'s expired hold {seq} on shard {shard}")
        }
        Action::Replicate(s) => format!("shard {s}'s replica catches up"),
        Action::Failover(s) => format!("FAULT: shard {s} fails over to its replica"),
        Action::Lose(s) => format!("FAULT: shard {s} loses its data"),
        Action::Snapshot(s) => format!("shard {s}'s master is snapshotted"),
        Action::Restore(s) => format!(
            "FAULT: shard {s}'s master restarts from its older snapshot as process {}",
            before.nodes[usize::from(s)].run.wrapping_add(1)
        ),
        Action::Watch(s) => {
            let n = &before.nodes[usize::from(s)];
            format!(
                "consumer's watch finds shard {s}'s vouch {:?} (process {}), rebuilds if foreign, vouches",
                n.master.vouch, n.run
            )
        }
        Action::DbRefuses => "FAULT: the database refuses writes".to_owned(),
        Action::DbAccepts => "the database accepts writes again".to_owned(),
        Action::Rebuild => "consumer rebuilds the campaign from the ledger".to_owned(),
        Action::Repreheat => "operator preheats again".to_owned(),
        Action::ReleaseBegin(id) => {
            format!("consumer starts releasing claim {}-{}", id.shard, id.entry)
        }
        Action::ReleaseRedis(id) => format!(
            "consumer runs the Redis step of releasing {}-{}",
            id.shard, id.entry
        ),
        Action::WavePlace => "operator places a stock wave".to_owned(),
        Action::WaveRedis => "consumer pushes the wave to the slices".to_owned(),
        Action::Tick => format!("time passes to {}", before.now + 1),
    }
}

/// A gateway runs a request's next step.
fn step(before: &State, task: u8, lag: bool) -> String {
    let t = &before.tasks[usize::from(task)];
    let lag = if lag {
        " (its replica misses the write)"
    } else {
        ""
    };
    format!(
        "gateway {} runs u{}/r{}'s next step from {:?}{lag}",
        t.gw, t.user, t.rid, t.pc
    )
}

/// A consumer's round on `shard`: read, commit, and what ends it.
fn consume(before: &State, shard: ShardId, crash: bool) -> String {
    let row = before.ledger.streams[usize::from(shard)];
    let replid = before.nodes[usize::from(shard)].replid;
    let what = if crash {
        "FAULT: consumer reads"
    } else {
        "consumer reads"
    };
    let end = if before.db_refusing {
        "the database refuses the commit; the rows are kept as poison and the offset moves past them"
    } else if crash {
        "commits, and crashes before its final answers and trim"
    } else {
        "commits, moves the offset and trims"
    };
    let at = match &before.stalled {
        Some(p) if p.shard == shard && p.epoch == row.epoch => {
            format!("after its own paused read, from {:?}", p.to)
        }
        _ => format!("from the ledger offset {:?}", row.offset),
    };
    format!(
        "{what} shard {shard}'s stream {at} (lease {}, master replid {replid}), {end}",
        row.epoch
    )
}

/// A consumer that reads and pauses before its commit.
fn paused_read(before: &State, s: ShardId) -> String {
    let row = before.ledger.streams[usize::from(s)];
    format!(
        "FAULT: a consumer reads shard {s}'s stream from the ledger offset {:?} (lease {}, master replid {}) and pauses before its commit",
        row.offset,
        row.epoch,
        before.nodes[usize::from(s)].replid
    )
}

/// The paused consumer's late commit.
fn paused_commit(before: &State) -> String {
    let p = before.stalled.as_ref().expect("listed");
    format!(
        "the paused consumer commits entries {:?} of shard {} (from {:?} to {:?}, lease {})",
        p.entries.iter().map(|(e, _)| e).collect::<Vec<_>>(),
        p.shard,
        p.from,
        p.to,
        p.epoch
    )
}
