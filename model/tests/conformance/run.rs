//! The run: one seeded sequence of steps, each applied to Redis (the real scripts) and to
//! the model (its script functions), then replies, published events and the touched
//! shards' keys compared. The first difference ends the run as a [`Counterexample`].

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use model::keyspace::{Event, Shard, ShardId};
use model::scripts::{ClaimReply, TakeReply};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{Connection, PubSub};
use test_support::RedisServer;

use crate::counterexample::Counterexample;
use crate::diff;
use crate::ids::Ids;
use crate::keys::{CHANNEL, SHARDS, SKU};
use crate::lua::{Reply, Scripts, Sources};
use crate::observe;
use crate::steps::{self, Seen, Step, END, START};

/// A close-out of everything this often, so sets and streams stay small (see `Step::Reset`).
const RESET_EVERY: usize = 1_000;
/// Every shard is read whole (the stream from its first entry) this often and at the end.
const FULL_EVERY: usize = 500;
/// Steps shown before the failing one.
const HISTORY: usize = 12;

pub(crate) struct Config {
    pub(crate) seed: u64,
    pub(crate) steps: usize,
}

/// What a passing run exercised: how often each reply came back, each event was published.
pub(crate) struct Summary {
    pub(crate) replies: BTreeMap<String, usize>,
}

pub(crate) struct Run<'a> {
    pub(crate) con: Connection,
    pub(crate) sub: PubSub<'a>,
    pub(crate) scripts: Scripts,
    pub(crate) model: Vec<Shard>,
    pub(crate) ids: Ids,
    /// Per shard, the last stream entry compared.
    pub(crate) since: Vec<Option<String>>,
    pub(crate) seen: Vec<Seen>,
    pub(crate) marks: u64,
}

pub(crate) fn redis_now_ms() -> i64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(d.as_millis()).expect("ms fit")
}

fn event_text(e: &Event) -> String {
    match e {
        Event::Empty(s) => format!("empty {SKU} {s}"),
        Event::Restock(s) => format!("restock {SKU} {s}"),
    }
}

/// `<script> <reply>`, e.g. `take HoldExpired`, for the summary of what a run exercised.
fn reply_name(step: &Step, r: &Reply) -> String {
    let script = match step {
        Step::Claim { .. } => "claim",
        Step::Take { .. } => "take",
        Step::Settle { .. } => "settle",
        Step::Preheat { .. } => "preheat",
        Step::ReleaseStock { .. } => "release_stock",
        Step::ReleaseUser { .. } => "release_user",
        Step::Wave { .. } => "wave",
        Step::Fault { .. } => "fault",
        Step::Reset => "reset",
    };
    let inner = match r {
        Reply::Claim(x) => format!("{x:?}"),
        Reply::Take(x) => format!("{x:?}"),
        Reply::Settle(x) => format!("{x:?}"),
        Reply::Preheat(x) => format!("{x:?}"),
        Reply::Release(x) => format!("{x:?}"),
        Reply::Wave(x) => format!("{x:?}"),
        other => format!("{other:?}"),
    };
    let end = inner.find([' ', '{', '(']).unwrap_or(inner.len());
    format!("{script} {}", &inner[..end])
}

/// The preheat that opens a campaign: always valid, never a window that excludes the
/// steps' clock.
fn opening(rng: &mut StdRng, shard: ShardId) -> Step {
    Step::Preheat {
        shard,
        slice: rng.random_range(2..=8),
        limit: rng.random_range(2..=6),
        start: START,
        end: END,
    }
}

impl Run<'_> {
    /// What the scripts published during the step: everything before a mark this run
    /// publishes after it (one connection, so Redis delivers in that order).
    fn published(&mut self) -> Result<Vec<String>, String> {
        self.marks += 1;
        let mark = format!("mark {}", self.marks);
        redis::cmd("PUBLISH")
            .arg(CHANNEL)
            .arg(&mark)
            .query::<i64>(&mut self.con)
            .map_err(|e| format!("publish mark: {e}"))?;
        let mut out = Vec::new();
        loop {
            let msg = self.sub.get_message().map_err(|e| format!("events: {e}"))?;
            let text: String = msg.get_payload().map_err(|e| format!("event: {e}"))?;
            if text == mark {
                return Ok(out);
            }
            out.push(text);
        }
    }

    /// Compares shard `s`: the keys since the last entry compared (`full`: from the first),
    /// and the entries the step appended against what it asked for.
    fn compare_shard(&mut self, s: ShardId, full: bool, step: &Step) -> Result<(), String> {
        let i = usize::from(s);
        let since = if full { None } else { self.since[i].clone() };
        let obs = observe::read_shard(
            &mut self.con,
            s,
            &mut self.ids,
            since.as_deref(),
            &self.model[i],
        )
        .map_err(|e| format!("shard {s}: redis state unreadable: {e}"))?;
        let d = diff::shards(&obs.shard, &self.model[i]);
        if !d.is_empty() {
            return Err(format!("shard {s} state (redis vs model):\n{d}"));
        }
        if !full {
            // The model keeps no `ts`: checked against the step.
            let want = match step {
                Step::Claim { args } => Some(args.now),
                Step::Take { args, .. } => Some(args.now),
                _ => None,
            };
            for e in &obs.new_entries {
                if want != Some(e.ts) {
                    return Err(format!(
                        "shard {s}: entry {} written with ts {}, the step asked {want:?}",
                        e.entry, e.ts
                    ));
                }
            }
        }
        self.since[i] = obs.last_real;
        Ok(())
    }

    fn remember(&mut self, step: &Step, reply: &Reply) {
        match (step, reply) {
            (Step::Claim { args, .. }, Reply::Claim(ClaimReply::Claimed { claim, .. })) => {
                self.seen.push(Seen {
                    claim: *claim,
                    user: args.user,
                    qty: args.qty,
                    home: args.shard,
                });
            }
            (Step::Take { args, .. }, Reply::Take(TakeReply::Claimed { claim, .. })) => {
                self.seen.push(Seen {
                    claim: *claim,
                    user: args.user,
                    qty: args.qty,
                    home: args.home,
                });
            }
            _ => {}
        }
    }
}

/// Runs `cfg.steps` steps of seed `cfg.seed` with the scripts of `sources` on a fresh
/// Redis; the first difference is the error.
pub(crate) fn run(sources: &Sources, cfg: &Config) -> Result<Summary, Box<Counterexample>> {
    let server = RedisServer::start();
    let mut sub_con = server.connection();
    let mut sub = sub_con.as_pubsub();
    sub.subscribe(CHANNEL).expect("subscribe");
    sub.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    let mut run = Run {
        con: server.connection(),
        sub,
        scripts: Scripts::new(sources),
        model: vec![Shard::default(); usize::from(SHARDS)],
        ids: Ids::new(SHARDS),
        since: vec![None; usize::from(SHARDS)],
        seen: Vec::new(),
        marks: 0,
    };
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut queued: VecDeque<Step> = (0..SHARDS).map(|s| opening(&mut rng, s)).collect();
    let mut history: VecDeque<(usize, Step, Reply)> = VecDeque::new();
    let mut replies = BTreeMap::new();
    for n in 0..cfg.steps {
        let mut step = if let Some(s) = queued.pop_front() {
            s
        } else if n % RESET_EVERY == 0 {
            queued.extend((0..SHARDS).map(|s| opening(&mut rng, s)));
            Step::Reset
        } else {
            steps::random_step(&mut rng, &run.model, &run.seen)
        };
        let (real, model, model_events) = run.apply(&mut step);
        let fail = |what: String| {
            Box::new(Counterexample {
                seed: cfg.seed,
                step_no: n,
                step: step.clone(),
                redis_reply: real.clone(),
                model_reply: model.clone(),
                what,
                history: history.iter().cloned().collect(),
            })
        };
        if real != model {
            return Err(fail("the replies differ".to_owned()));
        }
        let published = run.published().map_err(&fail)?;
        let want: Vec<String> = model_events.iter().map(event_text).collect();
        for e in &published {
            let kind = e.split(' ').next().unwrap_or_default();
            *replies.entry(format!("event {kind}")).or_insert(0) += 1;
        }
        if published != want {
            return Err(fail(format!(
                "events: redis published {published:?}, the model {want:?}"
            )));
        }
        for s in step.shards() {
            run.compare_shard(s, false, &step).map_err(&fail)?;
        }
        if (n + 1) % FULL_EVERY == 0 || n + 1 == cfg.steps {
            for s in 0..SHARDS {
                run.compare_shard(s, true, &step).map_err(&fail)?;
            }
        }
        run.remember(&step, &model);
        *replies.entry(reply_name(&step, &model)).or_insert(0) += 1;
        if matches!(step, Step::Reset) {
            history.clear();
        }
        history.push_back((n, step, model));
        if history.len() > HISTORY {
            history.pop_front();
        }
    }
    Ok(Summary { replies })
}
