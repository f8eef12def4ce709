package oci

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/containers/storage/pkg/reexec"
	ggcrcompression "github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
)

// TestMain lets the test binary serve as the re-executed layer extractor
// that chrootarchive starts.
func TestMain(m *testing.M) {
	if reexec.Init() {
		return
	}
	os.Exit(m.Run())
}

// --- tar entries ---

type tentry struct {
	name     string
	typ      byte
	body     string
	link     string
	mode     int64
	uid, gid int
	major    int64
	minor    int64
}

func entFile(name, body string) tentry {
	return tentry{name: name, typ: tar.TypeReg, body: body, mode: 0o644}
}

func entFileOwned(name string, uid, gid int) tentry {
	e := entFile(name, name)
	e.uid, e.gid = uid, gid
	return e
}

func entDir(name string) tentry { return tentry{name: name, typ: tar.TypeDir, mode: 0o755} }

func entSymlink(name, target string) tentry {
	return tentry{name: name, typ: tar.TypeSymlink, link: target, mode: 0o777}
}

func entHardlink(name, target string) tentry {
	return tentry{name: name, typ: tar.TypeLink, link: target, mode: 0o644}
}

func entDevice(name string, typ byte, major, minor int64) tentry {
	return tentry{name: name, typ: typ, mode: 0o666, major: major, minor: minor}
}

// makeTar builds a layer tar exactly as listed, hostile names included.
func makeTar(t testing.TB, entries ...tentry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode,
			Uid: e.uid, Gid: e.gid, Devmajor: e.major, Devminor: e.minor,
			Format: tar.FormatPAX,
		}
		if e.typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("tar header %q: %v", e.name, err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// --- images ---

type layerKind int

const (
	gzipLayer layerKind = iota
	zstdLayer
	plainLayer
)

func newLayer(t testing.TB, kind layerKind, b []byte) v1.Layer {
	t.Helper()
	opener := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	var (
		l   v1.Layer
		err error
	)
	switch kind {
	case gzipLayer:
		l, err = tarball.LayerFromOpener(opener, tarball.WithMediaType(types.OCILayer))
	case zstdLayer:
		l, err = tarball.LayerFromOpener(opener, tarball.WithCompression(ggcrcompression.ZStd), tarball.WithMediaType(types.OCILayerZStd))
	case plainLayer:
		l = static.NewLayer(b, types.OCIUncompressedLayer)
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// newImage builds a linux/GOARCH image from layer tars.
func newImage(t testing.TB, kind layerKind, layers ...[]byte) v1.Image {
	t.Helper()
	return newImageFor(t, runtime.GOARCH, kind, layers...)
}

func newImageFor(t testing.TB, arch string, kind layerKind, layers ...[]byte) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", arch
	cfg.Config.Cmd = []string{"/bin/true"}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	for _, b := range layers {
		if img, err = mutate.AppendLayers(img, newLayer(t, kind, b)); err != nil {
			t.Fatal(err)
		}
	}
	return img
}

// --- archives as lists of files, so tests can tamper before writing ---

type afile struct {
	name string
	data []byte
	link string // symlink target, if a symlink
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func marshalT(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type tagged struct {
	tags []string
	img  v1.Image
}

func rawParts(t testing.TB, img v1.Image) (cfg []byte, layers [][]byte) {
	t.Helper()
	cfg, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		_ = rc.Close()
		layers = append(layers, b)
	}
	return cfg, layers
}

// dockerLegacyFiles lays images out as `docker save` before Docker 25
// (and podman, skopeo, buildah docker-archive) does: <config hex>.json,
// <layer id>/layer.tar uncompressed, manifest.json, repositories.
func dockerLegacyFiles(t testing.TB, imgs ...tagged) []afile {
	t.Helper()
	var files []afile
	var manifest []dockerEntry
	for _, ti := range imgs {
		cfg, layers := rawParts(t, ti.img)
		e := dockerEntry{Config: sha256Hex(cfg) + ".json", RepoTags: ti.tags}
		files = append(files, afile{name: e.Config, data: cfg})
		for i, l := range layers {
			id := sha256Hex([]byte(sha256Hex(cfg) + string(rune('a'+i))))
			files = append(files,
				afile{name: id + "/VERSION", data: []byte("1.0")},
				afile{name: id + "/json", data: []byte(`{"id":"` + id + `"}`)},
				afile{name: id + "/layer.tar", data: l})
			e.Layers = append(e.Layers, id+"/layer.tar")
		}
		manifest = append(manifest, e)
	}
	return append(files, afile{name: "manifest.json", data: marshalT(t, manifest)})
}

// docker25Files lays one image out as Docker 25+ `docker save` does: an
// OCI layout with uncompressed layers plus manifest.json naming its blobs.
func docker25Files(t testing.TB, tag string, img v1.Image) []afile {
	t.Helper()
	cfg, layers := rawParts(t, img)
	files := []afile{{name: "oci-layout", data: []byte(`{"imageLayoutVersion":"1.0.0"}`)}}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1,
		Config: v1.Descriptor{MediaType: types.OCIConfigJSON, Size: int64(len(cfg)), Digest: v1.Hash{Algorithm: "sha256", Hex: sha256Hex(cfg)}}}
	e := dockerEntry{Config: "blobs/sha256/" + sha256Hex(cfg), RepoTags: []string{tag}}
	files = append(files, afile{name: "blobs/sha256/" + sha256Hex(cfg), data: cfg})
	for _, l := range layers {
		files = append(files, afile{name: "blobs/sha256/" + sha256Hex(l), data: l})
		e.Layers = append(e.Layers, "blobs/sha256/"+sha256Hex(l))
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: types.OCIUncompressedLayer, Size: int64(len(l)), Digest: v1.Hash{Algorithm: "sha256", Hex: sha256Hex(l)}})
	}
	mb := marshalT(t, m)
	files = append(files, afile{name: "blobs/sha256/" + sha256Hex(mb), data: mb})
	idx := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{{
		MediaType: types.OCIManifestSchema1, Size: int64(len(mb)), Digest: v1.Hash{Algorithm: "sha256", Hex: sha256Hex(mb)},
		Annotations: map[string]string{annotationContainerdName: "docker.io/library/" + tag, annotationRefName: "latest"},
	}}}
	files = append(files, afile{name: "index.json", data: marshalT(t, idx)})
	return append(files, afile{name: "manifest.json", data: marshalT(t, []dockerEntry{e})})
}

// ociFiles writes an index with go-containerregistry's layout package and
// returns the files of that OCI image layout.
func ociFiles(t testing.TB, ii v1.ImageIndex) []afile {
	t.Helper()
	d := t.TempDir()
	if _, err := layout.Write(d, ii); err != nil {
		t.Fatal(err)
	}
	var files []afile
	err := filepath.WalkDir(d, func(p string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(d, p)
		files = append(files, afile{name: filepath.ToSlash(rel), data: b})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	return files
}

// ociIndex makes an index of images, each annotated with its ref name
// (none if "").
func ociIndex(imgs ...tagged) v1.ImageIndex {
	var ii v1.ImageIndex = empty.Index
	for _, ti := range imgs {
		d := v1.Descriptor{}
		if len(ti.tags) > 0 {
			d.Annotations = map[string]string{annotationRefName: ti.tags[0]}
		}
		ii = mutate.AppendManifests(ii, mutate.IndexAddendum{Add: ti.img, Descriptor: d})
	}
	return ii
}

func replaceFile(t testing.TB, files []afile, name string, data []byte) []afile {
	t.Helper()
	for i := range files {
		if files[i].name == name {
			files[i].data = data
			return files
		}
	}
	t.Fatalf("no file %q in archive", name)
	return nil
}

func removeFile(t testing.TB, files []afile, name string) []afile {
	t.Helper()
	for i := range files {
		if files[i].name == name {
			return append(files[:i:i], files[i+1:]...)
		}
	}
	t.Fatalf("no file %q in archive", name)
	return nil
}

func findFile(t testing.TB, files []afile, prefix string) afile {
	t.Helper()
	for _, f := range files {
		if strings.HasPrefix(f.name, prefix) {
			return f
		}
	}
	t.Fatalf("no file %q... in archive", prefix)
	return afile{}
}

// writeArchive writes files as a tar (gzip-compressed if gz) under dir
// and returns its path.
func writeArchive(t testing.TB, dir string, files []afile, gz bool) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		hdr := &tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg}
		if f.link != "" {
			hdr = &tar.Header{Name: f.name, Mode: 0o777, Typeflag: tar.TypeSymlink, Linkname: f.link}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if f.link == "" {
			if _, err := tw.Write(f.data); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	name := "image.tar"
	if gz {
		b = gzipBytes(t, b)
		name = "image.tar.gz"
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func gzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// --- checking a rootfs ---

func readFileT(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(b)
}

func assertAbsent(t testing.TB, p string) {
	t.Helper()
	if _, err := os.Lstat(p); err == nil {
		t.Errorf("%s exists, want it absent", p)
	} else if !os.IsNotExist(err) {
		t.Errorf("lstat %s: %v", p, err)
	}
}

func statT(t testing.TB, p string) *syscall.Stat_t {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return fi.Sys().(*syscall.Stat_t)
}

// snapshot records everything under root that a breakout could change.
type snapEntry struct {
	mode       fs.FileMode
	uid, gid   uint32
	nlink      uint64
	size       int64
	content    string
	linkTarget string
}

func snapshotTree(t testing.TB, root string, skip string) map[string]snapEntry {
	t.Helper()
	out := map[string]snapEntry{}
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == skip {
			return filepath.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		e := snapEntry{mode: fi.Mode(), uid: st.Uid, gid: st.Gid, nlink: uint64(st.Nlink), size: fi.Size()}
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.content = sha256Hex(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			e.linkTarget, _ = os.Readlink(p)
		}
		out[p] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func fileSnapshot(t testing.TB, p string) snapEntry {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	b, _ := os.ReadFile(p)
	return snapEntry{mode: fi.Mode(), uid: st.Uid, gid: st.Gid, nlink: uint64(st.Nlink), size: fi.Size(), content: sha256Hex(b)}
}

// errText is the error's message with the given paths (temp dirs named
// after the test) taken out, so a check for a word cannot match a path.
func errText(err error, paths ...string) string {
	s := err.Error()
	for _, p := range paths {
		s = strings.ReplaceAll(s, p, "<path>")
	}
	return s
}
