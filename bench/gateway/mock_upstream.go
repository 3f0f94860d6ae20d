// The gateway bench's mock upstream: serves fixed answers, as fast as one core allows.
//
// Standard library only (Debian's golang-go builds it offline, GO111MODULE=off). Its answers
// come from the manifest that bench/gateway/wire.py writes (-routes FILE): for each route, the
// end of its path, a JSON answer, and a stream's events. A POST whose path ends with a route's
// suffix gets the stream when its body holds `"stream": true` and the route has events (each
// event flushed as its own HTTP chunk, plus the route's usage event before the last one when
// the body holds `"include_usage": true`), else the JSON answer. The body is read whole and
// never decoded: a byte scan keeps the mock's cost negligible even for 200 KB requests.
// GET .../models and /health answer small JSON. GOMAXPROCS follows the taskset mask.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

type route struct {
	Suffix     string   `json:"suffix"`
	JSON       string   `json:"json"`
	Events     []string `json:"events"`
	UsageEvent string   `json:"usage_event"`
	json       []byte
	events     [][]byte
	usage      []byte
}

var (
	addr       = flag.String("addr", "127.0.0.1:18000", "listen address")
	routesFile = flag.String("routes", "", "the manifest of answers (bench/gateway/wire.py)")
	chunkDelay = flag.Duration("chunk-delay", 0, "pause between streamed events; 0 = none")
	respDelay  = flag.Duration("delay", 0, "pause before answering (a model's latency); 0 = none")
	idle       = flag.Duration("idle-timeout", 90*time.Second, "keep-alive idle timeout")
	routes     []route
	streamKey  = []byte(`"stream"`)
	usageKey   = []byte(`"include_usage"`)
	modelsBody = []byte(`{"object":"list","data":[{"id":"mock-model","object":"model","created":1700000000,"owned_by":"mock"}]}`)
	bufPool    = sync.Pool{New: func() any { return bytes.NewBuffer(make([]byte, 0, 64*1024)) }}
)

func load(path string) {
	raw, err := os.ReadFile(path)
	if err != nil {
		log.Fatalf("cannot read the routes manifest: %v", err)
	}
	var manifest struct {
		Routes []route `json:"routes"`
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		log.Fatalf("bad routes manifest %s: %v", path, err)
	}
	for _, r := range manifest.Routes {
		r.json = []byte(r.JSON)
		for _, e := range r.Events {
			r.events = append(r.events, []byte(e))
		}
		r.usage = []byte(r.UsageEvent)
		routes = append(routes, r)
	}
}

// flagTrue reports whether `"key"` is followed (after blanks and ':') by `true`.
func flagTrue(body, key []byte) bool {
	for off := 0; ; {
		i := bytes.Index(body[off:], key)
		if i < 0 {
			return false
		}
		j := off + i + len(key)
		for j < len(body) && (body[j] == ' ' || body[j] == '\t' || body[j] == '\n' || body[j] == '\r') {
			j++
		}
		if j < len(body) && body[j] == ':' {
			j++
			for j < len(body) && (body[j] == ' ' || body[j] == '\t' || body[j] == '\n' || body[j] == '\r') {
				j++
			}
			return bytes.HasPrefix(body[j:], []byte("true"))
		}
		off = j
	}
}

func answer(w http.ResponseWriter, r *http.Request, rt *route) {
	if r.Method != http.MethodPost {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer bufPool.Put(buf)
	if _, err := io.Copy(buf, r.Body); err != nil {
		http.Error(w, "read error", http.StatusBadRequest)
		return
	}
	body := buf.Bytes()
	if *respDelay > 0 {
		time.Sleep(*respDelay)
	}
	h := w.Header()
	if len(rt.events) == 0 || !flagTrue(body, streamKey) {
		h["Content-Type"] = []string{"application/json"}
		h["Content-Length"] = []string{strconv.Itoa(len(rt.json))}
		w.Write(rt.json)
		return
	}
	h["Content-Type"] = []string{"text/event-stream"}
	h["Cache-Control"] = []string{"no-cache"}
	fl, _ := w.(http.Flusher)
	last := len(rt.events) - 1
	for i, e := range rt.events {
		if i == last && len(rt.usage) > 0 && flagTrue(body, usageKey) {
			w.Write(rt.usage)
		}
		w.Write(e)
		if i < last && fl != nil {
			fl.Flush()
			if *chunkDelay > 0 {
				time.Sleep(*chunkDelay)
			}
		}
	}
}

func main() {
	flag.Parse()
	if *routesFile == "" {
		log.Fatal("-routes FILE is required (python -m bench.gateway writes it)")
	}
	load(*routesFile)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		for i := range routes {
			if strings.HasSuffix(p, routes[i].Suffix) {
				answer(w, r, &routes[i])
				return
			}
		}
		switch {
		case strings.HasSuffix(p, "/models"):
			w.Header()["Content-Type"] = []string{"application/json"}
			w.Write(modelsBody)
		case p == "/health" || p == "/healthz":
			w.Header()["Content-Type"] = []string{"application/json"}
			w.Write([]byte(`{"status":"ok"}`))
		default:
			http.NotFound(w, r)
		}
	})
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: *idle, MaxHeaderBytes: 1 << 20}
	log.Printf("mock upstream listening on http://%s, %d routes", *addr, len(routes))
	log.Fatal(srv.ListenAndServe())
}
