-- The events of one task, newest last, for the console's task page: an
-- index on the task instead of a scan of its queue's log.

ALTER TABLE result_events ADD KEY ix_result_events_task (task_id, task_revision);
