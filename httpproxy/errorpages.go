package httpproxy

import (
	"fmt"

	"github.com/valyala/fasthttp"

	"ballast/config"
)

// errorPage is a custom body for a status Ballast produces, read once per table.
type errorPage struct {
	body  []byte
	ctype []byte
}

// loadErrorPages reads the configured pages; a file that cannot be read fails the table, so
// a reload with a broken page keeps the running configuration.
func loadErrorPages(eps []config.ErrorPage) (map[int]*errorPage, error) {
	if len(eps) == 0 {
		return nil, nil
	}
	pages := make(map[int]*errorPage, len(eps))
	for _, ep := range eps {
		body := []byte(ep.Body)
		if ep.File != "" {
			b, err := config.ReadErrorPage(ep.File)
			if err != nil {
				return nil, fmt.Errorf("httpproxy: error page for %d: %w", ep.Status, err)
			}
			body = b
		}
		ctype := ep.ContentType
		if ctype == "" {
			ctype = config.DefaultErrorPageType
		}
		pages[ep.Status] = &errorPage{body: body, ctype: []byte(ctype)}
	}
	return pages, nil
}

// errorPage replaces the body of the error response Ballast just produced with the custom
// page for its status, if there is one; headers such as Retry-After stay.
func (ls *listenerState) errorPage(ctx *fasthttp.RequestCtx, t *table) {
	if t == nil || t.pol == nil || t.pol.pages == nil {
		return
	}
	page := t.pol.pages[ctx.Response.StatusCode()]
	if page == nil {
		return
	}
	ctx.Response.SetBodyRaw(page.body) // shared and never written to
	ctx.Response.Header.SetContentTypeBytes(page.ctype)
}
