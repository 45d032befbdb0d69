package events

// Subprotocol exposes subprotocol to the external tests.
const Subprotocol = subprotocol
