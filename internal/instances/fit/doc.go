// Package fit is the arithmetic of pool room, with no database and no job
// queue: resources and their sums, reservation windows and their peaks,
// the quota and capacity checks of instances and reservations, a pool's
// capacity from what its tenants hold, and the placement of an instance on
// a host's GPU devices (whole GPUs, MIG devices, time slices). Package
// instances reads the rows and locks, then asks fit; what changes here is
// a rule of how room is counted or chosen, never how it is stored.
package fit
