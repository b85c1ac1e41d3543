package pid1

import (
	"fmt"
	"log/slog"
	"time"
)

// Step is one named boot step; boot is an ordered list of them, each logged with its duration.
type Step struct {
	Name string
	Run  func() error
}

// RunSteps runs steps in order and stops at the first failure, naming it.
func RunSteps(log *slog.Logger, steps []Step) error {
	for _, s := range steps {
		start := time.Now()
		if err := s.Run(); err != nil {
			log.Error("boot step failed", "step", s.Name, "error", err)
			return fmt.Errorf("boot step %s: %w", s.Name, err)
		}
		log.Info("boot step done", "step", s.Name, "ms", time.Since(start).Milliseconds())
	}
	return nil
}
