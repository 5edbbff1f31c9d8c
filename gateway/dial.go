package gateway

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
)

// errInternal refuses a name that resolves only to addresses the egress
// proxy never dials by name (internalAddr).
var errInternal = errors.New("gateway: the host resolves to a loopback, link-local, private or the host's own address")

// Resolver looks up the addresses of a host name; *net.Resolver is one.
// The egress proxy resolves each name once per dial through it and dials
// the address it checked, never the name.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Addresses a name is never dialled at besides those netip classifies:
// 0.0.0.0/8 ("this network", which Linux dials locally), the shared
// address space of carrier-grade NAT (RFC 6598) and the limited
// broadcast.
var internalPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("255.255.255.255/32"),
}

// internalAddr says whether ip is one the egress proxy never dials by
// name: loopback, link-local (169.254.0.0/16 with the cloud metadata
// address, fe80::/10), private (RFC 1918, fc00::/7), carrier-grade NAT,
// unspecified, multicast, or an address of one of the host's own
// interfaces (own).
func internalAddr(ip netip.Addr, own map[netip.Addr]bool) bool {
	ip = ip.Unmap()
	if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsPrivate() || ip.IsUnspecified() ||
		ip.IsMulticast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || own[ip.WithZone("")] {
		return true
	}
	for _, p := range internalPrefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// ownAddrs is the set of the host's interface addresses (empty when they
// cannot be listed: loopback, link-local and private ones are refused
// regardless).
func ownAddrs() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			out[pfx.Addr().Unmap().WithZone("")] = true
		}
	}
	return out
}

// dialTarget dials an egress target that its grant's allowlist matched:
// the one dialer of CONNECT and of absolute-URI requests. An IP literal
// was named by the list as it is and is dialled as it is. A name is
// resolved here, on every dial, and only the addresses it resolved to
// that are not internal (internalAddr) are dialled, by address: the name
// is never resolved again, so it cannot rebind between the check and the
// dial. A name with no other address is refused (errInternal). The
// dialer never reaches the gateway itself (errSelf).
func (g *Gateway) dialTarget(ctx context.Context, t target) (net.Conn, error) {
	if t.name == "" {
		return g.dialer.DialContext(ctx, "tcp", t.addr())
	}
	ips, err := g.resolver.LookupNetIP(ctx, "ip", t.name)
	if err != nil {
		return nil, err
	}
	own := ownAddrs()
	var first error
	for _, ip := range ips {
		if internalAddr(ip, own) && !g.reachInternal {
			continue
		}
		c, err := g.dialer.DialContext(ctx, "tcp", net.JoinHostPort(ip.Unmap().String(), strconv.Itoa(t.port)))
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if first == nil {
		return nil, errInternal
	}
	return nil, first
}

// dialAddr is the egress transport's DialContext: the address is the
// checked target's (forward rewrites the request's host to it), dialled
// as CONNECT dials.
func (g *Gateway) dialAddr(ctx context.Context, _, addr string) (net.Conn, error) {
	t, ok := parseTarget(addr, 80)
	if !ok {
		return nil, errInternal
	}
	return g.dialTarget(ctx, t)
}

// refused says whether an egress dial error is a refusal of the gateway's
// (403), not a failure to reach the target (502).
func refused(err error) bool {
	return errors.Is(err, errSelf) || errors.Is(err, errInternal)
}
