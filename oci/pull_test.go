package oci

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestPullIsBounded: an image whose manifest declares more than the limit
// is refused before any layer is fetched; one within it is pulled.
func TestPullIsBounded(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/fn:v1"
	img, err := random.Image(4096, 3)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "pulled.tar")
	_, err = Pull(context.Background(), ref, dest, WithInsecureRegistry(), WithMaxPullBytes(8000))
	if err == nil || !strings.Contains(err.Error(), "larger than the limit of 8000 bytes") {
		t.Errorf("three layers of 4 KiB with a limit of 8000 bytes: %v, want refused", err)
	}
	want, _ := img.Digest()
	if got, err := Pull(context.Background(), ref, dest, WithInsecureRegistry(), WithMaxPullBytes(1<<20)); err != nil || got != want {
		t.Errorf("within the limit: %v %v, want %v", got, err, want)
	}
}

// TestParseReferenceSaysWhy: an invalid reference is refused with what is
// wrong with it, not only that it does not parse.
func TestParseReferenceSaysWhy(t *testing.T) {
	for ref, want := range map[string]string{
		"127.0.0.1:5000/acme/Function-A:v1":       "repository can only contain the characters",
		"registry.example.com/acme/fn:bad tag":    "tag can only contain the characters",
		"registry.example.com/acme/fn@sha256:abc": "invalid checksum digest length",
	} {
		_, err := ParseReference(ref)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), ref) {
			t.Errorf("ParseReference(%q) = %v, want an error naming it and %q", ref, err, want)
		}
	}
	if _, err := ParseReference("127.0.0.1:5000/acme/fn:V1"); err != nil {
		t.Errorf("a tag in upper case is valid: %v", err)
	}
}

// TestPushRefusesMultiPlatformImages: ocifn push pushes one image; an
// archive of a multi-platform image (top-level platforms, or a nested
// index) is refused, naming its platforms, instead of pushing only the
// one for this machine under the tag.
func TestPushRefusesMultiPlatformImages(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	layer := makeTar(t, entFile("a/file1", "x"))
	platforms := func() v1.ImageIndex {
		return mutate.AppendManifests(empty.Index,
			mutate.IndexAddendum{Add: newImageFor(t, otherArch(), gzipLayer, layer),
				Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: otherArch()}}},
			mutate.IndexAddendum{Add: newImage(t, gzipLayer, layer),
				Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}},
		)
	}
	cases := map[string]v1.ImageIndex{
		"top_level_platforms": platforms(),
		"nested_index": mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: platforms(),
			Descriptor: v1.Descriptor{Annotations: map[string]string{annotationRefName: "foo:latest"}}}),
	}
	for name, ii := range cases {
		t.Run(name, func(t *testing.T) {
			path := writeArchive(t, t.TempDir(), ociFiles(t, ii), false)
			d, err := Push(context.Background(), path, host+"/fn:"+name, WithInsecureRegistry())
			if err == nil || !strings.Contains(err.Error(), "linux/"+otherArch()) {
				t.Errorf("Push of a two-platform image: %v, %v; want refused, naming linux/%s", d, err, otherArch())
			}
		})
	}
	// One image in an index of one platform is pushed.
	one := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: newImage(t, gzipLayer, layer),
		Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}})
	path := writeArchive(t, t.TempDir(), ociFiles(t, one), false)
	if _, err := Push(context.Background(), path, host+"/fn:one", WithInsecureRegistry()); err != nil {
		t.Errorf("Push of a one-platform index: %v", err)
	}
}

// TestPushSaysItPushesOneImage: a docker-save tarball of several images is
// refused with what to do about it; Open's advice, to choose one by name,
// is for commands that can (build --image), and push cannot.
func TestPushSaysItPushesOneImage(t *testing.T) {
	files := dockerLegacyFiles(t, tagged{[]string{"aa:latest"}, newImage(t, gzipLayer, makeTar(t, entFile("a", "1")))},
		tagged{[]string{"bb:latest"}, newImage(t, gzipLayer, makeTar(t, entFile("b", "2")))})
	path := writeArchive(t, t.TempDir(), files, false)
	_, err := Push(context.Background(), path, "127.0.0.1:1/fn:v1", WithInsecureRegistry())
	if err == nil || !strings.Contains(err.Error(), "ocifn push pushes one image") {
		t.Errorf("Push of a tarball of two images: %v, want refused, saying push takes one", err)
	}
}

// TestInsecureRegistryAcceptsAnUnverifiedCertificate: WithInsecureRegistry
// (--insecure-registry) reaches a registry whose certificate no authority
// of this machine signed, as docker's insecure-registries does, for push,
// pull and inspect alike; without it that registry is refused.
func TestInsecureRegistryAcceptsAnUnverifiedCertificate(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	srv := httptest.NewTLSServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "https://")
	img := newImage(t, gzipLayer, makeTar(t, entFile("a/file1", "x")))
	path := writeArchive(t, t.TempDir(), dockerLegacyFiles(t, tagged{[]string{"fn:v1"}, img}), false)
	ctx := context.Background()
	if _, err := Push(ctx, path, host+"/fn:v1"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Push to a registry of an unknown authority without WithInsecureRegistry: %v, want refused for its certificate", err)
	}
	d, err := Push(ctx, path, host+"/fn:v1", WithInsecureRegistry())
	if err != nil {
		t.Fatalf("Push with WithInsecureRegistry: %v", err)
	}
	if _, err := RemoteImage(ctx, host+"/fn:v1", WithInsecureRegistry()); err != nil {
		t.Errorf("RemoteImage with WithInsecureRegistry: %v", err)
	}
	got, err := Pull(ctx, host+"/fn:v1", filepath.Join(t.TempDir(), "pulled.tar"), WithInsecureRegistry())
	if err != nil || got.String() != d.DigestStr() {
		t.Errorf("Pull with WithInsecureRegistry: %v %v, want %s", got, err, d.DigestStr())
	}
}
