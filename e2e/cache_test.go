package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	fnv1beta1 "github.com/crossplane/function-sdk-go/proto/v1beta1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
)

func wire(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hitTTL checks that a cache hit's meta.ttl is at most the function's,
// ttl, in whole seconds (a hit says what is left of it: see
// TestCacheHitCarriesTheTTLLeft), and sets it back to ttl, so that the
// rest of the hit can be compared with the answer cached byte for byte.
// rsp is a v1 or a v1beta1 response.
func hitTTL(t *testing.T, rsp proto.Message, ttl time.Duration) {
	t.Helper()
	meta := rsp.ProtoReflect().Mutable(rsp.ProtoReflect().Descriptor().Fields().ByName("meta")).Message()
	fd := meta.Descriptor().Fields().ByName("ttl")
	if !meta.Has(fd) {
		t.Errorf("a hit within the function's TTL carries none")
	} else if got := meta.Get(fd).Message().Interface().(*durationpb.Duration).AsDuration(); got > ttl || got%time.Second != 0 {
		t.Errorf("a hit says ttl %v, want whole seconds up to the function's %v", got, ttl)
	}
	meta.Set(fd, protoreflect.ValueOfMessage(durationpb.New(ttl).ProtoReflect()))
}

// TestResponseCache: a response with meta.ttl answers later requests with
// the same tag until the TTL ends; another tag never gets it.
func TestResponseCache(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("jq-function.tar")})
	// now changes from call to call: a repeated value proves a cache hit.
	filter := `{"input": {"filter": "{meta: {ttl: \"60s\"}, desired: .desired, context: {at: (now | tostring)}}"}}`
	req := func(tag string) *fnv1.RunFunctionRequest {
		return jsonRequest(t, `{"meta": {"tag": "`+tag+`"}, `+filter[1:])
	}
	first := s.call(t, req("tag-a"))
	second := s.call(t, req("tag-a"))
	hitTTL(t, second, time.Minute)
	if !bytes.Equal(wire(t, first), wire(t, second)) {
		t.Errorf("the second call with the same tag was not answered from the cache:\n%v\n%v", first, second)
	}
	other := s.call(t, req("tag-b"))
	if other.GetContext().AsMap()["at"] == first.GetContext().AsMap()["at"] {
		t.Errorf("a call with another tag got the cached response")
	}
	text := scrape(t, s.metricsURL(t))
	if hits := metricValue(t, text, "ocifn_cache_hits_total"); hits != 1 {
		t.Errorf("cache hits %v, want 1", hits)
	}
	if misses := metricValue(t, text, "ocifn_cache_misses_total"); misses != 2 {
		t.Errorf("cache misses %v, want 2", misses)
	}
}

// TestCacheTTLFlag: --cache-ttl caches responses that carry no TTL, and a
// cached answer is byte-for-byte what a fresh call gives.
func TestCacheTTLFlag(t *testing.T) {
	cached := startServer(t, []string{"--tarball", image("labelizer.tar"), "--cache-ttl", "1m"})
	fresh := startServer(t, []string{"--tarball", image("labelizer.tar"), "--cache=false"})
	req := loadRequest(t, "labelizer", "request.json")
	miss := cached.call(t, req)
	hit := cached.call(t, req)
	uncached := fresh.call(t, req)
	if !bytes.Equal(wire(t, miss), wire(t, hit)) || !bytes.Equal(wire(t, hit), wire(t, uncached)) {
		t.Errorf("cached and fresh answers differ:\nfresh  %v\ncached %v", uncached, hit)
	}
	if hits := cached.metric(t, "ocifn_cache_hits_total"); hits != 1 {
		t.Errorf("cache hits %v, want 1", hits)
	}
	if hits := fresh.metric(t, "ocifn_cache_hits_total"); hits != 0 {
		t.Errorf("cache hits with --cache=false: %v", hits)
	}
}

// TestResponseCacheTellsCapabilitiesAndCredentialsApart: under one tag, a
// request with other capabilities or other credentials reaches the
// function rather than an answer made for another request.
func TestResponseCacheTellsCapabilitiesAndCredentialsApart(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("jq-function.tar")})
	filter := `"input": {"filter": "{meta: {ttl: \"60s\"}, desired: .desired, context: {seen: ([.meta.capabilities, .credentials] | tostring)}}"}`
	req := func(meta, credentials string) *fnv1.RunFunctionRequest {
		return jsonRequest(t, `{"meta": {"tag": "one-tag"`+meta+`}, "credentials": {"c": {"credentialData": {"data": {"key": "`+credentials+`"}}}}, `+filter+`}`)
	}
	first := req(`, "capabilities": ["CAPABILITY_CAPABILITIES"]`, "YQ==")
	seen := func(rsp *fnv1.RunFunctionResponse) any { return rsp.GetContext().AsMap()["seen"] }
	want := seen(s.call(t, first))
	if got := seen(s.call(t, first)); got != want {
		t.Fatalf("the same request again: %v, want %v", got, want)
	}
	for name, other := range map[string]*fnv1.RunFunctionRequest{
		"other capabilities": req(`, "capabilities": ["CAPABILITY_CAPABILITIES", "CAPABILITY_REQUIRED_SCHEMAS"]`, "YQ=="),
		"other credentials":  req(`, "capabilities": ["CAPABILITY_CAPABILITIES"]`, "Yg=="),
	} {
		if got := seen(s.call(t, other)); got == want {
			t.Errorf("a request with %s got the cached answer to the first: %v", name, got)
		}
	}
}

// TestCacheHitsWhileDraining: once shutdown began, a call whose answer is
// in the response cache is still answered from it (it runs no container
// and takes no slot, and Crossplane's connection stays on this server
// until it closes), while a call that would run the function is refused
// with UNAVAILABLE.
func TestCacheHitsWhileDraining(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-ttl", "1m", "--grace-period", patient(10 * time.Second).String()})
	cachedReq := shRequest(t, "t-cached", okScript)
	first := s.call(t, cachedReq)
	done := make(chan error, 1)
	go func() {
		_, err := s.callErr(context.Background(), shRequest(t, "t-drain", fmt.Sprintf("sleep %d; %s", int(patient(3*time.Second).Seconds()), okScript)))
		done <- err
	}()
	eventually(t, 5*time.Second, "the call running", func() bool { return s.metric(t, "ocifn_calls_in_flight") == 1 })
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	eventually(t, 5*time.Second, "shutting down", func() bool { return strings.Contains(s.stderr.String(), "shutting down") })
	hit, err := s.callErr(context.Background(), cachedReq)
	if err != nil || !bytes.Equal(wire(t, first), wire(t, hit)) {
		t.Errorf("a call whose answer is cached, while draining: %v %v; want the cached answer", hit, err)
	}
	if _, err := s.callErr(context.Background(), shRequest(t, "t-new", okScript)); status.Code(err) != codes.Unavailable {
		t.Errorf("a call not cached, while draining: %v; want UNAVAILABLE", err)
	}
	if err := <-done; err != nil {
		t.Errorf("the call running at SIGTERM: %v", err)
	}
	s.wait(t)
	mustContain(t, "server log", s.stderr.String(), "msg=call tag=t-cached front=crossplane outcome=ok")
}

// TestCacheHitsOfALargeAnswerStayWithinTheBound: many calls at once, over
// v1 and v1beta1, answered from the cache with one response of nearly 4
// MiB (the most --max-send-msg-size sends by default; 370,000 numbers,
// some 30 MB decoded). Hits run no function, so --max-concurrency does
// not admit them; each got the very response cached (but for the TTL
// left), and the server's peak RSS stays under --max-inflight-bytes above
// its baseline.
func TestCacheHitsOfALargeAnswerStayWithinTheBound(t *testing.T) {
	const (
		bound = 200 << 20
		hits  = 32
	)
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--warm", "0",
		"--max-recv-msg-size", "4Mi", "--max-inflight-bytes", strconv.Itoa(bound)})
	req := shRequest(t, "large", `jq -c '{desired: {composite: {resource: {status: {l: [range(370000)]}}}}, meta: {ttl: "600s"}}'`)
	first := s.call(t, req)
	if n := len(first.GetDesired().GetComposite().GetResource().GetFields()["status"].GetStructValue().GetFields()["l"].GetListValue().GetValues()); n != 370000 {
		t.Fatalf("the first answer holds %d numbers, want 370000: %v", n, first.GetResults())
	}
	want := wire(t, first)
	baseline := rss(t, s)
	var wg sync.WaitGroup
	for i := range hits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), patient(60*time.Second))
			defer cancel()
			var rsp proto.Message
			var err error
			if i%2 == 0 {
				rsp, err = fnv1.NewFunctionRunnerServiceClient(s.conn).RunFunction(ctx, req)
			} else {
				old := &fnv1beta1.RunFunctionRequest{}
				if err := proto.Unmarshal(wire(t, req), old); err != nil {
					t.Error(err)
					return
				}
				rsp, err = fnv1beta1.NewFunctionRunnerServiceClient(s.conn).RunFunction(ctx, old)
			}
			if err != nil {
				t.Errorf("hit %d: %v", i, err)
				return
			}
			hitTTL(t, rsp, 600*time.Second)
			if !bytes.Equal(wire(t, rsp), want) {
				t.Errorf("hit %d is not the cached response", i)
			}
		}()
	}
	wg.Wait()
	peak := peakRSS(t, s)
	t.Logf("RSS baseline %d MiB, peak %d MiB, bound %d MiB", baseline>>20, peak>>20, bound>>20)
	if peak > baseline+bound {
		t.Errorf("peak RSS %d MiB is past the baseline %d MiB plus --max-inflight-bytes %d MiB", peak>>20, baseline>>20, bound>>20)
	}
	text := scrape(t, s.metricsURL(t))
	if got := metricValue(t, text, "ocifn_cache_hits_total"); got != hits {
		t.Errorf("cache hits %v, want %d", got, hits)
	}
}

// TestCacheHitCarriesTheTTLLeft: a hit's meta.ttl is what is left of the
// function's, in whole seconds as HTTP's Age counts, over v1 and v1beta1.
// Crossplane's own response cache keeps a response a full meta.ttl from
// when it receives it (internal/xfn/cached), so a hit that said the
// function's whole TTL let an answer be used for nearly twice as long as
// the function allowed. Past the function's TTL, a hit that --cache-ttl
// still answers carries none, so that Crossplane does not keep it.
func TestCacheHitCarriesTheTTLLeft(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("jq-function.tar"), "--cache-ttl", "1m"})
	// now changes from call to call: a repeated value proves a cache hit.
	req := jsonRequest(t, `{"meta": {"tag": "t-ttl"}, "input": {"filter": "{meta: {ttl: \"3s\"}, context: {at: (now | tostring)}}"}}`)
	first := s.call(t, req)
	if ttl := first.GetMeta().GetTtl().AsDuration(); ttl != 3*time.Second {
		t.Fatalf("the function's answer says ttl %v, want 3s", ttl)
	}
	time.Sleep(1100 * time.Millisecond)
	hit := s.call(t, req)
	old := &fnv1beta1.RunFunctionRequest{}
	if err := proto.Unmarshal(wire(t, req), old); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patient(60*time.Second))
	defer cancel()
	oldHit, err := fnv1beta1.NewFunctionRunnerServiceClient(s.conn).RunFunction(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	newHit := &fnv1.RunFunctionResponse{}
	if err := proto.Unmarshal(wire(t, oldHit), newHit); err != nil {
		t.Fatal(err)
	}
	for name, rsp := range map[string]*fnv1.RunFunctionResponse{"v1": hit, "v1beta1": newHit} {
		if ttl := rsp.GetMeta().GetTtl().AsDuration(); ttl > time.Second || ttl%time.Second != 0 {
			t.Errorf("a %s hit 1.1 s after the answer says ttl %v, want the whole seconds left of 3s: at most 1s", name, ttl)
		}
		// But for its ttl, a hit is the answer cached.
		rsp.Meta.Ttl = first.Meta.Ttl
		if !bytes.Equal(wire(t, rsp), wire(t, first)) {
			t.Errorf("a %s hit is not the cached answer but for its ttl:\n%v\nwant\n%v", name, rsp, first)
		}
	}
	time.Sleep(2 * time.Second)
	late := s.call(t, req)
	if late.GetContext().AsMap()["at"] != first.GetContext().AsMap()["at"] {
		t.Fatalf("past the function's TTL, --cache-ttl 1m did not answer from the cache: %v", late)
	}
	if late.GetMeta().GetTtl() != nil || late.GetMeta().GetTag() != "t-ttl" {
		t.Errorf("a hit past the function's TTL says meta %v, want its tag and no ttl", late.GetMeta())
	}
}
