package httpcore

import (
	"net/textproto"

	"ballast/config"
)

// headerOps is a compiled request_headers or response_headers mapping.
type headerOps struct {
	remove [][]byte
	set    []headerOp
	add    []headerOp
}

// headerOp is one "Name: value" rule. A value without variables is kept as bytes and costs
// no expansion; one with variables is expanded into the request's scratch buffer.
type headerOp struct {
	name  []byte
	lit   []byte // the whole value when it has no variables
	parts []tmplPart
}

// tmplPart is a literal or a variable of a compiled template.
type tmplPart struct {
	lit []byte
	v   tmplVar
}

type tmplVar uint8

const (
	varNone tmplVar = iota
	varClientIP
	varScheme
	varHost
	varRequestID
	varBackend
)

var tmplVars = map[string]tmplVar{
	config.VarClientIP: varClientIP, config.VarScheme: varScheme, config.VarHost: varHost,
	config.VarRequestID: varRequestID, config.VarBackend: varBackend,
}

// compileHeaders compiles hr, which validation has checked; nil for nil.
func compileHeaders(hr *config.HeaderRules) (*headerOps, error) {
	if hr == nil {
		return nil, nil
	}
	ops := &headerOps{}
	for _, n := range hr.Remove {
		ops.remove = append(ops.remove, []byte(textproto.CanonicalMIMEHeaderKey(n)))
	}
	compile := func(lines []string) ([]headerOp, error) {
		var out []headerOp
		for _, line := range lines {
			name, value, err := config.ParseHeaderLine(line)
			if err != nil {
				return nil, err
			}
			op := headerOp{name: []byte(textproto.CanonicalMIMEHeaderKey(name))}
			for _, p := range value {
				op.parts = append(op.parts, tmplPart{lit: []byte(p.Literal), v: tmplVars[p.Var]})
			}
			if len(op.parts) == 0 {
				op.lit = []byte{}
			} else if len(op.parts) == 1 && op.parts[0].v == varNone {
				op.lit = op.parts[0].lit
			}
			out = append(out, op)
		}
		return out, nil
	}
	var err error
	if ops.set, err = compile(hr.Set); err != nil {
		return nil, err
	}
	if ops.add, err = compile(hr.Add); err != nil {
		return nil, err
	}
	return ops, nil
}

// value returns op's value for x's request, expanded into x.tmp when it has variables.
// backend is empty on the request side.
func (op *headerOp) value(x *Exchange, backend string) []byte {
	if op.lit != nil {
		return op.lit
	}
	b := x.tmp[:0]
	for _, p := range op.parts {
		switch p.v {
		case varNone:
			b = append(b, p.lit...)
		case varClientIP:
			if x.client.IsValid() {
				b = x.client.AppendTo(b)
			}
		case varScheme:
			b = append(b, schemeOf(x.tls)...)
		case varHost:
			b = append(b, x.host...)
		case varRequestID:
			b = append(b, x.id...)
		case varBackend:
			b = append(b, backend...)
		}
	}
	x.tmp = b
	return b
}

// apply runs the rules on h: remove, then set, then add.
func (ops *headerOps) apply(h Header, x *Exchange, backend string) {
	for _, k := range ops.remove {
		h.Del(k)
	}
	for i := range ops.set {
		op := &ops.set[i]
		h.Set(op.name, op.value(x, backend))
	}
	for i := range ops.add {
		op := &ops.add[i]
		h.Add(op.name, op.value(x, backend))
	}
}
