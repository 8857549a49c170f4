package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kubefence/kubefence/hack/devenv"
)

// result is what the story showed, for the test.
type result struct {
	// TokenA and TokenB are the tokens granted to worker A and worker B.
	TokenA, TokenB int64
	// Refusal is the API server's answer to A's late write.
	RefusalCode    int32
	RefusalMessage string
	// Entries, Writer and ObjectToken are the Widget's spec.entries, spec.writer
	// and fencing-token annotation after the story.
	Entries     []string
	Writer      string
	ObjectToken string
	// WebhookRefusals counts the refusals the fencing webhook logged.
	WebhookRefusals int
	// PIDs are the worker processes' ids; TempDir held every file of the run.
	PIDs    []int
	TempDir string
}

// run sets up the control plane, plays the story, and always stops what it
// started and removes its temporary directory before it returns.
func run(ctx context.Context, o options) (res *result, err error) {
	began := time.Now()
	setUpLogging(o)
	assets, err := assetsDir()
	if err != nil {
		return nil, err
	}
	root, err := devenv.ModuleRoot()
	if err != nil {
		return nil, fmt.Errorf("%w (the demo reads config/ and test/crds): `make demo`", err)
	}
	say := func(format string, args ...any) { fmt.Fprintf(o.out, "[setup] "+format+"\n", args...) }
	for _, line := range sweepLeftovers() {
		say("%s", line)
	}
	dir, err := os.MkdirTemp("", strings.Replace(tempPattern, "*", "", 1))
	if err != nil {
		return nil, err
	}
	res = &result{TempDir: dir}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return res, err
	}
	// Everything the run writes goes under dir, also what envtest (webhook
	// certificates) and go build put in the temporary directory.
	prevTmp, hadTmp := os.LookupEnv("TMPDIR")
	if err := os.Setenv("TMPDIR", dir); err != nil {
		_ = os.RemoveAll(dir)
		return res, err
	}
	restoreTmp := func() {
		if hadTmp {
			_ = os.Setenv("TMPDIR", prevTmp)
		} else {
			_ = os.Unsetenv("TMPDIR")
		}
	}

	var cleanups []func() error
	var tl *timeline
	defer func() {
		if tl != nil {
			tl.setMuted(true)
		}
		if ctx.Err() != nil {
			fmt.Fprintln(o.out, "\n[cleanup] interrupted: stopping the workers, the operator, kube-apiserver and etcd ...")
		} else {
			fmt.Fprintln(o.out, "\n[cleanup] stopping the workers, the operator, kube-apiserver and etcd ...")
		}
		var errs []error
		for i := len(cleanups) - 1; i >= 0; i-- {
			errs = append(errs, cleanups[i]())
		}
		restoreTmp()
		errs = append(errs, os.RemoveAll(dir))
		if cerr := errors.Join(errs...); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up: %w", cerr))
			fmt.Fprintf(o.out, "[cleanup] incomplete: %v\n", cerr)
			return
		}
		fmt.Fprintf(o.out, "[cleanup] done: no process left, %s removed (%.1fs in all)\n", dir, time.Since(began).Seconds())
	}()

	fmt.Fprintln(o.out, "kubefence demo: a lease holder that was paused past its lease writes late, and the API server refuses it")
	fmt.Fprintln(o.out, "(real processes: etcd, kube-apiserver, the kubefence operator, and two worker processes)")
	fmt.Fprintln(o.out)

	// Build the worker while the control plane starts.
	bin := filepath.Join(dir, "worker")
	say("building the worker program (go build ./hack/demo/worker) ...")
	buildStart := time.Now()
	built := make(chan error, 1)
	go func() { built <- buildWorker(ctx, root, bin) }()
	waitBuild := sync.OnceValue(func() error { return <-built })
	cleanups = append(cleanups, func() error { _ = waitBuild(); return nil })

	say("starting etcd and kube-apiserver (envtest) from %s ...", assets)
	cpStart := time.Now()
	cp, err := startControlPlane(ctx, root, assets, dir)
	if err != nil {
		return res, err
	}
	cleanups = append(cleanups, cp.stop)
	say("kube-apiserver %s up in %.1fs at %s; CRDs and webhook configurations installed", cp.version, time.Since(cpStart).Seconds(), cp.cfg.Host)
	say("kubefence operator running in this process: FencedLease controller and webhooks on https://%s:%d",
		cp.env.WebhookInstallOptions.LocalServingHost, cp.env.WebhookInstallOptions.LocalServingPort)
	if err := waitBuild(); err != nil {
		return res, err
	}
	say("worker built in %.1fs", time.Since(buildStart).Seconds())

	fmt.Fprintln(o.out, "\nTimeline (seconds since the story began)")
	tl = newTimeline(o.out)
	s := &story{o: o, cp: cp, tl: tl, dir: dir, bin: bin, res: res}
	cleanups = append(cleanups, s.close)
	tap := func(f map[string]string) {
		tl.add(whoWebhook, fmt.Sprintf("refused %s of %s %s/%s from user %s: presented token %s, current token %s (reason %s)",
			f["operation"], f["resource"], f["namespace"], f["name"], f["user"], f["presentedToken"], f["currentToken"], f["reason"]), nil)
	}
	refusalTap.Store(&tap)
	cleanups = append(cleanups, func() error { refusalTap.Store(nil); return nil })

	if err := s.play(ctx); err != nil {
		return res, err
	}
	s.showViews(ctx)
	s.summary()

	if !o.keep {
		return res, nil
	}
	fmt.Fprintln(o.out, "\n--keep: the control plane, the operator and both workers keep running until Ctrl-C.")
	fmt.Fprintf(o.out, "  kubeconfig: %s\n", cp.adminKubeconfig)
	fmt.Fprintln(o.out, "In another terminal (any kubectl will do; KUBECACHEDIR keeps its cache in the demo's directory):")
	fmt.Fprintf(o.out, "  export KUBECONFIG=%s KUBECACHEDIR=%s\n", cp.adminKubeconfig, cp.kubectlCache)
	fmt.Fprintf(o.out, "  %s get fencedleases -A -o wide\n", cp.kubectl)
	fmt.Fprintf(o.out, "  %s get fencedleases -n %s -w\n", cp.kubectl, storyNamespace)
	for _, w := range s.workers {
		fmt.Fprintf(o.out, "  %s is pid %d (kill -STOP %d, kill -CONT %d)\n", w.Name, w.Pid(), w.Pid(), w.Pid())
	}
	fmt.Fprintln(o.out, "Events keep appearing below. Press Ctrl-C to stop everything and clean up.")
	<-ctx.Done()
	return res, nil
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}
