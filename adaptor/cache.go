package adaptor

import (
	"container/list"
	"sync"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/proto"
)

// DefaultCacheMaxBytes bounds the response cache.
const DefaultCacheMaxBytes = 64 << 20

// responseCache keeps responses by the request's meta.tag until their TTL
// ends, as Crossplane's Functions design describes: equal tags mean equal
// requests. It holds each response marshalled, so that a hit is the very
// bytes the function's answer was, and evicts the least recently used
// entries beyond maxBytes.
type responseCache struct {
	mu       sync.Mutex
	maxBytes int
	size     int
	order    *list.List // front: most recently used
	items    map[string]*list.Element
	now      func() time.Time
}

type cacheEntry struct {
	tag     string
	data    []byte
	expires time.Time
}

func newResponseCache(maxBytes int) *responseCache {
	return &responseCache{maxBytes: maxBytes, order: list.New(), items: map[string]*list.Element{}, now: time.Now}
}

// lookup returns the marshalled response for tag, if one is live. The
// bytes are never changed (put replaces an entry), so a caller may keep
// them after the entry goes.
func (c *responseCache) lookup(tag string) (cachedResponse, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[tag]
	if !ok {
		return cachedResponse{}, false
	}
	ent := e.Value.(*cacheEntry)
	if !c.now().Before(ent.expires) {
		c.remove(e)
		return cachedResponse{}, false
	}
	c.order.MoveToFront(e)
	return cachedResponse{data: ent.data}, true
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

// cachedResponse is a cache hit: a response as protobuf bytes. A call the
// gRPC server answers sends them as they are (see rawAnswer); decoding a
// copy per hit, which the in-flight budget does not bound and
// --max-concurrency does not admit, took a server answering many hits of a
// large response at once past its memory bound.
type cachedResponse struct{ data []byte }

// decode returns a copy of the response.
func (h cachedResponse) decode() (*fnv1.RunFunctionResponse, error) {
	rsp := &fnv1.RunFunctionResponse{}
	if err := proto.Unmarshal(h.data, rsp); err != nil {
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
	if err != nil || len(data) > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[tag]; ok {
		c.remove(e)
	}
	c.items[tag] = c.order.PushFront(&cacheEntry{tag: tag, data: data, expires: c.now().Add(ttl)})
	c.size += len(data)
	for c.size > c.maxBytes {
		c.remove(c.order.Back())
	}
}

func (c *responseCache) remove(e *list.Element) {
	ent := c.order.Remove(e).(*cacheEntry)
	delete(c.items, ent.tag)
	c.size -= len(ent.data)
}

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
