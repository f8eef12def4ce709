package adaptor

import (
	"context"
	"sync/atomic"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	fnv1beta1 "github.com/crossplane/function-sdk-go/proto/v1beta1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ocifn/ocifn/codec"
	"github.com/ocifn/ocifn/hook"
	"github.com/ocifn/ocifn/internal/protocount"
)

// registerBounded adds the v1 and v1beta1 FunctionRunnerService, both
// backed by the Function that fn holds, to s, with the memory of requests
// in flight bounded by b (see inflight).
func registerBounded(s grpc.ServiceRegistrar, fn *FunctionRef, b *inflight) {
	s.RegisterService(b.bounded(&fnv1.FunctionRunnerService_ServiceDesc, fn, false), &v1Server{fn: fn})
	s.RegisterService(b.bounded(&fnv1beta1.FunctionRunnerService_ServiceDesc, fn, true), &v1beta1Server{fn: fn})
}

// FunctionRef holds the Function calls go to once it is ready. The server
// listens, and answers health checks, while the image is still unpacked.
type FunctionRef struct {
	p atomic.Pointer[Function]
	// starting, when set, counts and logs the calls refused before there
	// is a Function (see WithHooksWhileStarting).
	starting *hook.Chain
}

// Set makes f serve calls.
func (r *FunctionRef) Set(f *Function) { r.p.Store(f) }

// run hands a call to the Function, or refuses it while there is none.
func (r *FunctionRef) run(ctx context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	f := r.p.Load()
	if f == nil {
		err := status.Error(codes.Unavailable, "the function image is still being unpacked; retry shortly")
		refuse(ctx, r.starting, "RunFunction", time.Now(), err)
		return nil, err
	}
	return f.Run(ctx, req)
}

// codec is the I/O mode of the Function, or the default before there is
// one (when calls are refused anyway).
func (r *FunctionRef) codec() codec.Codec {
	if f := r.p.Load(); f != nil {
		return f.codec
	}
	return codec.JSON{}
}

// refused reports a call that came at received and was refused before the
// Function ran it, to be counted and logged.
func (r *FunctionRef) refused(ctx context.Context, method string, received time.Time, err error) {
	if f := r.p.Load(); f != nil {
		f.Refused(ctx, method, received, err)
		return
	}
	refuse(ctx, r.starting, method, received, err)
}

type v1Server struct {
	fnv1.UnimplementedFunctionRunnerServiceServer
	fn *FunctionRef
}

func (s *v1Server) RunFunction(ctx context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	return s.fn.run(ctx, req)
}

// v1beta1Server serves the older API. Its messages are the v1 messages under
// another package name, identical on the wire, so calls are converted
// through the wire format and handled once.
type v1beta1Server struct {
	fnv1beta1.UnimplementedFunctionRunnerServiceServer
	fn *FunctionRef
}

func (s *v1beta1Server) RunFunction(ctx context.Context, req *fnv1beta1.RunFunctionRequest) (*fnv1beta1.RunFunctionResponse, error) {
	in := &fnv1.RunFunctionRequest{}
	if err := convert(req, in, nil); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "cannot read the v1beta1 request as v1: %v", err)
	}
	rsp, err := s.fn.run(ctx, in)
	if err != nil {
		return nil, err
	}
	// The conversion holds the response's bytes and a second decoded
	// response: both are charged to the in-flight budget, as a v1beta1
	// request's conversion is, but not refused: the call has been
	// answered, logged and perhaps cached, and a retry would find the same
	// answer.
	out := &fnv1beta1.RunFunctionResponse{}
	var charge func(wire []byte) error
	if budget := answerBudgetOf(ctx); budget != nil {
		charge = func(wire []byte) error {
			c, err := protocount.Count(wire, out.ProtoReflect().Descriptor())
			if err != nil {
				return err
			}
			budget.force(int64(len(wire)) + c.Decoded())
			return nil
		}
	}
	if err := convert(rsp, out, charge); err != nil {
		return nil, status.Errorf(codes.Internal, "cannot write the response as v1beta1: %v", err)
	}
	return out, nil
}

// convert makes to from from through the wire format; charge, when not
// nil, is told the wire bytes before they are decoded.
func convert(from, to proto.Message, charge func(wire []byte) error) error {
	b, err := proto.Marshal(from)
	if err != nil {
		return err
	}
	if charge != nil {
		if err := charge(b); err != nil {
			return err
		}
	}
	return proto.Unmarshal(b, to)
}
