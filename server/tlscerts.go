package server

import (
	"crypto/tls"
	"errors"
	"sync"

	"ballast/config"
	"ballast/tlsconf"
)

// tlsCerts holds the certificates of the http plane's TLS listeners across reloads: one
// tlsconf.Server per listener name, whose configuration a reload replaces in place, so that
// a listener keeps its socket and its session tickets while its certificates change.
type tlsCerts struct {
	mu  sync.Mutex
	tls map[string]*tlsconf.Server // by listener name; kept across reloads
}

// prepare reads the certificates of every TLS listener of cfg; commit installs them. A file
// that cannot be read refuses the configuration (the old certificates keep serving).
func (c *tlsCerts) prepare(cfg *config.Config) (commit func(), err error) {
	built := map[string]*tls.Config{}
	for _, l := range cfg.Listeners {
		if l.TLS == nil || l.IsL4() {
			continue
		}
		tc, err := tlsconf.Build(l.TLS)
		if err != nil {
			return nil, errors.New("listener " + l.Name + ": " + err.Error())
		}
		built[l.Name] = tc
	}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.tls == nil {
			c.tls = map[string]*tlsconf.Server{}
		}
		for name, tc := range built {
			if s := c.tls[name]; s != nil {
				s.Install(tc)
			} else {
				c.tls[name] = tlsconf.NewServer(tc)
			}
		}
	}, nil
}

// config is the TLS configuration of the named listener (following reloads of its
// certificates), nil when it has none.
func (c *tlsCerts) config(name string) *tls.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.tls[name]; s != nil {
		return s.Config()
	}
	return nil
}
