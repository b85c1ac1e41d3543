package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func b64(v any) string {
	raw, _ := json.Marshal(v)
	return base64.StdEncoding.EncodeToString(raw)
}

func encodeSetup(serverURL, secret string) string {
	return b64(map[string]string{
		".runner":      b64(map[string]any{"AgentId": 7, "AgentName": "imp-7", "PoolId": 1, "ServerUrl": serverURL, "WorkFolder": "_work", "Ephemeral": true}),
		".credentials": b64(map[string]any{"Scheme": "ImpTestOneTimeSecret", "Data": map[string]string{"secret": secret}}),
	})
}

func TestDecodeSetup(t *testing.T) {
	setup, err := decodeSetup(encodeSetup("http://127.0.0.1:1/_imp-test/runner", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	if setup.Runner.AgentID != 7 || setup.Runner.AgentName != "imp-7" || setup.Secret != "s3cret" || setup.Runner.WorkFolder != "_work" {
		t.Fatalf("decoded %+v", setup.Runner)
	}
	bad := map[string]string{
		"not base64":        "%%%",
		"not json":          base64.StdEncoding.EncodeToString([]byte("nope")),
		"no credentials":    b64(map[string]string{".runner": b64(map[string]any{"AgentId": 1, "AgentName": "a", "ServerUrl": "http://x"})}),
		"absolute work dir": b64(map[string]string{".runner": b64(map[string]any{"AgentId": 1, "AgentName": "a", "ServerUrl": "http://x", "WorkFolder": "/etc"}), ".credentials": b64(map[string]any{"Scheme": "ImpTestOneTimeSecret", "Data": map[string]string{"secret": "SECRET-VALUE"}})}),
		"other scheme":      b64(map[string]string{".runner": b64(map[string]any{"AgentId": 1, "AgentName": "a", "ServerUrl": "http://x"}), ".credentials": b64(map[string]any{"Scheme": "OAuth", "Data": map[string]string{"clientId": "SECRET-VALUE"}})}),
		"file scheme":       b64(map[string]string{".runner": b64(map[string]any{"AgentId": 1, "AgentName": "a", "ServerUrl": "file:///x"}), ".credentials": b64(map[string]any{"Scheme": "ImpTestOneTimeSecret", "Data": map[string]string{"secret": "SECRET-VALUE"}})}),
	}
	for name, encoded := range bad {
		_, err := decodeSetup(encoded)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), "SECRET-VALUE") || strings.Contains(err.Error(), encoded) {
			t.Errorf("%s: error leaks the setup: %v", name, err)
		}
	}
}

// fakeServer implements the session API with one job and one-time sessions.
type fakeServer struct {
	mu       sync.Mutex
	used     bool
	active   bool
	result   map[string]any
	jobTaken bool
	// job, when set, replaces the default job answer to acquire.
	job string
	// renewAnswer, when set, is the status and body of every renewal; else 200.
	renewStatus int
	renewBody   string
	renewals    int
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	path := strings.TrimPrefix(r.URL.Path, "/_imp-test/runner")
	switch {
	case r.Method == http.MethodPost && path == "/sessions":
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		if body["secret"] != "s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"InvalidSetup"}`))
			return
		}
		if f.active {
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error":"SessionConflict","message":"busy"}`))
			return
		}
		if f.used {
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error":"SetupAlreadyUsed","message":"used"}`))
			return
		}
		f.used, f.active = true, true
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"sessionId":"s-1"}`))
	case strings.HasSuffix(path, "/acquire"):
		if f.jobTaken {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		f.jobTaken = true
		if f.job != "" {
			_, _ = w.Write([]byte(f.job))
			return
		}
		_, _ = w.Write([]byte(`{"job":{"id":9,"name":"build","steps":[{"name":"hello","run":"echo hello-from-step; echo \"jit=${ACTIONS_RUNNER_INPUT_JITCONFIG:-unset}\""},{"name":"fail","run":"exit 3"},{"name":"never","run":"echo never-runs"}]}}`))
	case strings.HasSuffix(path, "/jobs/9/renew"):
		f.renewals++
		if f.renewStatus != 0 {
			w.WriteHeader(f.renewStatus)
			_, _ = w.Write([]byte(f.renewBody))
			return
		}
		_, _ = w.Write([]byte(`{"renewSeconds":1}`))
	case strings.HasSuffix(path, "/jobs/9/result"):
		_ = json.NewDecoder(r.Body).Decode(&f.result)
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodDelete:
		f.active = false
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func TestOneJobThenRefuseReuse(t *testing.T) {
	fake := &fakeServer{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	setup := encodeSetup(srv.URL+"/_imp-test/runner", "s3cret")
	t.Chdir(t.TempDir())
	var out, errOut bytes.Buffer
	env := map[string]string{"ACTIONS_RUNNER_INPUT_JITCONFIG": setup, "TEST_RUNNER_IDLE_SECONDS": "5"}
	code := run(context.Background(), nil, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errOut)
	if code != exitSuccess {
		t.Fatalf("exit %d, stderr %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "hello-from-step") || !strings.Contains(out.String(), "jit=unset") || strings.Contains(out.String(), "never-runs") {
		t.Fatalf("step output:\n%s", out.String())
	}
	if strings.Contains(out.String()+errOut.String(), setup) || strings.Contains(out.String()+errOut.String(), "s3cret") {
		t.Fatal("the setup was printed")
	}
	steps, _ := fake.result["steps"].([]any)
	if fake.result["conclusion"] != "failure" || len(steps) != 2 {
		t.Fatalf("result %v", fake.result)
	}
	// The same setup again: the server says it was used, the runner exits 1 like the real one.
	errOut.Reset()
	if code := run(context.Background(), []string{"--jitconfig", setup}, func(string) string { return "" }, strings.NewReader(""), &out, &errOut); code != exitTerminatedError {
		t.Fatalf("reuse: exit %d, stderr %s", code, errOut.String())
	}
	if !strings.Contains(errOut.String(), "SetupAlreadyUsed") {
		t.Fatalf("reuse: stderr %s", errOut.String())
	}
}

func TestExitCodes(t *testing.T) {
	none := func(string) string { return "" }
	var out, errOut bytes.Buffer
	if code := run(context.Background(), nil, none, strings.NewReader(""), &out, &errOut); code != exitTerminatedError {
		t.Errorf("no setup: exit %d", code)
	}
	if code := run(context.Background(), []string{"--jitconfig", "%%%"}, none, strings.NewReader(""), &out, &errOut); code != exitTerminatedError {
		t.Errorf("bad setup: exit %d", code)
	}
	// Nothing listens on port 1: retryable.
	if code := run(context.Background(), []string{"--jitconfig", encodeSetup("http://127.0.0.1:1/x", "s3cret")}, none, strings.NewReader(""), &out, &errOut); code != exitRetryableError {
		t.Errorf("unreachable: exit %d", code)
	}
	fake := &fakeServer{active: true}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	if code := run(context.Background(), []string{"--jitconfig", encodeSetup(srv.URL+"/_imp-test/runner", "s3cret")}, none, strings.NewReader(""), &out, &errOut); code != exitSessionConflict {
		t.Errorf("conflict: exit %d", code)
	}
	if code := run(context.Background(), []string{"--jitconfig", encodeSetup(srv.URL+"/_imp-test/runner", "wrong")}, none, strings.NewReader(""), &out, &errOut); code != exitTerminatedError {
		t.Errorf("wrong secret: exit %d", code)
	}
}

// runJob runs the runner against fake with one job and returns its exit code and output.
func runJob(t *testing.T, fake *fakeServer) (int, string, string) {
	t.Helper()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	t.Chdir(t.TempDir())
	var out, errOut bytes.Buffer
	env := map[string]string{"ACTIONS_RUNNER_INPUT_JITCONFIG": encodeSetup(srv.URL+"/_imp-test/runner", "s3cret"), "TEST_RUNNER_IDLE_SECONDS": "5"}
	code := run(context.Background(), nil, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRenewsTheJobLockWhileTheJobRuns(t *testing.T) {
	fake := &fakeServer{job: `{"job":{"id":9,"name":"slow","steps":[{"name":"wait","run":"sleep 2.5; echo done-waiting"}]},"renewSeconds":1}`}
	code, out, errOut := runJob(t, fake)
	if code != exitSuccess || !strings.Contains(out, "done-waiting") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if fake.renewals < 2 || fake.result["conclusion"] != "success" {
		t.Fatalf("renewals %d, result %v", fake.renewals, fake.result)
	}
}

func TestAJobTheServerCancelledOrLostIsStopped(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		code   int
	}{
		{"cancelled", http.StatusConflict, `{"error":"JobCancelled","message":"cancelled"}`, exitSuccess},
		{"lost", http.StatusNotFound, `{"error":"NoSuchJob","message":"gone"}`, exitTerminatedError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// `sleep 60` in a child of the step's shell: stopping the job must stop it too, well before a minute.
			fake := &fakeServer{job: `{"job":{"id":9,"name":"long","steps":[{"name":"wait","run":"sleep 60 & wait; echo not-stopped"}]},"renewSeconds":1}`, renewStatus: tc.status, renewBody: tc.body}
			code, out, errOut := runJob(t, fake)
			if code != tc.code || strings.Contains(out, "not-stopped") {
				t.Fatalf("exit %d (want %d)\n%s\n%s", code, tc.code, out, errOut)
			}
			fake.mu.Lock()
			defer fake.mu.Unlock()
			if fake.result != nil {
				t.Fatalf("a stopped job reported a result: %v", fake.result)
			}
		})
	}
}

func TestRenewInterval(t *testing.T) {
	for in, want := range map[int]time.Duration{0: 5 * time.Second, -3: 5 * time.Second, 1: time.Second, 3: 3 * time.Second, 600: time.Minute} {
		if got := renewInterval(in); got != want {
			t.Errorf("renewInterval(%d) = %s, want %s", in, got, want)
		}
	}
}

func TestSetupFromStdinReachesNoStepEnvironment(t *testing.T) {
	fake := &fakeServer{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	setup := encodeSetup(srv.URL+"/_imp-test/runner", "s3cret")
	t.Chdir(t.TempDir())
	var out, errOut bytes.Buffer
	env := map[string]string{"IMP_RUNNER_SETUP": "stdin", "IMP_RUNNER_JITCONFIG": "leaked-if-seen", "TEST_RUNNER_IDLE_SECONDS": "5"}
	code := run(context.Background(), nil, func(k string) string { return env[k] }, strings.NewReader(setup), &out, &errOut)
	if code != exitSuccess {
		t.Fatalf("exit %d, stderr %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "hello-from-step") {
		t.Fatalf("the runner did not run the job with the setup from stdin:\n%s", out.String())
	}
}

func TestTrySessionReportsTheServersRefusal(t *testing.T) {
	fake := &fakeServer{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	setup := encodeSetup(srv.URL+"/_imp-test/runner", "s3cret")
	t.Chdir(t.TempDir())
	var out, errOut bytes.Buffer
	env := map[string]string{"ACTIONS_RUNNER_INPUT_JITCONFIG": setup, "TEST_RUNNER_IDLE_SECONDS": "5"}
	if code := run(context.Background(), nil, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errOut); code != exitSuccess {
		t.Fatalf("first run: exit %d, %s", code, errOut.String())
	}
	out.Reset()
	try := map[string]string{"IMP_TRY_JITCONFIG": setup}
	if code := run(context.Background(), []string{"try-session"}, func(k string) string { return try[k] }, strings.NewReader(""), &out, &errOut); code != exitSuccess {
		t.Fatalf("try-session: exit %d, %s %s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "refused 409 SetupAlreadyUsed") {
		t.Fatalf("try-session said %q", out.String())
	}
}

// A renewal that fails is tried again within about a second, long before the next tick: with a
// 30 s interval, the second request must arrive while the test has waited far less than that.
func TestRenewLockRetriesAFailedRenewalBeforeTheNextTick(t *testing.T) {
	var mu sync.Mutex
	var calls []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, time.Now())
		n := len(calls)
		mu.Unlock()
		if n == 1 {
			http.Error(w, `{"error":"Boom","message":"try later"}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("content-type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	c := &client{base: srv.URL, http: srv.Client()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan renewOutcome, 1)
	go func() { done <- renewLockEvery(ctx, c, "/renew", 30*time.Second, 0, cancel, &bytes.Buffer{}) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(calls)
		mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a failed renewal, %d request(s) in 20 s: the retry waited for the 30 s tick", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if got := <-done; got != renewHeld {
		t.Fatalf("outcome %v, want held", got)
	}
}
