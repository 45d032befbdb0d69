-- Subscriptions to a queue's result log and the deliveries materialised from
-- it. No foreign keys: integrity is kept in transactions.

CREATE TABLE subscriptions (
  id              CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'subscription id',
  namespace_id    CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'namespace of the owning credential',
  queue_id        CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'the one queue it follows, fixed for ever',
  credential_id   CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'the credential that created and owns it, fixed for ever',
  name            VARCHAR(128)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'unique in the namespace',
  revision        BIGINT UNSIGNED NOT NULL COMMENT 'configuration revision, +1 on every configure',
  enabled         TINYINT(1)      NOT NULL COMMENT '0 while paused: no materialisation, no new claims',
  types           VARCHAR(255)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'subscribed result types, sorted, comma-separated',
  cursor_sequence BIGINT UNSIGNED NOT NULL COMMENT 'last log sequence scanned and materialised',
  max_pending     INT             NOT NULL COMMENT 'backlog bound: PENDING + LEASED + EXPIRED deliveries',
  max_attempts    INT             NOT NULL COMMENT 'attempt budget each new delivery starts with',
  created_at      DATETIME(6)     NOT NULL COMMENT 'creation time, UTC',
  updated_at      DATETIME(6)     NOT NULL COMMENT 'last configuration change, UTC',
  PRIMARY KEY (id),
  UNIQUE KEY uq_subscriptions_name (namespace_id, name),
  KEY ix_subscriptions_list (queue_id, credential_id, created_at, id),
  KEY ix_subscriptions_namespace (namespace_id)
) ENGINE=InnoDB COMMENT='subscriptions to a queue''s result log';

CREATE TABLE subscription_changes (
  id              CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'change id',
  subscription_id CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'changed subscription',
  credential_id   CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'credential that made the change',
  revision        BIGINT UNSIGNED NOT NULL COMMENT 'revision the change produced',
  enabled         TINYINT(1)      NOT NULL COMMENT 'enabled value set by the change',
  reason          VARCHAR(1024)   CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'reason given by the caller',
  created_at      DATETIME(6)     NOT NULL COMMENT 'time of the change, UTC',
  PRIMARY KEY (id),
  UNIQUE KEY uq_subscription_changes_revision (subscription_id, revision)
) ENGINE=InnoDB COMMENT='audited configuration changes of subscriptions';

CREATE TABLE event_deliveries (
  id                  CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'delivery id, stable across redeliveries',
  subscription_id     CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'subscription it belongs to',
  queue_id            CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'queue of the event',
  event_id            CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'the result event delivered',
  sequence            BIGINT UNSIGNED NOT NULL COMMENT 'log sequence of the event',
  revision            BIGINT UNSIGNED NOT NULL COMMENT 'delivery revision: +1 on lease, recovery, ACK and manual retry',
  state               VARCHAR(16)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'PENDING, LEASED, ACKED or EXPIRED',
  created_at          DATETIME(6)     NOT NULL COMMENT 'materialisation time, UTC',
  available_at        DATETIME(6)     NOT NULL COMMENT 'earliest time it may be sent (again), UTC',
  lease_epoch         BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '0 until first sent, +1 on every lease',
  lease_until         DATETIME(6)     NULL COMMENT 'end of the current lease, UTC; NULL unless LEASED',
  lease_secret_digest BINARY(32)      NULL COMMENT 'SHA-256 of the latest lease secret; the secret is never stored',
  lease_session_id    CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'event connection holding the lease',
  attempts            INT             NOT NULL DEFAULT 0 COMMENT 'leases so far; never reset',
  attempt_budget      INT             NOT NULL COMMENT 'cumulative attempt budget, at most 1000000',
  acknowledged_at     DATETIME(6)     NULL COMMENT 'first valid ACK, UTC; NULL unless ACKED',
  PRIMARY KEY (id),
  UNIQUE KEY uq_event_deliveries_event (subscription_id, event_id),
  KEY ix_event_deliveries_claim (subscription_id, state, available_at, sequence),
  KEY ix_event_deliveries_list (subscription_id, created_at, id),
  KEY ix_event_deliveries_list_state (subscription_id, state, created_at, id),
  KEY ix_event_deliveries_session (lease_session_id, state),
  KEY ix_event_deliveries_expiry (state, lease_until),
  KEY ix_event_deliveries_retention (queue_id, sequence, state)
) ENGINE=InnoDB COMMENT='one delivery of one event to one subscription';

CREATE TABLE delivery_acks (
  delivery_id     CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'acknowledged delivery',
  subscription_id CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'its subscription',
  epoch           BIGINT UNSIGNED NOT NULL COMMENT 'lease epoch of the proof that acknowledged it',
  session_id      CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'connection the ACK arrived on',
  acknowledged_at DATETIME(6)     NOT NULL COMMENT 'time of the ACK, UTC',
  PRIMARY KEY (delivery_id)
) ENGINE=InnoDB COMMENT='one audit record per acknowledged delivery';

CREATE TABLE delivery_retries (
  id                  CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'retry id',
  delivery_id         CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'retried delivery',
  credential_id       CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'credential that asked',
  revision            BIGINT UNSIGNED NOT NULL COMMENT 'delivery revision the retry produced',
  additional_attempts INT             NOT NULL COMMENT 'attempts added to the budget, 1-100',
  reason              VARCHAR(1024)   CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'reason given by the caller',
  created_at          DATETIME(6)     NOT NULL COMMENT 'time of the retry, UTC',
  PRIMARY KEY (id),
  KEY ix_delivery_retries_delivery (delivery_id, created_at)
) ENGINE=InnoDB COMMENT='audited manual retries of expired deliveries';
