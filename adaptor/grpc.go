package adaptor

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// Files Crossplane mounts into a function's TLS directory.
const (
	tlsCertFile = "tls.crt"
	tlsKeyFile  = "tls.key"
	tlsCAFile   = "ca.crt"
)

// DefaultMaxRecvMsgSize is the largest request accepted. gRPC's default of
// 4 MiB is too small for composites with many composed resources, whose
// observed and desired states both travel in one request.
const DefaultMaxRecvMsgSize = 64 << 20

// Server is the gRPC server of the adaptor with its health service.
type Server struct {
	*grpc.Server
	Health *health.Server
}

// NewServer returns a gRPC server offering f over the v1 and v1beta1
// FunctionRunnerService, the standard health service (NOT_SERVING until the
// caller sets it) and server reflection. creds may be nil for plaintext.
func NewServer(f *Function, creds credentials.TransportCredentials, maxRecvMsgSize int) *Server {
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(maxRecvMsgSize), grpc.MaxSendMsgSize(maxRecvMsgSize)}
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	s := grpc.NewServer(opts...)
	Register(s, f)
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s, h)
	reflection.Register(s)
	return &Server{Server: s, Health: h}
}

// SetServing marks the server (and every service) as able to run calls, or
// not.
func (s *Server) SetServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.Health.SetServingStatus("", st)
}

// LoadServerTLS reads tls.crt, tls.key and ca.crt from dir, the way
// Crossplane provides them to functions, and returns credentials that
// require and verify a client certificate signed by that CA.
func LoadServerTLS(dir string) (credentials.TransportCredentials, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, tlsCertFile), filepath.Join(dir, tlsKeyFile))
	if err != nil {
		return nil, fmt.Errorf("cannot load the server certificate from %s (%s, %s): %w", dir, tlsCertFile, tlsKeyFile, err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, tlsCAFile))
	if err != nil {
		return nil, fmt.Errorf("cannot read the client CA from %s: %w", dir, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s holds no PEM certificate", filepath.Join(dir, tlsCAFile))
	}
	return credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}), nil
}
