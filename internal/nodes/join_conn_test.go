package nodes_test

import (
	"context"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/app"
	"github.com/bettercompute/computed/internal/nodes"
	"github.com/bettercompute/computed/internal/pools"
	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/fixture"
)

// A join takes one database connection: the CA is read in the join's own
// transaction, not on a second connection of the pool while the first is
// held (with every connection of a busy replica held by joins, none would
// ever be free for the CA).
func TestJoinNeedsOneConnection(t *testing.T) {
	t.Parallel()
	url := testkit.DBURL(t)
	db, err := store.OpenWith(context.Background(), url, store.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fixture.Must(nodes.EnsureCA(context.Background(), db)) // as the server does at start
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f := &fixture.F{T: t, DB: db, Reg: app.Registry(db, nil, nil, nil), Ctx: ctx}
	e := &env{F: f, acme: f.Tenant("acme")}
	e.pool = fixture.Must(pools.Create(ctx, db, &pools.CreateInput{TenantID: "acme", Name: "metal", Site: "fra1",
		GPUModel: "H100-SXM5-80GB", SharingMode: "exclusive", Kind: "bare-metal"})).PoolID
	r, err := fixture.Call[nodes.JoinResult](f, nil, "nodes.join", testkit.NewMachine(t).JoinBody(e.token(1)))
	if err != nil || r.Status != "admitted" {
		t.Fatalf("a join on a pool of one connection: %+v, %v", r, err)
	}
}
