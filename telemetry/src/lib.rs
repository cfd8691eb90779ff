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

use tracing_subscriber::EnvFilter;

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
/// error rather than silently logging nothing.
pub fn init(format: LogFormat, default_filter: &str) -> Result<(), LogError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => {
            EnvFilter::try_new(&v).map_err(|e| LogError::BadFilter {
                value: v.clone(),
                reason: e.to_string(),
            })?
        }
        _ => EnvFilter::new(default_filter),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .try_init(),
    };
    result.map_err(|_| LogError::AlreadySet)
}
