-- When each credential last authenticated, for `orbit admin credential list`
-- (O-8). It is written on authentication at most once a minute per
-- credential, so a busy credential costs one small UPDATE a minute, not one
-- per request; the time shown is therefore exact to within a minute. NULL:
-- never used since this migration.

ALTER TABLE credentials
  ADD COLUMN last_used_at DATETIME(6) NULL COMMENT 'last authentication, UTC, updated at most once a minute; NULL if never';
