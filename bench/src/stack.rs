//! The processes a run measures and how: private `redis-server` / cluster processes killed
//! on drop ([`servers`]), the ledger's database ([`mysql`]), the bare hyper server every
//! ratio is taken against ([`baseline`]), an external client beside our own ([`external`]),
//! and CPU time per answer of each process by its role ([`cpu`]).

pub mod baseline;
pub mod baseline_claim;
pub mod cpu;
pub mod external;
pub mod mysql;
pub mod servers;
