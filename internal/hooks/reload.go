package hooks

// WithHooks returns a Dispatcher like d (the same Redis, store, options
// and counters) that delivers to hs instead, for a reload of the hooks
// file: stop d's Run, then Run the new one. A hook kept by name keeps its
// consumer groups, so it resumes where d left off. Errors: an invalid
// hook, named as New names it.
func (d *Dispatcher) WithHooks(hs []Hook) (*Dispatcher, error) {
	o := d.o
	o.Hooks = hs
	o.Registerer = nil
	n, err := New(d.rdb, d.st, o)
	if err != nil {
		return nil, err
	}
	n.m = d.m
	return n, nil
}
