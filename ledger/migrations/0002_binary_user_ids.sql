-- User ids and request ids are compared byte for byte, as Redis does: under the server's
-- default case- and accent-insensitive collation, "Alice" and "alice" (or "josé" and
-- "jose") collide on UNIQUE (sku, user_id, user_seq), and an acknowledged claim of one would
-- be rejected as the other's duplicate. NO PAD, so "bob" and "bob " differ too (plain
-- utf8mb4_bin ignores trailing spaces). MariaDB names it utf8mb4_nopad_bin; on MySQL 8 the
-- equivalent is utf8mb4_0900_bin.
ALTER TABLE claims
    MODIFY user_id    VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    MODIFY request_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NULL;
