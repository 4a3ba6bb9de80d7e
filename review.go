package hutch

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/hutchsandbox/hutch/hostdirs"
	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/plan"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/review"
)

// ReviewSummary is what a review sandbox left in its change set when it
// ended (docs/REVIEW.md).
type ReviewSummary struct {
	// ID is the change set's id: hutch diff, apply and discard take it.
	ID string `json:"id"`
	// Dir is the change set's directory.
	Dir      string `json:"dir"`
	Added    int    `json:"added"`
	Modified int    `json:"modified"`
	Deleted  int    `json:"deleted"`
	// Removed: the sandbox changed nothing, so the change set is gone.
	Removed bool `json:"removed,omitempty"`
	// Paths are the first changed paths (at most MaxSummaryPaths).
	Paths []string `json:"paths,omitempty"`
}

// MaxSummaryPaths caps ReviewSummary.Paths.
const MaxSummaryPaths = 50

// ChangesRoot is the directory of this user's change sets, under hutch's
// state directory; "" when there is none (neither XDG_STATE_HOME nor HOME).
func ChangesRoot() string {
	if s := hostdirs.State(); s != "" {
		return review.Root(s)
	}
	return ""
}

// reviewing is a session's change set while its sandbox runs.
type reviewing struct {
	cs   *review.ChangeSet
	lock *review.Lock
}

// openReview makes (or reopens) the change set id for the sandbox about to
// be planned on host h, holds its lock, and points h's workspace mount at
// its upper layer. id "" is a new one-off id.
func openReview(p *policy.Policy, h *plan.Host, id, session string) (*reviewing, error) {
	root := ChangesRoot()
	if root == "" {
		return nil, errors.New("filesystem.review: review mode keeps change sets in hutch's state directory, and there is none here: set XDG_STATE_HOME or HOME")
	}
	if id == "" {
		id = review.NewID(time.Now())
	}
	review.Prune(root, time.Now())
	prot := slices.Concat(h.Protected, h.Found, h.Hidden)
	if h.Protection != nil {
		prot = append(prot, h.Protection.Missing...)
	}
	cs, err := review.Create(root, id, review.Meta{
		Workspace: h.Workspace, Mount: p.Filesystem.PathsFor(h.Workspace, "").Mount,
		Session: session, Protected: prot,
	})
	if err != nil {
		return nil, fmt.Errorf("filesystem.review: %w", err)
	}
	l, err := cs.TryLock()
	if err != nil {
		return nil, fmt.Errorf("filesystem.review: %w", err)
	}
	h.Review = &mounts.Layer{Upper: cs.Upper(), Work: cs.Work()}
	return &reviewing{cs: cs, lock: l}, nil
}

// planReview points h at a change set that is not made (hutch plan).
func planReview(h *plan.Host) {
	d := filepath.Join(ChangesRoot(), "NEW")
	h.Review = &mounts.Layer{Upper: filepath.Join(d, "upper"), Work: filepath.Join(d, "work")}
}

// ReviewPending is what the change set of a running review session holds
// so far (a read-only walk of its upper layer); nil without review mode.
func (s *Session) ReviewPending() *ReviewSummary {
	if s.review == nil {
		return nil
	}
	return summarize(s.review.cs)
}

func summarize(cs *review.ChangeSet) *ReviewSummary {
	s, _ := summarizeDiff(cs)
	return s
}

// summarizeDiff is summarize with the Diff it read (nil when it failed).
func summarizeDiff(cs *review.ChangeSet) (*ReviewSummary, *review.Result) {
	s := &ReviewSummary{ID: cs.Meta.ID, Dir: cs.Dir}
	d, err := review.Diff(cs, review.DiffOptions{})
	if err == nil {
		s.Added, s.Modified, s.Deleted = d.Added, d.Modified, d.Deleted
		for _, c := range d.Changes {
			if len(s.Paths) == MaxSummaryPaths {
				break
			}
			s.Paths = append(s.Paths, c.Path)
		}
	}
	return s, d
}

// end records that the sandbox ended and releases the change set; an empty
// one is removed. It returns what the change set holds.
func (r *reviewing) end() *ReviewSummary {
	if r == nil {
		return nil
	}
	defer r.lock.Unlock()
	s, d := summarizeDiff(r.cs)
	removed, err := r.cs.End(d)
	s.Removed = err == nil && removed
	return s
}

// Message is the line a CLI prints for s.
func (s *ReviewSummary) Message() string {
	if s.Removed {
		return "hutch: review: the command changed nothing in the workspace (no change set kept)"
	}
	return fmt.Sprintf("hutch: review: %d added, %d modified, %d deleted, kept in change set %s (not in your files): hutch diff %s shows them, hutch apply %s applies them, hutch discard %s drops them",
		s.Added, s.Modified, s.Deleted, s.ID, s.ID, s.ID, s.ID)
}
