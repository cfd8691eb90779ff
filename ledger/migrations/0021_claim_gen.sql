-- A claim's record generation (docs/DESIGN.md, "The claim protocol" and "Late claims"): the
-- rebuild generation its shard carried when the script took it, copied from the stream
-- record. A hold is named by the generation it was placed under, and a hold is its claim's
-- own only at that claim's generation; the readers that read claims back from the ledger
-- (the rebuild's image, the late-claims sweep) need it to tell a claim's own hold from
-- another request's hold of the same `user|seq`. Rows written before this column read 0.
ALTER TABLE claims
    ADD COLUMN IF NOT EXISTS gen BIGINT UNSIGNED NOT NULL DEFAULT 0;
