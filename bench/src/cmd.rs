//! The subcommands that orchestrate the library's parts (servers, load, checks, reports).
//! They report with `anyhow`, like the rest of the binary's top.

pub(crate) mod ablate;
pub(crate) mod draw;
pub(crate) mod run;
pub(crate) mod stack;
pub(crate) mod sweep;
