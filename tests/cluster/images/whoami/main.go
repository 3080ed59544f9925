// Command whoami stands in for the traefik/whoami image, which the Go module
// proxy does not serve: a tiny HTTP server that answers with what it knows
// of itself and of the request, as traefik/whoami does.
//
//	GET /[?wait=d] text: Name (if set), Hostname, every IP, RemoteAddr, the request line and headers,
//	               after waiting d (a Go duration, e.g. 100ms) if asked
//	GET /api       the same as JSON
//	GET /health    200; POST /health with a status code in the body sets what later GETs answer
//	GET /data?size=N&unit=KB|MB|GB  N units of filler bytes
//	GET /bench     "1", the cheapest answer
//	GET /echo      a WebSocket that sends back every message
//
// Like the image, it listens on -port (default 80, or WHOAMI_PORT_NUMBER) and
// takes -name (or WHOAMI_NAME). It installs no signal handler: SIGTERM ends it
// at once, in-flight requests included, as it does the real image.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/websocket"
)

func main() {
	port := flag.String("port", envOr("WHOAMI_PORT_NUMBER", "80"), "port to listen on")
	name := flag.String("name", os.Getenv("WHOAMI_NAME"), "name to report")
	verbose := flag.Bool("verbose", false, "log each request")
	flag.Parse()

	var health atomic.Int32
	health.Store(http.StatusOK)

	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if wait, err := time.ParseDuration(r.URL.Query().Get("wait")); err == nil && wait > 0 {
			select {
			case <-time.After(wait):
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, describe(*name, r))
	})
	mux.HandleFunc("/api", func(w http.ResponseWriter, r *http.Request) {
		host, _ := os.Hostname()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"hostname": host, "ip": addresses(), "headers": r.Header, "url": r.URL.RequestURI(),
			"host": r.Host, "method": r.Method, "name": *name, "remoteAddr": r.RemoteAddr,
		})
	})
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(io.LimitReader(r.Body, 16))
			code, err := strconv.Atoi(strings.TrimSpace(string(body)))
			if err != nil || code < 200 || code > 599 {
				http.Error(w, "want a status code between 200 and 599", http.StatusBadRequest)
				return
			}
			health.Store(int32(code))
		}
		w.WriteHeader(int(health.Load()))
	})
	mux.HandleFunc("/bench", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "1")
	})
	mux.HandleFunc("/data", func(w http.ResponseWriter, r *http.Request) {
		size, err := strconv.ParseInt(r.URL.Query().Get("size"), 10, 64)
		if err != nil || size < 0 {
			size = 1
		}
		unit := map[string]int64{"": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}[strings.ToUpper(r.URL.Query().Get("unit"))]
		if unit == 0 {
			unit = 1
		}
		total := size * unit
		w.Header().Set("Content-Length", strconv.FormatInt(total, 10))
		chunk := []byte(strings.Repeat("|", 32<<10))
		for total > 0 {
			n := min(total, int64(len(chunk)))
			if _, err := w.Write(chunk[:n]); err != nil {
				return
			}
			total -= n
		}
	})
	mux.Handle("/echo", websocket.Handler(func(ws *websocket.Conn) { _, _ = io.Copy(ws, ws) }))

	var handler http.Handler = mux
	if *verbose {
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			log.Printf("%s %s %s", r.RemoteAddr, r.Method, r.URL.RequestURI())
			mux.ServeHTTP(w, r)
		})
	}
	log.Printf("whoami: listening on :%s", *port)
	log.Fatal(http.ListenAndServe(":"+*port, handler)) //nolint:gosec // a test image
}

func describe(name string, r *http.Request) string {
	var b strings.Builder
	if name != "" {
		fmt.Fprintf(&b, "Name: %s\n", name)
	}
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "Hostname: %s\n", host)
	for _, ip := range addresses() {
		fmt.Fprintf(&b, "IP: %s\n", ip)
	}
	fmt.Fprintf(&b, "RemoteAddr: %s\n", r.RemoteAddr)
	fmt.Fprintf(&b, "%s %s %s\n", r.Method, r.URL.RequestURI(), r.Proto)
	fmt.Fprintf(&b, "Host: %s\n", r.Host)
	_ = r.Header.Write(&b)
	return b.String()
}

func addresses() []string {
	var out []string
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out = append(out, n.IP.String())
		}
	}
	return out
}

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}
