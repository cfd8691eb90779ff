-- A draw's grants as the draw loop made them (campaign-ops/src/draw/run.rs): the claim id
-- and the shard its unit came from, on the rank's row, written before `granted_rank`
-- moves past it. The claims table learns of a grant only when the consumer commits its
-- stream record; a shard that lost its win (`W|`) before that was marked from the claims
-- table without it, and its winner was told `won_pending` for good.
ALTER TABLE draw_ranks
    ADD COLUMN IF NOT EXISTS claim_id    VARCHAR(64)       NULL,
    ADD COLUMN IF NOT EXISTS claim_shard SMALLINT UNSIGNED NULL;
