package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestDocsCoverEveryKey: docs/config.md has a table row for every key of the file format, so
// a field added to Config without documentation fails here.
func TestDocsCoverEveryKey(t *testing.T) {
	data, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	var walk func(t reflect.Type, path string)
	walk = func(typ reflect.Type, path string) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || typ == durationType {
			return
		}
		for _, name := range fieldNames(typ) {
			f := typ.FieldByIndex(fieldIndex(typ)[name])
			full := name
			if path != "" {
				full = path + "." + name
			}
			// A row names the key as `key`, or as `parent.key` for small sub-mappings.
			if !strings.Contains(doc, "| `"+name+"`") && !strings.Contains(doc, "`"+lastTwo(full)+"`") {
				t.Errorf("docs/config.md has no row for %s", full)
			}
			walk(f.Type, full)
		}
	}
	walk(reflect.TypeFor[Config](), "")
}

func lastTwo(path string) string {
	parts := strings.Split(path, ".")
	if len(parts) < 2 {
		return path
	}
	return strings.Join(parts[len(parts)-2:], ".")
}
