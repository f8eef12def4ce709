package adaptor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/ocifn/ocifn/hook"
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

// DefaultMaxSendMsgSize is the largest response sent: what Crossplane's
// gRPC client accepts. It keeps gRPC's default receive limit of 4 MiB (it
// sets none), so a larger answer fails at Crossplane with a bare
// RESOURCE_EXHAUSTED, after ocifn has counted, logged and cached it as an
// answer; within this bound the function gets a Fatal result naming it.
const DefaultMaxSendMsgSize = 4 << 20

// Server is the gRPC server of the adaptor with its health service.
type Server struct {
	*grpc.Server
	health *watchesEnded
	fn     FunctionRef
}

// ServerOption configures a Server.
type ServerOption func(*serverOptions)

type serverOptions struct {
	starting         *hook.Chain
	maxInflightBytes int64
	streamWorkers    uint32
	recvTimeout      time.Duration
	maxSendMsgSize   int
}

// WithMaxSendMsgSize is the largest response gRPC sends (default: the
// largest request accepted); a Function's WithMaxResponseBytes should say
// the same, so that a larger answer is a Fatal result rather than a failed
// send.
func WithMaxSendMsgSize(n int) ServerOption {
	return func(o *serverOptions) { o.maxSendMsgSize = n }
}

// WithMaxInflightBytes bounds the memory that calls being received or run
// hold at once, their requests and their functions' answers (default
// DefaultMaxInflightBytes); a call beyond it is refused with
// RESOURCE_EXHAUSTED. It must hold what the largest
// request accepted takes when it is one string (see CheckInflightBytes).
func WithMaxInflightBytes(n int64) ServerOption {
	return func(o *serverOptions) { o.maxInflightBytes = n }
}

// WithHooksWhileStarting counts and logs through ch the calls refused
// before Ready, while the function image is unpacked, as the Function
// counts and logs its own refusals.
func WithHooksWhileStarting(ch *hook.Chain) ServerOption {
	return func(o *serverOptions) { o.starting = ch }
}

// WithRecvTimeout refuses a request that has not arrived whole d after its
// call began, with DEADLINE_EXCEEDED, and lets go of what it held of the
// in-flight budget (see inflight). Zero waits for as long as the client
// keeps the stream open.
func WithRecvTimeout(d time.Duration) ServerOption {
	return func(o *serverOptions) { o.recvTimeout = d }
}

// WithStreamWorkers runs calls on n long-lived goroutines instead of a new
// goroutine per call; calls beyond n get one of their own, as before. A new
// goroutine starts with a small stack, and decoding a function's response
// (protojson recurses once per level of the JSON) grows it several times
// per call, each time copying it: about 6% of ocifn's CPU at 4 clients. A
// worker keeps the stack it grew. Give it the calls that may run at once:
// a call waiting for its turn holds a worker too, so beyond that many
// calls, running or waiting, the rest get goroutines of their own, as
// before, which costs only this saving. At most maxStreamWorkers are
// started.
func WithStreamWorkers(n int) ServerOption {
	return func(o *serverOptions) { o.streamWorkers = uint32(min(max(n, 0), maxStreamWorkers())) }
}

// maxStreamWorkers bounds the stream workers. Each is started with the
// server and kept for its life, with the stack it grew: about 1.4 KB
// each before any call, so a worker per slot of a huge --max-concurrency
// (1,000,000) held 1.3 GB at idle. Four times the default
// --max-concurrency keeps a worker per call over the range the workers
// were measured in (docs/performance.md); a call past it gets a
// goroutine of its own, and pays only the stack's growth, small beside
// its container, of which that many at once are far past what the CPUs
// can start.
func maxStreamWorkers() int { return 4 * DefaultMaxConcurrency() }

// CheckInflightBytes says why a bound of maxInflight bytes on requests in
// flight could never admit a request of maxRecvMsgSize bytes, if it could
// not.
func CheckInflightBytes(maxInflight int64, maxRecvMsgSize int) error {
	if need := largestCost(int64(maxRecvMsgSize)); maxInflight < need {
		return fmt.Errorf("--max-inflight-bytes %d: must be at least %d, what a request of --max-recv-msg-size %d bytes that is one string takes", maxInflight, need, maxRecvMsgSize)
	}
	return nil
}

// NewServer returns a gRPC server offering the v1 and v1beta1
// FunctionRunnerService, the standard health service and server
// reflection. It reports NOT_SERVING, and refuses calls, until Ready. creds
// may be nil for plaintext.
func NewServer(creds credentials.TransportCredentials, maxRecvMsgSize int, options ...ServerOption) *Server {
	so := serverOptions{maxInflightBytes: DefaultMaxInflightBytes, maxSendMsgSize: maxRecvMsgSize}
	for _, o := range options {
		o(&so)
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxRecvMsgSize),
		grpc.MaxSendMsgSize(so.maxSendMsgSize),
		// Requests reach the in-flight budget undecoded (see inflight).
		grpc.ForceServerCodecV2(newRawCodec()),
		// Stop waits for handlers to return, so no call is still starting a
		// container when the bundle is removed.
		grpc.WaitForHandlers(true),
	}
	if so.streamWorkers > 0 {
		opts = append(opts, grpc.NumStreamWorkers(so.streamWorkers))
	}
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	srv := &Server{Server: grpc.NewServer(opts...), health: newWatchesEnded()}
	srv.fn.starting = so.starting
	registerBounded(srv.Server, &srv.fn, newInflight(so.maxInflightBytes, int64(maxRecvMsgSize), so.recvTimeout))
	srv.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv.Server, srv.health)
	reflection.Register(srv.Server)
	return srv
}

// Ready makes f serve calls and reports SERVING.
func (s *Server) Ready(f *Function) {
	s.fn.Set(f)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
}

// Drain reports NOT_SERVING, so that health checks route new work elsewhere
// while running calls finish.
func (s *Server) Drain() {
	s.health.Shutdown()
}

// GracefulStop ends the health watches, then stops as grpc.Server's
// GracefulStop does: closes the listeners and waits for the calls and
// connections to end. A watch lasts as long as its client keeps it, and
// held the stop, and the shutdown, for the whole grace period with no
// call running, or 2 s past it with one.
func (s *Server) GracefulStop() {
	s.health.end()
	s.Server.GracefulStop()
}

// watchesEnded is the standard health service, whose watches end when
// the server stops.
type watchesEnded struct {
	*health.Server
	stopping    context.Context
	stopWatches context.CancelFunc
}

func newWatchesEnded() *watchesEnded {
	h := &watchesEnded{Server: health.NewServer()}
	h.stopping, h.stopWatches = context.WithCancel(context.Background())
	return h
}

// end ends the watches running, and those to come.
func (h *watchesEnded) end() { h.stopWatches() }

func (h *watchesEnded) Watch(req *healthpb.HealthCheckRequest, stream grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	defer context.AfterFunc(h.stopping, cancel)()
	err := h.Server.Watch(req, watchStream{stream, ctx})
	if h.stopping.Err() != nil && stream.Context().Err() == nil {
		// Its client watches again elsewhere, as after a lost
		// connection.
		return status.Error(codes.Unavailable, "ocifn is shutting down")
	}
	return err
}

// watchStream is a watch's stream with a context that ends when the
// server stops.
type watchStream struct {
	grpc.ServerStreamingServer[healthpb.HealthCheckResponse]
	ctx context.Context
}

func (w watchStream) Context() context.Context { return w.ctx }

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
