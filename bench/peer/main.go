// Command peer is the benchmark's no-isolation peer: a Composition Function
// gRPC server, built on function-sdk-go, that runs each call as a plain
// fork/exec of the image's entrypoint in a chroot of the image's unpacked
// root filesystem, with the request as JSON on stdin and the response as
// JSON on stdout. No namespaces, no runtime, no seccomp: how in-pod exec
// functions such as function-shell run their programs. Next to ocifn, it
// prices the isolation of a fresh container per call.
//
//	peer -address 127.0.0.1:9444 -rootfs DIR [-dir /] [-env K=V]... -- ENTRYPOINT [ARG]...
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	function "github.com/crossplane/function-sdk-go"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

type envFlag []string

func (e *envFlag) String() string     { return strings.Join(*e, ",") }
func (e *envFlag) Set(v string) error { *e = append(*e, v); return nil }

// execFunction runs the entrypoint once per call.
type execFunction struct {
	fnv1.UnimplementedFunctionRunnerServiceServer
	rootfs string
	dir    string
	env    []string
	args   []string
}

// RunFunction execs the entrypoint with the request on stdin and parses
// what it prints as the response.
func (f *execFunction) RunFunction(ctx context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	in, err := protojson.Marshal(req)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "cannot encode the request: %v", err)
	}
	cmd := exec.CommandContext(ctx, f.args[0], f.args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: f.rootfs}
	cmd.Dir, cmd.Env = f.dir, f.env
	cmd.Stdin = bytes.NewReader(in)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, status.Errorf(codes.Internal, "%v: %s", err, errb.Bytes())
	}
	rsp := &fnv1.RunFunctionResponse{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(out.Bytes(), rsp); err != nil {
		return nil, status.Errorf(codes.Internal, "the function printed no response: %v", err)
	}
	if rsp.Meta == nil {
		rsp.Meta = &fnv1.ResponseMeta{Tag: req.GetMeta().GetTag()}
	}
	return rsp, nil
}

func main() {
	f := &execFunction{}
	var env envFlag
	address := flag.String("address", "127.0.0.1:9444", "address to serve gRPC on, plaintext")
	flag.StringVar(&f.rootfs, "rootfs", "", "the image's unpacked root filesystem")
	flag.StringVar(&f.dir, "dir", "/", "working directory inside the rootfs")
	flag.Var(&env, "env", "environment variable K=V of the function (repeatable)")
	flag.Parse()
	f.env, f.args = env, flag.Args()
	if f.rootfs == "" || len(f.args) == 0 {
		fmt.Fprintln(os.Stderr, "peer: want -rootfs DIR -- ENTRYPOINT [ARG]...")
		os.Exit(2)
	}
	err := function.Serve(f, function.Listen("tcp", *address), function.Insecure(true), function.WithMetricsServer(""))
	fmt.Fprintln(os.Stderr, "peer:", err)
	os.Exit(1)
}
