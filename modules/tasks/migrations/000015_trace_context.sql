-- W3C trace context a producer sent with its task (POST /v1/tasks
-- traceparent and tracestate headers), or the server's submit span when
-- tracing is on. It is handed to the worker in task.assign and to
-- consumers in event.deliver; result_events link the task, so the log
-- itself stores none. Not indexed: read only with the task's row.

ALTER TABLE tasks
  ADD COLUMN trace_parent CHAR(55)     CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'W3C traceparent, version 00; NULL when the task has no trace context',
  ADD COLUMN trace_state  VARCHAR(512) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'W3C tracestate; NULL when none';
