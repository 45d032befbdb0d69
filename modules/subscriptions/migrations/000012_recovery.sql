-- Recovery: bulk retries, replays and skips are each one audited operation,
-- and a deleted subscription leaves a deletion record. The record frees the
-- subscription's name and slot at once (its row is removed), keeps the
-- deletion audited, lets a replay of the DELETE find its receipt's owner,
-- and tells the background purger whose deliveries are still to remove.

CREATE TABLE subscription_operations (
  id              CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'operation id',
  subscription_id CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'subscription acted on',
  credential_id   CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'credential that asked',
  kind            VARCHAR(16)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'RETRY, REPLAY or SKIP',
  filter          VARCHAR(1024)   CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'JSON of what the operation selected',
  count           BIGINT UNSIGNED NOT NULL COMMENT 'deliveries changed',
  reason          VARCHAR(1024)   CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'reason given by the caller',
  created_at      DATETIME(6)     NOT NULL COMMENT 'time of the operation, UTC',
  PRIMARY KEY (id),
  KEY ix_subscription_operations_subscription (subscription_id, created_at)
) ENGINE=InnoDB COMMENT='audited bulk operations on deliveries of a subscription';

CREATE TABLE subscription_deletions (
  subscription_id CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'the deleted subscription',
  namespace_id    CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'its namespace',
  queue_id        CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'its queue',
  credential_id   CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'its owner, who deleted it',
  name            VARCHAR(128)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'its name, free again',
  revision        BIGINT UNSIGNED NOT NULL COMMENT 'its revision when deleted',
  reason          VARCHAR(1024)   CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'reason given by the caller',
  deleted_at      DATETIME(6)     NOT NULL COMMENT 'time of the deletion, UTC',
  purged_at       DATETIME(6)     NULL COMMENT 'when its last delivery was removed, UTC; NULL while some remain',
  PRIMARY KEY (subscription_id),
  KEY ix_subscription_deletions_purge (purged_at)
) ENGINE=InnoDB COMMENT='deleted subscriptions: audit, and deliveries still to remove';
