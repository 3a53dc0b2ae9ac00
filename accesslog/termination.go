package accesslog

// Termination states of the HTTP planes (Entry.Termination), after HAProxy's: the first
// character says who or what ended the request (C client, S server, s a server-side timeout,
// c a client-side timeout, P Ballast's policy or protocol checks, L Ballast answering itself,
// R a resource of Ballast's), the second in which phase (R reading the request, Q waiting in
// the backlog queue, C connecting to the backend, H waiting for the response headers, D
// relaying the body); "--" is a normal end.
const (
	TermNormal        = "--" // the response was relayed whole
	TermLocal         = "LR" // Ballast answered itself: a redirect, no route
	TermRefused       = "PR" // refused by policy or by the request checks (403, 429, 413, 400, 405, 431, 505)
	TermClientTimeout = "cR" // the client was too slow sending its request (408)
	TermClientBody    = "CR" // the client's request body failed
	TermQueueTimeout  = "sQ" // timed out in the backlog queue (503)
	TermQueueFull     = "RQ" // the backlog queue was full (503)
	TermServerConnect = "SC" // no usable backend, or none could be connected to (503, 502)
	TermServerTimeout = "sH" // no response headers within timeouts.response (504)
	TermServerHeaders = "SH" // the backend closed or reset the connection before its response headers (502)
	TermServerInvalid = "PH" // the backend's response was invalid (502)
	TermClientHeaders = "CH" // the client left before the response headers (499)
	TermClientData    = "CD" // the client left while the body was relayed
	TermServerData    = "SD" // the backend broke off the body
)
