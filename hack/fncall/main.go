// Command fncall sends one RunFunctionRequest to a running function over
// plaintext gRPC and prints the response as JSON. It is the client `make run`
// uses; any Crossplane function (ocifn or SDK-based) can be called with it.
//
//	fncall [-address 127.0.0.1:9443] [-api v1|v1beta1] [-wait 30s] REQUEST.json
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	fnv1beta1 "github.com/crossplane/function-sdk-go/proto/v1beta1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

func main() {
	address := flag.String("address", "127.0.0.1:9443", "function address")
	api := flag.String("api", "v1", "protocol version: v1 or v1beta1")
	wait := flag.Duration("wait", 30*time.Second, "how long to wait for the function to report SERVING")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: fncall [-address ADDR] [-api v1|v1beta1] REQUEST.json")
		os.Exit(2)
	}
	if err := run(*address, *api, *wait, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "fncall:", err)
		os.Exit(1)
	}
}

func run(address, api string, wait time.Duration, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait+30*time.Second)
	defer cancel()
	if err := waitServing(ctx, conn, wait); err != nil {
		return err
	}
	var req, rsp proto.Message
	switch api {
	case "v1":
		req, rsp = &fnv1.RunFunctionRequest{}, &fnv1.RunFunctionResponse{}
	case "v1beta1":
		req, rsp = &fnv1beta1.RunFunctionRequest{}, &fnv1beta1.RunFunctionResponse{}
	default:
		return fmt.Errorf("-api %q: want v1 or v1beta1", api)
	}
	if err := protojson.Unmarshal(data, req); err != nil {
		return fmt.Errorf("%s is not a RunFunctionRequest: %w", path, err)
	}
	method := "/apiextensions.fn.proto." + api + ".FunctionRunnerService/RunFunction"
	if err := conn.Invoke(ctx, method, req, rsp); err != nil {
		return err
	}
	out, err := protojson.MarshalOptions{Multiline: true}.Marshal(rsp)
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}

func waitServing(ctx context.Context, conn *grpc.ClientConn, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	h := healthpb.NewHealthClient(conn)
	for {
		c, cancel := context.WithTimeout(ctx, time.Second)
		r, err := h.Check(c, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the function at %s did not report SERVING within %s (last: %v %v)", conn.Target(), wait, r.GetStatus(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
