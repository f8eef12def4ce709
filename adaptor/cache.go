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

// get returns a copy of the cached response for tag, if one is live.
func (c *responseCache) get(tag string) (*fnv1.RunFunctionResponse, bool) {
	c.mu.Lock()
	e, ok := c.items[tag]
	if !ok {
		c.mu.Unlock()
		return nil, false
	}
	ent := e.Value.(*cacheEntry)
	if !c.now().Before(ent.expires) {
		c.remove(e)
		c.mu.Unlock()
		return nil, false
	}
	c.order.MoveToFront(e)
	data := ent.data
	c.mu.Unlock()
	rsp := &fnv1.RunFunctionResponse{}
	if err := proto.Unmarshal(data, rsp); err != nil {
		return nil, false
	}
	return rsp, true
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

// Get returns the live response for a tag, for hook.Cache.
func (c *responseCache) Get(tag string) (any, bool) {
	rsp, ok := c.get(tag)
	if !ok {
		return nil, false
	}
	return rsp, true
}

// Put keeps a RunFunctionResponse for a tag, for hook.Cache.
func (c *responseCache) Put(tag string, answer any, ttl time.Duration) {
	if rsp, ok := answer.(*fnv1.RunFunctionResponse); ok {
		c.put(tag, rsp, ttl)
	}
}
