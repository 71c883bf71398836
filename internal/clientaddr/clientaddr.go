// Package clientaddr decides a request's client address: the TCP peer's,
// or, only when the peer is a trusted proxy, the right-most untrusted hop
// of the forwarding header the proxies write (Forwarded, RFC 7239, or
// X-Forwarded-For). Every limit keyed by address, the request logs and the
// audit trail use the one address it decides.
//
// The header is untrusted input: a client can send anything in it, and
// the proxies in front append to what it sent. Only hops appended by
// trusted proxies are believed, so the walk goes from the peer leftwards
// while the hop it stands on is trusted; the first untrusted hop is the
// client. A hop that does not parse as an address (garbage, "unknown", an
// obfuscated identifier) stops the walk at the trusted proxy that wrote
// it: an address a client spoofed never reaches the limits.
package clientaddr

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// Header names a forwarding header.
type Header string

// The forwarding headers a trusted proxy may write.
const (
	XForwardedFor Header = "X-Forwarded-For"
	Forwarded     Header = "Forwarded"
)

// Resolver decides client addresses. Its zero value trusts no proxy: the
// client address is always the peer's.
type Resolver struct {
	// Trusted are the proxies' prefixes (COMPUTE_TRUSTED_PROXIES).
	Trusted []netip.Prefix
	// Header is the one header the trusted proxies write
	// (COMPUTE_FORWARDED_HEADER, default X-Forwarded-For); the other is
	// ignored, since a proxy passes on whatever a client put in a header it
	// does not write itself.
	Header Header
}

// MaxHops bounds the hops read from a header (a longer chain is cut at its
// right-most MaxHops: the walk never needs more than the proxies in front).
const MaxHops = 32

// ParsePrefixes reads a comma-separated list of CIDRs or single addresses.
func ParsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: want a CIDR such as 10.0.0.0/8 or an address", f)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// ParseHeader reads COMPUTE_FORWARDED_HEADER.
func ParseHeader(s string) (Header, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "x-forwarded-for":
		return XForwardedFor, nil
	case "forwarded":
		return Forwarded, nil
	}
	return "", fmt.Errorf("forwarded header %q: want X-Forwarded-For or Forwarded", s)
}

func (r *Resolver) trusted(a netip.Addr) bool {
	for _, p := range r.Trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Resolve returns the client address of a request from peer (its
// RemoteAddr, "host:port") and its headers.
func (r *Resolver) Resolve(peer string, h http.Header) netip.Addr {
	addr, ok := parseHop(peer)
	if !ok {
		// net/http always sets an ip:port; anything else (a unix socket,
		// a test) is one unknown client.
		return netip.IPv4Unspecified()
	}
	if len(r.Trusted) == 0 || !r.trusted(addr) {
		return addr
	}
	var hops []string
	if r.Header == Forwarded {
		hops = forwardedFors(h.Values("Forwarded"))
	} else {
		hops = xffHops(h.Values("X-Forwarded-For"))
	}
	for i := len(hops) - 1; i >= 0 && r.trusted(addr); i-- {
		next, ok := parseHop(hops[i])
		if !ok {
			break
		}
		addr = next
	}
	return addr
}

// xffHops splits X-Forwarded-For values (one or several header lines) into
// their hops, keeping the right-most MaxHops.
func xffHops(values []string) []string {
	var hops []string
	for _, v := range values {
		for _, f := range strings.Split(v, ",") {
			hops = append(hops, strings.TrimSpace(f))
		}
	}
	if len(hops) > MaxHops {
		hops = hops[len(hops)-MaxHops:]
	}
	return hops
}

// forwardedFors reads the for= parameter of every element of Forwarded
// values (RFC 7239: elements separated by commas, pairs by semicolons,
// values a token or a quoted string), keeping the right-most MaxHops. An
// element without for= is a hop that says nothing ("").
func forwardedFors(values []string) []string {
	var hops []string
	for _, v := range values {
		for _, elem := range splitQuoted(v, ',') {
			hop := ""
			for _, pair := range splitQuoted(elem, ';') {
				k, val, ok := strings.Cut(pair, "=")
				if !ok || !strings.EqualFold(strings.TrimSpace(k), "for") {
					continue
				}
				hop = unquote(strings.TrimSpace(val))
			}
			hops = append(hops, hop)
		}
	}
	if len(hops) > MaxHops {
		hops = hops[len(hops)-MaxHops:]
	}
	return hops
}

// splitQuoted splits s at sep outside double quotes.
func splitQuoted(s string, sep byte) []string {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && quoted:
			i++
		case c == '"':
			quoted = !quoted
		case c == sep && !quoted:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// unquote removes a quoted string's quotes and backslash escapes.
func unquote(s string) string {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s
	}
	s = s[1 : len(s)-1]
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseHop reads one hop: an address, an address with a port
// ("192.0.2.1:80", "[2001:db8::1]:443") or a bracketed IPv6 address
// ("[2001:db8::1]", as Forwarded writes it). IPv4-mapped IPv6 addresses
// are the IPv4 address; zones are dropped.
func parseHop(s string) (netip.Addr, bool) {
	if s == "" || len(s) > 64 {
		return netip.Addr{}, false
	}
	var a netip.Addr
	if ap, err := netip.ParseAddrPort(s); err == nil {
		a = ap.Addr()
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		x, err := netip.ParseAddr(s[1 : len(s)-1])
		if err != nil || !x.Is6() {
			return netip.Addr{}, false
		}
		a = x
	} else if x, err := netip.ParseAddr(s); err == nil {
		a = x
	} else {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}
