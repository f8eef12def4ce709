package adaptor

import (
	"container/list"
	"sync"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// DefaultCacheMaxBytes bounds the response cache.
const DefaultCacheMaxBytes = 64 << 20

// responseCache keeps responses by the request's meta.tag until their TTL
// ends, as Crossplane's Functions design describes: equal tags mean equal
// requests. It holds each response marshalled, so that a hit is the bytes
// the function's answer was but for its meta.ttl (see cacheEntry), and
// evicts the least recently used entries beyond maxBytes.
type responseCache struct {
	mu       sync.Mutex
	maxBytes int
	size     int
	order    *list.List // front: most recently used
	items    map[string]*list.Element
	now      func() time.Time
}

// cacheEntry is a response kept. A hit says what is left of the
// function's meta.ttl, not all of it: Crossplane's own response cache
// keeps a response for a full meta.ttl from when it receives it, so a hit
// that said the whole TTL let an answer be used for up to twice as long as
// the function allowed. Only the response's meta, its first field, is
// encoded again per hit; the rest is sent as it was kept.
type cacheEntry struct {
	tag     string
	data    []byte
	expires time.Time
	// ttl is the function's meta.ttl, when positive, from stored; meta is
	// then the encoding of the response's meta without it, and rest where
	// the fields after the meta begin in data.
	ttl    time.Duration
	stored time.Time
	meta   []byte
	rest   int
}

func newResponseCache(maxBytes int) *responseCache {
	return &responseCache{maxBytes: maxBytes, order: list.New(), items: map[string]*list.Element{}, now: time.Now}
}

// lookup returns the marshalled response for tag, if one is live. The
// bytes are never changed (put replaces an entry), so a caller may keep
// them after the entry goes.
func (c *responseCache) lookup(tag string) (cachedResponse, bool) {
	c.mu.Lock()
	e, ok := c.items[tag]
	if !ok {
		c.mu.Unlock()
		return cachedResponse{}, false
	}
	ent := e.Value.(*cacheEntry)
	now := c.now()
	if !now.Before(ent.expires) {
		c.remove(e)
		c.mu.Unlock()
		return cachedResponse{}, false
	}
	c.order.MoveToFront(e)
	c.mu.Unlock()
	if ent.ttl <= 0 {
		return cachedResponse{data: ent.data}, true
	}
	return cachedResponse{head: ent.head(ent.ttl - now.Sub(ent.stored)), data: ent.data[ent.rest:]}, true
}

// head encodes the response's meta (field 1) with left as its ttl, cut to
// whole seconds as HTTP's Age counts: so the encoding is never longer than
// the function's, which --max-send-msg-size was checked against. Less
// than a second left, the ttl is left out: Crossplane then keeps nothing.
func (ent *cacheEntry) head(left time.Duration) []byte {
	var secs uint64
	if left > 0 {
		secs = uint64(left / time.Second)
	}
	// The ttl, a Duration of whole seconds: its field 1 alone.
	dur, ttl := 1+protowire.SizeVarint(secs), 0
	if secs > 0 {
		ttl = 1 + protowire.SizeBytes(dur)
	}
	n := len(ent.meta) + ttl
	b := make([]byte, 0, 1+protowire.SizeBytes(n))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b = append(b, ent.meta...)
	if secs > 0 {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(dur))
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, secs)
	}
	return b
}

// get returns a copy of the cached response for tag, if one is live.
func (c *responseCache) get(tag string) (*fnv1.RunFunctionResponse, bool) {
	hit, ok := c.lookup(tag)
	if !ok {
		return nil, false
	}
	rsp, err := hit.decode()
	return rsp, err == nil
}

// cachedResponse is a cache hit: a response as protobuf bytes, head then
// data (the bytes kept, never changed). A call the gRPC server answers
// sends them as they are (see rawAnswer); decoding a copy per hit, which
// the in-flight budget does not bound and --max-concurrency does not
// admit, took a server answering many hits of a large response at once
// past its memory bound.
type cachedResponse struct{ head, data []byte }

// decode returns a copy of the response.
func (h cachedResponse) decode() (*fnv1.RunFunctionResponse, error) {
	rsp := &fnv1.RunFunctionResponse{}
	if err := proto.Unmarshal(h.head, rsp); err != nil {
		return nil, err
	}
	if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(h.data, rsp); err != nil {
		return nil, err
	}
	return rsp, nil
}

// put stores rsp for tag for ttl. Responses larger than the whole cache are
// not kept.
func (c *responseCache) put(tag string, rsp *fnv1.RunFunctionResponse, ttl time.Duration) {
	if tag == "" || ttl <= 0 {
		return
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(rsp)
	if err != nil {
		return
	}
	now := c.now()
	ent := &cacheEntry{tag: tag, data: data, expires: now.Add(ttl)}
	if fn := rsp.GetMeta().GetTtl().AsDuration(); fn > 0 {
		var ok bool
		if ent.meta, ent.rest, ok = splitMeta(data); !ok {
			return // not as Marshal writes it: nothing to send for sure
		}
		ent.ttl, ent.stored = fn, now
	}
	if ent.size() > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[tag]; ok {
		c.remove(e)
	}
	c.items[tag] = c.order.PushFront(ent)
	c.size += ent.size()
	for c.size > c.maxBytes {
		c.remove(c.order.Back())
	}
}

// splitMeta returns the encoding of a marshalled response's meta, its first
// field (Marshal writes a message's fields in the order of their numbers),
// without its ttl, and where the fields after it begin.
func splitMeta(data []byte) (meta []byte, rest int, ok bool) {
	num, typ, n := protowire.ConsumeTag(data)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		return nil, 0, false
	}
	v, m := protowire.ConsumeBytes(data[n:])
	if m < 0 {
		return nil, 0, false
	}
	for b := v; len(b) > 0; {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return nil, 0, false
		}
		f := protowire.ConsumeFieldValue(num, typ, b[k:])
		if f < 0 {
			return nil, 0, false
		}
		if num != 2 {
			meta = append(meta, b[:k+f]...)
		}
		b = b[k+f:]
	}
	return meta, n + m, true
}

func (c *responseCache) remove(e *list.Element) {
	ent := c.order.Remove(e).(*cacheEntry)
	delete(c.items, ent.tag)
	c.size -= ent.size()
}

// size is what the entry holds: its meta (the request's tag, which may be
// long) is a copy.
func (ent *cacheEntry) size() int { return len(ent.data) + len(ent.meta) }

// Get returns the live response for a tag, a cachedResponse, for
// hook.Cache.
func (c *responseCache) Get(tag string) (any, bool) {
	hit, ok := c.lookup(tag)
	if !ok {
		return nil, false
	}
	return hit, true
}

// Put keeps a RunFunctionResponse for a tag, for hook.Cache.
func (c *responseCache) Put(tag string, answer any, ttl time.Duration) {
	if rsp, ok := answer.(*fnv1.RunFunctionResponse); ok {
		c.put(tag, rsp, ttl)
	}
}
