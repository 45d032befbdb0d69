-- What recovery needs to read cheaply. A lease records when it started,
-- for the report of work in flight for too long. Event sessions are found
-- per subscription (is a consumer connected? when did the last one leave?)
-- without reading every session ever opened.

ALTER TABLE event_deliveries
  ADD COLUMN leased_at DATETIME(6) NULL COMMENT 'start of the current lease, UTC; NULL until first leased';

ALTER TABLE event_sessions
  ADD KEY ix_event_sessions_subscription (subscription_id, closed_at);
