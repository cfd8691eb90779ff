//! The report of `bench draw`: one row set per mode, as JSON and as a Markdown table, and
//! the fairness goal (the bots' share of a draw's or a queue's winners within ±2 pp of
//! their share of the users) with its binomial standard error.

use std::collections::BTreeMap;

use bench::stack::cpu::{CpuUse, Role};
use serde::Serialize;

use super::drive::{class_name, PhaseResult, CLASSES};
use super::population::Shape;

/// The goal's tolerance, percentage points.
pub(crate) const GOAL_PP: f64 = 2.0;

/// One invariant: a failure makes the command exit non-zero.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Check {
    pub(crate) name: String,
    pub(crate) passed: bool,
    pub(crate) detail: String,
}

impl Check {
    pub(crate) fn new(name: &str, passed: bool, detail: String) -> Self {
        Self {
            name: name.to_owned(),
            passed,
            detail,
        }
    }
}

/// The draw's own figures.
#[derive(Debug, Clone, Serialize, Default)]
pub(crate) struct DrawFigures {
    pub(crate) draw_at_ms: i64,
    pub(crate) drawn_at_ms: Option<i64>,
    /// Entries the draw counted (`draws.entrants`).
    pub(crate) entrants: Option<u64>,
    /// Users the gateway told they had entered.
    pub(crate) entered_answers: u64,
    /// Humans whose only answer was `entries_closed` (sent after the draw time).
    pub(crate) late_humans: u64,
    pub(crate) verified: Option<bool>,
    pub(crate) verify_output: String,
    /// `drawn_at_ms - draw_at_ms`.
    pub(crate) to_drawn_ms: Option<i64>,
    /// The last grant's `claimed_ms - draw_at_ms`.
    pub(crate) to_all_grants_ms: Option<i64>,
    pub(crate) granted_rank: u32,
}

/// A queue campaign's own figures.
#[derive(Debug, Clone, Serialize, Default)]
pub(crate) struct QueueFigures {
    pub(crate) start_ms: i64,
    /// The start minus the moment the last arrival was answered (negative: arrivals ran
    /// past the start).
    pub(crate) arrivals_before_start_ms: Option<i64>,
    /// Requests sent with a `Queue-Token`.
    pub(crate) with_token: u64,
    pub(crate) waiting_at_deadline: u64,
    pub(crate) invalid_tokens: u64,
    /// The first and the last fresh `claimed` after the start.
    pub(crate) to_first_claim_ms: Option<i64>,
    pub(crate) to_last_claim_ms: Option<i64>,
}

/// One mode's row set.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ModeReport {
    pub(crate) mode: &'static str,
    pub(crate) sku: u64,
    pub(crate) stock: u64,
    pub(crate) users: u32,
    pub(crate) bots: u32,
    pub(crate) bot_share_of_users_pct: f64,
    pub(crate) requests: u64,
    pub(crate) phase_s: f64,
    pub(crate) human_lag_max_ms: f64,
    /// Answers by status, bots and humans apart.
    pub(crate) answers_bots: BTreeMap<&'static str, u64>,
    pub(crate) answers_humans: BTreeMap<&'static str, u64>,
    pub(crate) winners: u64,
    pub(crate) bot_winners: u64,
    pub(crate) bot_share_of_winners_pct: f64,
    /// Bots' share of winners minus their share of users.
    pub(crate) diff_pp: f64,
    /// Binomial standard error of the bots' share of `winners` draws at their user share.
    pub(crate) se_pp: f64,
    /// CPU over the phase by process; per request and per entrant (draw) or winner (fcfs).
    pub(crate) cpu: Vec<CpuUse>,
    pub(crate) gateway_us_per_request: Option<f64>,
    pub(crate) redis_us_per_request: Option<f64>,
    pub(crate) gateway_us_per_entry: Option<f64>,
    pub(crate) redis_us_per_entry: Option<f64>,
    pub(crate) draw: Option<DrawFigures>,
    pub(crate) queue: Option<QueueFigures>,
    pub(crate) checks: Vec<Check>,
}

impl ModeReport {
    /// The mode's figures from its phase and its winners (user numbers, one per unit).
    pub(crate) fn new(
        mode: &'static str,
        sku: u64,
        stock: u64,
        shape: &Shape,
        phase: &PhaseResult,
        winners: u64,
        bot_winners: u64,
    ) -> Self {
        let (users, bots) = (shape.users, shape.bots());
        let p = bots as f64 / users.max(1) as f64;
        let w = bot_winners as f64 / winners.max(1) as f64;
        let answers = |side: usize| {
            (0..CLASSES)
                .filter(|&c| phase.answers[side][c] > 0)
                .map(|c| (class_name(c), phase.answers[side][c]))
                .collect()
        };
        let requests = phase.requests();
        let cpu_of = |role: Role| {
            let v: Vec<&CpuUse> = phase.cpu.iter().filter(|c| c.role == role).collect();
            (!v.is_empty()).then(|| v.iter().map(|c| c.cpu_s).sum::<f64>())
        };
        let per = |cpu: Option<f64>, n: u64| cpu.filter(|_| n > 0).map(|s| s * 1e6 / n as f64);
        let (gw, redis) = (cpu_of(Role::Gateway), cpu_of(Role::RedisMaster));
        Self {
            mode,
            sku,
            stock,
            users,
            bots,
            bot_share_of_users_pct: 100.0 * p,
            requests,
            phase_s: phase.took.as_secs_f64(),
            human_lag_max_ms: phase.human_lag_max.as_secs_f64() * 1e3,
            answers_bots: answers(0),
            answers_humans: answers(1),
            winners,
            bot_winners,
            bot_share_of_winners_pct: 100.0 * w,
            diff_pp: 100.0 * (w - p),
            se_pp: 100.0 * (p * (1.0 - p) / winners.max(1) as f64).sqrt(),
            cpu: phase.cpu.clone(),
            gateway_us_per_request: per(gw, requests),
            redis_us_per_request: per(redis, requests),
            gateway_us_per_entry: None,
            redis_us_per_entry: None,
            draw: None,
            queue: None,
            checks: Vec::new(),
        }
    }

    /// CPU per accepted entry (a draw's entrants).
    pub(crate) fn per_entry(&mut self, entries: u64) {
        let sum = |role: Role| {
            let v: Vec<f64> = self
                .cpu
                .iter()
                .filter(|c| c.role == role)
                .map(|c| c.cpu_s)
                .collect();
            (!v.is_empty() && entries > 0).then(|| v.iter().sum::<f64>() * 1e6 / entries as f64)
        };
        self.gateway_us_per_entry = sum(Role::Gateway);
        self.redis_us_per_entry = sum(Role::RedisMaster);
    }

    pub(crate) fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }

    /// The fairness goal (draw and queue modes): PASS within ±2 pp.
    pub(crate) fn goal(&self) -> bool {
        self.diff_pp.abs() <= GOAL_PP
    }
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DrawReport {
    pub(crate) seed: u64,
    pub(crate) bot_factor: u32,
    pub(crate) rush_ms: u64,
    pub(crate) connections: usize,
    pub(crate) modes: Vec<ModeReport>,
    /// The goal line of each mode that has one (draw, queue).
    pub(crate) goals: Vec<String>,
    pub(crate) invariants_passed: bool,
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "—".into())
}

fn opt_i(v: Option<i64>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "—".into())
}

/// The Markdown table (one column per mode), the goal line and the failed checks.
/// Long because it lists the table's rows in their order, one `row` call each: split, the
/// order a reader sees would be spread over several functions.
pub(crate) fn markdown(r: &DrawReport) -> String {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |name: &str, f: &dyn Fn(&ModeReport) -> String| {
        rows.push((name.to_owned(), r.modes.iter().map(f).collect()));
    };
    row("SKU", &|m| m.sku.to_string());
    row("stock", &|m| m.stock.to_string());
    row("users", &|m| m.users.to_string());
    row("bots' share of users", &|m| {
        format!("{:.2} % ({})", m.bot_share_of_users_pct, m.bots)
    });
    row("requests", &|m| m.requests.to_string());
    row("phase (s)", &|m| format!("{:.2}", m.phase_s));
    row("humans sent late by the client, max (ms)", &|m| {
        format!("{:.0}", m.human_lag_max_ms)
    });
    row("winners", &|m| m.winners.to_string());
    row("bots' share of winners", &|m| {
        format!("{:.2} % ({})", m.bot_share_of_winners_pct, m.bot_winners)
    });
    row("difference (pp), ± binomial SE", &|m| {
        format!("{:+.2} ± {:.2}", m.diff_pp, m.se_pp)
    });
    row("entrants", &|m| {
        m.draw
            .as_ref()
            .map(|d| {
                format!(
                    "{} (answered entered: {}, late humans: {})",
                    opt_i(d.entrants.map(|e| e as i64)),
                    d.entered_answers,
                    d.late_humans
                )
            })
            .unwrap_or_else(|| "—".into())
    });
    row(
        "`consumer draw verify`",
        &|m| match m.draw.as_ref().and_then(|d| d.verified) {
            Some(true) => "verified".into(),
            Some(false) => "FAILED".into(),
            None => "—".into(),
        },
    );
    row("draw_at → drawn (ms)", &|m| {
        opt_i(m.draw.as_ref().and_then(|d| d.to_drawn_ms))
    });
    row("draw_at → all grants (ms)", &|m| {
        opt_i(m.draw.as_ref().and_then(|d| d.to_all_grants_ms))
    });
    row("queue: start after the last arrival (ms)", &|m| {
        opt_i(m.queue.as_ref().and_then(|q| q.arrivals_before_start_ms))
    });
    row("queue: start → first / last claim (ms)", &|m| {
        m.queue
            .as_ref()
            .map(|q| {
                format!(
                    "{} / {}",
                    opt_i(q.to_first_claim_ms),
                    opt_i(q.to_last_claim_ms)
                )
            })
            .unwrap_or_else(|| "—".into())
    });
    row("queue: requests with a Queue-Token", &|m| {
        m.queue
            .as_ref()
            .map(|q| q.with_token.to_string())
            .unwrap_or_else(|| "—".into())
    });
    row("queue: users still waiting at the deadline", &|m| {
        m.queue
            .as_ref()
            .map(|q| q.waiting_at_deadline.to_string())
            .unwrap_or_else(|| "—".into())
    });
    row("gateway CPU µs per request", &|m| {
        opt(m.gateway_us_per_request, 1)
    });
    row("Redis CPU µs per request", &|m| {
        opt(m.redis_us_per_request, 1)
    });
    row("gateway CPU µs per entry", &|m| {
        opt(m.gateway_us_per_entry, 1)
    });
    row("Redis CPU µs per entry", &|m| opt(m.redis_us_per_entry, 1));
    row("invariants", &|m| {
        if m.passed() { "pass" } else { "FAIL" }.into()
    });
    let mut s = String::from("| | ");
    s.push_str(
        &r.modes
            .iter()
            .map(|m| m.mode)
            .collect::<Vec<_>>()
            .join(" | "),
    );
    s.push_str(" |\n|---|");
    s.push_str(&"---|".repeat(r.modes.len()));
    s.push('\n');
    for (name, cells) in rows {
        s.push_str(&format!("| {name} | {} |\n", cells.join(" | ")));
    }
    if !r.goals.is_empty() {
        s.push('\n');
    }
    for g in &r.goals {
        s.push_str(g);
        s.push('\n');
    }
    for m in &r.modes {
        for c in m.checks.iter().filter(|c| !c.passed) {
            s.push_str(&format!(
                "\ninvariant FAILED ({}): {}: {}",
                m.mode, c.name, c.detail
            ));
        }
    }
    s
}

/// The goal line of a draw's or a queue's figures.
pub(crate) fn goal_line(m: &ModeReport) -> String {
    let verdict = if m.goal() { "PASS" } else { "FAIL" };
    let mut s = format!(
        "goal ({}: bots' share of winners within ±{GOAL_PP} pp of their share of users): \
         {verdict}: {:.2} % of winners vs {:.2} % of users, {:+.2} pp, binomial SE {:.2} pp \
         over {} winners",
        m.mode, m.bot_share_of_winners_pct, m.bot_share_of_users_pct, m.diff_pp, m.se_pp, m.winners
    );
    if 2.0 * m.se_pp > GOAL_PP {
        s.push_str(&format!(
            " (with this few winners ±{GOAL_PP} pp is inside the noise: 2 SE = {:.2} pp; \
             only an invariant failure fails the run)",
            2.0 * m.se_pp
        ));
    }
    s
}
