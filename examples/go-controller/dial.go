package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// maxRecvBytes bounds one received frame; cloudhub's own limit is 4 MiB by default
// (`maxFrameBytes`), plus the routing around the message.
const maxRecvBytes = 16 << 20

// dial creates a gRPC client for cloudhub's ControllerHub address ("https://host[:port]",
// port 443 when absent) over TLS that trusts only the CA certificates of caFile (PEM) and
// checks the server certificate against the URL's host. It does not connect yet: grpc-go
// connects on the first call.
func dial(address, caFile string) (*grpc.ClientConn, error) {
	u, err := url.Parse(address)
	if err != nil {
		return nil, fmt.Errorf("--cloudhub %q: %w", address, err)
	}
	if u.Scheme != "https" || u.Hostname() == "" {
		return nil, fmt.Errorf("--cloudhub %q: expected https://<host>[:<port>] (cloudhub serves TLS only)", address)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca-file: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--ca-file %s: no PEM certificate in it", caFile)
	}
	creds := credentials.NewTLS(&tls.Config{
		RootCAs:    roots,
		ServerName: u.Hostname(),
		MinVersion: tls.VersionTLS12,
	})
	return grpc.NewClient(
		"passthrough:///"+net.JoinHostPort(u.Hostname(), port),
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvBytes)),
	)
}
