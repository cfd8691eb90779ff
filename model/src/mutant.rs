//! Deliberate bugs, one rule switched off each, for the tests that prove the checker finds
//! what it is meant to find (`tests/mutants.rs`). `None` everywhere else.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// take.lua without its deadline (the hold's TTL less a third): a take can land after
    /// the consumer resolved the hold as "nothing taken".
    TakeIgnoresDeadline,
    /// The gateway keeps a hold whose take found no stock (settle `keep` instead of `undo`).
    SettleKeepsFailedTake,
    /// A rebuild counts the ledger only, not the claims still in the streams.
    RebuildIgnoresStreams,
    /// The consumer commits a batch without a fence confirming a replica holds it.
    CommitBeforeReplica,
    /// preheat.lua writes the full slice over a live one.
    PreheatOverwrites,
    /// The gateway answers 410 from its sold-out cache before the replay check.
    ReplayAfterCache,
    /// claim.lua without the per-user limit check.
    NoLimitCheck,
}

impl Mutant {
    pub const ALL: [Mutant; 7] = [
        Mutant::TakeIgnoresDeadline,
        Mutant::SettleKeepsFailedTake,
        Mutant::RebuildIgnoresStreams,
        Mutant::CommitBeforeReplica,
        Mutant::PreheatOverwrites,
        Mutant::ReplayAfterCache,
        Mutant::NoLimitCheck,
    ];
}
