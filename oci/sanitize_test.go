package oci

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestUnpackNeutralisesHostileEntries covers what the extractor alone would
// let through to the host's cache directory: setuid and setgid files,
// file capabilities, fifos, and whiteouts aimed at a directory, its parent
// or ../. Each is stripped, skipped or refused with an error naming the
// entry, and nothing outside the rootfs changes.
func TestUnpackNeutralisesHostileEntries(t *testing.T) {
	mode := func(e tentry, m int64) tentry { e.mode = m; return e }
	cases := []struct {
		name    string
		layers  func(s *sandbox) [][]byte
		wantErr []string
		check   func(t *testing.T, s *sandbox)
	}{
		{
			name: "setuid_and_setgid_bits_are_stripped",
			layers: func(s *sandbox) [][]byte {
				d := entDir("sgid-dir/")
				d.mode = 0o2775
				return [][]byte{makeTar(t, mode(entFile("suid", "x"), 0o4755), mode(entFile("sgid", "x"), 0o2711), d, mode(entFile("sticky", "x"), 0o1755))}
			},
			check: func(t *testing.T, s *sandbox) {
				for name, want := range map[string]uint32{"suid": 0o755, "sgid": 0o711, "sgid-dir": 0o775, "sticky": 0o1755} {
					if got := statT(t, filepath.Join(s.dest, name)).Mode & 0o7777; got != want {
						t.Errorf("%s has mode %04o, want %04o", name, got, want)
					}
				}
			},
		},
		{
			name: "file_capabilities_and_other_privileged_xattrs_are_dropped",
			layers: func(s *sandbox) [][]byte {
				return [][]byte{paxTar(t, "capped", map[string]string{
					"SCHILY.xattr.security.capability":    "\x01\x00\x00\x02\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
					"SCHILY.xattr.trusted.overlay.opaque": "y",
				})}
			},
			check: func(t *testing.T, s *sandbox) {
				for _, x := range []string{"security.capability", "trusted.overlay.opaque"} {
					if _, err := unix.Lgetxattr(filepath.Join(s.dest, "capped"), x, make([]byte, 64)); !errors.Is(err, unix.ENODATA) {
						t.Errorf("xattr %s: %v, want it absent (ENODATA)", x, err)
					}
				}
			},
		},
		{
			name: "fifos_are_skipped",
			layers: func(s *sandbox) [][]byte {
				return [][]byte{makeTar(t, entDir("run/"), tentry{name: "run/ctl", typ: tar.TypeFifo, mode: 0o666}, entFile("ok", "ok"))}
			},
			check: func(t *testing.T, s *sandbox) {
				assertAbsent(t, filepath.Join(s.dest, "run/ctl"))
				if got := readFileT(t, filepath.Join(s.dest, "ok")); got != "ok" {
					t.Errorf("ok = %q", got)
				}
			},
		},
		{
			name: "whiteout_through_dotdot_stays_inside",
			layers: func(s *sandbox) [][]byte {
				return [][]byte{
					makeTar(t, entFile("sibling.txt", "inside"), entFile("keep", "k")),
					makeTar(t, entFile("../.wh.sibling.txt", ""), entFile(strings.Repeat("../", 8)+".wh.outside", "")),
				}
			},
			check: func(t *testing.T, s *sandbox) {
				assertAbsent(t, filepath.Join(s.dest, "sibling.txt"))
				if got := readFileT(t, filepath.Join(s.dest, "keep")); got != "k" {
					t.Errorf("keep = %q", got)
				}
			},
		},
		{
			name: "whiteout_of_the_parent_directory_is_refused",
			layers: func(s *sandbox) [][]byte {
				return [][]byte{makeTar(t, entFile("keep", "k")), makeTar(t, entFile("sub/.wh...", ""))}
			},
			wantErr: []string{`layer 2/2`, `entry "sub/.wh..."`, errWhiteoutTarget},
		},
		{
			name: "whiteout_of_the_directory_itself_is_refused",
			layers: func(s *sandbox) [][]byte {
				return [][]byte{makeTar(t, entFile(".wh..", ""))}
			},
			wantErr: []string{`entry ".wh.."`, errWhiteoutTarget},
		},
		{
			name: "sparse_file_bomb_is_refused",
			layers: func(s *sandbox) [][]byte {
				return [][]byte{sparseTar(t, "holes", 4<<30)}
			},
			wantErr: []string{`entry "holes"`, errSparse},
		},
		{
			name: "opaque_whiteout_still_works",
			layers: func(s *sandbox) [][]byte {
				return [][]byte{
					makeTar(t, entDir("d/"), entFile("d/old", "old")),
					makeTar(t, entDir("d/"), entFile("d/.wh..wh..opq", ""), entFile("d/new", "new")),
				}
			},
			check: func(t *testing.T, s *sandbox) {
				assertAbsent(t, filepath.Join(s.dest, "d/old"))
				if got := readFileT(t, filepath.Join(s.dest, "d/new")); got != "new" {
					t.Errorf("d/new = %q", got)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSandbox(t)
			err := unpackLayers(t, s.dest, tc.layers(s))
			if err != nil {
				t.Logf("error: %v", err)
			}
			switch {
			case len(tc.wantErr) == 0 && err != nil:
				t.Errorf("Unpack: %v", err)
			case len(tc.wantErr) > 0 && err == nil:
				t.Errorf("Unpack succeeded, want an error with %q", tc.wantErr)
			case err != nil:
				for _, w := range tc.wantErr {
					if !strings.Contains(errText(err, s.dest), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
			}
			s.assertContained(t)
			if err == nil && tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

// TestUnpackDecompressionBomb: a gzip layer of a few kilobytes that
// inflates to 256 MiB stops at the byte limit, quickly, with an error
// naming the layer and the limit, and leaves the disk unfilled.
func TestUnpackDecompressionBomb(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	const size = 256 << 20
	if err := tw.WriteHeader(&tar.Header{Name: "bomb", Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(tw, zeros{}, size); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	img := newImage(t, gzipLayer, buf.Bytes())
	layers, _ := img.Layers()
	compressed, _ := layers[0].Size()
	t.Logf("layer: %d bytes compressed, %d uncompressed", compressed, buf.Len())
	s := newSandbox(t)
	start := time.Now()
	err := Unpack(t.Context(), img, s.dest, WithMaxBytes(1<<20))
	if err == nil || !strings.Contains(err.Error(), "layer 1/1") || !strings.Contains(err.Error(), "larger than the limit of 1048576 uncompressed bytes") {
		t.Fatalf("error %v, want the limit named for layer 1", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("stopping the bomb took %s", took)
	}
	if fi, err := os.Stat(filepath.Join(s.dest, "bomb")); err == nil && fi.Size() > 2<<20 {
		t.Errorf("the bomb wrote %d bytes before it was stopped", fi.Size())
	}
	s.assertContained(t)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// paxTar is a layer with one file carrying the given PAX records.
func paxTar(t testing.TB, name string, records map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Typeflag: tar.TypeReg, Size: 1, PAXRecords: records, Format: tar.FormatPAX}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzUnpack applies arbitrary bytes as a layer: Unpack may refuse them, but
// must never panic and never change anything outside the rootfs, and what it
// unpacks carries no setuid or setgid bit. Seeds are hostile layers like the
// ones above, plus testdata/fuzz/FuzzUnpack.
//
// The layers go through the sanitizer and the extractor in this process
// (extractInThread), not through a re-executed child per input: thousands
// of inputs per second instead of about 6. Plain `go test` runs each seed
// through the re-executed child too.
func FuzzUnpack(f *testing.F) {
	up := strings.Repeat("../", 8)
	for _, l := range [][]byte{
		makeTar(f, entFile("a", "a"), entDir("d/"), entSymlink("d/l", "../a"), entHardlink("h", "a")),
		makeTar(f, entFile("../escape", "x"), entFile("/abs", "x"), entSymlink("evil", "/"), entFile("evil/through", "x")),
		makeTar(f, entSymlink("up", up+"outside"), entHardlink("stolen", up+"outside/secret"), entFile(".wh..", "")),
		makeTar(f, entDevice("dev/null", tar.TypeChar, 1, 3), tentry{name: "fifo", typ: tar.TypeFifo, mode: 0o666}, entFile("d/.wh..wh..opq", "")),
		makeTar(f, tentry{name: "suid", typ: tar.TypeReg, mode: 0o6755}),
		paxTar(f, "capped", map[string]string{"SCHILY.xattr.security.capability": "x"}),
		sparseTar(f, "holes", 4<<30),
		makeTar(f, entFile("a", "a"), entHardlink("../h", "/a"), entFile("../.wh.a", "")),
	} {
		f.Add(l)
	}
	fuzzing := flag.Lookup("test.fuzz").Value.String() != ""
	f.Fuzz(func(t *testing.T, data []byte) {
		unpackAndCheck(t, data, withExtractor(extractInThread))
		if !fuzzing {
			unpackAndCheck(t, data)
		}
	})
}

func unpackAndCheck(t *testing.T, data []byte, opts ...UnpackOption) {
	s := newSandbox(t)
	var warnings []Warning
	err := Unpack(t.Context(), newImage(t, plainLayer, data), s.dest, append(opts, WithWarnings(func(w Warning) { warnings = append(warnings, w) }))...)
	if errors.Is(err, errThreadChroot) {
		t.Fatal(err)
	}
	s.assertContained(t)
	_ = filepath.WalkDir(s.dest, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s has mode %v", p, fi.Mode())
		}
		return nil
	})
	if len(warnings) > maxWarnings+1 {
		t.Errorf("%d warnings for one layer, want at most %d", len(warnings), maxWarnings+1)
	}
	for _, w := range warnings {
		if w.Layer == "" || w.Reason == "" {
			t.Errorf("warning without its layer or reason: %+v", w)
		}
	}
}

// sparseTar is a layer of one old-GNU sparse entry that is all hole: a few
// hundred bytes that a tar reader expands to size bytes of zeros. Go's tar
// writer does not write sparse entries, so the header is built by hand.
func sparseTar(t testing.TB, name string, size int64) []byte {
	t.Helper()
	var h [512]byte
	octal := func(off, n int, v int64) { copy(h[off:off+n], fmt.Sprintf("%0*o\x00", n-1, v)) }
	copy(h[0:100], name)
	octal(100, 8, 0o644)
	octal(108, 8, 0)
	octal(116, 8, 0)
	octal(124, 12, 0) // no data stored
	octal(136, 12, 0)
	h[156] = tar.TypeGNUSparse
	copy(h[257:265], "ustar  \x00")
	octal(483, 12, size) // real size; the sparse map (386-481) is empty
	for i := 148; i < 156; i++ {
		h[i] = ' '
	}
	var sum int64
	for _, c := range h {
		sum += int64(c)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return append(h[:], make([]byte, 1024)...)
}

// TestSanitizeKeepsTimes: the times of an entry pass the sanitizer whole:
// a modification time's fraction of a second, and access and change
// times, which a USTAR header cannot hold.
func TestSanitizeKeepsTimes(t *testing.T) {
	mtime, atime := time.Unix(1700000000, 123456789), time.Unix(1700000100, 5)
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeReg, Name: "fine", Mode: 0o644, ModTime: mtime, AccessTime: atime, ChangeTime: atime, Format: tar.FormatPAX},
		{Typeflag: tar.TypeReg, Name: "whole", Mode: 0o644, ModTime: time.Unix(1700000000, 0)},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := copySanitized(&in, &out, names{}, nil, func(string, string) {}); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&out)
	h, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	if !h.ModTime.Equal(mtime) || !h.AccessTime.Equal(atime) || !h.ChangeTime.Equal(atime) {
		t.Errorf("times %v, %v, %v became %v, %v, %v", mtime, atime, atime, h.ModTime, h.AccessTime, h.ChangeTime)
	}
	if h, err = tr.Next(); err != nil {
		t.Fatal(err)
	}
	if h.Format != tar.FormatUSTAR || !h.ModTime.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("a whole second: format %v, time %v; want USTAR, as before", h.Format, h.ModTime)
	}
}
