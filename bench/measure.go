package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// measure runs call from clients concurrent workers for d or max calls,
// whichever ends first, each worker as fast as it can or, with pace, one
// call per pace. cpu reports the CPU time spent by whatever runs the calls.
func measure(ctx context.Context, call caller, clients int, d time.Duration, max int, pace time.Duration, cpu func() time.Duration) round {
	// Warm up: caches, connections, the first container.
	for i := range clients {
		_ = call(ctx, i)
	}
	var next atomic.Int64
	lat := make([][]time.Duration, clients)
	errs := make([]int, clients)
	var firstErr atomic.Value
	deadline := time.Now().Add(d)
	cpu0 := cpu()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			due := time.Now()
			for time.Now().Before(deadline) && next.Add(1) <= int64(max) {
				if pace > 0 {
					time.Sleep(time.Until(due))
					due = due.Add(pace)
				}
				t := time.Now()
				err := call(ctx, w)
				lat[w] = append(lat[w], time.Since(t))
				if err != nil {
					errs[w]++
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	r := round{elapsed: time.Since(start), children: cpu() - cpu0}
	for w := range clients {
		r.lat = append(r.lat, lat[w]...)
		r.errors += errs[w]
	}
	if e, ok := firstErr.Load().(string); ok {
		r.firstError = e
	}
	return r
}

// childrenCPU is the CPU time of this process's reaped children.
func childrenCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// split is the CPU of a call, split by who spent it (see cpuSplit). client
// and elsewhere are outside the server: ghz's own CPU, and the rest of
// what the machine's CPUs were busy with during the cell (kernel threads
// such as the workers that tear down network namespaces, interrupts,
// anything else running); they are not part of total.
type split struct {
	own, runtime, function time.Duration
	client, elsewhere      time.Duration
	// floor is the floor's CPU per call, the function's part where the
	// server does not count it (counted false).
	floor   time.Duration
	counted bool
}

func (s split) total() time.Duration { return s.own + s.runtime + s.function }

// machine is what the whole machine spent per call: the server and its
// children, ghz, and elsewhere.
func (s split) machine() time.Duration { return s.total() + s.client + s.elsewhere }

type row struct {
	mode    string
	clients int
	r       result
	cpu     split
}

// target is a gRPC server under measurement: ocifn serve, or the peer.
type target struct {
	name string
	s    *server
}

// measured is what benchFunction measured of one function, for the
// targets' table (targets.go).
type measured struct {
	rows []row
	// warm names the rows of the server with the default pool.
	warm string
	// paced holds the one-client rows at pace calls/s, the floor's
	// first (its split: the function's CPU alone).
	paced []row
	pace  int
	// idle is the warm server's memory before the runs.
	idle memory
}

func benchFunction(ctx context.Context, c config, work, fn string, pod *podman, g *ghzTool) (*measured, error) {
	tarballPath, err := filepath.Abs(filepath.Join(c.images, fn+".tar"))
	if err != nil {
		return nil, err
	}
	reqPath := filepath.Join("testdata", "functions", fn, "request.json")
	request, err := os.ReadFile(reqPath)
	if err != nil {
		return nil, err
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, request); err != nil {
		return nil, fmt.Errorf("%s: %w", reqPath, err)
	}
	input := compact.Bytes()
	dir, err := os.MkdirTemp(work, fn+"-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, err
	}
	reqFile := filepath.Join(dir, "request.json")
	if err := os.WriteFile(reqFile, input, 0o644); err != nil {
		return nil, err
	}
	gz := *g
	gz.request = reqFile
	fl, err := newFloor(ctx, tarballPath, dir, input)
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}

	var targets []target
	var idle []memory
	for i, m := range []struct {
		name  string
		extra []string
	}{{"ocifn --warm 0", []string{"--warm", "0"}}, {fmt.Sprintf("ocifn --warm %d", c.warm), []string{"--warm", fmt.Sprint(c.warm)}}} {
		cache := filepath.Join(dir, fmt.Sprintf("cache-%d", i))
		s, err := startServer(c.ocifn, tarballPath, cache, m.extra...)
		if err != nil {
			return nil, err
		}
		defer s.stop()
		targets = append(targets, target{m.name, s})
	}
	if c.peer != "" {
		s, err := startPeer(c.peer, fl)
		if err != nil {
			return nil, err
		}
		defer s.stop()
		targets = append(targets, target{"peer (sdk server, chroot + exec)", s})
	}
	time.Sleep(time.Second) // the warm pools fill
	// The isolation floor runs the warm server's bundle (cache-1), if it
	// can run all of what that bundle asks for.
	iso, err := newIsolationFloor(dir, filepath.Join(dir, "cache-1"), reqFile)
	if err != nil {
		fmt.Printf("isolation floor: skipped for %s (%v)\n\n", fn, err)
		iso = nil
	}
	for _, t := range targets {
		idle = append(idle, t.s.memory())
	}
	var podFn *podman
	if pod != nil {
		if podFn, err = pod.load(tarballPath, input); err != nil {
			fmt.Printf("podman: skipped for %s (%v)\n\n", fn, err)
		}
	}

	// Each cell runs in c.rounds rounds of d (or perRound calls),
	// interleaved with the other modes' (see cell).
	d := c.duration / time.Duration(c.rounds)
	perRound := (c.maxCalls + c.rounds - 1) / c.rounds
	var rows []row
	for _, n := range c.clients {
		// The modes of a row, floor first: its CPU per call is the
		// function's part of the others'.
		names := []string{"floor (chroot + exec, no gRPC)"}
		modes := []func() (round, error){func() (round, error) {
			return measure(ctx, fl.call, n, d, perRound, 0, childrenCPU), nil
		}}
		// The isolation floor, each container made on the call's path, then
		// as many made ahead per client as the warm server keeps.
		isoErr := map[string]*error{}
		if iso != nil {
			for _, m := range []struct {
				name string
				l    loop
			}{{isolationName, loop{}}, {isolationAheadName, loop{ahead: madeAhead(c.warm)}}} {
				var failed error
				isoErr[m.name] = &failed
				names = append(names, m.name)
				modes = append(modes, iso.mode(n, d, perRound, m.l, &failed))
			}
		}
		for _, t := range targets {
			names = append(names, t.name)
			modes = append(modes, func() (round, error) { return ghzCell(ctx, &gz, t.s, n, d, 0) })
		}
		cells, err := interleave(c.rounds, modes)
		if err != nil {
			return nil, err
		}
		floorCPU := cells[0].cpuPerCall()
		for i, name := range names {
			if failed := isoErr[name]; failed != nil && *failed != nil {
				fmt.Printf("%v\n\n", *failed)
				continue
			}
			rows = append(rows, row{name, n, cells[i].result(), cells[i].split(floorCPU)})
		}
		if podFn != nil {
			// podman is slow: fewer calls keep the run short, in one round.
			r := cell{measure(ctx, podFn.call, n, c.duration, max(n*4, 20), 0, childrenCPU)}
			rows = append(rows, row{"podman run --rm -i (own client)", n, r.result(), split{runtime: r.cpuPerCall()}})
		}
	}

	fmt.Printf("## %s\n\n", fn)
	fmt.Printf("Latency and throughput by ghz (the floor and podman by the bench's own loop). CPU per call: *server* is ocifn's own processes (the peer's process); *function* is, for ocifn, what its containers' processes used from their start to their end in the same calls (`ocifn_function_cpu_seconds_total`: the exec, the program, its children and its exit), and for the others the floor's CPU per call (fork, exec and the program in a chroot); *crun & co.* is what the server's reaped children used beyond *function* (crun create/delete and the container's set-up before its start). The *isolation floor* runs the function with the isolation of ocifn's containers (the namespaces, ID mappings, mounts, masked paths, rlimits, no capabilities and the seccomp filter of the warm server's bundle) made by a minimal C loop with no runtime (bench/isolation/isolate.c): its *crun & co.* is the kernel's work for that isolation, which any runtime pays; what ocifn's *crun & co.* has beyond it is crun's own. *Made ahead*, the same loop keeps %d containers per client set up before their calls (as many as the warm server's pool keeps for one client) and starts one per call, making the next after the answer: its latency over the floor's is what starting a container made ahead costs the kernel (in a closed loop, with any wait for one still setting up); its CPU includes the set-up of the containers left unused at each round's end. Outside the server, not in *total*: *ghz* is the load tool's own CPU; *elsewhere* is the rest of what the machine's CPUs were busy with during the cell (/proc/stat), mostly kernel threads, such as the workers that tear down a container's network namespace.\n\n", madeAhead(c.warm))
	fmt.Printf("| mode | clients | calls | errors | p50 | p90 | p99 | calls/s | CPU/call: server | crun & co. | function | total | ghz | elsewhere |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Printf("| %s | %d | %d | %d | %s | %s | %s | %.0f | %s | %s | %s | %s | %s | %s |\n", r.mode, r.clients, r.r.calls, r.r.errors, ms(r.r.p50), ms(r.r.p90), ms(r.r.p99), r.r.perSecond,
			ms(r.cpu.own), ms(r.cpu.runtime), ms(r.cpu.function), ms(r.cpu.total()), orDash(r.cpu.client), orDash(r.cpu.elsewhere))
	}
	fmt.Println()
	for _, r := range rows {
		if r.r.firstError != "" {
			fmt.Printf("first error of %s with %d clients: %s\n\n", r.mode, r.clients, oneLine(r.r.firstError))
		}
	}
	warmName := targets[1].name
	m := &measured{rows: rows, warm: warmName, idle: idle[1], pace: c.paced}
	get := func(n int, prefix string) result { return m.rowOf(n, prefix).r }
	fmt.Printf("| clients | warm p50 − floor p50 | warm p99 − floor p99 | warm/floor throughput | warm p50 / peer p50 | warm/peer throughput | podman p50 / warm p50 | isolation floor/floor throughput | warm crun & co. − isolation floor's |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range c.clients {
		f, w, pe, p, iso := get(n, "floor"), m.rowOf(n, warmName), get(n, "peer"), get(n, "podman"), m.rowOf(n, isolationName)
		fmt.Printf("| %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", n, ms(w.r.p50-f.p50), ms(w.r.p99-f.p99), pctOf(w.r.perSecond, f.perSecond),
			ratio(w.r.p50.Seconds(), pe.p50.Seconds()), pctOf(w.r.perSecond, pe.perSecond), ratio(p.p50.Seconds(), w.r.p50.Seconds()),
			pctOf(iso.r.perSecond, f.perSecond), crunOwn(w.cpu, iso))
	}
	fmt.Println()
	if c.paced > 0 {
		pace := time.Second / time.Duration(c.paced)
		// Longer rounds than the closed loops': a paced round's calls are
		// few, and its median is the target's.
		d := c.pacedDuration / time.Duration(c.rounds)
		fmt.Printf("One client, %d calls/s (ghz --rps; as calls come from reconciles rather than a closed loop):\n\n", c.paced)
		fmt.Printf("| mode | calls | p50 | p90 | p99 | p50 − floor p50 | CPU/call: server | crun & co. | function | ghz | elsewhere |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		names := []string{"floor"}
		modes := []func() (round, error){func() (round, error) {
			return measure(ctx, fl.call, 1, d, perRound, pace, childrenCPU), nil
		}}
		var isoErr error
		if iso != nil {
			names = append(names, isolationAheadName)
			modes = append(modes, iso.mode(1, d, perRound, loop{ahead: madeAhead(c.warm), rate: c.paced}, &isoErr))
		}
		for _, t := range targets {
			names = append(names, t.name)
			modes = append(modes, func() (round, error) { return ghzCell(ctx, &gz, t.s, 1, d, c.paced) })
		}
		cells, err := interleave(c.rounds, modes)
		if err != nil {
			return nil, err
		}
		floorRes, floorCPU := cells[0].result(), cells[0].cpuPerCall()
		fmt.Printf("| floor | %d | %s | %s | %s | – | – | – | %s | – | – |\n", floorRes.calls, ms(floorRes.p50), ms(floorRes.p90), ms(floorRes.p99), ms(floorCPU))
		m.paced = append(m.paced, row{"floor", 1, floorRes, split{function: floorCPU}})
		for i, name := range names[1:] {
			if name == isolationAheadName && isoErr != nil {
				continue
			}
			r, cpu := cells[i+1].result(), cells[i+1].split(floorCPU)
			m.paced = append(m.paced, row{name, 1, r, cpu})
			fmt.Printf("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name, r.calls, ms(r.p50), ms(r.p90), ms(r.p99), ms(r.p50-floorRes.p50), orDash(cpu.own), ms(cpu.runtime), ms(cpu.function), orDash(cpu.client), orDash(cpu.elsewhere))
		}
		fmt.Println()
		// Printed after the table, which a line of its own would end.
		if isoErr != nil {
			fmt.Printf("%v\n\n", isoErr)
		}
	}
	fmt.Printf("Memory (PSS counts the pages processes share once):\n\n")
	for i, t := range targets {
		after := t.s.memory()
		fmt.Printf("- %s: idle: PSS %s of the server's processes, %s of its %d warm containers; after the runs: peak RSS %s, PSS %s\n",
			t.name, mb(idle[i].pss), mb(idle[i].childPss), idle[i].children, mb(after.peak), mb(after.pss))
	}
	fmt.Println()
	if c.scaleIdle > 0 {
		return m, benchScaleToZero(ctx, c, &gz, tarballPath, dir)
	}
	return m, nil
}

// ghzCell measures one round of a server with ghz and reads the CPU it
// used. The server's own processes are read from /proc (utime+stime);
// everything else it caused ran in processes it reaped (crun, and the
// container's process: crun's set-up inside the container, then the
// function), whose CPU the kernel adds to the reaper's cutime+cstime
// (cell.split takes the function's part out: what ocifn counted of it,
// read from its metrics around the round, inside the window of the
// children's CPU). Warm containers created but
// not yet reaped are not counted, nor are ones created before the round
// but reaped in it: with a pool of steady size the two even out.
func ghzCell(ctx context.Context, g *ghzTool, s *server, clients int, d time.Duration, rps int) (round, error) {
	// Warm up: connections, caches, the pool's size for this load.
	if _, err := g.run(ctx, s.addrConn, clients, 300*time.Millisecond, rps); err != nil {
		return round{}, err
	}
	own0, ch0 := s.cpuSplit()
	f0, counted0 := s.functionCPU()
	m0 := machineBusy()
	r, err := g.run(ctx, s.addrConn, clients, d, rps)
	if err != nil {
		return round{}, err
	}
	f1, counted1 := s.functionCPU()
	own1, ch1 := s.cpuSplit()
	r.own, r.children, r.machine = own1-own0, ch1-ch0, machineBusy()-m0
	r.function, r.counted = f1-f0, counted0 && counted1
	return r, nil
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// orDash is ms, or a dash where nothing was measured (the bench's own
// loops have no ghz).
func orDash(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	return ms(d)
}

// crunOwn is what the warm server's crun & co. used beyond the isolation
// floor's kernel work, or a dash without an isolation floor row.
func crunOwn(warm split, iso row) string {
	if iso.r.calls == 0 {
		return "–"
	}
	return ms(warm.runtime - iso.cpu.runtime)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
func mb(b int64) string         { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1fx", a/b)
}

func pctOf(a, b float64) string {
	if a == 0 || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f%%", 100*a/b)
}

// benchStartup times `ocifn serve` from process start to SERVING, for a
// small image and a large generated one, next to `tar -xf` of the same
// layers. It returns the ratio of the two for the large image.
func benchStartup(ctx context.Context, c config, work string) (float64, error) {
	small, err := filepath.Abs(filepath.Join(c.images, "labelizer.tar"))
	if err != nil {
		return 0, err
	}
	bigTar, layers, err := bigImage(work, filepath.Join(c.images, "trivial.tar"), c.bigMB)
	if err != nil {
		return 0, err
	}
	smallLayers, err := layerFiles(work, small, "small")
	if err != nil {
		return 0, err
	}
	var big float64 // the ratio for the large image, the last
	fmt.Printf("## startup\n\n| image | ocifn serve to SERVING (median of 3) | tar -xf of the same layers (median of 3) | ratio |\n|---|---:|---:|---:|\n")
	for _, im := range []struct {
		name    string
		tarball string
		layers  []string
	}{{"labelizer (small)", small, smallLayers}, {fmt.Sprintf("generated, %d MB", c.bigMB), bigTar, layers}} {
		var serve, untar []time.Duration
		for i := range 3 {
			cache := filepath.Join(work, fmt.Sprintf("startup-%d", i))
			s, err := startServer(c.ocifn, im.tarball, cache)
			if err != nil {
				return 0, err
			}
			serve = append(serve, s.started)
			s.stop()
			d, err := untarLayers(filepath.Join(work, fmt.Sprintf("untar-%d", i)), im.layers)
			if err != nil {
				return 0, err
			}
			untar = append(untar, d)
		}
		sm, um := median(serve), median(untar)
		fmt.Printf("| %s | %s | %s | %s |\n", im.name, ms(sm), ms(um), ratio(sm.Seconds(), um.Seconds()))
		big = sm.Seconds() / um.Seconds()
	}
	fmt.Println()
	return big, nil
}

func median(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

// untarLayers extracts layer blobs in order with the system tar.
func untarLayers(dir string, layers []string) (time.Duration, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	t := time.Now()
	for _, l := range layers {
		if out, err := exec.Command("tar", "-xf", l, "-C", dir).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("tar -xf %s: %v\n%s", l, err, out)
		}
	}
	return time.Since(t), nil
}

// layerFiles writes the layer blobs of an image tarball to files, as stored
// (tar -xf detects their compression itself).
func layerFiles(work, tarballPath, prefix string) ([]string, error) {
	img, err := tarball.ImageFromPath(tarballPath, nil)
	if err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	var out []string
	for i, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			return nil, err
		}
		p := filepath.Join(work, fmt.Sprintf("%s-layer-%d", prefix, i))
		f, err := os.Create(p)
		if err != nil {
			return nil, err
		}
		_, err = io.Copy(f, rc)
		rc.Close()
		f.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// bigImage writes the base image plus two layers of incompressible data
// totalling about mb megabytes: one large file, and many small ones.
func bigImage(work, base string, mbs int) (string, []string, error) {
	img, err := tarball.ImageFromPath(base, nil)
	if err != nil {
		return "", nil, err
	}
	total := int64(mbs) << 20
	for li, spec := range []struct{ files, size int64 }{{1, total * 6 / 10}, {2000, total * 4 / 10 / 2000}} {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		tw := tar.NewWriter(zw)
		_ = tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("data%d/", li), Mode: 0o755, Typeflag: tar.TypeDir})
		for f := range spec.files {
			if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("data%d/f%05d", li, f), Mode: 0o644, Size: spec.size, Typeflag: tar.TypeReg}); err != nil {
				return "", nil, err
			}
			if _, err := io.CopyN(tw, rand.Reader, spec.size); err != nil {
				return "", nil, err
			}
		}
		tw.Close()
		zw.Close()
		data := buf.Bytes()
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
		if err != nil {
			return "", nil, err
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return "", nil, err
		}
	}
	out := filepath.Join(work, "big.tar")
	ref, _ := name.ParseReference("example.org/bench/big:v1")
	if err := tarball.WriteToFile(out, ref, img); err != nil {
		return "", nil, err
	}
	layers, err := layerFiles(work, out, "big")
	return out, layers, err
}

func crunVersion() string {
	out, err := exec.Command("crun", "--version").Output()
	if err != nil {
		return "crun not found"
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return first
}
