-- Tasks and their attempts. A task changes state only inside a transaction
-- that also appends its result-log row when the change is a result or a
-- requeue (see 000003). No foreign keys: integrity is kept in transactions.

CREATE TABLE tasks (
  id                 CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'task id, 32 lowercase hex',
  namespace_id       CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'namespace of the queue',
  queue_id           CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'queue the task was submitted to',
  credential_id      CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'credential that submitted it',
  state              VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED, NEEDS_REVIEW',
  revision           BIGINT UNSIGNED NOT NULL COMMENT 'starts at 1, +1 on every state change',
  idempotent         TINYINT(1)   NOT NULL COMMENT '1 when running the task twice is harmless',
  max_attempts       INT          NOT NULL COMMENT 'attempt budget, 1-100',
  attempts           INT          NOT NULL DEFAULT 0 COMMENT 'attempts started so far',
  effect_uncertain   TINYINT(1)   NOT NULL DEFAULT 0 COMMENT '1 when an attempt may have had effects nobody reported',
  cancel_requested   TINYINT(1)   NOT NULL DEFAULT 0 COMMENT '1 once cancel was asked while RUNNING',
  current_attempt_id CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'attempt holding or last holding the lease',
  lease_epoch        BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'lease generation, +1 on every assignment',
  input              MEDIUMTEXT   CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'task input, raw JSON text as submitted',
  result             MEDIUMTEXT   CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL COMMENT 'result, raw JSON text as reported; NULL when none',
  error_code         VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL COMMENT 'error code of a failed attempt or review',
  error_message      VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL COMMENT 'error message for people',
  available_at       DATETIME(6)  NOT NULL COMMENT 'earliest time a PENDING task may be assigned (retry backoff)',
  created_at         DATETIME(6)  NOT NULL COMMENT 'submission time, UTC',
  updated_at         DATETIME(6)  NOT NULL COMMENT 'last state change, UTC',
  finished_at        DATETIME(6)  NULL COMMENT 'time it reached a final state, UTC',
  PRIMARY KEY (id),
  KEY ix_tasks_assign (queue_id, state, available_at, created_at),
  KEY ix_tasks_list (queue_id, created_at, id),
  KEY ix_tasks_list_state (queue_id, state, created_at, id)
) ENGINE=InnoDB COMMENT='submitted tasks and their current state';

CREATE TABLE task_attempts (
  id                  CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'attempt id',
  task_id             CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'task being attempted',
  queue_id            CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'queue of the task',
  session_id          CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'worker session holding the lease',
  epoch               BIGINT UNSIGNED NOT NULL COMMENT 'lease epoch of the task for this attempt',
  lease_secret_digest BINARY(32)   NOT NULL COMMENT 'SHA-256 of the lease secret; the secret is never stored',
  lease_until         DATETIME(6)  NOT NULL COMMENT 'lease expiry, UTC; renewed by worker.ping',
  state               VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'RUNNING, COMPLETED, RELEASED, EXPIRED, SUPERSEDED',
  outcome             VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'succeeded, failed, needs_review, cancelled as reported',
  reply               TEXT         CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL COMMENT 'JSON reply of the first completion, returned again on a repeat',
  started_at          DATETIME(6)  NOT NULL COMMENT 'assignment time, UTC',
  ended_at            DATETIME(6)  NULL COMMENT 'time the attempt ended, UTC',
  PRIMARY KEY (id),
  KEY ix_attempts_task (task_id, epoch),
  KEY ix_attempts_session (session_id, state),
  KEY ix_attempts_expiry (state, lease_until)
) ENGINE=InnoDB COMMENT='one row per assignment of a task to a worker (a lease)';
