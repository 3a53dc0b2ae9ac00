package evloop

// Buffer classes of a shard's pool: a connection that must keep bytes between events (the
// start of a request head, a response its client cannot take yet) borrows one of these and
// gives it back once drained, so an idle connection holds none.
var bufClasses = [...]int{1 << 10, 2 << 10, 4 << 10, 16 << 10, 64 << 10}

// bufKeep bounds the free buffers a shard keeps per class, 1 MiB of each: enough for the
// requests of a few hundred connections in flight without allocating, and no more, so the
// memory of a larger burst goes to the collector after it.
var bufKeep = [...]int{1024, 512, 256, 64, 16}

type bufPool struct {
	free [len(bufClasses)][][]byte
	// Gets and misses count the buffers handed out and those that had to be allocated.
	gets, misses uint64
}

func classOf(n int) int {
	for i, c := range bufClasses {
		if n <= c {
			return i
		}
	}
	return -1
}

func (p *bufPool) get(n int) []byte {
	p.gets++
	k := classOf(n)
	if k < 0 {
		p.misses++
		return make([]byte, 0, n)
	}
	if f := p.free[k]; len(f) > 0 {
		b := f[len(f)-1]
		f[len(f)-1] = nil
		p.free[k] = f[:len(f)-1]
		return b[:0]
	}
	p.misses++
	return make([]byte, 0, bufClasses[k])
}

func (p *bufPool) put(b []byte) {
	k := classOf(cap(b))
	if k < 0 || cap(b) != bufClasses[k] || len(p.free[k]) >= bufKeep[k] {
		return
	}
	p.free[k] = append(p.free[k], b[:0])
}
