-- Console sessions (O-9): one row per signed-in browser. The cookie holds
-- the session id and a secret; only the secret's SHA-256 is stored. A
-- session is bound to the credential whose token signed it in, and is
-- worth nothing once that credential is revoked.

CREATE TABLE console_sessions (
  id            CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'session id, in the cookie beside the secret',
  secret_digest BINARY(32)  NOT NULL COMMENT 'SHA-256 of the session secret; the secret is never stored',
  credential_id CHAR(32)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'credential that signed in',
  created_at    DATETIME(6) NOT NULL COMMENT 'sign-in time, UTC',
  expires_at    DATETIME(6) NOT NULL COMMENT 'end of the session, UTC',
  PRIMARY KEY (id),
  KEY ix_console_sessions_credential (credential_id),
  KEY ix_console_sessions_expiry (expires_at)
) ENGINE=InnoDB COMMENT='signed-in console sessions';
