# Better Compute API server.
#   make run       build and serve on the embedded default (PostgreSQL from the machine's binaries)
#   make test      every test, against PostgreSQL clusters the tests start themselves
SHELL := /bin/bash
GO    ?= go
export GOFLAGS ?= -buildvcs=false

.PHONY: run build test deps browser tpm-deps generate examples check-generated lint bench loadtest postgraphile-deps fuzz audit-deps ci clean

# The PostgreSQL server binaries: PATH, or Debian's /usr/lib/postgresql/*/bin; installed with apt when missing.
deps:
	@if ! command -v postgres >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then \
		echo "installing PostgreSQL server binaries (apt)"; \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
		else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; fi; \
	fi

# Headless Chromium for the GraphiQL browser test (Debian's package).
browser:
	@if ! command -v chromium >/dev/null 2>&1; then \
		echo "installing chromium (apt)"; \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; fi; \
	fi

# The TPM 2.0 reference simulator the tpm attestor's tests run (go-tpm-tools,
# built with cgo) links OpenSSL's libcrypto: Debian's libssl-dev.
tpm-deps:
	@if ! echo '#include <openssl/evp.h>' | $${CC:-cc} -E -x c - >/dev/null 2>&1; then \
		echo "installing libssl-dev (apt)"; \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libssl-dev >/dev/null; \
		else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libssl-dev >/dev/null; fi; \
	fi

build:
	$(GO) build -o bin/computed ./cmd/computed

run: deps build
	./bin/computed serve

# Node packages for the GraphQL-over-HTTP audit and the graphql-transport-ws client test.
audit-deps:
	@if command -v npm >/dev/null 2>&1 && { [ ! -d test/clients/node_modules ] || [ test/clients/package-lock.json -nt test/clients/node_modules ]; }; then \
		(cd test/clients && npm ci --no-audit --no-fund --loglevel=error); fi

# -timeout: the e2e package takes 4-7 minutes on a quiet machine; go test's
# default of 10 minutes per package was reached once with other servers
# loading the 2 cores (load average 15), and a timeout says nothing of the code.
test: deps browser audit-deps tpm-deps
	$(GO) test -count=1 -timeout 25m ./...

generate:
	$(GO) tool gqlgen generate
	$(GO) run ./internal/gqlfast
	$(GO) run ./internal/docgen/cmd

# Records one request and answer per method from a run of the e2e and
# workflow tests into docs/api/examples.json (the method pages show them),
# then regenerates the docs. Run it after changing a method's input or output.
examples: deps audit-deps tpm-deps
	rm -f docs/api/examples.json
	COMPUTE_RECORD_EXAMPLES=$(CURDIR)/docs/api/examples.json $(GO) test -count=1 ./internal/e2e/ ./internal/workflows/
	$(GO) run ./internal/docgen/cmd

# Fails when generated code or documents differ from what is committed.
check-generated: generate
	@git diff --exit-code -- graph resolvers docs/api schema.graphql || (echo "generated files are stale: run make generate and commit" && exit 1)
	@test -z "$$(git status --porcelain -- graph resolvers docs/api schema.graphql)" || (git status --porcelain -- graph resolvers docs/api schema.graphql; echo "untracked generated files" && exit 1)

lint: tpm-deps
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt would change these files" && exit 1)
	$(GO) vet ./...

bench: deps tpm-deps
	$(GO) test -run='^$$' -bench=. -benchmem -count=1 ./...

# PostGraphile v5 for the load benchmark's comparison (npm registry).
postgraphile-deps:
	@if [ ! -d test/postgraphile/node_modules ] || [ test/postgraphile/package-lock.json -nt test/postgraphile/node_modules ]; then \
		(cd test/postgraphile && npm ci --no-audit --no-fund --loglevel=error); fi

# The load benchmark (not part of make test: several minutes): the server as
# a separate process and PostGraphile on the same seeded fleet, at 8 and 32
# connections, alternating. The fleet is seeded once into .loadtest/.
# LOADTEST_FLAGS passes flags (go run ./cmd/loadtest -h).
loadtest: deps build postgraphile-deps
	$(GO) build -o bin/loadtest ./cmd/loadtest
	./bin/loadtest $(LOADTEST_FLAGS)

# A few seconds of each fuzz target (seed corpora live in testdata/fuzz).
# A few seconds of each target, as a count of inputs rather than a time:
# with -fuzztime=5s Go's fuzzing coordinator sometimes ends a clean run
# with "context deadline exceeded" on a loaded machine (seen in CI here).
fuzz: tpm-deps
	$(GO) test -run='^$$' -fuzz=FuzzDecodeInput -fuzztime=7500x ./internal/registry/
	$(GO) test -run='^$$' -fuzz=FuzzDecodeParams -fuzztime=10000x ./internal/server/
	$(GO) test -run='^$$' -fuzz=FuzzCheckDocument -fuzztime=6000x ./internal/server/
	$(GO) test -run='^$$' -fuzz=FuzzLiteralPath -fuzztime=10000x ./internal/server/
	$(GO) test -run='^$$' -fuzz=FuzzDecodeSections -fuzztime=15000x ./internal/inventory/
	$(GO) test -run='^$$' -fuzz=FuzzParseCSR -fuzztime=15000x ./internal/pki/
	$(GO) test -run='^$$' -fuzz=FuzzEKHash -fuzztime=15000x ./internal/pki/
	$(GO) test -run='^$$' -fuzz=FuzzMatchesECMA -fuzztime=2000x ./internal/pattern/
	$(GO) test -run='^$$' -fuzz=FuzzResolve -fuzztime=50000x ./internal/clientaddr/
	$(GO) test -run='^$$' -fuzz=FuzzParseAKPublic -fuzztime=12500x ./internal/pki/
	$(GO) test -run='^$$' -fuzz=FuzzEKCertificate -fuzztime=10000x ./internal/pki/
	$(GO) test -run='^$$' -fuzz=FuzzCursorKey -fuzztime=40000x ./internal/audit/
	$(GO) test -run='^$$' -fuzz=FuzzPolicy -fuzztime=10000x ./internal/pools/
	$(GO) test -run='^$$' -fuzz=FuzzParseCursor -fuzztime=12500x ./internal/events/
	$(GO) test -run='^$$' -fuzz=FuzzDuplicate -fuzztime=15000x ./internal/jsonkeys/
	$(GO) test -run='^$$' -fuzz=FuzzBounded -fuzztime=20000x ./internal/jsonnum/
	$(GO) test -run='^$$' -fuzz='FuzzInt$$' -fuzztime=20000x ./internal/jsonnum/
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=15000x ./internal/relay/
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=15000x ./internal/rfc3339/
	$(GO) test -run='^$$' -fuzz=FuzzDecode -fuzztime=15000x ./internal/page/
	$(GO) test -run='^$$' -fuzz=FuzzLoneSurrogate -fuzztime=10000x ./internal/jsonkeys/
	$(GO) test -run='^$$' -fuzz=FuzzIntegral -fuzztime=5000x ./internal/jsonnum/

ci: lint check-generated test fuzz

clean:
	rm -rf bin
