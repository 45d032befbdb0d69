-- The intake of the result log: an appending transaction writes its event
-- here with the task change, without locking the queue's head row; the
-- post-commit sequencer moves committed rows into result_events, numbering
-- them under the head row lock, many per transaction (T-9). Reads of a
-- task's state look up its intake rows by task (see awaitSequenced).

CREATE TABLE result_intake (
  id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'intake order; a queue''s rows are sequenced in this order',
  queue_id      CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'queue whose log the event joins',
  event_id      CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'event id (result_events.id)',
  type          VARCHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'as result_events.type',
  task_id       CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'the task (aggregate_id)',
  task_revision BIGINT UNSIGNED NOT NULL COMMENT 'task revision after the change',
  occurred_at   DATETIME(6)     NOT NULL COMMENT 'time of the change, UTC',
  details       TEXT            CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'event details JSON',
  snapshot      MEDIUMTEXT      CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'immutable task snapshot JSON',
  PRIMARY KEY (id),
  KEY ix_result_intake_task (task_id)
) ENGINE=InnoDB COMMENT='committed result events waiting for their sequence in their queue''s log';
