package e2e

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/server"
	"github.com/bettercompute/computed/internal/testkit"
)

// Queries and mutations wait for an execution slot
// (Config.GraphQLConcurrency). With one slot held by a query stuck in its
// database read, another query waits, and past its deadline answers
// UNAVAILABLE saying the server is busy; once the slot is free, queries run
// again. (Subscriptions never take a slot: the subscription tests run their
// events through the same server.)
func TestGraphQLExecutionsWaitForASlot(t *testing.T) {
	t.Parallel()
	e := testkit.StartWith(t, testkit.Options{Config: server.Config{GraphQLConcurrency: 1, RequestTimeout: time.Second}})
	acme := newTenant(t, e, "acme")
	newProject(t, e, acme.Member.Token, "acme", "web")
	const q = `{ tenant(tenantId: "acme") { projects(first: 5) { totalCount } } }`

	entered, release := make(chan struct{}), make(chan struct{})
	var released sync.Once
	free := func() { released.Do(func() { close(release) }) }
	t.Cleanup(free) // before the server's cleanup, which waits for the held query
	var once sync.Once
	e.OnStatement(func(sql string) {
		if strings.Contains(sql, "FROM projects") {
			first := false
			once.Do(func() { first = true; close(entered) })
			if first { // only the first query is held in its read
				<-release
			}
		}
	})
	first := make(chan struct{})
	go func() {
		defer close(first)
		e.GraphQL(acme.Viewer.Token, q, nil) // holds the one slot until released
	}()
	<-entered
	start := time.Now()
	gqlExpect(t, e.GraphQL(acme.Viewer.Token, q, nil), "UNAVAILABLE", anyPath)
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Fatalf("the second query did not wait for the slot (%v)", waited)
	}
	e.OnStatement(nil)
	free()
	<-first
	if d := gqlOK(t, e.GraphQL(acme.Viewer.Token, q, nil)); dig(t, d, "tenant", "projects", "totalCount") != float64(1) {
		t.Fatalf("after the slot is free: %v", d)
	}
}
