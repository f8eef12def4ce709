// Package codec holds the wire formats a function's container speaks: how a
// RunFunction call becomes the bytes on its stdin, and how what it prints
// becomes the response. A codec is pure: no processes, no files; the adaptor
// runs the container and applies the I/O contract around it.
package codec

import (
	"fmt"
	"sort"
	"strings"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/ocifn/ocifn/internal/protocount"
)

// Codec is one I/O mode (json, functionio, krm).
type Codec interface {
	// Name is the mode's name, as --io takes it.
	Name() string
	// Encode renders the request as the function reads it on stdin.
	Encode(req *fnv1.RunFunctionRequest) ([]byte, error)
	// EncodeMemory is at most the memory Encode allocates for a request
	// of counts c, its result and garbage included: a server that holds
	// requests within a memory bound charges it before the request is
	// decoded.
	EncodeMemory(c protocount.Counts) int64
	// DecodeMemory is at most the memory Decode (and DecodeFailure, for a
	// FailureDecoder) holds at once to read stdout, the response included:
	// a server that holds calls within a memory bound charges it before it
	// decodes.
	DecodeMemory(stdout []byte) int64
	// Decode turns what the function printed on stdout, having exited 0,
	// into its response to req. An error says why the output is not a
	// valid answer, naming the likely mode when the output is another
	// mode's; the adaptor turns it into a Fatal result.
	Decode(req *fnv1.RunFunctionRequest, stdout []byte) (*fnv1.RunFunctionResponse, error)
}

// Default is the mode of an image that records none: ocifn's own JSON.
const Default = "json"

// modes are the codecs --io can name, by name.
var modes = map[string]Codec{
	"json":       JSON{},
	"functionio": FunctionIO{},
	"krm":        KRM{},
}

// ByName returns the codec of an I/O mode; "" is the default mode.
func ByName(name string) (Codec, error) {
	if name == "" {
		name = Default
	}
	if c, ok := modes[name]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("unknown I/O mode %q; valid modes are %s", name, strings.Join(Names(), ", "))
}

// Names lists the valid I/O modes, sorted.
func Names() []string {
	names := make([]string, 0, len(modes))
	for n := range modes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
