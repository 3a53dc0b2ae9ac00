package httpcore

import (
	"fmt"

	"ballast/config"
)

// Page is a custom body for a status Ballast answers itself, read once per table. Its bytes
// are shared by every request: read-only.
type Page struct {
	Body        []byte
	ContentType []byte
}

// loadErrorPages reads the configured pages; a file that cannot be read fails the table, so
// a reload with a broken page keeps the running configuration.
func loadErrorPages(eps []config.ErrorPage) (map[int]*Page, error) {
	if len(eps) == 0 {
		return nil, nil
	}
	pages := make(map[int]*Page, len(eps))
	for _, ep := range eps {
		body := []byte(ep.Body)
		if ep.File != "" {
			b, err := config.ReadErrorPage(ep.File)
			if err != nil {
				return nil, fmt.Errorf("httpcore: error page for %d: %w", ep.Status, err)
			}
			body = b
		}
		ctype := ep.ContentType
		if ctype == "" {
			ctype = config.DefaultErrorPageType
		}
		pages[ep.Status] = &Page{Body: body, ContentType: []byte(ctype)}
	}
	return pages, nil
}
