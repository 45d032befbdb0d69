-- Consumer control: a consumer may NACK, reject or extend a delivery, and
-- each subscription has a retry policy for NACKs and lease expiries.
-- EXPIRED is the dead-letter state; expired_reason says how a delivery got
-- there. Deliveries that expired before this migration ran out of attempts
-- when a lease expired.

ALTER TABLE event_deliveries
  ADD COLUMN expired_reason VARCHAR(24)  CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'only when EXPIRED: ATTEMPTS_EXHAUSTED, REJECTED or SKIPPED',
  ADD COLUMN last_error     VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL COMMENT 'last NACK or reject reason, or LEASE_EXPIRED',
  ADD COLUMN nacks          INT          NOT NULL DEFAULT 0 COMMENT 'NACKs received so far; never reset';

UPDATE event_deliveries
   SET expired_reason = 'ATTEMPTS_EXHAUSTED', last_error = 'LEASE_EXPIRED'
 WHERE state = 'EXPIRED';

ALTER TABLE subscriptions
  ADD COLUMN retry_initial_delay_ms BIGINT NOT NULL DEFAULT 1000   COMMENT 'retry policy: delay before the first redelivery, 0-86400000 ms',
  ADD COLUMN retry_max_delay_ms     BIGINT NOT NULL DEFAULT 600000 COMMENT 'retry policy: the longest delay, 0-86400000 ms',
  ADD COLUMN retry_multiplier       DOUBLE NOT NULL DEFAULT 2      COMMENT 'retry policy: growth per attempt, 1.0-10.0';
