// Package codec holds the wire formats a function's container speaks: how a
// RunFunction call becomes the bytes on its stdin, and how what it prints
// becomes the response. A codec is pure: no processes, no files; the adaptor
// runs the container and applies the I/O contract around it.
package codec

import (
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// Codec is one I/O mode (json, functionio, krm).
type Codec interface {
	// Name is the mode's name, as --io takes it.
	Name() string
	// Encode renders the request as the function reads it on stdin.
	Encode(req *fnv1.RunFunctionRequest) ([]byte, error)
	// Decode turns what the function printed on stdout, having exited 0,
	// into its response to req. An error says why the output is not a
	// valid answer, naming the likely mode when the output is another
	// mode's; the adaptor turns it into a Fatal result.
	Decode(req *fnv1.RunFunctionRequest, stdout []byte) (*fnv1.RunFunctionResponse, error)
}
