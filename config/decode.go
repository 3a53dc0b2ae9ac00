package config

import (
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// pos is where a value sits in the file.
type pos struct{ line, col int }

// maxNodes bounds the nodes one document may expand to (aliases can multiply a small file).
const maxNodes = 200_000

// decoder walks a yaml.Node tree alongside the Config struct. It does the job of
// yaml.Decoder.KnownFields(true) but keeps going after a problem, so every error is reported,
// and it records where each field path was written: validation uses that to place its errors
// and defaulting uses it to tell "weight: 0" from an absent weight.
type decoder struct {
	file  string
	errs  Errors
	seen  map[string]pos  // field path → position of its value; nil for configs built in code
	bad   map[string]bool // field paths that failed to decode; validation stays quiet about them
	nodes int
}

func (d *decoder) errorf(p pos, path, format string, args ...any) {
	if path != "" {
		if d.bad == nil {
			d.bad = map[string]bool{}
		}
		d.bad[path] = true
	}
	d.errs = append(d.errs, &Error{File: d.file, Line: p.line, Column: p.col, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// quiet reports whether path, or a field enclosing it, already failed: a second error about
// the same value (say "must be more than 0s" after "duration needs a unit") would be noise.
func (d *decoder) quiet(path string) bool {
	for path != "" {
		if d.bad[path] {
			return true
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return false
}

// at is the position recorded for path or, when the field was not written, for the nearest
// enclosing value that was.
func (d *decoder) at(path string) pos {
	for path != "" {
		if p, ok := d.seen[path]; ok {
			return p
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return pos{}
}

// has reports whether the field at path was written in the file. For a config built in code,
// where there is no file, a field counts as written when its value is not zero.
func (d *decoder) has(path string, nonZero bool) bool {
	if d.seen == nil {
		return nonZero
	}
	_, ok := d.seen[path]
	return ok
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parse decodes one YAML document into c (a *Config, or another file's struct such as a
// discovery file's). It returns false when the YAML itself is broken, so that nothing can be
// said about its fields.
func (d *decoder) parse(data []byte, c any) bool {
	var doc yaml.Node
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return true // an empty file: validation says what is missing
		}
		d.syntax(err)
		return false
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.errorf(pos{extra.Line, extra.Column}, "", "a configuration is one YAML document; found another one here")
	} else if !errors.Is(err, io.EOF) {
		d.syntax(err)
		return false
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		d.value(doc.Content[0], reflect.ValueOf(c).Elem(), "")
	}
	// Past the expansion limit the config is cut short: checking it would only add noise.
	return d.nodes <= maxNodes
}

// syntax turns the YAML library's "yaml: line N: msg" into file:N: msg.
func (d *decoder) syntax(err error) {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		d.errorf(pos{line: line}, "", "YAML syntax: %s", m[2])
		return
	}
	d.errorf(pos{}, "", "YAML syntax: %s", strings.TrimPrefix(msg, "yaml: "))
}

var durationType = reflect.TypeFor[Duration]()

// value decodes node n into v, the field at path.
func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	d.nodes++
	if d.nodes > maxNodes {
		if d.nodes == maxNodes+1 {
			d.errorf(pos{n.Line, n.Column}, path, "the document expands to more than %d values (alias loop or bomb?)", maxNodes)
		}
		return
	}
	for n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return
		}
		n = n.Alias
	}
	p := pos{n.Line, n.Column}
	if path != "" {
		d.seen[path] = p
	}
	isNull := n.Kind == yaml.ScalarNode && n.Tag == "!!null"

	if v.Type() == durationType {
		if isNull {
			return
		}
		dur, err := parseDuration(n)
		if err != nil {
			d.errorf(p, path, "%v", err)
			return
		}
		v.Set(reflect.ValueOf(Duration{dur}))
		return
	}

	switch v.Kind() {
	case reflect.Pointer:
		if isNull {
			return
		}
		ptr := reflect.New(v.Type().Elem())
		d.value(n, ptr.Elem(), path)
		v.Set(ptr)
	case reflect.Struct:
		if isNull {
			return
		}
		if n.Kind != yaml.MappingNode {
			d.errorf(p, path, "expected a mapping of %s, got %s", strings.Join(fieldNames(v.Type()), ", "), kindName(n))
			return
		}
		d.mapping(n, v, path)
	case reflect.Slice:
		if isNull {
			return
		}
		if n.Kind != yaml.SequenceNode {
			d.errorf(p, path, "expected a list (\"- item\" lines), got %s", kindName(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.value(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.String:
		if isNull {
			return
		}
		if n.Kind != yaml.ScalarNode {
			d.errorf(p, path, "expected a string, got %s", kindName(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Int:
		if isNull {
			return
		}
		var i int64
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&i) != nil {
			d.errorf(p, path, "expected a whole number, got %s", kindName(n))
			return
		}
		if i < math.MinInt32 || i > math.MaxInt32 {
			d.errorf(p, path, "%d is out of range", i)
			return
		}
		v.SetInt(i)
	case reflect.Int64: // AS numbers and other 32-bit unsigned values
		if isNull {
			return
		}
		var i int64
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&i) != nil {
			d.errorf(p, path, "expected a whole number, got %s", kindName(n))
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		if isNull {
			return
		}
		var f float64
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!float" && n.Tag != "!!int") || n.Decode(&f) != nil {
			d.errorf(p, path, "expected a number, got %s", kindName(n))
			return
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			d.errorf(p, path, "expected a finite number, got %s", n.Value)
			return
		}
		v.SetFloat(f)
	case reflect.Bool:
		if isNull {
			return
		}
		var b bool
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
			d.errorf(p, path, "expected true or false, got %s", kindName(n))
			return
		}
		v.SetBool(b)
	default:
		d.errorf(p, path, "internal: cannot decode into %s", v.Type())
	}
}

// mapping decodes a YAML mapping into struct v, refusing unknown and repeated keys.
func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	fields := fieldIndex(v.Type())
	done := make(map[string]pos, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		kp := pos{k.Line, k.Column}
		if k.Kind != yaml.ScalarNode {
			d.errorf(kp, path, "keys must be plain names, got %s", kindName(k))
			continue
		}
		sub := k.Value
		if path != "" {
			sub = path + "." + k.Value
		}
		if k.Value == "<<" {
			d.errorf(kp, path, "merge keys (<<) are not supported; repeat the keys or use an alias for the whole value")
			continue
		}
		idx, ok := fields[k.Value]
		if !ok {
			where := "at the top level"
			if path != "" {
				where = "in " + path
			}
			hint := ""
			if near := nearest(k.Value, fieldNames(v.Type())); near != "" {
				hint = fmt.Sprintf("did you mean %q? ", near)
			}
			d.errorf(kp, sub, "unknown key %q %s (%svalid: %s)", k.Value, where, hint, strings.Join(fieldNames(v.Type()), ", "))
			continue
		}
		if prev, dup := done[k.Value]; dup {
			d.errorf(kp, sub, "key %q is repeated (first at line %d)", k.Value, prev.line)
			continue
		}
		done[k.Value] = kp
		d.value(val, v.FieldByIndex(idx), sub)
	}
}

var fieldCache sync.Map // reflect.Type → map[string][]int

// fieldIndex maps a struct's YAML key names to field index paths; the keys of an embedded
// struct tagged ",inline" belong to the enclosing mapping, as yaml.v3 encodes them.
func fieldIndex(t reflect.Type) map[string][]int {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string][]int)
	}
	m := make(map[string][]int, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if f.Anonymous && name == "" && strings.Contains(opts, "inline") && f.Type.Kind() == reflect.Struct {
			for k, idx := range fieldIndex(f.Type) {
				m[k] = append([]int{i}, idx...)
			}
			continue
		}
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		m[name] = []int{i}
	}
	fieldCache.Store(t, m)
	return m
}

// fieldNames lists a struct's YAML keys, sorted, for "valid: ..." hints.
func fieldNames(t reflect.Type) []string {
	m := fieldIndex(t)
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// nearest returns the candidate within two edits of s (a typo), or "".
func nearest(s string, candidates []string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		if dist := editDistance(s, c); dist < bestDist {
			best, bestDist = c, dist
		}
	}
	return best
}

// editDistance is the Levenshtein distance, with a transposition counted as one edit.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 100
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
