//! Logging setup every flashgate binary shares, so `--log-format` and `RUST_LOG` mean the
//! same thing in each of them.
//!
//! - `text`: one human-readable line per event (the default, for terminals).
//! - `json`: one JSON object per line for a log pipeline: `timestamp`, `level`, `target`,
//!   the event's fields (`message` among them) at the top level, and the fields of the
//!   spans the event happened in under `spans`.
//!
//! Logs go to stderr, so a binary's stdout stays free for its own output (reports, JSON
//! answers of admin subcommands).
//!
//! A line is never written by the thread that logged it: it goes into a bounded queue of
//! [`BUFFERED_LINES`] that one writer thread empties into stderr (tracing-appender's
//! non-blocking writer, lossy), as many lines per write as the queue holds. When whatever reads stderr stalls (a log shipper behind, a
//! full pipe), the queue fills and further lines are dropped and counted
//! ([`dropped_lines`]) instead of blocking a request's worker thread on `write`: during
//! the opening rush of a sale the log must give way, never the claims
//! (`gateway/tests/metrics/log_backpressure.rs`).

use std::sync::OnceLock;

use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

/// Lines the queue holds before new ones are dropped: several seconds of a busy process's
/// log (a few MB at most), so a reader that only hiccups loses nothing.
pub const BUFFERED_LINES: usize = 16_384;

/// Bytes the writer thread gathers before a write to stderr.
const WRITE_BUFFER: usize = 64 * 1024;

/// The writer's count of dropped lines, once [`init`] has run.
static DROPPED: OnceLock<ErrorCounter> = OnceLock::new();

/// Lines dropped so far because the queue was full (0 before [`init`]).
pub fn dropped_lines() -> u64 {
    DROPPED.get().map_or(0, |c| c.dropped_lines() as u64)
}

/// Keeps the writer thread; dropping it writes out what is queued (at the end of `main`).
#[must_use = "dropping the guard stops the log writer"]
pub struct LogGuard {
    _writer: WorkerGuard,
}

/// The `--log-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Setting up logging failed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("RUST_LOG {value:?}: {reason}")]
    BadFilter { value: String, reason: String },
    #[error("a global logger is already installed")]
    AlreadySet,
}

/// Installs the process-wide subscriber. The filter comes from `RUST_LOG`, else
/// `default_filter` (e.g. `"info,sqlx=warn"`); a `RUST_LOG` that does not parse is an
/// error rather than silently logging nothing. Keep the guard until the process ends.
pub fn init(format: LogFormat, default_filter: &str) -> Result<LogGuard, LogError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => {
            EnvFilter::try_new(&v).map_err(|e| LogError::BadFilter {
                value: v.clone(),
                reason: e.to_string(),
            })?
        }
        _ => EnvFilter::new(default_filter),
    };
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(BUFFERED_LINES)
        .thread_name("log-writer")
        // The writer thread drains the queue, then flushes: under load many lines go out
        // in one write instead of one write each.
        .finish(std::io::BufWriter::with_capacity(
            WRITE_BUFFER,
            std::io::stderr(),
        ));
    let dropped = writer.error_counter();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .try_init(),
    };
    result.map_err(|_| LogError::AlreadySet)?;
    let _ = DROPPED.set(dropped);
    Ok(LogGuard { _writer: guard })
}
