package clientaddr

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

func resolver(t testing.TB, trusted string, h Header) *Resolver {
	t.Helper()
	p, err := ParsePrefixes(trusted)
	if err != nil {
		t.Fatal(err)
	}
	return &Resolver{Trusted: p, Header: h}
}

func TestResolve(t *testing.T) {
	cases := []struct {
		name, trusted string
		header        Header
		peer          string
		h             map[string][]string
		want          string
	}{
		{"no proxies trusted: the peer", "", XForwardedFor, "198.51.100.7:5000", map[string][]string{"X-Forwarded-For": {"203.0.113.9"}}, "198.51.100.7"},
		{"untrusted peer, spoofed header: the peer", "10.0.0.0/8", XForwardedFor, "198.51.100.7:5000", map[string][]string{"X-Forwarded-For": {"10.0.0.1, 203.0.113.9"}}, "198.51.100.7"},
		{"trusted peer: its hop", "10.0.0.0/8", XForwardedFor, "10.1.2.3:5000", map[string][]string{"X-Forwarded-For": {"203.0.113.9"}}, "203.0.113.9"},
		{"client's spoofed hops left of the real one are ignored", "10.0.0.0/8", XForwardedFor, "10.1.2.3:5000", map[string][]string{"X-Forwarded-For": {"1.1.1.1, 10.9.9.9, 203.0.113.9"}}, "203.0.113.9"},
		{"two trusted proxies", "10.0.0.0/8", XForwardedFor, "10.1.2.3:5000", map[string][]string{"X-Forwarded-For": {"1.1.1.1, 203.0.113.9, 10.2.0.1"}}, "203.0.113.9"},
		{"several header lines are one list", "10.0.0.0/8", XForwardedFor, "10.1.2.3:5000", map[string][]string{"X-Forwarded-For": {"1.1.1.1", "203.0.113.9, 10.2.0.1"}}, "203.0.113.9"},
		{"garbage hop stops at the proxy", "10.0.0.0/8", XForwardedFor, "10.1.2.3:5000", map[string][]string{"X-Forwarded-For": {"203.0.113.9, nonsense"}}, "10.1.2.3"},
		{"all hops trusted: the left-most", "10.0.0.0/8", XForwardedFor, "10.1.2.3:5000", map[string][]string{"X-Forwarded-For": {"10.7.7.7, 10.2.0.1"}}, "10.7.7.7"},
		{"hop with a port", "10.0.0.0/8", XForwardedFor, "10.1.2.3:5000", map[string][]string{"X-Forwarded-For": {"203.0.113.9:4711"}}, "203.0.113.9"},
		{"IPv6 peer and hop", "2001:db8:ffff::/48", XForwardedFor, "[2001:db8:ffff::1]:443", map[string][]string{"X-Forwarded-For": {"2001:db8::77"}}, "2001:db8::77"},
		{"IPv4-mapped hop", "10.0.0.0/8", XForwardedFor, "10.1.2.3:5000", map[string][]string{"X-Forwarded-For": {"::ffff:203.0.113.9"}}, "203.0.113.9"},
		{"no header from a trusted peer: the peer", "10.0.0.0/8", XForwardedFor, "10.1.2.3:5000", nil, "10.1.2.3"},
		{"Forwarded ignored when X-Forwarded-For is configured", "10.0.0.0/8", XForwardedFor, "10.1.2.3:5000", map[string][]string{"Forwarded": {"for=1.1.1.1"}, "X-Forwarded-For": {"203.0.113.9"}}, "203.0.113.9"},
		{"Forwarded", "10.0.0.0/8", Forwarded, "10.1.2.3:5000", map[string][]string{"Forwarded": {`for=1.1.1.1, for="[2001:db8::5]:4711";proto=https;by=10.1.2.3`}}, "2001:db8::5"},
		{"Forwarded, X-Forwarded-For ignored", "10.0.0.0/8", Forwarded, "10.1.2.3:5000", map[string][]string{"Forwarded": {"for=203.0.113.9"}, "X-Forwarded-For": {"1.1.1.1"}}, "203.0.113.9"},
		{"Forwarded, quoted with port, trusted chain", "10.0.0.0/8", Forwarded, "10.1.2.3:5000", map[string][]string{"Forwarded": {`for="203.0.113.9:80", for=10.2.0.1`}}, "203.0.113.9"},
		{"Forwarded unknown stops at the proxy", "10.0.0.0/8", Forwarded, "10.1.2.3:5000", map[string][]string{"Forwarded": {"for=203.0.113.9, for=unknown"}}, "10.1.2.3"},
		{"Forwarded obfuscated stops at the proxy", "10.0.0.0/8", Forwarded, "10.1.2.3:5000", map[string][]string{"Forwarded": {"for=_hidden"}}, "10.1.2.3"},
		{"Forwarded element without for stops at the proxy", "10.0.0.0/8", Forwarded, "10.1.2.3:5000", map[string][]string{"Forwarded": {"for=203.0.113.9, proto=https"}}, "10.1.2.3"},
		{"Forwarded quoted comma", "10.0.0.0/8", Forwarded, "10.1.2.3:5000", map[string][]string{"Forwarded": {`for=203.0.113.9;x="a,b"`}}, "203.0.113.9"},
		{"a single trusted address", "10.1.2.3", XForwardedFor, "10.1.2.3:5000", map[string][]string{"X-Forwarded-For": {"203.0.113.9"}}, "203.0.113.9"},
		{"a neighbour of the single trusted address is not trusted", "10.1.2.3", XForwardedFor, "10.1.2.4:5000", map[string][]string{"X-Forwarded-For": {"203.0.113.9"}}, "10.1.2.4"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := resolver(t, c.trusted, c.header)
			h := http.Header{}
			for k, vs := range c.h {
				for _, v := range vs {
					h.Add(k, v)
				}
			}
			if got := r.Resolve(c.peer, h); got.String() != c.want {
				t.Fatalf("got %s, want %s", got, c.want)
			}
		})
	}
}

func TestParsePrefixes(t *testing.T) {
	p, err := ParsePrefixes(" 10.0.0.0/8, 192.168.1.7 ,2001:db8::/32,")
	if err != nil || len(p) != 3 || p[1].String() != "192.168.1.7/32" {
		t.Fatalf("%v %v", p, err)
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "10.0.0"} {
		if _, err := ParsePrefixes(bad); err == nil {
			t.Fatalf("%q parsed", bad)
		}
	}
	if _, err := ParseHeader("x-forwarded-for"); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseHeader("X-Real-IP"); err == nil {
		t.Fatal("X-Real-IP accepted")
	}
}

// FuzzResolve: whatever a client sends, the client address is the peer
// when the peer is untrusted, and otherwise the peer or one of the hops the
// header names; it never panics and is always a valid address.
func FuzzResolve(f *testing.F) {
	f.Add("10.1.2.3:5000", "203.0.113.9, 10.2.0.1", `for="[2001:db8::5]:4711";proto=https, for=10.2.0.1`)
	f.Add("198.51.100.7:1", "1.1.1.1", "for=1.1.1.1")
	f.Add("[2001:db8:ffff::1]:443", `"x, y"`, `for="\"[::1]"; by=x`)
	f.Add("10.0.0.1:1", strings.Repeat("10.0.0.2,", 40), strings.Repeat("for=10.0.0.2,", 40))
	trusted, _ := ParsePrefixes("10.0.0.0/8, 2001:db8:ffff::/48")
	f.Fuzz(func(t *testing.T, peer, xff, fwd string) {
		h := http.Header{"X-Forwarded-For": {xff}, "Forwarded": {fwd}}
		for _, hdr := range []Header{XForwardedFor, Forwarded} {
			r := &Resolver{Trusted: trusted, Header: hdr}
			got := r.Resolve(peer, h)
			if !got.IsValid() {
				t.Fatalf("invalid address for %q %q %q", peer, xff, fwd)
			}
			p, ok := parseHop(peer)
			if !ok {
				if got != netip.IPv4Unspecified() {
					t.Fatalf("unparsable peer %q gave %s", peer, got)
				}
				continue
			}
			if !r.trusted(p) {
				if got != p {
					t.Fatalf("untrusted peer %s: the header moved the address to %s", p, got)
				}
				continue
			}
			if got == p {
				continue
			}
			var hops []string
			if hdr == Forwarded {
				hops = forwardedFors(h.Values("Forwarded"))
			} else {
				hops = xffHops(h.Values("X-Forwarded-For"))
			}
			found := false
			for _, s := range hops {
				if a, ok := parseHop(s); ok && a == got {
					found = true
				}
			}
			if !found {
				t.Fatalf("%s is neither the peer nor a hop of %q", got, hops)
			}
			if again := r.Resolve(peer, h); again != got {
				t.Fatalf("not deterministic: %s then %s", got, again)
			}
		}
	})
}
