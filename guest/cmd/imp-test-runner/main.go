// Command imp-test-runner stands in for the GitHub Actions runner in tests, against the test
// server in test/github (these machines cannot reach GitHub). It honours the parts of the real
// runner's contract that Imp relies on:
//
//   - the one-time setup arrives as `--jitconfig <encoded>` (as `run.sh --jitconfig` takes it), in
//     ACTIONS_RUNNER_INPUT_JITCONFIG, or — with IMP_RUNNER_SETUP=stdin, which the real runner does
//     not know — on stdin, read once; it is never printed or written to disk, and never reaches
//     the job's steps through their environment;
//   - the runner comes online, takes exactly one job, runs its shell steps with their output on
//     stdout, reports the result with the job's log (its first 256 KiB, as a job log GitHub shows)
//     and exits 0, whatever the job's conclusion;
//   - while the job runs it renews the job's lock every few seconds (the real runner renews its
//     job request), so the server can tell a runner that died mid-job from a slow job; if the
//     server says the job was cancelled the steps are stopped and it exits 0, and if the server
//     lost the job (the lock expired) the steps are stopped and it exits 1;
//   - a setup that cannot be used exits non-zero with the real runner's return codes:
//     1 terminated (bad or already-used setup), 2 retryable (server unreachable, no job in time),
//     5 session conflict (another process holds this runner's session).
//
// The encoded setup is base64 JSON of {".runner": base64(json), ".credentials": base64(json)}, the
// files the real runner keeps; the credential is a one-time secret for the test server's minimal
// session API instead of the Actions service's OAuth key.
package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Return codes of the real runner (Runner.Listener's Constants.Runner.ReturnCode).
const (
	exitSuccess         = 0
	exitTerminatedError = 1
	exitRetryableError  = 2
	exitSessionConflict = 5
)

const version = "imp-test-runner/1"

// RunnerFile mirrors the fields of the real runner's .runner file that this program reads.
type RunnerFile struct {
	AgentID    int64  `json:"AgentId"`
	AgentName  string `json:"AgentName"`
	PoolID     int64  `json:"PoolId"`
	ServerURL  string `json:"ServerUrl"`
	GitHubURL  string `json:"GitHubUrl"`
	WorkFolder string `json:"WorkFolder"`
	Ephemeral  bool   `json:"Ephemeral"`
}

// CredentialsFile mirrors the real runner's .credentials file (Scheme + Data).
type CredentialsFile struct {
	Scheme string            `json:"Scheme"`
	Data   map[string]string `json:"Data"`
}

// Setup is a decoded one-time runner setup. Secret must never be printed.
type Setup struct {
	Runner RunnerFile
	Secret string
}

// decodeSetup parses an encoded jitconfig; errors never contain the input.
func decodeSetup(encoded string) (Setup, error) {
	var setup Setup
	outerJSON, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return setup, errors.New("the jitconfig is not base64")
	}
	var outer map[string]string
	if err := json.Unmarshal(outerJSON, &outer); err != nil {
		return setup, errors.New("the jitconfig is not a JSON object of files")
	}
	readFile := func(name string, into any) error {
		encodedFile, ok := outer[name]
		if !ok {
			return fmt.Errorf("the jitconfig has no %s file", name)
		}
		raw, err := base64.StdEncoding.DecodeString(encodedFile)
		if err != nil {
			return fmt.Errorf("the jitconfig's %s file is not base64", name)
		}
		if err := json.Unmarshal(raw, into); err != nil {
			return fmt.Errorf("the jitconfig's %s file is not JSON", name)
		}
		return nil
	}
	var creds CredentialsFile
	if err := readFile(".runner", &setup.Runner); err != nil {
		return setup, err
	}
	if err := readFile(".credentials", &creds); err != nil {
		return setup, err
	}
	switch {
	case setup.Runner.AgentID <= 0 || setup.Runner.AgentName == "":
		return setup, errors.New("the jitconfig's .runner file has no AgentId or AgentName")
	case !strings.HasPrefix(setup.Runner.ServerURL, "http://") && !strings.HasPrefix(setup.Runner.ServerURL, "https://"):
		return setup, errors.New("the jitconfig's .runner file has no http(s) ServerUrl")
	case creds.Scheme != "ImpTestOneTimeSecret" || creds.Data["secret"] == "":
		return setup, fmt.Errorf("the jitconfig's credential scheme %q is not supported", creds.Scheme)
	case filepath.IsAbs(setup.Runner.WorkFolder) || strings.Contains(setup.Runner.WorkFolder, ".."):
		return setup, errors.New("the jitconfig's WorkFolder must be relative, without ..")
	}
	setup.Secret = creds.Data["secret"]
	if setup.Runner.WorkFolder == "" {
		setup.Runner.WorkFolder = "_work"
	}
	return setup, nil
}

// Step is one shell step of a job.
type Step struct {
	Name string `json:"name"`
	Run  string `json:"run"`
}

// StepResult is reported back to the server.
type StepResult struct {
	Name     string `json:"name"`
	ExitCode int    `json:"exitCode"`
}

// runSteps runs steps in order with /bin/sh -e, output to out, and stops at the first failure (as
// Actions does without continue-on-error).
func runSteps(ctx context.Context, steps []Step, dir string, runnerEnv []string, out io.Writer) ([]StepResult, string) {
	results := make([]StepResult, 0, len(steps))
	for _, step := range steps {
		fmt.Fprintf(out, "##[group]Run %s\n", step.Name)
		cmd := exec.CommandContext(ctx, "/bin/sh", "-e", "-c", step.Run)
		// A stopped job stops the whole step, its children included (a `sleep` holding the output
		// pipe open would otherwise keep Run waiting), as the real runner kills a cancelled step's tree.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		cmd.Dir = dir
		cmd.Stdout = out
		cmd.Stderr = out
		cmd.Env = append(os.Environ(), runnerEnv...)
		// The setup must not reach the job through the environment.
		cmd.Env = withoutJitConfig(cmd.Env)
		code := 0
		if err := cmd.Run(); err != nil {
			var exitErr *exec.ExitError
			if errors.As(err, &exitErr) && exitErr.ExitCode() >= 0 {
				code = exitErr.ExitCode()
			} else {
				code = 127
			}
		}
		fmt.Fprintf(out, "##[endgroup]\n")
		results = append(results, StepResult{Name: step.Name, ExitCode: code})
		if code != 0 {
			fmt.Fprintf(out, "##[error]Process completed with exit code %d.\n", code)
			return results, "failure"
		}
	}
	return results, "success"
}

// stepEnv is what the real runner sets for every step that a workflow commonly reads (a subset of
// GitHub's "default environment variables"): the hosted-runner conformance job checks them.
func stepEnv(runnerName, workDir string) []string {
	temp := filepath.Join(workDir, "_temp")
	_ = os.MkdirAll(temp, 0o755)
	arch := map[string]string{"amd64": "X64", "arm64": "ARM64", "386": "X86", "arm": "ARM"}[runtime.GOARCH]
	return []string{
		"CI=true", "GITHUB_ACTIONS=true", "RUNNER_OS=Linux", "RUNNER_ARCH=" + arch, "RUNNER_NAME=" + runnerName,
		"RUNNER_TEMP=" + temp, "GITHUB_WORKSPACE=" + workDir,
	}
}

func withoutJitConfig(env []string) []string {
	kept := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "ACTIONS_RUNNER_INPUT_JITCONFIG=") && !strings.HasPrefix(kv, "IMP_RUNNER_JITCONFIG=") && !strings.HasPrefix(kv, "IMP_RUNNER_SETUP=") {
			kept = append(kept, kv)
		}
	}
	return kept
}

// maxStdinSetup bounds what is read from stdin for the setup (the guest protocol's stdin limit).
const maxStdinSetup = 64 * 1024

// client speaks the test server's runner session API.
type client struct {
	base string
	http *http.Client
}

type apiError struct {
	Status int
	Code   string `json:"error"`
	Msg    string `json:"message"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("server answered %d %s: %s", e.Status, e.Code, e.Msg)
}

func (c *client) do(ctx context.Context, method, path string, body any, into any) (int, error) {
	var reader io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		reader = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, reader)
	if err != nil {
		return 0, err
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("user-agent", version)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 400 {
		apiErr := &apiError{Status: resp.StatusCode}
		_ = json.Unmarshal(raw, apiErr)
		return resp.StatusCode, apiErr
	}
	if into != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, into); err != nil {
			return resp.StatusCode, fmt.Errorf("server answer is not JSON: %w", err)
		}
	}
	return resp.StatusCode, nil
}

type config struct {
	idleTimeout time.Duration
	pollSeconds int
}

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "try-session" {
		return trySession(ctx, getenv, stdout, stderr)
	}
	flags := flag.NewFlagSet("imp-test-runner", flag.ContinueOnError)
	flags.SetOutput(stderr)
	jitconfig := flags.String("jitconfig", "", "the encoded one-time runner setup (or ACTIONS_RUNNER_INPUT_JITCONFIG)")
	if err := flags.Parse(args); err != nil {
		return exitTerminatedError
	}
	encoded := *jitconfig
	if encoded == "" && getenv("IMP_RUNNER_SETUP") == "stdin" {
		raw, err := io.ReadAll(io.LimitReader(stdin, maxStdinSetup))
		if err != nil {
			fmt.Fprintln(stderr, "Cannot start the runner: cannot read the setup from stdin")
			return exitTerminatedError
		}
		encoded = string(raw)
	}
	if encoded == "" {
		encoded = getenv("ACTIONS_RUNNER_INPUT_JITCONFIG")
	}
	if encoded == "" {
		fmt.Fprintln(stderr, "Cannot start the runner: no --jitconfig and no ACTIONS_RUNNER_INPUT_JITCONFIG")
		return exitTerminatedError
	}
	setup, err := decodeSetup(encoded)
	if err != nil {
		fmt.Fprintf(stderr, "Cannot start the runner: %v\n", err)
		return exitTerminatedError
	}
	cfg := config{idleTimeout: 10 * time.Minute, pollSeconds: 10}
	if v, err := strconv.Atoi(getenv("TEST_RUNNER_IDLE_SECONDS")); err == nil && v > 0 {
		cfg.idleTimeout = time.Duration(v) * time.Second
		cfg.pollSeconds = min(cfg.pollSeconds, v)
	}
	return listen(ctx, setup, cfg, stdout, stderr)
}

func listen(ctx context.Context, setup Setup, cfg config, stdout, stderr io.Writer) int {
	c := &client{base: strings.TrimRight(setup.Runner.ServerURL, "/"), http: &http.Client{Timeout: time.Duration(cfg.pollSeconds+30) * time.Second}}
	name := setup.Runner.AgentName
	var session struct {
		SessionID string `json:"sessionId"`
	}
	_, err := c.do(ctx, http.MethodPost, "/sessions", map[string]any{"runnerId": setup.Runner.AgentID, "runnerName": name, "secret": setup.Secret, "version": version}, &session)
	var apiErr *apiError
	switch {
	case errors.As(err, &apiErr) && apiErr.Code == "SessionConflict":
		fmt.Fprintf(stderr, "Cannot start runner %s: another session holds it (%s)\n", name, apiErr.Msg)
		return exitSessionConflict
	case errors.As(err, &apiErr) && (apiErr.Code == "SetupAlreadyUsed" || apiErr.Status == http.StatusUnauthorized):
		fmt.Fprintf(stderr, "Cannot start runner %s: the server refused its setup (%s)\n", name, apiErr.Code)
		return exitTerminatedError
	case err != nil:
		fmt.Fprintf(stderr, "Cannot start runner %s: %v\n", name, err)
		return exitRetryableError
	}
	fmt.Fprintf(stdout, "√ Connected to GitHub\n\nCurrent runner version: '%s'\nListening for Jobs\n", version)
	// Whatever happens next, give the session back so the server sees the runner go offline.
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = c.do(closeCtx, http.MethodDelete, "/sessions/"+session.SessionID, nil, nil)
	}()

	var job struct {
		Job *struct {
			ID    int64  `json:"id"`
			Name  string `json:"name"`
			Steps []Step `json:"steps"`
		} `json:"job"`
		// How often to renew the job's lock; the server derives it from its lock timeout.
		RenewSeconds int `json:"renewSeconds"`
	}
	deadline := time.Now().Add(cfg.idleTimeout)
	for job.Job == nil {
		if time.Now().After(deadline) {
			fmt.Fprintf(stderr, "Cannot run a job on runner %s: none arrived within %s\n", name, cfg.idleTimeout)
			return exitRetryableError
		}
		if ctx.Err() != nil {
			return exitTerminatedError
		}
		status, err := c.do(ctx, http.MethodPost, fmt.Sprintf("/sessions/%s/acquire?waitSeconds=%d", session.SessionID, cfg.pollSeconds), nil, &job)
		if err != nil {
			fmt.Fprintf(stderr, "Cannot take a job on runner %s: %v\n", name, err)
			return exitRetryableError
		}
		if status == http.StatusNoContent {
			job.Job = nil
		}
	}

	fmt.Fprintf(stdout, "%s: Running job: %s\n", time.Now().UTC().Format(time.DateTime), job.Job.Name)
	workDir, err := filepath.Abs(setup.Runner.WorkFolder)
	if err == nil {
		err = os.MkdirAll(workDir, 0o755)
	}
	var results []StepResult
	conclusion := "failure"
	jobLog := &cappedBuffer{limit: maxJobLog}
	jobCtx, stopJob := context.WithCancel(ctx)
	renewPath := fmt.Sprintf("/sessions/%s/jobs/%d/renew", session.SessionID, job.Job.ID)
	renewed := make(chan renewOutcome, 1)
	go func() { renewed <- renewLock(jobCtx, c, renewPath, renewInterval(job.RenewSeconds), stopJob, stderr) }()
	if err != nil {
		fmt.Fprintf(stderr, "Cannot prepare the work folder: %v\n", err)
	} else {
		results, conclusion = runSteps(jobCtx, job.Job.Steps, workDir, stepEnv(name, workDir), io.MultiWriter(stdout, jobLog))
	}
	stopJob()
	switch <-renewed {
	case renewCancelled:
		fmt.Fprintf(stdout, "%s: Job %s was cancelled\n", time.Now().UTC().Format(time.DateTime), job.Job.Name)
		return exitSuccess
	case renewLost:
		fmt.Fprintf(stderr, "Cannot finish job %s: the server no longer holds it for this runner (its lock expired)\n", job.Job.Name)
		return exitTerminatedError
	}
	fmt.Fprintf(stdout, "%s: Job %s completed with result: %s\n", time.Now().UTC().Format(time.DateTime), job.Job.Name, cases(conclusion))
	if _, err := c.do(ctx, http.MethodPost, fmt.Sprintf("/sessions/%s/jobs/%d/result", session.SessionID, job.Job.ID), map[string]any{"conclusion": conclusion, "steps": results, "log": jobLog.String()}, nil); err != nil {
		fmt.Fprintf(stderr, "Cannot report the result of job %s: %v\n", job.Job.Name, err)
		return exitRetryableError
	}
	return exitSuccess
}

type renewOutcome int

const (
	renewHeld      renewOutcome = iota // the job ran to its end holding its lock
	renewCancelled                     // the server cancelled the job
	renewLost                          // the server no longer holds the job for us
)

// renewInterval is the server's renewSeconds, or 5 s when it gave none, within 1..60 s.
func renewInterval(seconds int) time.Duration {
	if seconds <= 0 {
		seconds = 5
	}
	return time.Duration(min(max(seconds, 1), 60)) * time.Second
}

// renewLock renews the job's lock every interval until ctx ends. A refusal (cancelled, or the job
// is gone) stops the job through stop. A failed request (a network hiccup, a starved vCPU) is
// reported and tried again within a second or two, not at the next tick, as the real runner retries
// a failed renewal at once: with one try per tick a single hung request cost a tick plus its own
// timeout, longer than a short test lock, and lost a job the server still held.
func renewLock(ctx context.Context, c *client, path string, interval time.Duration, stop context.CancelFunc, stderr io.Writer) renewOutcome {
	return renewLockEvery(ctx, c, path, interval, interval, stop, stderr)
}

// renewLockEvery is renewLock with the first renewal after first (tests start at once).
func renewLockEvery(ctx context.Context, c *client, path string, interval, first time.Duration, stop context.CancelFunc, stderr io.Writer) renewOutcome {
	wait := first
	for {
		select {
		case <-ctx.Done():
			return renewHeld
		case <-time.After(wait):
		}
		reqCtx, cancel := context.WithTimeout(ctx, interval)
		_, err := c.do(reqCtx, http.MethodPost, path, nil, nil)
		cancel()
		var apiErr *apiError
		switch {
		case err == nil:
			wait = interval
		case errors.As(err, &apiErr) && apiErr.Code == "JobCancelled":
			stop()
			return renewCancelled
		case errors.As(err, &apiErr) && (apiErr.Status == http.StatusNotFound || apiErr.Status == http.StatusGone):
			stop()
			return renewLost
		case ctx.Err() != nil:
			return renewHeld
		default:
			wait = renewRetryDelay(interval)
			fmt.Fprintf(stderr, "Cannot renew the job's lock (will try again in %v): %v\n", wait, err)
		}
	}
}

// renewRetryDelay is how soon a failed renewal is tried again: a second, never later than the interval.
func renewRetryDelay(interval time.Duration) time.Duration {
	return min(time.Second, interval)
}

// maxJobLog caps the log a runner uploads: a job that prints without end must not make the report huge.
const maxJobLog = 256 << 10

// cappedBuffer keeps the first limit bytes written to it and drops the rest, never failing a write.
type cappedBuffer struct {
	buf   bytes.Buffer
	limit int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.limit - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *cappedBuffer) String() string { return b.buf.String() }

func cases(conclusion string) string {
	if conclusion == "success" {
		return "Succeeded"
	}
	return "Failed"
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}

// trySession is what a job that read its runner's setup (from the runner's environment, which a
// job of the same user can read) could do with it: open a second session with it. It prints the
// server's answer and exits 0 only when the server refused, as it must.
func trySession(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) int {
	setup, err := decodeSetup(getenv("IMP_TRY_JITCONFIG"))
	if err != nil {
		fmt.Fprintf(stderr, "try-session: %v\n", err)
		return exitTerminatedError
	}
	c := &client{base: strings.TrimRight(setup.Runner.ServerURL, "/"), http: &http.Client{Timeout: 30 * time.Second}}
	status, err := c.do(ctx, http.MethodPost, "/sessions", map[string]any{"runnerId": setup.Runner.AgentID, "runnerName": setup.Runner.AgentName, "secret": setup.Secret, "version": version}, nil)
	var apiErr *apiError
	if errors.As(err, &apiErr) {
		fmt.Fprintf(stdout, "try-session: refused %d %s\n", apiErr.Status, apiErr.Code)
		return exitSuccess
	}
	fmt.Fprintf(stdout, "try-session: ACCEPTED %d (%v)\n", status, err)
	return exitTerminatedError
}
