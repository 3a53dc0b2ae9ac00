//go:build linux

package h1

import (
	"sync/atomic"
	"time"

	"ballast/accesslog"
	"ballast/evloop"
)

// Access-log lines are formatted on the shard where the request ends and written by a
// goroutine of the shard's own: a write to a file may block, which a shard must never do.
// The lines of one wake-up go in one batch; a writer that falls behind by more than
// logBatches batches loses the newest lines, counted (Stats.LogDropped), instead of holding
// the shard.

// logBatches bounds the batches waiting for the writer, and logBatchMax a batch's size.
const (
	logBatches  = 8
	logBatchMax = 256 << 10
)

type logBatch struct {
	l *accesslog.Log
	b []byte
	n int // lines
}

// shardLog is one shard's side of the access log.
type shardLog struct {
	sh      *shard
	cur     logBatch
	queued  bool // a flush is due after this wake-up (Later)
	ch      chan logBatch
	free    chan []byte
	done    chan struct{}
	dropped atomic.Int64
}

func newShardLog(sh *shard) *shardLog {
	sl := &shardLog{sh: sh, ch: make(chan logBatch, logBatches), free: make(chan []byte, logBatches+1), done: make(chan struct{})}
	go sl.write()
	return sl
}

// write is the writer goroutine.
func (sl *shardLog) write() {
	defer close(sl.done)
	for b := range sl.ch {
		b.l.WriteLines(b.b)
		select {
		case sl.free <- b.b[:0]:
		default:
		}
	}
}

// add formats e for l into the current batch.
func (sl *shardLog) add(l *accesslog.Log, e *accesslog.Entry) {
	if sl.cur.l != l && sl.cur.n > 0 { // the log was switched: one batch, one log
		sl.flush()
	}
	sl.cur.l = l
	if sl.cur.b == nil {
		select {
		case sl.cur.b = <-sl.free:
		default:
			sl.cur.b = make([]byte, 0, 16<<10)
		}
	}
	sl.cur.b = l.AppendLine(sl.cur.b, e, time.Now())
	sl.cur.n++
	if len(sl.cur.b) >= logBatchMax {
		sl.flush()
		return
	}
	if !sl.queued {
		sl.queued = true
		sl.sh.s.Later(sl)
	}
}

// Event flushes after the wake-up's events (evloop.Deferred).
func (sl *shardLog) Event(evloop.Events) {
	sl.queued = false
	sl.flush()
}

// flush hands the current batch to the writer, or drops it when the writer is that far
// behind.
func (sl *shardLog) flush() {
	if sl.cur.n == 0 {
		return
	}
	select {
	case sl.ch <- sl.cur:
		sl.cur = logBatch{}
	default:
		sl.dropped.Add(int64(sl.cur.n))
		sl.cur.b, sl.cur.n = sl.cur.b[:0], 0
	}
}

// close flushes and stops the writer once it has written what it holds.
func (sl *shardLog) close() {
	sl.flush()
	close(sl.ch)
	<-sl.done
}
