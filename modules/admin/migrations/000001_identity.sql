-- Identity and scope: namespaces, applications, environments, queues, credentials,
-- permissions and queue grants. No foreign keys: integrity is kept in transactions.
-- IDs are 32 lowercase hex characters; times are UTC DATETIME(6).

CREATE TABLE namespaces (
  id         CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'namespace id, 32 lowercase hex',
  name       VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'unique name (C-11 rules)',
  created_at DATETIME(6)  NOT NULL COMMENT 'creation time, UTC',
  PRIMARY KEY (id),
  UNIQUE KEY uq_namespaces_name (name)
) ENGINE=InnoDB COMMENT='isolation boundary for applications, queues and subscriptions';

CREATE TABLE applications (
  id           CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'application id',
  namespace_id CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'owning namespace',
  name         VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'unique within the namespace',
  created_at   DATETIME(6)  NOT NULL COMMENT 'creation time, UTC',
  PRIMARY KEY (id),
  UNIQUE KEY uq_applications_name (namespace_id, name)
) ENGINE=InnoDB COMMENT='a program that holds credentials';

CREATE TABLE environments (
  id             CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'environment id',
  application_id CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'owning application',
  name           VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'unique within the application',
  created_at     DATETIME(6)  NOT NULL COMMENT 'creation time, UTC',
  PRIMARY KEY (id),
  UNIQUE KEY uq_environments_name (application_id, name)
) ENGINE=InnoDB COMMENT='deployment stage of an application (development, production, ...)';

CREATE TABLE queues (
  id           CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'queue id',
  namespace_id CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'owning namespace',
  name         VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'unique within the namespace',
  created_at   DATETIME(6)  NOT NULL COMMENT 'creation time, UTC',
  PRIMARY KEY (id),
  UNIQUE KEY uq_queues_name (namespace_id, name)
) ENGINE=InnoDB COMMENT='a task queue and the unit of result ordering';

CREATE TABLE credentials (
  id             CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'credential id',
  namespace_id   CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'the one namespace it acts in',
  application_id CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'the one application it belongs to',
  environment_id CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'the one environment it belongs to',
  token_digest   BINARY(32)  NOT NULL COMMENT 'SHA-256 of the bearer token; the token itself is never stored',
  label          VARCHAR(128) CHARACTER SET utf8mb4 NOT NULL DEFAULT '' COMMENT 'operator note, never secret',
  created_at     DATETIME(6) NOT NULL COMMENT 'creation time, UTC',
  revoked_at     DATETIME(6) NULL COMMENT 'revocation time, UTC; NULL while active',
  PRIMARY KEY (id),
  UNIQUE KEY uq_credentials_token (token_digest),
  KEY ix_credentials_scope (namespace_id, application_id, environment_id, created_at)
) ENGINE=InnoDB COMMENT='bearer credentials, stored as digests';

CREATE TABLE credential_permissions (
  credential_id CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'credential holding the permission',
  permission    VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'tasks:submit, events:read, ...',
  PRIMARY KEY (credential_id, permission)
) ENGINE=InnoDB COMMENT='action permissions of a credential';

CREATE TABLE credential_queue_grants (
  credential_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'credential holding the grant',
  queue_id      CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'queue the credential may act on',
  PRIMARY KEY (credential_id, queue_id)
) ENGINE=InnoDB COMMENT='queues a credential may act on';

CREATE TABLE idempotency_records (
  credential_id  CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'credential that sent the write',
  operation      VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'method, route and path ids',
  idem_key       VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Idempotency-Key header',
  request_digest BINARY(32)   NOT NULL COMMENT 'SHA-256 of the canonical request JSON',
  status         SMALLINT     NOT NULL COMMENT 'HTTP status of the first reply',
  receipt        MEDIUMBLOB   NOT NULL COMMENT 'the data of the first reply, as returned',
  created_at     DATETIME(6)  NOT NULL COMMENT 'first write time, UTC',
  PRIMARY KEY (credential_id, operation, idem_key)
) ENGINE=InnoDB COMMENT='receipts of management writes, written in the same transaction as the change';

CREATE TABLE audit_log (
  id            CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'audit record id',
  namespace_id  CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'namespace the change happened in',
  credential_id CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'acting credential; NULL for operator commands',
  action        VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'what happened, e.g. credential.create',
  subject_id    CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'the changed object',
  reason        VARCHAR(1024) CHARACTER SET utf8mb4 NOT NULL DEFAULT '' COMMENT 'human reason, never secret',
  created_at    DATETIME(6)  NOT NULL COMMENT 'time of the change, UTC',
  PRIMARY KEY (id),
  KEY ix_audit_subject (subject_id, created_at)
) ENGINE=InnoDB COMMENT='append-only record of administrative and configuration changes';
