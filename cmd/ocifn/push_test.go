package main

import (
	"context"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/ocifn/ocifn/oci"
)

// TestPushUnauthorizedSaysWhereCredentialsComeFrom: a registry that wants
// credentials answers a push's first call, a HEAD, with a bare 401; the
// error says where ocifn takes credentials from, for the registry's host.
func TestPushUnauthorizedSaysWhereCredentialsComeFrom(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	pkg := randomPackage(t)
	err := runPush(context.Background(), pkg, host+"/acme/function:v1", true)
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "docker login "+host) {
		t.Errorf("push to a registry that wants credentials: %v, want the 401 and how to log in", err)
	}
	_, err = inspect(context.Background(), host+"/acme/function:v1", true)
	if err == nil || !strings.Contains(err.Error(), "docker login "+host) {
		t.Errorf("inspect on a registry that wants credentials: %v, want how to log in", err)
	}
}

// TestRegistryOfUnknownAuthoritySaysWhatFixesIt: a registry whose
// certificate no authority of this machine signed is refused, naming the
// settings that make it work, by push, inspect, build --runtime-image and
// the pulls of test and render alike.
func TestRegistryOfUnknownAuthoritySaysWhatFixesIt(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.StartTLS()
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "https://") + "/acme/function:v1"
	pkg := randomPackage(t)
	ctx := context.Background()
	_, inspectErr := inspect(ctx, ref, false)
	build := &buildOptions{runtimeImage: ref}
	_, _, buildErr := build.runtime(ctx)
	fns := newLocalFunctions(functionFlags{cacheDir: t.TempDir()}, slog.New(slog.DiscardHandler), nil, false)
	_, pullErr := fns.pull(ctx, ref)
	for what, err := range map[string]error{
		"push":                  runPush(ctx, pkg, ref, false),
		"inspect":               inspectErr,
		"build --runtime-image": buildErr,
		"render's pull":         pullErr,
	} {
		if err == nil || !strings.Contains(err.Error(), "unknown authority") ||
			!strings.Contains(err.Error(), "SSL_CERT_FILE") || !strings.Contains(err.Error(), "--insecure-registry") {
			t.Errorf("%s from a registry of an unknown authority: %v, want the error to name SSL_CERT_FILE and --insecure-registry", what, err)
		}
	}
}

// TestMissingCredentialHelperNamesTheConfig: a docker config whose
// credsStore or credHelpers names a helper that is not installed fails
// every registry call; the error says which config names it and what to
// do, not only which program could not be run.
func TestMissingCredentialHelperNamesTheConfig(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	for key, config := range map[string]string{
		"credsStore":  `{"credsStore": "ocifn-test-missing"}`,
		"credHelpers": `{"credHelpers": {"` + host + `": "ocifn-test-missing"}}`,
	} {
		t.Run(key, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o600); err != nil {
				t.Fatal(err)
			}
			t.Setenv("DOCKER_CONFIG", dir)
			_, err := inspect(context.Background(), host+"/acme/function:v1", false)
			if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "config.json")) ||
				!strings.Contains(err.Error(), "docker-credential-ocifn-test-missing") || !strings.Contains(err.Error(), "remove it") {
				t.Errorf("inspect with a %s helper that is not installed: %v, want the config file, the helper and what to do", key, err)
			}
		})
	}
}

// TestPushToAnotherDigestUploadsNothing: a reference by digest names the
// manifest it must be; a package whose manifest is another is refused
// before a byte is uploaded, naming both digests, instead of uploading
// its layers for the registry to refuse the manifest at the end.
func TestPushToAnotherDigestUploadsNothing(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	var writes atomic.Int32
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch {
			writes.Add(1)
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	pkg := randomPackage(t)
	wrong := "sha256:" + strings.Repeat("0", 64)
	err := runPush(context.Background(), pkg, host+"/acme/function@"+wrong, true)
	if err == nil || !strings.Contains(err.Error(), wrong) || !strings.Contains(err.Error(), "sha256:") {
		t.Errorf("push to a digest the package does not have: %v, want an error naming it and the package's", err)
	}
	if n := writes.Load(); n != 0 {
		t.Errorf("push to a digest the package does not have made %d uploads, want none", n)
	}
	// The package's own digest is pushed to as to a tag.
	tagged, err := oci.Push(context.Background(), pkg, host+"/acme/function:v1", oci.WithInsecureRegistry())
	if err != nil {
		t.Fatal(err)
	}
	byDigest, err := oci.Push(context.Background(), pkg, tagged.String(), oci.WithInsecureRegistry())
	if err != nil || byDigest != tagged {
		t.Errorf("push to the package's own digest %s: %v, %v", tagged, byDigest, err)
	}
}

// randomPackage writes an image of random content, which push and its
// registry take as a package, and returns its path.
func randomPackage(t *testing.T) string {
	t.Helper()
	img, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(t.TempDir(), "function.xpkg")
	if err := tarball.WriteToFile(pkg, nil, img); err != nil {
		t.Fatal(err)
	}
	return pkg
}
