//! `flashgate-gateway`: parse the configuration, set up logging, bind, and [`gateway::run`]
//! until SIGTERM or SIGINT.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use gateway::{Config, Listeners};
use tokio::net::TcpListener;

const NAME: &str = "flashgate-gateway";

// Claims make many small, short-lived allocations across threads: mimalloc's thread-local
// free lists cost less than glibc malloc's (docs/BENCHMARKS.md "Figures behind the
// gateway's group commit and allocator").
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cfg = match Config::try_parse() {
        Ok(cfg) => cfg,
        Err(e) if !e.use_stderr() => {
            // --help / --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let msg = e.to_string();
            let first = msg.lines().next().unwrap_or("bad arguments");
            eprintln!("{NAME}: {}", first.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    if let Err(e) = cfg.validate() {
        eprintln!("{NAME}: {e}");
        return ExitCode::from(2);
    }
    let _log = match telemetry::init(cfg.log_format, "info") {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("{NAME}: {e}");
            return ExitCode::from(2);
        }
    };
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if cfg.worker_threads > 0 {
        rt.worker_threads(cfg.worker_threads);
    }
    let rt = match rt.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{NAME}: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let served = rt.block_on(serve(cfg));
    // Dropping a runtime waits for its blocking tasks without bound (a name lookup of a
    // Redis host is one): the drain already ended, so give them a moment, not forever.
    rt.shutdown_timeout(Duration::from_secs(1));
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{NAME}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(cfg: Config) -> anyhow::Result<()> {
    let api = plumbing::listen::bind(cfg.listen, cfg.listen_backlog)
        .with_context(|| format!("cannot bind --listen {}", cfg.listen))?;
    let admin = TcpListener::bind(cfg.admin_listen)
        .await
        .with_context(|| format!("cannot bind --admin-listen {}", cfg.admin_listen))?;
    tracing::info!(api = %cfg.listen, admin = %cfg.admin_listen, "listening");
    gateway::run(
        cfg,
        Listeners { api, admin },
        plumbing::shutdown::terminated(),
    )
    .await?;
    Ok(())
}
