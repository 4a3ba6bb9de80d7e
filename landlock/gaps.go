package landlock

// Gaps lists what a kernel with Landlock ABI abi cannot enforce of r:
// required gaps make a strict build fail (a *StrictError lists them); the
// reported ones are said in words (Report.NotEnforced carries them too).
// It is what Build would find, without building; a planner uses it.
func Gaps(abi int, r Rules) (required []Gap, reported []string) {
	if abi < 1 {
		return nil, []string{"Landlock is not available: no filesystem, TCP or scope restriction is applied by Landlock"}
	}
	return gaps(abi, r)
}
