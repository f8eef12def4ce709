package pipeline

import (
	"context"
	"fmt"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	fnv1beta1 "github.com/crossplane/function-sdk-go/proto/v1beta1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// waitForReady makes calls wait for the connection instead of failing at
// once, so a function that is still starting gets its chance.
const waitForReady = `{"methodConfig": [{"name": [{}], "waitForReady": true}]}`

// Remote calls a function that is already running (a development target)
// over plaintext gRPC: any Crossplane function, built with any SDK, or
// another `ocifn serve --insecure`.
type Remote struct {
	target  string
	conn    *grpc.ClientConn
	timeout time.Duration
}

// DialRemote prepares calls to the gRPC target (gRPC target syntax, for
// example localhost:9443 or dns:///fn.example.org:9443). Each call may take
// up to timeout.
func DialRemote(target string, timeout time.Duration) (*Remote, error) {
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(waitForReady))
	if err != nil {
		return nil, fmt.Errorf("cannot dial the function at %q: %w", target, err)
	}
	return &Remote{target: target, conn: conn, timeout: timeout}, nil
}

// Run calls RunFunction of apiextensions.fn.proto.v1, or of v1beta1 when
// the function only offers that.
func (r *Remote) Run(ctx context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	rsp, err := fnv1.NewFunctionRunnerServiceClient(r.conn).RunFunction(ctx, req)
	if status.Code(err) != codes.Unimplemented {
		return rsp, r.explain(err)
	}
	// v1beta1 messages are the same on the wire.
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	breq := &fnv1beta1.RunFunctionRequest{}
	if err := proto.Unmarshal(b, breq); err != nil {
		return nil, err
	}
	brsp, err := fnv1beta1.NewFunctionRunnerServiceClient(r.conn).RunFunction(ctx, breq)
	if err != nil {
		return nil, r.explain(err)
	}
	if b, err = proto.Marshal(brsp); err != nil {
		return nil, err
	}
	rsp = &fnv1.RunFunctionResponse{}
	return rsp, proto.Unmarshal(b, rsp)
}

func (r *Remote) explain(err error) error {
	if err == nil {
		return nil
	}
	if status.Code(err) == codes.DeadlineExceeded {
		return fmt.Errorf("no answer from the function at %s within %s (is it running, with --insecure?): %w", r.target, r.timeout, err)
	}
	return fmt.Errorf("the function at %s: %w", r.target, err)
}

// Close closes the connection.
func (r *Remote) Close() error { return r.conn.Close() }
