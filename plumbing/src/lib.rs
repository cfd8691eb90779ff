//! Process plumbing the gateway and the consumer share, kept apart from what either does:
//! - [`shutdown`]: the stop signal every background task takes, and SIGTERM / Ctrl-C.
//! - [`backoff`]: exponential backoff whose sleeps wake early on shutdown.
//! - [`serve`]: one HTTP/1.1 accept loop with a connection cap, timeouts and a bounded drain;
//!   [`listen`]: binding its listener with a backlog sized for a rush.

pub mod backoff;
pub mod listen;
pub mod serve;
pub mod shutdown;

pub use backoff::Backoff;
pub use serve::{serve, ServeOpts};
pub use shutdown::stopped;
