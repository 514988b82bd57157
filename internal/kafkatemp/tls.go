package kafkatemp

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLSFiles are the PEM files of a cluster started with Options.TLS.
type TLSFiles struct {
	// CA is the certificate of the CA that signed the brokers' and the
	// client's certificates.
	CA string
	// ClientCert and ClientKey are a client certificate the brokers
	// accept (the SSL listener requires one: ssl.client.auth=required).
	ClientCert, ClientKey string
}

// TLS returns the cluster's PEM files; the zero value without Options.TLS.
func (c *Cluster) TLS() TLSFiles {
	if !c.opts.TLS {
		return TLSFiles{}
	}
	d := filepath.Join(c.dir, "tls")
	return TLSFiles{CA: filepath.Join(d, "ca.pem"), ClientCert: filepath.Join(d, "client.pem"), ClientKey: filepath.Join(d, "client-key.pem")}
}

// writeTLS generates the CA, a broker certificate for 127.0.0.1 and
// localhost and a client certificate, and returns the SSL listener's
// settings (PEM key stores: no keytool needed).
func (c *Cluster) writeTLS() (map[string]string, error) {
	d := filepath.Join(c.dir, "tls")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, fmt.Errorf("kafkatemp: %w", err)
	}
	caKey, caCert, caDER, err := newCA("kafkatemp CA")
	if err != nil {
		return nil, err
	}
	files := c.TLS()
	if err := writePEM(files.CA, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	brokerKey, brokerDER, err := newLeaf(caKey, caCert, "127.0.0.1", true)
	if err != nil {
		return nil, err
	}
	keystore := filepath.Join(d, "broker-keystore.pem")
	if err := writePEMs(keystore, []pemBlock{{"PRIVATE KEY", brokerKey}, {"CERTIFICATE", brokerDER}, {"CERTIFICATE", caDER}}); err != nil {
		return nil, err
	}
	clientKey, clientDER, err := newLeaf(caKey, caCert, "pgoutbox-client", false)
	if err != nil {
		return nil, err
	}
	if err := writePEM(files.ClientCert, "CERTIFICATE", clientDER); err != nil {
		return nil, err
	}
	if err := writePEM(files.ClientKey, "PRIVATE KEY", clientKey); err != nil {
		return nil, err
	}
	return map[string]string{
		"listener.name.ssl.ssl.keystore.type":       "PEM",
		"listener.name.ssl.ssl.keystore.location":   keystore,
		"listener.name.ssl.ssl.truststore.type":     "PEM",
		"listener.name.ssl.ssl.truststore.location": files.CA,
		"listener.name.ssl.ssl.client.auth":         "required",
	}, nil
}

// NewCA returns a fresh self-signed CA's certificate PEM, with a client
// certificate and key it signed: credentials the cluster's CA does not
// know, for tests of a refused handshake.
func NewCA(dir string) (TLSFiles, error) {
	caKey, caCert, caDER, err := newCA("another CA")
	if err != nil {
		return TLSFiles{}, err
	}
	f := TLSFiles{CA: filepath.Join(dir, "other-ca.pem"), ClientCert: filepath.Join(dir, "other-client.pem"), ClientKey: filepath.Join(dir, "other-client-key.pem")}
	key, der, err := newLeaf(caKey, caCert, "stranger", false)
	if err != nil {
		return TLSFiles{}, err
	}
	for _, w := range []struct {
		path, typ string
		der       []byte
	}{{f.CA, "CERTIFICATE", caDER}, {f.ClientCert, "CERTIFICATE", der}, {f.ClientKey, "PRIVATE KEY", key}} {
		if err := writePEM(w.path, w.typ, w.der); err != nil {
			return TLSFiles{}, err
		}
	}
	return f, nil
}

func newCA(name string) (*ecdsa.PrivateKey, *x509.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kafkatemp: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(30 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kafkatemp: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kafkatemp: CA certificate: %w", err)
	}
	return key, cert, der, nil
}

// newLeaf returns a PKCS#8 key and a certificate signed by the CA: a
// server certificate for 127.0.0.1 and localhost, or a client one.
func newLeaf(caKey *ecdsa.PrivateKey, ca *x509.Certificate, name string, server bool) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("kafkatemp: key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, fmt.Errorf("kafkatemp: serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(30 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("kafkatemp: certificate: %w", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("kafkatemp: key: %w", err)
	}
	return pkcs8, der, nil
}

type pemBlock struct {
	typ string
	der []byte
}

func writePEM(path, typ string, der []byte) error {
	return writePEMs(path, []pemBlock{{typ, der}})
}

func writePEMs(path string, blocks []pemBlock) error {
	var out []byte
	for _, b := range blocks {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: b.typ, Bytes: b.der})...)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		return fmt.Errorf("kafkatemp: %w", err)
	}
	return nil
}
