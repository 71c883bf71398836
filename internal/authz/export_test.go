package authz

// KnownPermissions is every declared permission (for the external tests).
func KnownPermissions() []Permission {
	perms := make([]Permission, 0, len(known))
	for p := range known {
		perms = append(perms, p)
	}
	return perms
}
