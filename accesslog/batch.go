package accesslog

import (
	"errors"
	"os"
	"time"

	"ballast/config"
)

// A plane that must not write to a file on its own goroutine (an event loop: a write to disk
// may block) formats lines where the request ends (AppendLine) and writes them in batches from
// a goroutine of its own (WriteLines). Write is the two together.

// AppendLine appends e as one line in the log's format, stamped now, to b.
func (l *Log) AppendLine(b []byte, e *Entry, now time.Time) []byte {
	if l.format == config.AccessCombined {
		return e.appendCombined(b, now)
	}
	return e.appendJSON(b, now)
}

// WriteLines writes b, whole lines made by AppendLine, with one write(2) (O_APPEND keeps the
// lines of concurrent writers whole). A file being reopened meanwhile gets them in the new one.
func (l *Log) WriteLines(b []byte) {
	for range 2 {
		f := l.out.Load()
		if f == nil {
			return
		}
		if _, err := f.Write(b); !errors.Is(err, os.ErrClosed) {
			return // written, or an error a retry would not cure
		}
	}
}
