-- The metrics collector asks, for each subscription, whether a consumer is
-- connected and when the last one left (orbit_subscription_blocked,
-- NO_CONSUMER). This index answers both from a range of the subscription's
-- sessions: the open ones (closed_at NULL) and the latest close, without
-- reading the table.

ALTER TABLE event_sessions
  ADD KEY ix_event_sessions_subscription (subscription_id, closed_at);
