-- Claims and ACKs rewrite every index that holds a delivery's state. The
-- sweeper of expired leases no longer needs one of its own: it reads the
-- LEASED deliveries of each subscription through the claim index, and
-- those are only as many as the connected consumers' capacities.

ALTER TABLE event_deliveries DROP KEY ix_event_deliveries_expiry;
