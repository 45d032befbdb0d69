-- One unique key now does the work of two: an event is one (queue_id,
-- sequence), and a subscription follows one queue, so (queue_id, sequence,
-- subscription_id) is unique exactly when (subscription_id, event_id) is,
-- and its prefix is what retention looks up. Every materialised delivery
-- writes one index entry fewer.

ALTER TABLE event_deliveries
  ADD UNIQUE KEY uq_event_deliveries_position (queue_id, sequence, subscription_id),
  DROP KEY uq_event_deliveries_event,
  DROP KEY ix_event_deliveries_event_position;
