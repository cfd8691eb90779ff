//! `bench ablate`: the same scenario on a fresh stack per row, one feature changed per row,
//! so the effect of each feature is a measured ratio against the full system in the same
//! session. A row whose stack cannot start (a gateway that lacks the flag) says why.

use std::fmt::Write;
use std::path::PathBuf;

use bench::report::Report;
use bench::scenario::cli::ScenarioArgs;
use loadgen::latency::fmt_us;
use shard_router::RedisArgs;

use super::run::{self, SystemArgs};
use super::stack::{Ablation, Stack, StackOpts};

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct AblateOpts {
    #[command(flatten)]
    pub(crate) scenario: ScenarioArgs,
    /// Stack flags shared by every row; `--ablation` here is ignored.
    #[command(flatten)]
    pub(crate) stack_opts: StackOpts,
    /// Rows to measure after the full system (default: all).
    #[arg(long = "row", value_enum)]
    pub(crate) rows: Vec<Ablation>,
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    #[arg(long)]
    pub(crate) quiet: bool,
}

/// One row: its name and its report, or why it could not run.
pub(crate) type Row = (String, Result<Report, String>);

pub(crate) async fn ablate(o: &AblateOpts) -> anyhow::Result<(Vec<Row>, String)> {
    let rows: Vec<Option<Ablation>> = std::iter::once(None)
        .chain(
            if o.rows.is_empty() {
                vec![
                    Ablation::NoSoldOutCache,
                    Ablation::Shards1,
                    Ablation::NoSecondChance,
                    Ablation::Replica,
                ]
            } else {
                o.rows.clone()
            }
            .into_iter()
            .map(Some),
        )
        .collect();
    let mut out = Vec::new();
    for row in rows {
        let name = row.map_or("full system".to_owned(), |a| format!("{a:?}"));
        eprintln!("row: {name} ...");
        let mut so = o.stack_opts.clone();
        so.ablation = row.into_iter().collect();
        out.push((name, one_row(o, &so).await.map_err(|e| format!("{e:#}"))));
    }
    let md = markdown(&out);
    if let Some(dir) = &o.out {
        std::fs::create_dir_all(dir)?;
        let json: Vec<_> = out
            .iter()
            .map(|(n, r)| match r {
                Ok(rep) => serde_json::json!({ "row": n, "report": rep }),
                Err(e) => serde_json::json!({ "row": n, "error": e }),
            })
            .collect();
        std::fs::write(dir.join("ablation.json"), serde_json::to_vec_pretty(&json)?)?;
        std::fs::write(dir.join("ablation.md"), &md)?;
    }
    Ok((out, md))
}

async fn one_row(o: &AblateOpts, so: &StackOpts) -> anyhow::Result<Report> {
    let mut s = o.scenario.scenario()?;
    let st = Stack::start(so).await?;
    let mut sys = SystemArgs {
        targets: Vec::new(),
        redis: RedisArgs {
            redis: None,
            redis_cluster: false,
            shards: so.shards(),
        },
        no_preheat: false,
        mysql: None,
        consumer_bin: None,
        drain_timeout_s: 60,
        token_secret_file: None,
    };
    run::use_stack(&mut sys, &st, &mut s);
    let client = run::prepare(&sys, &s).await?;
    let w = run::watched(Some(&st));
    let r = run::against_system(&sys, &s, client.as_ref(), run::run_tag("a"), !o.quiet, w).await;
    drop(st);
    r
}

fn markdown(rows: &[Row]) -> String {
    let mut s = String::from(
        "### ablations — same scenario, fresh stack per row\n\n| row | answers/s | claims/s | p50 | p99 | errors | invariants | answers/s vs full |\n| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |\n",
    );
    let full = rows
        .first()
        .and_then(|(_, r)| r.as_ref().ok())
        .map(|r| r.throughput_rps);
    for (name, r) in rows {
        match r {
            Ok(r) => {
                let _ = writeln!(
                    s,
                    "| {name} | {:.0} | {:.0} | {} | {} | {} | {} | {} |",
                    r.throughput_rps,
                    r.claims_per_s,
                    fmt_us(r.latency.p50_us),
                    fmt_us(r.latency.p99_us),
                    r.errors,
                    r.invariants
                        .as_ref()
                        .map_or("–", |i| if i.passed { "pass" } else { "FAIL" }),
                    full.filter(|f| *f > 0.0)
                        .map_or("–".into(), |f| format!("{:.2}", r.throughput_rps / f))
                );
            }
            Err(e) => {
                let first = e.lines().next().unwrap_or(e).replace('|', "/");
                let _ = writeln!(s, "| {name} | – | – | – | – | – | not run: {first} | – |");
            }
        }
    }
    s
}
