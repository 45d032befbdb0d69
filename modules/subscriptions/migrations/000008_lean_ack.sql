-- An ACK changes a delivery's state, and every index holding state is
-- rewritten with it. Retention asks only whether an event still has a live
-- delivery; it finds the few deliveries of one (queue, sequence) by this
-- narrower index and reads their state from the row, so ACKs no longer
-- rewrite it.

ALTER TABLE event_deliveries
  ADD KEY ix_event_deliveries_event_position (queue_id, sequence),
  DROP KEY ix_event_deliveries_retention;
