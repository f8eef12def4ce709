package adaptor

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ocifn/ocifn/hook"
)

func response(t *testing.T, name string, size int) *fnv1.RunFunctionResponse {
	t.Helper()
	s, err := structpb.NewStruct(map[string]any{"name": name, "pad": strings.Repeat("x", size)})
	if err != nil {
		t.Fatal(err)
	}
	return &fnv1.RunFunctionResponse{Desired: &fnv1.State{Resources: map[string]*fnv1.Resource{name: {Resource: s}}}}
}

func TestResponseCache(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newResponseCache(3000)
	c.now = func() time.Time { return now }

	a := response(t, "a", 1000)
	c.put("a", a, time.Minute)
	got, ok := c.get("a")
	if !ok {
		t.Fatal("miss right after put")
	}
	want, _ := proto.MarshalOptions{Deterministic: true}.Marshal(a)
	have, _ := proto.MarshalOptions{Deterministic: true}.Marshal(got)
	if string(want) != string(have) {
		t.Error("a hit is not byte-for-byte the stored response")
	}
	if _, ok := c.get("b"); ok {
		t.Error("another tag got a's response")
	}

	// Least recently used goes first: a was just read, so b is evicted
	// when d does not fit.
	c.put("b", response(t, "b", 1000), time.Minute)
	c.get("a")
	c.put("d", response(t, "d", 1000), time.Minute)
	if _, ok := c.get("b"); ok {
		t.Error("b should have been evicted")
	}
	for _, tag := range []string{"a", "d"} {
		if _, ok := c.get(tag); !ok {
			t.Errorf("%s evicted", tag)
		}
	}
	if c.size > c.maxBytes {
		t.Errorf("size %d over the bound %d", c.size, c.maxBytes)
	}

	now = now.Add(time.Minute)
	if _, ok := c.get("a"); ok {
		t.Error("hit after the TTL ended")
	}
	c.put("", a, time.Minute)
	c.put("z", a, 0)
	c.put("huge", response(t, "huge", 5000), time.Minute)
	for _, tag := range []string{"", "z", "huge"} {
		if _, ok := c.get(tag); ok {
			t.Errorf("%q cached: empty tags, no TTL and responses larger than the cache are not", tag)
		}
	}
}

// TestCacheHitCarriesTheTTLLeft: a hit says what is left of the function's
// meta.ttl, in whole seconds, and never more: Crossplane keeps a response
// a full meta.ttl from when it gets it. Its encoding is the response kept
// but for the ttl, and never longer than the function's, which the send
// limit was checked against. A hit past the function's TTL (kept longer
// by --cache-ttl) carries none.
func TestCacheHitCarriesTheTTLLeft(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newResponseCache(1 << 20)
	c.now = func() time.Time { return now }
	stored := response(t, "a", 100)
	stored.Meta = &fnv1.ResponseMeta{Tag: "t", Ttl: durationpb.New(60 * time.Second)}
	stored.Results = []*fnv1.Result{{Message: "after the desired state"}}
	c.put("t", stored, 10*time.Minute) // as --cache-ttl 10m does
	kept, _ := proto.MarshalOptions{Deterministic: true}.Marshal(stored)

	for _, tc := range []struct {
		age  time.Duration
		want *durationpb.Duration
	}{
		{0, durationpb.New(60 * time.Second)},
		{50*time.Second + 500*time.Millisecond, durationpb.New(9 * time.Second)},
		{59*time.Second + 1, nil},
		{61 * time.Second, nil},
		{9 * time.Minute, nil},
	} {
		now = time.Unix(1000, 0).Add(tc.age)
		hit, ok := c.lookup("t")
		if !ok {
			t.Fatalf("at %v: a miss", tc.age)
		}
		sent := append(append([]byte{}, hit.head...), hit.data...)
		if len(sent) > len(kept) {
			t.Errorf("at %v: the hit takes %d bytes, more than the %d of the answer", tc.age, len(sent), len(kept))
		}
		if tc.age == 0 && string(sent) != string(kept) {
			t.Errorf("at once: the hit is not byte-for-byte the answer")
		}
		got := &fnv1.RunFunctionResponse{}
		if err := proto.Unmarshal(sent, got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got.GetMeta().GetTtl(), tc.want) {
			t.Errorf("at %v: the hit says ttl %v, want %v", tc.age, got.GetMeta().GetTtl(), tc.want)
		}
		decoded, err := hit.decode()
		if err != nil || !proto.Equal(decoded, got) {
			t.Errorf("at %v: decoded %v (%v), want %v", tc.age, decoded, err, got)
		}
		got.Meta.Ttl = stored.Meta.Ttl
		if !proto.Equal(got, stored) {
			t.Errorf("at %v: the hit is not the answer but for its ttl: %v", tc.age, got)
		}
	}

	// A sub-second TTL is cut to whole seconds, never rounded up.
	now = time.Unix(1000, 0)
	stored.Meta.Ttl = durationpb.New(1500 * time.Millisecond)
	c.put("s", stored, time.Minute)
	if got, _ := c.get("s"); got.GetMeta().GetTtl().AsDuration() != time.Second {
		t.Errorf("a hit of a 1.5s TTL says %v, want 1s", got.GetMeta().GetTtl())
	}
}

func TestRunUsesCache(t *testing.T) {
	r := &scriptedRunner{stdout: `{"meta": {"ttl": "60s"}, "desired": {}}`}
	f := NewFunction(r, quiet(), WithCache(1<<20, 0))
	for i := range 2 {
		if _, err := f.Run(context.Background(), request(t, req1)); err != nil {
			t.Fatal(i, err)
		}
	}
	r.stdin = nil
	if _, err := f.Run(context.Background(), request(t, req1)); err != nil || r.stdin != nil {
		t.Errorf("third call with the same tag ran the function (err %v)", err)
	}
	other := request(t, strings.Replace(req1, `"t1"`, `"t2"`, 1))
	if _, err := f.Run(context.Background(), other); err != nil || r.stdin == nil {
		t.Errorf("a call with another tag did not run the function (err %v)", err)
	}
}

// Crossplane tags a pipeline step's request once, then calls the function
// again under that tag with the required resources it asked for and the
// context it returned: the cache must not answer those calls with the
// first one's response, or the function never gets what it asked for.
func TestCacheTellsCallsOfOneStepApart(t *testing.T) {
	r := &scriptedRunner{stdout: `{"meta": {"ttl": "60s"}, "desired": {}, "requirements": {"resources": {"cm": {"apiVersion": "v1", "kind": "ConfigMap", "matchName": "a"}}}}`}
	f := NewFunction(r, quiet(), WithCache(1<<20, 0))
	first := request(t, req1)
	if _, err := f.Run(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	cm, err := structpb.NewStruct(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	again := proto.Clone(first).(*fnv1.RunFunctionRequest)
	again.RequiredResources = map[string]*fnv1.Resources{"cm": {Items: []*fnv1.Resource{{Resource: cm}}}}
	again.Context, _ = structpb.NewStruct(map[string]any{"step": "asked"})
	for name, req := range map[string]*fnv1.RunFunctionRequest{
		"with the required resources": again,
		"with another context":        {Meta: first.Meta, Observed: first.Observed, Desired: first.Desired, Input: first.Input, Context: again.Context},
	} {
		r.stdin = nil
		if _, err := f.Run(context.Background(), req); err != nil || r.stdin == nil {
			t.Errorf("the call %s, under the first call's tag, did not run the function (err %v)", name, err)
		}
	}
	r.stdin = nil
	if _, err := f.Run(context.Background(), again); err != nil || r.stdin != nil {
		t.Errorf("the same call again ran the function (err %v)", err)
	}
}

// Crossplane adds meta.capabilities to a request after it has made its
// tag, and a tag is no secret: a cached answer must not reach a request
// under the same tag that declares other capabilities (a Crossplane
// upgraded meanwhile) or carries other credentials, or none.
func TestCacheTellsCapabilitiesAndCredentialsApart(t *testing.T) {
	r := &scriptedRunner{stdout: `{"meta": {"ttl": "60s"}, "desired": {}}`}
	f := NewFunction(r, quiet(), WithCache(1<<20, 0))
	first := request(t, req1)
	first.Meta.Capabilities = []fnv1.Capability{fnv1.Capability_CAPABILITY_CAPABILITIES}
	first.Credentials = map[string]*fnv1.Credentials{"aws": {Source: &fnv1.Credentials_CredentialData{CredentialData: &fnv1.CredentialData{Data: map[string][]byte{"key": []byte("a")}}}}}
	if _, err := f.Run(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	capabilities := proto.Clone(first).(*fnv1.RunFunctionRequest)
	capabilities.Meta.Capabilities = append(capabilities.Meta.Capabilities, fnv1.Capability_CAPABILITY_REQUIRED_SCHEMAS)
	none := proto.Clone(first).(*fnv1.RunFunctionRequest)
	none.Meta.Capabilities = nil
	otherKey := proto.Clone(first).(*fnv1.RunFunctionRequest)
	otherKey.Credentials["aws"].GetCredentialData().Data["key"] = []byte("b")
	noCredentials := proto.Clone(first).(*fnv1.RunFunctionRequest)
	noCredentials.Credentials = nil
	for name, req := range map[string]*fnv1.RunFunctionRequest{
		"with more capabilities": capabilities,
		"without capabilities":   none,
		"with other credentials": otherKey,
		"without credentials":    noCredentials,
	} {
		r.stdin = nil
		if _, err := f.Run(context.Background(), req); err != nil || r.stdin == nil {
			t.Errorf("the call %s, under the first call's tag, was answered from the cache (err %v)", name, err)
		}
	}
	r.stdin = nil
	if _, err := f.Run(context.Background(), proto.Clone(first).(*fnv1.RunFunctionRequest)); err != nil || r.stdin != nil {
		t.Errorf("the first call again ran the function (err %v)", err)
	}
}

// keyHook records the cache key of every call it sees.
type keyHook struct{ keys *[]string }

func (h keyHook) Before(ctx context.Context, c *hook.Call) (context.Context, error) {
	*h.keys = append(*h.keys, c.CacheKey)
	return ctx, nil
}

func (keyHook) After(context.Context, *hook.Call) error { return nil }

// TestCacheKeyOnlyForACache: a call's cache key, a digest of its context
// and required resources, is worked out when a response cache holds the
// calls, not on every call of a server without one (--cache=false).
func TestCacheKeyOnlyForACache(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, cached := range []bool{false, true} {
		var keys []string
		hooks := []hook.Hook{keyHook{&keys}}
		if cached {
			hooks = append(hooks, hook.Cache{Store: NewCache(1 << 20)})
		}
		f := NewFunction(&scriptedRunner{stdout: `{}`}, quiet(), WithHooks(hook.NewChain(log, hooks...), 0))
		if _, err := f.Run(context.Background(), request(t, req1)); err != nil {
			t.Fatal(err)
		}
		if len(keys) != 1 || (keys[0] != "") == !cached {
			t.Errorf("with a cache %v: the call's cache key %q, want one only with a cache", cached, keys)
		}
	}
}

// TestCacheKeyOfCapabilitiesIsCheap: Crossplane v2 declares its
// capabilities in every request, so their part of the cache key is worked
// out without the digest the rarer fields need: the key of a request with
// a tag and capabilities alone takes at most two allocations; two tags
// with capabilities never share a key.
func TestCacheKeyOfCapabilitiesIsCheap(t *testing.T) {
	req := &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: "a", Capabilities: []fnv1.Capability{
		fnv1.Capability_CAPABILITY_CAPABILITIES, fnv1.Capability_CAPABILITY_REQUIRED_RESOURCES}}}
	if n := testing.AllocsPerRun(100, func() { cacheKey(req) }); n > 2 {
		t.Errorf("the cache key of a request with capabilities takes %v allocations, want at most 2", n)
	}
	other := &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: "a,1", Capabilities: []fnv1.Capability{
		fnv1.Capability_CAPABILITY_REQUIRED_RESOURCES}}}
	if k1, k2 := cacheKey(req), cacheKey(other); k1 == k2 {
		t.Errorf("two tags with other capabilities share the cache key %q", k1)
	}
}

// BenchmarkCacheHit: what a hit costs the gRPC server besides its
// transport: the hooks, the cache's lookup, and the answer handed to the
// codec, for a response of about 1 KiB and one of about 1 MiB, each with
// a meta.ttl.
func BenchmarkCacheHit(b *testing.B) {
	for _, size := range []int{1 << 10, 1 << 20} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			out := `{"meta": {"ttl": "60s"}, "desired": {"composite": {"resource": {"status": {"pad": "` + strings.Repeat("x", size) + `"}}}}}`
			f := NewFunction(&scriptedRunner{stdout: out}, quiet(), WithCache(64<<20, 0))
			req := &fnv1.RunFunctionRequest{}
			if err := protojson.Unmarshal([]byte(req1), req); err != nil {
				b.Fatal(err)
			}
			if _, err := f.Run(context.Background(), req); err != nil {
				b.Fatal(err)
			}
			ctx, answer := withAnswerBudget(context.Background(), newInflight(1<<30, DefaultMaxRecvMsgSize, 0))
			codec := newRawCodec()
			b.ReportAllocs()
			for b.Loop() {
				answer.cached = rawAnswer{}
				if _, err := f.Run(ctx, req); err != nil {
					b.Fatal(err)
				}
				if _, err := codec.Marshal(&answer.cached); err != nil {
					b.Fatal(err)
				}
			}
			if answer.cached.data == nil {
				b.Fatal("not a hit")
			}
		})
	}
}
