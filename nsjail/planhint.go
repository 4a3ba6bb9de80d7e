package nsjail

import (
	"bytes"
	"fmt"
	"path/filepath"

	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/store"
)

// StorePlanHint stores plan as the plan hint of a prestarted init, for the
// next prestarted init of the same command line in the same directory (see
// "plan hint" in init.c): it builds the root's policy-independent part while
// the supervisor's runtime starts. Call it when this run's init could not use
// its hint (Ready.PlanHint is not "used"); an unchanged hint is not
// rewritten. The hint's path, which prestart.c names, must be the store's:
// a hint is only ever read from there.
func StorePlanHint(st *store.Store, pre *Prestarted, plan *mounts.Plan) error {
	if pre == nil || pre.PlanHint == "" {
		return nil
	}
	key := filepath.Base(pre.PlanHint)
	if st.Path(store.Plans, key) != pre.PlanHint {
		return fmt.Errorf("plan hint %s is not in the store %s", pre.PlanHint, st.Dir())
	}
	b, err := EncodePlanHint(plan)
	if err != nil {
		return err
	}
	if old, _, err := st.Get(store.Plans, key); err == nil && bytes.Equal(old, b) {
		return nil
	}
	return st.Put(store.Plans, key, b)
}
