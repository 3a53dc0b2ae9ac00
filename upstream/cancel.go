package upstream

// Cancel undoes an Acquire whose attempt never reached the backend because the proxy itself
// could not go on (it ran out of descriptors or socket memory): the slot is freed and handed
// on like Release's, but nothing is observed (no latency, no failure, no Spec.OnRelease), so
// a limit of the proxy's own is never held against a backend (outlier detection, ewma).
func (p *Pool) Cancel(b *Backend) {
	b.inflight.Add(-1)
	b.requests.Add(^uint64(0)) // it was never a request
	p.snap.Load().track(b)
	p.kick()
	if o := b.owner.Load(); o != nil && o != p {
		o.snap.Load().track(b)
		o.kick()
	}
}
