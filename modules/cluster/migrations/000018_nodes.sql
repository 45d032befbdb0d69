-- Node membership and cross-node wake-up (N-2, N-3). Every `orbit serve`
-- run registers one row in nodes and keeps its heartbeat (database clock);
-- a node whose heartbeat is older than three of its intervals is marked
-- dead by any other, which closes its worker and event sessions in the same
-- transaction. node_signals counts, per node, the wake-up signals it raised
-- (tasks.submitted, subscriptions.claimable, ...): the other nodes poll the
-- counters and wake their own waiters when one moves. Sessions record the
-- node that serves them; rows from before this file have node_id ''.

CREATE TABLE nodes (
  id           CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'node id, new for every run of orbit serve',
  name         VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'cluster.node_name, the host name by default',
  pid          INT          NOT NULL COMMENT 'process id on its host',
  heartbeat_ms INT          NOT NULL COMMENT 'cluster.heartbeat_interval of the node; dead after three without a heartbeat',
  started_at   DATETIME(6)  NOT NULL COMMENT 'registration time, database clock, UTC',
  heartbeat_at DATETIME(6)  NOT NULL COMMENT 'last heartbeat, database clock, UTC',
  stopped_at   DATETIME(6)  NULL COMMENT 'orderly stop, UTC; NULL while running',
  dead_at      DATETIME(6)  NULL COMMENT 'when another node found its heartbeat late and closed its sessions, UTC; NULL while alive',
  PRIMARY KEY (id)
) ENGINE=InnoDB COMMENT='orbit serve nodes sharing this database';

CREATE TABLE node_signals (
  node_id CHAR(32)        CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'node that raised the signal',
  name    VARCHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'signal name, <module>.<what>',
  counter BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'bumped by the node after signals raised on it; other nodes wake their waiters when it moves',
  PRIMARY KEY (node_id, name)
) ENGINE=InnoDB COMMENT='wake-up signals of each node, polled by the others';

ALTER TABLE worker_sessions
  ADD COLUMN node_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '' COMMENT 'node serving the connection; empty for rows from before node membership',
  ADD KEY ix_worker_sessions_node (node_id, closed_at);

ALTER TABLE event_sessions
  ADD COLUMN node_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '' COMMENT 'node serving the connection; empty for rows from before node membership',
  ADD KEY ix_event_sessions_node (node_id, closed_at);
