package nodes

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"log/slog"

	"github.com/bettercompute/computed/internal/pki"
	"github.com/bettercompute/computed/internal/store"
)

// RecordNodeKeys records the key (key_fingerprint, migration 00025) of
// every live node that joined before the column, from its certificate,
// which is issued for its CSR's key: from then on a join with a new CSR of
// that key is CONFLICT, as for a node that joined after. Every replica's
// start runs it after the migrations; it changes only nodes without one,
// so once they are recorded it reads nothing. A live node whose key another
// live node holds already (two joined with one key before the column) is
// left without one and logged: a join finds it by its CSR, as before.
func RecordNodeKeys(ctx context.Context, q store.Q, log *slog.Logger) error {
	var rows []struct {
		NodeID string `db:"node_id"`
		Cert   string `db:"certificate"`
	}
	if err := q.SelectContext(ctx, &rows, `SELECT node_id, certificate FROM nodes
		WHERE key_fingerprint IS NULL AND state <> 'removed' ORDER BY node_id`); err != nil {
		return store.Wrap(err)
	}
	for _, r := range rows {
		var cert *x509.Certificate
		if b, _ := pem.Decode([]byte(r.Cert)); b != nil {
			cert, _ = x509.ParseCertificate(b.Bytes)
		}
		if cert == nil {
			log.WarnContext(ctx, "a node's certificate does not parse: its key is not recorded", "nodeId", r.NodeID)
			continue
		}
		_, err := q.ExecContext(ctx, `UPDATE nodes SET key_fingerprint = $2
			WHERE node_id = $1 AND key_fingerprint IS NULL AND state <> 'removed'`, r.NodeID, pki.KeyFingerprint(cert.RawSubjectPublicKeyInfo))
		if store.IsUnique(err, "nodes_key_fingerprint_key") {
			log.WarnContext(ctx, "a live node's key is another live node's too: it is not recorded, and joins find the node by its CSR", "nodeId", r.NodeID)
			continue
		}
		if err != nil {
			return store.Wrap(err)
		}
	}
	return nil
}
