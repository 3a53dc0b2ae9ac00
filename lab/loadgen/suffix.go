package loadgen

import (
	"bufio"
	"io"
	"strings"
)

// JoinSuffix appends one -R line to a URL. A line starting with "?" or "&", or any other line
// that is not a path (such as "wait=1"), is a query: it is joined with "?" when the URL has no
// query yet and with "&" otherwise. A line starting with "/" is appended to the path (one
// trailing slash of the URL is dropped so that "/a/" + "/b" is "/a/b"); it cannot follow a URL
// that already has a query, so then it is appended as is. An empty line leaves the URL alone.
func JoinSuffix(url, line string) string {
	line = strings.TrimSpace(line)
	if line == "" {
		return url
	}
	hasQuery := strings.Contains(url, "?")
	if line[0] == '/' {
		if !hasQuery {
			url = strings.TrimSuffix(url, "/")
		}
		return url + line
	}
	q := strings.TrimLeft(line, "?&")
	if q == "" {
		return url
	}
	switch {
	case !hasQuery:
		return url + "?" + q
	case strings.HasSuffix(url, "?") || strings.HasSuffix(url, "&"):
		return url + q
	default:
		return url + "&" + q
	}
}

// ReadSuffixes reads a -R file: one suffix per line; blank lines and lines starting with "#"
// are skipped, and a trailing "\r" is dropped.
func ReadSuffixes(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		out = append(out, line)
	}
	return out, sc.Err()
}
