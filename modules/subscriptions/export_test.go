package subscriptions

// The names below expose the package's internals to its external tests.

const (
	MaxAttemptBudget             = maxAttemptBudget
	MaxSubscriptionsPerNamespace = maxSubscriptionsPerNamespace
	StateExpired                 = stateExpired
	StateLeased                  = stateLeased
	StatePending                 = statePending
)

var (
	DeliveryAck         = deliveryAck
	DeliveryMaterialize = deliveryMaterialize
	SubscriptionCreate  = subscriptionCreate
)

type (
	SubscriptionCreateParams = subscriptionCreateParams
	SubscriptionView         = subscriptionView
)

// DeliveryControlBatch records extensions, NACKs and rejects.
var DeliveryControlBatch = deliveryControlBatch
