//! The consumer binary: parse, set up tracing and metrics, then run the service or one
//! admin subcommand. Bad configuration exits non-zero with one line naming the setting.

use anyhow::Context;
use campaign_ops::cli::{Cli, Command, DrawCommand, ModeArg, PoisonCommand};
use campaign_ops::{campaign, closeout, draw, poison, rebuild, reconcile, release, service, wave};
use clap::Parser;
use shard_router::StockClient;

// glibc malloc (with its consolidation and free-chunk unlinking) was ~14% of the
// consumer's CPU samples under a steady sale (`perf record`, docs/BENCHMARKS.md "Where
// the CPU goes"): stream replies and ledger batches are many small, short-lived
// allocations.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = Cli::parse();
    let log = match telemetry::init(cli.common.log_format, "info,sqlx=warn") {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("consumer: {e}");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("consumer: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let result = runtime.block_on(real_main(cli));
    // `exit` skips destructors: the queued log lines are written out first.
    drop(log);
    if let Err(e) = result {
        eprintln!("consumer: {e:#}");
        std::process::exit(1);
    }
}

/// Runs the service or one command. Long because it is the CLI dispatch: one match arm per
/// subcommand, each reading its flags and calling the library, so the whole CLI reads in
/// one place.
async fn real_main(cli: Cli) -> anyhow::Result<()> {
    let cfg = match cli.config() {
        Ok(c) => c,
        Err(e) => anyhow::bail!("bad configuration: {e}"),
    };
    if let Command::Run(_) = &cli.command {
        if let Err(e) = cfg.validate() {
            anyhow::bail!("bad configuration: {e}");
        }
        campaign_ops::metrics::install();
        let addr = cfg.admin_addr;
        let listener = Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("--admin-addr {addr}: cannot bind"))?,
        );
        let (stop, rx) = plumbing::shutdown::channel();
        tokio::spawn(async move {
            plumbing::shutdown::terminated().await;
            let _ = stop.send(true);
        });
        service::run(cfg, listener, rx).await?;
        return Ok(());
    }
    // The commands read only the deployment's settings (Redis, shards, MySQL, bounds).
    let cfg = cfg.datapath;
    let t = cfg.db_timeout;
    let (_stop, mut rx) = plumbing::shutdown::channel();
    let pool = service::connect_db(&cfg, &mut rx).await.context("mysql")?;
    let client = || async { StockClient::connect(cfg.stock()).await.context("redis") };
    let out = match cli.command {
        Command::Run(_) => unreachable!("handled above"),
        Command::Migrate => serde_json::json!({"status": "migrated"}),
        Command::Campaign(a) => {
            let now = shard_router::now_ms();
            let (c, waves) = match a.campaign(now) {
                Ok(x) => x,
                Err(e) => anyhow::bail!("{e}"),
            };
            let draw = match a.draw(now) {
                Ok(d) => d,
                Err(e) => anyhow::bail!("{e}"),
            };
            let redis = client().await?;
            let sale = match (a.mode, draw) {
                (ModeArg::Draw, Some((draw_at_ms, waitlist))) => campaign::Sale::Draw {
                    draw_at_ms,
                    waitlist,
                },
                (ModeArg::Queue, _) => campaign::Sale::Queue,
                _ => campaign::Sale::Fcfs,
            };
            campaign::put_sale(&pool, &redis, &c, sale, cfg.shards, t).await?;
            let mut seen = std::collections::HashSet::new();
            if let Some(dup) = a.waves.iter().find(|f| !seen.insert(f.as_str())) {
                anyhow::bail!("--wave {dup} is given twice; give one wave of the sum instead");
            }
            for ((due_ms, units), flag) in waves.into_iter().zip(&a.waves) {
                // The id is the flag as written (not the resolved time, not its position):
                // running the command again, even with now+10m, schedules nothing new.
                let id: String = flag.chars().take(wave::MAX_ID).collect();
                let w = wave::Wave {
                    sku: a.sku,
                    id,
                    units,
                    due_ms,
                };
                wave::schedule_for_campaign(&pool, &w, t).await?;
            }
            // The flags declare the campaign's waves: one dropped from them is cancelled
            // while it adds nothing yet.
            let listed: Vec<String> = a
                .waves
                .iter()
                .map(|f| f.chars().take(wave::MAX_ID).collect())
                .collect();
            let dropped = wave::cancel_dropped(&pool, a.sku, &listed, t).await?;
            serde_json::json!({
                "campaign": ledger::campaigns::get(&pool, a.sku, t).await?,
                "waves": wave::list(&pool, a.sku, t).await?,
                "dropped_waves": dropped,
            })
        }
        Command::Wave(a) => {
            let now = shard_router::now_ms();
            let due_ms = match campaign_ops::times::parse_ms(&a.at, now) {
                Ok(ms) => ms,
                Err(e) => anyhow::bail!("--at {e}"),
            };
            let id = a.id.clone();
            let w = wave::Wave {
                sku: a.sku,
                id: id.clone(),
                units: a.units,
                due_ms,
            };
            wave::schedule(&pool, &w, t).await?;
            if due_ms <= now {
                let r = wave::apply_with(
                    &pool,
                    &client().await?,
                    a.sku,
                    &id,
                    now,
                    cfg.replica_wait,
                    t,
                )
                .await?;
                serde_json::json!({"wave": w, "outcome": r})
            } else {
                serde_json::json!({"wave": w, "outcome": "scheduled"})
            }
        }
        Command::Close { sku } => {
            closeout::close(&pool, &client().await?, sku, shard_router::now_ms(), t).await?
        }
        Command::Preheat { sku } => {
            ledger::campaigns::refuse_if_closed(&pool, sku, "preheat", t).await?;
            let r =
                campaign::preheat_with(&pool, &client().await?, sku, cfg.replica_wait, t).await?;
            serde_json::json!(r
                .iter()
                .map(|(s, o)| format!("shard {s}: {o:?}"))
                .collect::<Vec<_>>())
        }
        Command::Rebuild { sku } => serde_json::to_value(
            rebuild::rebuild(
                &pool,
                &client().await?,
                sku,
                &rebuild::Options {
                    replica_wait: cfg.replica_wait,
                    ..rebuild::Options::new(t)
                },
            )
            .await?,
        )?,
        Command::Status { sku } => {
            let mut v =
                serde_json::to_value(campaign::status(&pool, &client().await?, sku, t).await?)?;
            v["lifecycle"] =
                serde_json::to_value(ledger::campaigns::lifecycle(&pool, sku, t).await?)?;
            v["waves"] = serde_json::to_value(wave::list(&pool, sku, t).await?)?;
            v
        }
        Command::Confirm { claim_id } => {
            serde_json::to_value(release::confirm(&pool, &claim_id, t).await?)?
        }
        Command::Cancel { claim_id } => serde_json::to_value(
            release::release_with(
                &pool,
                &client().await?,
                &claim_id,
                release::Reason::Cancelled,
                cfg.replica_wait,
                t,
            )
            .await?,
        )?,
        Command::Reconcile { sku } => {
            let client = client().await?;
            let now = campaign_ops::clock::redis_now(&client).await?;
            serde_json::to_value(reconcile::run(&pool, &client, sku, now, t).await?)?
        }
        Command::Draw { command } => match command {
            DrawCommand::Show { sku } => serde_json::to_value(draw::show(&pool, sku, t).await?)?,
            DrawCommand::Verify { sku } => {
                let v = draw::verify::verify(&pool, sku, t).await?;
                let ok = v.verified;
                println!("{}", serde_json::to_string_pretty(&v)?);
                if !ok {
                    anyhow::bail!("draw of sku {sku} did not verify");
                }
                return Ok(());
            }
        },
        Command::Poison {
            command:
                Some(PoisonCommand::Replay {
                    stream,
                    entry,
                    all: _,
                    limit,
                }),
            ..
        } => {
            let which = match (stream, entry) {
                (Some(stream), Some(entry_id)) => poison::Which::One { stream, entry_id },
                _ => poison::Which::Oldest(limit),
            };
            let report = poison::replay(&pool, which, t).await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            if !report.still_poison.is_empty() {
                anyhow::bail!("{} poison entries still refused", report.still_poison.len());
            }
            return Ok(());
        }
        Command::Poison {
            limit,
            command: None,
        } => {
            let kept = ledger::poison::list(&pool, limit, t).await?;
            serde_json::json!({
                "count": ledger::poison::count(&pool, t).await?,
                "entries": kept.iter().map(|p| serde_json::json!({
                    "stream": p.stream,
                    "entry_id": p.entry_id,
                    "reason": p.reason,
                    "fields": serde_json::from_str::<serde_json::Value>(&p.fields)
                        .unwrap_or_else(|_| serde_json::Value::String(p.fields.clone())),
                })).collect::<Vec<_>>(),
            })
        }
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}
