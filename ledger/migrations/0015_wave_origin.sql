-- Which command scheduled a stock wave: `campaign` (a `--wave` flag of `consumer campaign`,
-- so a rerun of that command without the flag cancels the wave while it is not applied)
-- or `command` (`consumer wave`, the admin API: only an operator removes those).
ALTER TABLE campaign_waves
    ADD COLUMN scheduled_by VARCHAR(16) NOT NULL DEFAULT 'command';
