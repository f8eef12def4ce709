package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// startPeer starts the no-isolation peer (bench/peer) on the floor's rootfs,
// entrypoint and environment, and waits until it accepts connections.
func startPeer(path string, fl *floor) (*server, error) {
	// function.Serve does not report the address it got; take a free
	// port and hand it over.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	args := []string{"-address", addr, "-rootfs", fl.rootfs, "-dir", fl.dir}
	for _, e := range fl.env {
		args = append(args, "-env", e)
	}
	cmd := exec.Command(path, append(append(args, "--"), fl.args...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, fmt.Errorf("the peer did not listen on %s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &server{cmd: cmd, addrConn: addr}, nil
}

// benchScaleToZero shows what --warm-idle trades: a server whose pool has
// shrunk to no container holds less memory, and its next call waits for
// crun create.
func benchScaleToZero(ctx context.Context, c config, g *ghzTool, tarballPath, dir string) error {
	s, err := startServer(c.ocifn, tarballPath, filepath.Join(dir, "cache-idle"), "--warm", fmt.Sprint(c.warm), "--warm-idle", c.scaleIdle.String())
	if err != nil {
		return err
	}
	defer s.stop()
	time.Sleep(time.Second)
	full := s.memory()
	// The first call with the pool full, then the first after scale-down,
	// three times each.
	var warmFirst, coldFirst []time.Duration
	var empty memory
	for range 3 {
		r, err := g.run(ctx, s.addrConn, 1, 0, 0)
		if err != nil {
			return err
		}
		warmFirst = append(warmFirst, cell{r}.result().p50)
		deadline := time.Now().Add(c.scaleIdle + 10*time.Second)
		for {
			if empty = s.memory(); empty.children == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("--warm-idle %s: the pool did not shrink to zero within %s", c.scaleIdle, c.scaleIdle+10*time.Second)
			}
			time.Sleep(100 * time.Millisecond)
		}
		r, err = g.run(ctx, s.addrConn, 1, 0, 0)
		if err != nil {
			return err
		}
		coldFirst = append(coldFirst, cell{r}.result().p50)
		time.Sleep(time.Second) // the pool refills
	}
	fmt.Printf("## scale to zero (`--warm %d --warm-idle %s`)\n\n", c.warm, c.scaleIdle)
	fmt.Printf("| pool | PSS of ocifn's processes | PSS of the warm containers | one call, median of 3 (ghz -n 1) |\n|---|---:|---:|---:|\n")
	fmt.Printf("| full (%d containers) | %s | %s | %s |\n", full.children, mb(full.pss), mb(full.childPss), ms(median(warmFirst)))
	fmt.Printf("| scaled to zero | %s | %s | %s |\n\n", mb(empty.pss), mb(empty.childPss), ms(median(coldFirst)))
	return nil
}
