//! What a run checks after the load: the invariants against Redis and the ledger
//! ([`invariants`]) and the figures against a stored reference ([`regress`]).

pub mod invariants;
pub mod regress;
