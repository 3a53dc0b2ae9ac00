package discovery

import (
	"context"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"ballast/config"
)

// FileInterval is how often a file source looks at its file (size, modification time, inode).
const FileInterval = time.Second

// MaxFileBytes bounds what a file source reads: a larger file is refused.
const MaxFileBytes = 32 << 20

// File is a file source: a YAML file of backends (config.ParseBackends), read again when its
// size, modification time or inode changes (an editor's rename included).
type File struct {
	Path     string
	Max      int
	Interval time.Duration // 0 = FileInterval

	last stamp // of the last read, good or bad: a file is judged once per version
	read bool
}

type stamp struct {
	size, mtime int64
	ino, dev    uint64
}

// String describes the source for the status page.
func (f *File) String() string { return "file " + f.Path }

// Retry is the polling interval.
func (f *File) Retry() time.Duration {
	if f.Interval > 0 {
		return f.Interval
	}
	return FileInterval
}

// Fetch reads the file if it changed since the last read (Unchanged otherwise). A file that
// cannot be read, parsed or validated is an error naming file:line; it is not read again
// until it changes.
func (f *File) Fetch(context.Context) (Answer, error) {
	a := Answer{Next: f.Retry()}
	fi, err := os.Stat(f.Path)
	if err != nil {
		if f.read && f.last == (stamp{}) {
			a.Unchanged = true // still missing: said already
			return a, nil
		}
		f.read, f.last = true, stamp{}
		return Answer{}, err
	}
	st := stamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino, st.dev = sys.Ino, uint64(sys.Dev)
	}
	if f.read && st == f.last {
		a.Unchanged = true
		return a, nil
	}
	f.read, f.last = true, st
	if fi.Size() > MaxFileBytes {
		return Answer{}, fmt.Errorf("%s: %d bytes; at most %d are read", f.Path, fi.Size(), MaxFileBytes)
	}
	fh, err := os.Open(f.Path)
	if err != nil {
		return Answer{}, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, MaxFileBytes+1))
	if err != nil {
		return Answer{}, err
	}
	if len(data) > MaxFileBytes {
		return Answer{}, fmt.Errorf("%s: more than %d bytes", f.Path, MaxFileBytes)
	}
	bs, err := config.ParseBackends(f.Path, data, f.Max)
	if err != nil {
		return Answer{}, err
	}
	if len(bs) == 0 {
		return Answer{}, fmt.Errorf("%s: %w", f.Path, ErrEmpty)
	}
	for _, b := range bs {
		a.Backends = append(a.Backends, b.Spec())
	}
	return a, nil
}
