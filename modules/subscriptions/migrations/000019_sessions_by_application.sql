-- Connections per application, counted across every node (N-4). Event and
-- worker sessions record the application of their credential, and an index
-- finds an application's open sessions without reading every session ever
-- opened: a new connection counts them while it holds the application's
-- row locked.
--
-- Both tables change in this one file, which belongs to the subscriptions
-- module although worker_sessions is the tasks module's: subscriptions
-- requires tasks, so both tables exist wherever this file runs, whereas a
-- tasks file could not count on event_sessions.
--
-- Sessions opened before this migration get the application of their
-- credential, so that those still open count from the start.

ALTER TABLE event_sessions
  ADD COLUMN application_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '' COMMENT 'application of the credential; connections are counted per application',
  ADD KEY ix_event_sessions_application (application_id, closed_at);

UPDATE event_sessions s JOIN credentials c ON c.id = s.credential_id
  SET s.application_id = c.application_id;

ALTER TABLE worker_sessions
  ADD COLUMN application_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '' COMMENT 'application of the credential; connections are counted per application',
  ADD KEY ix_worker_sessions_application (application_id, closed_at);

UPDATE worker_sessions s JOIN credentials c ON c.id = s.credential_id
  SET s.application_id = c.application_id;
