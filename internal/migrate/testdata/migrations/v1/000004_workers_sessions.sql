-- Worker connections. Capacity is enforced inside the leasing transaction
-- against this row, so it holds across every node.

CREATE TABLE worker_sessions (
  id            CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'session id sent in worker.welcome',
  queue_id      CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'queue the worker serves',
  credential_id CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'credential of the worker',
  worker_name   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '' COMMENT 'name the worker gave in hello',
  capacity      INT          NOT NULL COMMENT 'leases the session may hold at once, 1-32',
  connected_at  DATETIME(6)  NOT NULL COMMENT 'connection time, UTC',
  closed_at     DATETIME(6)  NULL COMMENT 'disconnection time, UTC; NULL while connected',
  PRIMARY KEY (id)
) ENGINE=InnoDB COMMENT='worker connections; capacity is enforced against this row';
