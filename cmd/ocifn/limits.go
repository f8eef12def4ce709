package main

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/ocifn/ocifn/bundle"
	"github.com/ocifn/ocifn/spec"
)

// DefaultMaxRootfsBytes caps the unpacked size of a function image: far
// above any jq, yq or shell image, far below what fills a node's disk when a
// layer decompresses to much more than its size.
const DefaultMaxRootfsBytes = 4 << 30

// byteSize is a flag holding a number of bytes, written as a plain number or
// with a suffix: k, M, G (powers of 1000) or Ki, Mi, Gi (powers of 1024).
type byteSize int64

var byteSuffixes = []struct {
	suffix string
	factor int64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
}

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Type() string { return "bytes" }

func (b *byteSize) Set(s string) error {
	num, factor := strings.TrimSpace(s), int64(1)
	for _, u := range byteSuffixes {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, factor = n, u.factor
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || (factor > 1 && n > (1<<62)/factor) {
		return fmt.Errorf("%q is not a size in bytes (e.g. 1073741824, 1Gi or 512Mi)", s)
	}
	*b = byteSize(n * factor)
	return nil
}

// unitSize is a byteSize flag that remembers whether it was last given
// without a unit, so that a value absurd in bytes can be told from one
// the user wrote in bytes on purpose.
type unitSize struct {
	*byteSize
	unitless *bool
}

func (u unitSize) Set(s string) error {
	if err := u.byteSize.Set(s); err != nil {
		return err
	}
	_, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	*u.unitless = err == nil
	return nil
}

// minUnitlessMemory is the least --memory-limit given in plain bytes
// that is taken as meant. Below it hardly a function starts (measured
// under RLIMIT_DATA: a shell's cat needs 256 KiB, the jq images 2 MiB;
// a cgroup charges kernel memory too), and a call then ends "exited with
// code 139 (stderr was empty)", which does not point at the flag. Such a
// value is a unit left out: 512 for 512Mi.
const minUnitlessMemory = 1 << 20

// checkMemoryLimit refuses a --memory-limit given without a unit that is
// too small for a function, naming the unit that was likely meant; a
// limit that small is taken when written with its unit (512Ki).
func (o *functionFlags) checkMemoryLimit() error {
	n := int64(o.memoryLimit)
	if !o.memoryLimitUnitless || n == 0 || n >= minUnitlessMemory {
		return nil
	}
	// The same number in MiB, unless that is more than 64 GiB.
	meant := "512Mi"
	if n <= 64<<10 {
		meant = fmt.Sprintf("%dMi", n)
	}
	return fmt.Errorf("--memory-limit %d: a size without a unit is in bytes, too little for a function to start (a jq image needs about 2 MiB); give the unit, as in --memory-limit %s (a limit below 1 MiB is taken with its unit, as 512Ki)", n, meant)
}

// limits decides how the per-call caps are enforced and says so once when
// they fall back to rlimits. It must run inside ocifn's own namespaces.
func (o *functionFlags) limits(log *slog.Logger) spec.Limits {
	l, why := bundle.PrepareLimits(int64(o.memoryLimit), o.pidsLimit)
	if l.Cgroups {
		log.Info("per-call limits enforced with cgroups", "memory_limit", int64(o.memoryLimit), "pids_limit", o.pidsLimit)
		return l
	}
	log.Info("per-call limits fall back to rlimits: no delegated cgroup v2 tree",
		"reason", why, "memory_limit", int64(o.memoryLimit), "memory_rlimit", "RLIMIT_DATA per process",
		"pids_limit", o.pidsLimit, "pids_rlimit", "RLIMIT_NPROC per call")
	return l
}
