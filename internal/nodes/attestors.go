package nodes

import (
	"context"
	"database/sql"
	"encoding/pem"
	"errors"
	"strings"
	"time"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/pki"
	"github.com/bettercompute/computed/internal/store"
)

// ExpectedMachine is a machine the pool owner registered for the discovery
// attestor, by any of its system UUID, serial or MAC.
type ExpectedMachine struct {
	MachineID  string    `json:"machineId" db:"machine_id" doc:"The expected machine's id (mach_ and a ULID), as machines.forget takes it."`
	PoolID     string    `json:"poolId" db:"pool_id" doc:"The pool whose discovery attestor expects the machine."`
	SystemUUID *string   `json:"systemUuid" db:"system_uuid" doc:"The system UUID the machine is known by; null when it was registered without one."`
	Serial     *string   `json:"serial" db:"serial" doc:"The serial number the machine is known by; null when it was registered without one."`
	MAC        *string   `json:"mac" db:"mac" doc:"The MAC address the machine is known by; null when it was registered without one."`
	CreatedAt  time.Time `json:"createdAt" db:"created_at" doc:"When the machine was registered."`
}

// AllowedKey is an entry of a pool's TPM allow-list: an endorsement key
// (kind "ek", by the SHA-256 of its DER SubjectPublicKeyInfo) or a CA
// certificate that EK certificates chain to (kind "ca", by the SHA-256 of
// the certificate's DER, with the certificate).
type AllowedKey struct {
	PoolID        string    `json:"poolId" db:"pool_id" doc:"The pool whose TPM allow-list holds the entry."`
	EKHash        string    `json:"ekHash" db:"ek_hash" doc:"The SHA-256 (hex) of the endorsement key's DER SubjectPublicKeyInfo, or of the CA certificate's DER: the entry's key in its pool."`
	Kind          string    `json:"kind" db:"kind" schema:"TpmKeyKind" doc:"An endorsement key, or a CA certificate that EK certificates chain to."`
	CACertificate *string   `json:"caCertificate" db:"-" doc:"The CA certificate (PEM) of a ca entry; null for an ek entry."`
	Description   string    `json:"description" db:"description" doc:"The owner's words about the entry, as tpmKeys.allow was given them; empty when none were."`
	CreatedAt     time.Time `json:"createdAt" db:"created_at" doc:"When the entry was put on the list."`

	Certificate []byte `json:"-" db:"certificate"`
}

// Kinds of allow-list entries.
const (
	KeyKindEK = "ek"
	KeyKindCA = "ca"
)

func (k *AllowedKey) fix() {
	if k.Certificate != nil {
		p := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: k.Certificate}))
		k.CACertificate = &p
	}
}

const keyCols = `pool_id, ek_hash, kind, certificate, description, created_at`

type (
	MachineRegisterInput struct {
		TenantID   string  `json:"tenantId"`
		PoolID     string  `json:"poolId"`
		SystemUUID *string `json:"systemUuid,omitempty"`
		Serial     *string `json:"serial,omitempty"`
		MAC        *string `json:"mac,omitempty"`
	}
	MachineRefInput struct {
		TenantID  string `json:"tenantId"`
		MachineID string `json:"machineId"`
	}
	PoolListInput struct {
		TenantID string `json:"tenantId"`
		PoolID   string `json:"poolId"`
		Limit    int    `json:"limit"`
		Cursor   string `json:"cursor,omitempty"`
	}
	KeyAllowInput struct {
		TenantID      string  `json:"tenantId"`
		PoolID        string  `json:"poolId"`
		EKHash        *string `json:"ekHash,omitempty"`
		EKPublicKey   *string `json:"ekPublicKey,omitempty"`
		CACertificate *string `json:"caCertificate,omitempty"`
		Description   string  `json:"description"`
	}
	KeyRefInput struct {
		TenantID string `json:"tenantId"`
		PoolID   string `json:"poolId"`
		EKHash   string `json:"ekHash"`
	}
	RemovedCount struct {
		Removed int `json:"removed" doc:"How many entries were removed (a missing one is NOT_FOUND instead)."`
	}
)

const machineCols = `machine_id, pool_id, system_uuid, serial, mac, created_at`

// RegisterMachine records a machine the discovery attestor admits. A
// placeholder id identifies no machine and is INVALID_INPUT.
func RegisterMachine(ctx context.Context, q store.Q, in *MachineRegisterInput) (*ExpectedMachine, error) {
	if in.SystemUUID == nil && in.Serial == nil && in.MAC == nil {
		return nil, errs.Invalid("systemUuid", "pass systemUuid, serial or mac")
	}
	var uuid, serial, mac *string
	if in.SystemUUID != nil {
		if pki.PlaceholderUUID(*in.SystemUUID) {
			return nil, errs.Invalid("systemUuid", "%s is a placeholder UUID that identifies no machine", *in.SystemUUID)
		}
		u := normUUID(*in.SystemUUID)
		uuid = &u
	}
	if in.Serial != nil {
		if pki.PlaceholderSerial(*in.Serial) {
			return nil, errs.Invalid("serial", "%q is a placeholder serial that identifies no machine", *in.Serial)
		}
		s := strings.TrimSpace(*in.Serial)
		serial = &s
	}
	if in.MAC != nil {
		if pki.PlaceholderMAC(*in.MAC) {
			return nil, errs.Invalid("mac", "%s is not a network card's own address (all zeros, or a group address) and identifies no machine", *in.MAC)
		}
		m := strings.ToLower(*in.MAC)
		mac = &m
	}
	if _, err := ownedPool(ctx, q, in.TenantID, in.PoolID, addToPool); err != nil {
		return nil, err
	}
	// The same ids registered again are the machine registered: its entry
	// is answered (migration 00024's key; a registration that committed
	// while this one waited on the key is read after the wait).
	var m ExpectedMachine
	err := q.GetContext(ctx, &m, `INSERT INTO expected_machines (machine_id, pool_id, system_uuid, serial, mac)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (pool_id, coalesce(system_uuid, ''), coalesce(serial, ''), coalesce(mac, '')) DO NOTHING
		RETURNING `+machineCols, ids.New(ids.Machine), in.PoolID, uuid, serial, mac)
	if errors.Is(err, sql.ErrNoRows) {
		err = q.GetContext(ctx, &m, `SELECT `+machineCols+` FROM expected_machines
			WHERE pool_id = $1 AND system_uuid IS NOT DISTINCT FROM $2 AND serial IS NOT DISTINCT FROM $3 AND mac IS NOT DISTINCT FROM $4`,
			in.PoolID, uuid, serial, mac)
	}
	return &m, store.Wrap(err)
}

// ListMachines pages a pool's expected machines by id.
func ListMachines(ctx context.Context, q store.Q, in *PoolListInput) (*page.Page[ExpectedMachine], error) {
	var after string
	if _, err := MachineCursors.Decode(in.Cursor, &after); err != nil {
		return nil, err
	}
	if _, err := ownedPool(ctx, q, in.TenantID, in.PoolID, readPool); err != nil {
		return nil, err
	}
	rows := []ExpectedMachine{}
	err := q.SelectContext(ctx, &rows, `SELECT `+machineCols+` FROM expected_machines
		WHERE pool_id = $1 AND machine_id > $2 ORDER BY machine_id LIMIT $3`, in.PoolID, after, in.Limit+1)
	if err != nil {
		return nil, store.Wrap(err)
	}
	items, cur := page.Trim(rows, in.Limit, func(m ExpectedMachine) string { return MachineCursors.Encode(m.MachineID) })
	return &page.Page[ExpectedMachine]{Items: items, Cursor: cur}, nil
}

// ForgetMachine removes an expected machine; nodes already admitted stay.
func ForgetMachine(ctx context.Context, q store.Q, in *MachineRefInput) (*RemovedCount, error) {
	notFound := errs.E(errs.NotFound, "machine %s not found", in.MachineID)
	var poolID string
	err := q.GetContext(ctx, &poolID, `SELECT pool_id FROM expected_machines WHERE machine_id = $1`, in.MachineID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	if _, err := ownedPool(ctx, q, in.TenantID, poolID, takeFromPool); err != nil {
		if errs.CodeOf(err) == errs.NotFound {
			return nil, notFound // another tenant's machine
		}
		return nil, err
	}
	res, err := q.ExecContext(ctx, `DELETE FROM expected_machines WHERE machine_id = $1 AND pool_id = $2`, in.MachineID, poolID)
	if err != nil {
		return nil, store.Wrap(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil, notFound // forgotten by another call meanwhile
	}
	return &RemovedCount{Removed: 1}, nil
}

// AllowKey puts an endorsement key on the pool's allow-list, named by its
// hash or by the PEM public key (whose hash is computed here), or a CA
// certificate that admits the EKs whose certificates chain to it.
func AllowKey(ctx context.Context, q store.Q, in *KeyAllowInput) (*AllowedKey, error) {
	var hash string
	kind := KeyKindEK
	var cert []byte
	n := 0
	for _, p := range []*string{in.EKHash, in.EKPublicKey, in.CACertificate} {
		if p != nil {
			n++
		}
	}
	switch {
	case n > 1:
		path := "ekPublicKey"
		if in.CACertificate != nil {
			path = "caCertificate"
		}
		return nil, errs.Invalid(path, "pass one of ekHash, ekPublicKey and caCertificate")
	case in.EKHash != nil:
		hash = *in.EKHash
	case in.EKPublicKey != nil:
		// The keys the tpm attestor can challenge (RSA 2048, P-256).
		ek, err := pki.ParseEK("ekPublicKey", *in.EKPublicKey)
		if err != nil {
			return nil, err
		}
		hash = ek.Hash
	case in.CACertificate != nil:
		c, h, err := pki.ParseCACertificate("caCertificate", *in.CACertificate)
		if err != nil {
			return nil, err
		}
		hash, kind, cert = h, KeyKindCA, c.Raw
	default:
		return nil, errs.Invalid("ekHash", "pass ekHash, ekPublicKey or caCertificate")
	}
	if _, err := ownedPool(ctx, q, in.TenantID, in.PoolID, addToPool); err != nil {
		return nil, err
	}
	var k AllowedKey
	err := q.GetContext(ctx, &k, `INSERT INTO tpm_allowed_keys (pool_id, ek_hash, kind, certificate, description) VALUES ($1, $2, $3, $4, $5)
		RETURNING `+keyCols, in.PoolID, hash, kind, cert, in.Description)
	if store.IsUnique(err, "tpm_allowed_keys_pkey") {
		// the field the caller sent (it named ekHash beside an ekPublicKey)
		path := "ekHash"
		switch {
		case kind == KeyKindCA:
			path = "caCertificate"
		case in.EKPublicKey != nil:
			path = "ekPublicKey"
		}
		return nil, errs.E(errs.Conflict, "%s is already on the allow-list of pool %s", hash, in.PoolID).With("path", path)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	k.fix()
	return &k, nil
}

// ListKeys pages a pool's allow-list by hash.
func ListKeys(ctx context.Context, q store.Q, in *PoolListInput) (*page.Page[AllowedKey], error) {
	var after string
	if _, err := KeyCursors.Decode(in.Cursor, &after); err != nil {
		return nil, err
	}
	if _, err := ownedPool(ctx, q, in.TenantID, in.PoolID, readPool); err != nil {
		return nil, err
	}
	rows := []AllowedKey{}
	err := q.SelectContext(ctx, &rows, `SELECT `+keyCols+` FROM tpm_allowed_keys
		WHERE pool_id = $1 AND ek_hash > $2 ORDER BY ek_hash LIMIT $3`, in.PoolID, after, in.Limit+1)
	if err != nil {
		return nil, store.Wrap(err)
	}
	for i := range rows {
		rows[i].fix()
	}
	items, cur := page.Trim(rows, in.Limit, func(k AllowedKey) string { return KeyCursors.Encode(k.EKHash) })
	return &page.Page[AllowedKey]{Items: items, Cursor: cur}, nil
}

// DisallowKey takes a key off the allow-list.
func DisallowKey(ctx context.Context, q store.Q, in *KeyRefInput) (*RemovedCount, error) {
	if _, err := ownedPool(ctx, q, in.TenantID, in.PoolID, takeFromPool); err != nil {
		return nil, err
	}
	res, err := q.ExecContext(ctx, `DELETE FROM tpm_allowed_keys WHERE pool_id = $1 AND ek_hash = $2`, in.PoolID, in.EKHash)
	if err != nil {
		return nil, store.Wrap(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil, errs.E(errs.NotFound, "key %s is not allowed in pool %s", in.EKHash, in.PoolID)
	}
	return &RemovedCount{Removed: 1}, nil
}

// normUUID lowercases a UUID and puts the dashes in.
func normUUID(s string) string {
	s = strings.ToLower(strings.ReplaceAll(s, "-", ""))
	if len(s) != 32 {
		return s
	}
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}

// --- the graph's pages (Pool.machines, Pool.tpmKeys) ---------------------

// ownerReads is the visibility of a pool's expected machines and allowed
// keys (table alias x): the pool owner's readers of nodes (scope bound at
// param), as machines.list and tpmKeys.list decide on the owner.
func ownerReads(param string) string {
	return authz.Where(param, func(t string) string {
		return `EXISTS (SELECT 1 FROM pools p WHERE p.pool_id = x.pool_id AND p.tenant_id = ANY(` + t + `))`
	})
}

type poolMachineRow struct {
	Parent string `db:"parent_key"`
	Total  int    `db:"total_count"`
	ExpectedMachine
}

// MachinePagesByPool is machines.list's page of each pool (the owner's
// view), in one statement.
func MachinePagesByPool(ctx context.Context, q store.Q, scope authz.Scope, poolIDs []string, after string, limit int) (page.Rows[ExpectedMachine], error) {
	var rows []poolMachineRow
	err := q.SelectContext(ctx, &rows, `
		WITH t AS MATERIALIZED (
			SELECT t.parent, (SELECT count(*) FROM expected_machines x WHERE x.pool_id = t.parent AND `+ownerReads("$4")+`) AS total_count
			FROM unnest($1::text[]) AS t(parent))
		SELECT t.parent AS parent_key, t.total_count, y.*
		FROM t
		CROSS JOIN LATERAL (
			SELECT `+machineCols+` FROM expected_machines x WHERE x.pool_id = t.parent AND x.machine_id > $2
			  AND `+ownerReads("$4")+`
			ORDER BY x.machine_id LIMIT $3
		) y`, poolIDs, after, limit+1, scope.Arg())
	var r page.Rows[ExpectedMachine]
	for _, x := range rows {
		r.Parents, r.Totals, r.Items = append(r.Parents, x.Parent), append(r.Totals, x.Total), append(r.Items, x.ExpectedMachine)
	}
	return r, store.Wrap(err)
}

// CountMachinesByPool counts each pool's expected machines visible in scope.
func CountMachinesByPool(ctx context.Context, q store.Q, scope authz.Scope, poolIDs []string) (map[string]int, error) {
	return store.CountBy(ctx, q, `SELECT t.parent AS k,
			(SELECT count(*) FROM expected_machines x WHERE x.pool_id = t.parent AND `+ownerReads("$2")+`) AS n
		FROM unnest($1::text[]) AS t(parent)`, poolIDs, scope.Arg())
}

type poolKeyRow struct {
	Parent string `db:"parent_key"`
	Total  int    `db:"total_count"`
	AllowedKey
}

// KeyPagesByPool is tpmKeys.list's page of each pool (the owner's view),
// in one statement.
func KeyPagesByPool(ctx context.Context, q store.Q, scope authz.Scope, poolIDs []string, after string, limit int) (page.Rows[AllowedKey], error) {
	var rows []poolKeyRow
	err := q.SelectContext(ctx, &rows, `
		WITH t AS MATERIALIZED (
			SELECT t.parent, (SELECT count(*) FROM tpm_allowed_keys x WHERE x.pool_id = t.parent AND `+ownerReads("$4")+`) AS total_count
			FROM unnest($1::text[]) AS t(parent))
		SELECT t.parent AS parent_key, t.total_count, y.*
		FROM t
		CROSS JOIN LATERAL (
			SELECT `+keyCols+` FROM tpm_allowed_keys x WHERE x.pool_id = t.parent AND x.ek_hash > $2
			  AND `+ownerReads("$4")+`
			ORDER BY x.ek_hash LIMIT $3
		) y`, poolIDs, after, limit+1, scope.Arg())
	var r page.Rows[AllowedKey]
	for _, x := range rows {
		x.AllowedKey.fix()
		r.Parents, r.Totals, r.Items = append(r.Parents, x.Parent), append(r.Totals, x.Total), append(r.Items, x.AllowedKey)
	}
	return r, store.Wrap(err)
}

// CountKeysByPool counts each pool's allowed keys visible in scope.
func CountKeysByPool(ctx context.Context, q store.Q, scope authz.Scope, poolIDs []string) (map[string]int, error) {
	return store.CountBy(ctx, q, `SELECT t.parent AS k,
			(SELECT count(*) FROM tpm_allowed_keys x WHERE x.pool_id = t.parent AND `+ownerReads("$2")+`) AS n
		FROM unnest($1::text[]) AS t(parent)`, poolIDs, scope.Arg())
}
