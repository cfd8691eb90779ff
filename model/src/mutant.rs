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
    /// The consumer commits a batch without a fence confirming a replica holds it (nor that
    /// the master's replication id is still the one read under).
    CommitBeforeReplica,
    /// preheat.lua writes the full slice over a live one.
    PreheatOverwrites,
    /// The gateway answers 410 from its sold-out cache before the replay check.
    ReplayAfterCache,
    /// claim.lua without the per-user limit check.
    NoLimitCheck,
    /// The consumer keeps reading after its offset when the master's replication id is not
    /// the one the offset was read under (no new master rule: no read from the start).
    OffsetKeptAcrossNewMaster,
    /// The offset update ignores `from` (still conditional on the lease epoch): a read
    /// commits whether or not the offset stands where it started.
    UnconditionalOffset,
    /// stream_trim.lua without its guard (the master's replication id the offset's, the
    /// stream's last id at or above the offset).
    TrimPastCommitted,
    /// claim.lua, take.lua and settle.lua loaded without `lua/guard.lua`: a master back
    /// from an older snapshot sells from its older slices, counts and answers.
    NoVouchFence,
    /// The consumer's watch vouches for a new process without rebuilding its shard.
    VouchWithoutRebuild,
    /// The watch rebuilds a shard that came back older only when the ledger holds claims of
    /// the campaign (`campaign-ops/src/rebuild/watch.rs` also rebuilds a campaign rebuilt
    /// before, which every preheated one is): in the sale's first moments, before the
    /// consumer committed anything, it vouches the older data as it is, so a walk under a
    /// hold the restart lost still takes.
    WatchTrustsEmptyLedger,
    /// The sold-out path's replay read (`replay_confirmed_live`) trusts a missing answer on
    /// a process the ledger has not vouched for (`shard-router/src/replay.rs` reads the
    /// vouch with the answer and answers 503 there): a winner's retry after a restart from
    /// an older snapshot is told 410.
    ReplayReadIgnoresVouch,
    /// The writer takes a commit the database refused (a server-state error, not the row's
    /// own) for poison: the place moves past the rows, which never reach the ledger.
    ServerErrorIsPoison,
}

impl Mutant {
    pub const ALL: [Mutant; 15] = [
        Mutant::TakeIgnoresDeadline,
        Mutant::SettleKeepsFailedTake,
        Mutant::RebuildIgnoresStreams,
        Mutant::CommitBeforeReplica,
        Mutant::PreheatOverwrites,
        Mutant::ReplayAfterCache,
        Mutant::NoLimitCheck,
        Mutant::OffsetKeptAcrossNewMaster,
        Mutant::UnconditionalOffset,
        Mutant::TrimPastCommitted,
        Mutant::NoVouchFence,
        Mutant::VouchWithoutRebuild,
        Mutant::WatchTrustsEmptyLedger,
        Mutant::ReplayReadIgnoresVouch,
        Mutant::ServerErrorIsPoison,
    ];
}
