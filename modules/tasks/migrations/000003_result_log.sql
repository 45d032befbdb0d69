-- The per-queue result log. Each queue has a head row; an appending
-- transaction locks it, takes head+1 and commits the event with the task
-- change, so sequences become visible in commit order and without gaps.

CREATE TABLE queue_streams (
  queue_id       CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'queue the log belongs to',
  head_sequence  BIGINT UNSIGNED NOT NULL COMMENT 'highest committed sequence; 0 when the log is empty',
  retention_mark BIGINT UNSIGNED NOT NULL DEFAULT 1 COMMENT 'lowest sequence still retained; lower ones were purged',
  updated_at     DATETIME(6)     NOT NULL COMMENT 'last append or purge, UTC',
  PRIMARY KEY (queue_id)
) ENGINE=InnoDB COMMENT='committed head and retention mark of each queue''s result log';

CREATE TABLE result_events (
  queue_id           CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'queue whose log holds the event',
  sequence           BIGINT UNSIGNED NOT NULL COMMENT 'position in the queue''s log, from 1, no gaps',
  id                 CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'event id',
  type               VARCHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'task.succeeded, task.failed, task.cancelled, task.needs_review or task.requeued',
  task_id            CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'the task (aggregate_id)',
  task_revision      BIGINT UNSIGNED NOT NULL COMMENT 'task revision after the change (aggregate_revision)',
  occurred_at        DATETIME(6)     NOT NULL COMMENT 'commit-time of the change, UTC',
  details            TEXT            CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'event details JSON; never task input or secrets',
  snapshot           MEDIUMTEXT      CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'immutable task snapshot JSON',
  PRIMARY KEY (queue_id, sequence),
  UNIQUE KEY uq_result_events_id (id),
  KEY ix_result_events_age (queue_id, occurred_at)
) ENGINE=InnoDB COMMENT='ordered, durable log of task results per queue';
