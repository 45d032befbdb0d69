-- Claims take PENDING deliveries in sequence order. With this index InnoDB
-- reads them in that order and locks only the rows it visits, instead of
-- every PENDING row of the subscription, so competing claims on one
-- subscription (SKIP LOCKED) do not block on or skip the whole backlog.

ALTER TABLE event_deliveries
  ADD KEY ix_event_deliveries_claim_order (subscription_id, state, sequence),
  DROP KEY ix_event_deliveries_claim;
