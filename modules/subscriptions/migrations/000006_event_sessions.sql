-- Event connections. Capacity is enforced inside the leasing transaction
-- against this row, so it holds across every node.

CREATE TABLE event_sessions (
  id              CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'session id sent in events.welcome',
  subscription_id CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'subscription consumed',
  credential_id   CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'credential of the consumer',
  capacity        INT         NOT NULL COMMENT 'leases the connection may hold at once, 1-32',
  connected_at    DATETIME(6) NOT NULL COMMENT 'connection time, UTC',
  closed_at       DATETIME(6) NULL COMMENT 'disconnection time, UTC; NULL while connected',
  PRIMARY KEY (id)
) ENGINE=InnoDB COMMENT='event connections; capacity is enforced against this row';
