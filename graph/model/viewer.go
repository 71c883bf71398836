package model

// Viewer is the caller; its tenants connection has a resolver.
type Viewer struct {
	PrincipalID string  `json:"principalId"`
	Kind        string  `json:"kind"`
	Name        string  `json:"name"`
	TenantID    *string `json:"tenantId,omitempty"`
}
