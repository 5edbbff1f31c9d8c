package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"
)

// caValidity is how long a grant's certificate authority and its leaves
// are valid (from an hour before the grant, for a sandbox's clock that is
// behind).
const caValidity = 24 * time.Hour

// maxLeaves bounds a grant's cache of leaf certificates (a "*.domain"
// entry with rules could name many hosts): beyond it the cache starts
// over.
const maxLeaves = 1024

// authority is a grant's certificate authority: made in memory for a
// grant with method or path rules, it signs the leaf certificates the
// gateway presents to the sandbox for the hosts whose TLS it terminates.
// Its key never leaves it; only its certificate goes to the sandbox
// (Grant.CACert).
type authority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	leafKey *ecdsa.PrivateKey // one key for every leaf of the grant
	pem     []byte

	mu     sync.Mutex
	leaves map[target]*tls.Certificate
}

// newAuthority makes a grant's authority, ECDSA P-256, valid for
// caValidity, with name constraints that permit only the hosts of the
// entries with rules (names and their subdomains; IP literals).
func newAuthority(id string, entries []allowEntry) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"outpost"}, CommonName: "outpost egress CA " + id},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	constrain(tmpl, entries)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key, leafKey: leafKey, leaves: map[target]*tls.Certificate{},
		pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// constrain limits the names the authority may sign for to the hosts of
// the entries with rules: each name (a "*.domain" entry's domain, which
// also permits its subdomains) and each IP literal. Without an IP entry
// no IP address is permitted; without a name entry only ".invalid" is
// (RFC 6761: never a real host).
func constrain(tmpl *x509.Certificate, entries []allowEntry) {
	for _, e := range entries {
		switch {
		case !e.restricted():
		case e.ip.IsValid():
			bits := e.ip.BitLen()
			tmpl.PermittedIPRanges = append(tmpl.PermittedIPRanges, &net.IPNet{IP: e.ip.AsSlice(), Mask: net.CIDRMask(bits, bits)})
		default:
			tmpl.PermittedDNSDomains = append(tmpl.PermittedDNSDomains, e.name)
		}
	}
	if len(tmpl.PermittedDNSDomains) == 0 {
		tmpl.PermittedDNSDomains = []string{"invalid"}
	}
	if len(tmpl.PermittedIPRanges) == 0 {
		tmpl.ExcludedIPRanges = []*net.IPNet{{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, {IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}}
	}
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// leaf is the certificate the gateway presents for t, made on first use
// and cached for the grant.
func (a *authority) leaf(t target) (*tls.Certificate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.leaves[t]; ok {
		return c, nil
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"outpost"}},
		NotBefore:    a.cert.NotBefore,
		NotAfter:     a.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if t.name != "" {
		tmpl.Subject.CommonName, tmpl.DNSNames = t.name, []string{t.name}
	} else {
		tmpl.IPAddresses = []net.IP{t.ip.AsSlice()}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &a.leafKey.PublicKey, a.key)
	if err != nil {
		return nil, errors.New("gateway: cannot issue the host's certificate")
	}
	c := &tls.Certificate{Certificate: [][]byte{der, a.cert.Raw}, PrivateKey: a.leafKey}
	if len(a.leaves) >= maxLeaves {
		clear(a.leaves)
	}
	a.leaves[t] = c
	return c, nil
}

// CACert is the PEM certificate of the grant's certificate authority,
// which the sandbox must trust for the hosts whose TLS the gateway
// terminates (those with method or path rules); nil when the grant has
// no rules. The authority's key never leaves the gateway.
func (gr *Grant) CACert() []byte {
	if gr.ca == nil {
		return nil
	}
	return gr.ca.pem
}

// CABundle is CACert followed by the host's system roots (the first of
// the host's SSL_CERT_FILE and the usual bundle files that exists): the
// file for the variables that replace a client's roots rather than add
// to them (TrustVariables). nil when the grant has no rules.
func (gr *Grant) CABundle() []byte {
	if gr.ca == nil {
		return nil
	}
	return append(append(append([]byte(nil), gr.ca.pem...), '\n'), systemBundle()...)
}

// TrustVariables are the variables that make the sandbox's clients trust
// a grant's authority: caFile holds CACert, bundleFile CABundle (paths
// inside the sandbox). Node adds NODE_EXTRA_CA_CERTS to its roots;
// Python's requests (REQUESTS_CA_BUNDLE), Python's ssl, OpenSSL and Go
// (SSL_CERT_FILE), curl (CURL_CA_BUNDLE) and git (GIT_SSL_CAINFO) use
// the bundle in place of their roots.
func TrustVariables(caFile, bundleFile string) map[string]string {
	return map[string]string{
		"NODE_EXTRA_CA_CERTS": caFile,
		"REQUESTS_CA_BUNDLE":  bundleFile,
		"SSL_CERT_FILE":       bundleFile,
		"CURL_CA_BUNDLE":      bundleFile,
		"GIT_SSL_CAINFO":      bundleFile,
	}
}

// systemBundle is the host's PEM bundle of system roots, or nil.
var systemBundle = sync.OnceValue(func() []byte {
	files := []string{
		"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Alpine
		"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL
		"/etc/ssl/ca-bundle.pem",                            // openSUSE
		"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
		"/etc/ssl/cert.pem",                                 // macOS, Alpine
	}
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		files = append([]string{f}, files...)
	}
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && len(b) > 0 {
			return b
		}
	}
	return nil
})

// isServerName says whether a TLS server name is t's (an IP target's
// client sends none).
func (t target) isServerName(sni string) bool {
	if sni == "" {
		return true
	}
	if ip, err := netip.ParseAddr(sni); err == nil {
		return ip.Unmap() == t.ip
	}
	return t.name != "" && normalName(sni) == t.name
}
