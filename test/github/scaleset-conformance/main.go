// Command scaleset-conformance drives the GitHub test server with the real client and listener of
// github.com/actions/scaleset (the module actions-runner-controller's listener is built on), so
// that the test server's scale-set API is held to what that module sends and parses, not to our
// reading of it. It prints one JSON line per thing it saw; test/github/scale-set-conformance.test.ts
// drives it and asserts on them.
//
//	scaleset-conformance -config-url URL -app-id N -installation-id N -key FILE -name NAME
//
// Steps: find-or-create the scale set (as ARC does), prove a second session is refused (409),
// run the listener; on a desired count above the runners it made, mint runners with
// generatejitconfig; report JobStarted/JobCompleted; on SIGTERM close the session and, with
// -delete, delete the scale set.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/actions/scaleset"
	"github.com/actions/scaleset/listener"
)

var out = json.NewEncoder(os.Stdout)
var outMu sync.Mutex

func say(event string, fields map[string]any) {
	outMu.Lock()
	defer outMu.Unlock()
	fields["event"] = event
	_ = out.Encode(fields)
}

type scaler struct {
	client  *scaleset.Client
	setID   int
	name    string
	minted  int
	started []string
}

func (s *scaler) HandleJobStarted(_ context.Context, j *scaleset.JobStarted) error {
	say("jobStarted", map[string]any{"runnerName": j.RunnerName, "runnerId": j.RunnerID, "runnerRequestId": j.RunnerRequestID, "jobId": j.JobID, "labels": j.RequestLabels, "repository": j.RepositoryName, "owner": j.OwnerName, "queueTime": j.QueueTime, "runnerAssignTime": j.RunnerAssignTime})
	return nil
}

func (s *scaler) HandleJobCompleted(_ context.Context, j *scaleset.JobCompleted) error {
	say("jobCompleted", map[string]any{"runnerName": j.RunnerName, "result": j.Result, "runnerRequestId": j.RunnerRequestID, "finishTime": j.FinishTime})
	return nil
}

func (s *scaler) HandleDesiredRunnerCount(ctx context.Context, count int) (int, error) {
	say("desired", map[string]any{"count": count})
	for s.minted < count {
		s.minted++
		name := fmt.Sprintf("%s-runner-%d", s.name, s.minted)
		jit, err := s.client.GenerateJitRunnerConfig(ctx, &scaleset.RunnerScaleSetJitRunnerSetting{Name: name}, s.setID)
		if err != nil {
			return 0, fmt.Errorf("generatejitconfig: %w", err)
		}
		say("minted", map[string]any{"runnerId": jit.Runner.ID, "name": jit.Runner.Name, "scaleSetId": jit.Runner.RunnerScaleSetID, "encodedJITConfig": jit.EncodedJITConfig})
		// The name is taken now: the service must say so the way the module recognises.
		_, err = s.client.GenerateJitRunnerConfig(ctx, &scaleset.RunnerScaleSetJitRunnerSetting{Name: name}, s.setID)
		say("mintedAgain", map[string]any{"runnerExists": errors.Is(err, scaleset.RunnerExistsError), "error": fmt.Sprint(err)})
		ref, err := s.client.GetRunnerByName(ctx, name)
		if err != nil || ref == nil {
			return 0, fmt.Errorf("runner by name %s: %v (found %v)", name, err, ref != nil)
		}
		say("runnerByName", map[string]any{"id": ref.ID, "name": ref.Name, "scaleSetId": ref.RunnerScaleSetID})
	}
	return count, nil
}

func main() {
	configURL := flag.String("config-url", "", "GitHub config URL (scope)")
	appID := flag.String("app-id", "", "GitHub App id")
	installationID := flag.Int64("installation-id", 0, "installation id")
	keyFile := flag.String("key", "", "App private key (PEM)")
	name := flag.String("name", "conformance", "scale set name")
	deleteAtEnd := flag.Bool("delete", false, "delete the scale set on SIGTERM")
	flag.Parse()
	key, err := os.ReadFile(*keyFile)
	if err != nil {
		fail("read key", err)
	}
	client, err := scaleset.NewClientWithGitHubApp(scaleset.ClientWithGitHubAppConfig{
		GitHubConfigURL: *configURL,
		GitHubAppAuth:   scaleset.GitHubAppAuth{ClientID: *appID, InstallationID: *installationID, PrivateKey: string(key)},
		SystemInfo:      scaleset.SystemInfo{System: "imp-conformance", Subsystem: "listener"},
	}, scaleset.WithRetryMax(1), scaleset.WithRetryWaitMax(200*time.Millisecond))
	if err != nil {
		fail("client", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	group, err := client.GetRunnerGroupByName(ctx, "Default")
	if err != nil {
		fail("runner group", err)
	}
	set, err := client.GetRunnerScaleSet(ctx, group.ID, *name)
	if err != nil {
		fail("get scale set", err)
	}
	say("found", map[string]any{"exists": set != nil})
	if set == nil {
		set, err = client.CreateRunnerScaleSet(ctx, &scaleset.RunnerScaleSet{Name: *name, RunnerGroupID: group.ID, RunnerSetting: scaleset.RunnerSetting{DisableUpdate: true}})
		if err != nil {
			fail("create scale set", err)
		}
	}
	byID, err := client.GetRunnerScaleSetByID(ctx, set.ID)
	if err != nil {
		fail("get scale set by id", err)
	}
	say("scaleSet", map[string]any{"id": set.ID, "name": set.Name, "runnerGroupId": set.RunnerGroupID, "labels": set.Labels, "byIdName": byID.Name, "createdOn": byID.CreatedOn})

	session, err := client.MessageSessionClient(ctx, set.ID, "conformance-owner")
	if err != nil {
		fail("session", err)
	}
	s := session.Session()
	say("session", map[string]any{"sessionId": s.SessionID.String(), "owner": s.OwnerName, "assigned": s.Statistics.TotalAssignedJobs})
	_, err = client.MessageSessionClient(ctx, set.ID, "second-owner")
	say("secondSession", map[string]any{"refused": err != nil, "error": fmt.Sprint(err)})

	l, err := listener.New(session, listener.Config{ScaleSetID: set.ID, MaxRunners: 5})
	if err != nil {
		fail("listener", err)
	}
	runErr := l.Run(ctx, &scaler{client: client, setID: set.ID, name: *name})
	closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	closeErr := session.Close(closeCtx)
	if *deleteAtEnd {
		err = client.DeleteRunnerScaleSet(closeCtx, set.ID)
		say("deleted", map[string]any{"error": fmt.Sprint(err)})
	}
	say("stopped", map[string]any{"runError": fmt.Sprint(runErr), "canceled": errors.Is(runErr, context.Canceled), "closeError": fmt.Sprint(closeErr)})
}

func fail(what string, err error) {
	say("fatal", map[string]any{"what": what, "error": err.Error()})
	os.Exit(1)
}
