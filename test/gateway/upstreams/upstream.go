// An orders upstream for the gateway tests (Go standard library only).
//
// Every executed POST appends one line, its idempotency key, to the executions file (the side effect the
// tests count), synced before the response is written. GET /stream?chunks=N&size=B streams N chunks of B
// bytes, flushed one by one. A request's x-fault header picks a fault: "sleep=<ms>" commits then sleeps,
// "reset" commits then resets the connection without answering.
//
// Usage: upstream PORT EXECUTIONS_FILE; prints "ready" once it listens.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

var (
	mu        sync.Mutex
	log       *os.File
	responses = map[string]string{}
)

func execute(key string, body string) {
	mu.Lock()
	defer mu.Unlock()
	fmt.Fprintf(log, "%s\n", key)
	log.Sync()
	if _, seen := responses[key]; !seen {
		responses[key] = body
	}
}

func orders(w http.ResponseWriter, r *http.Request) {
	hash := sha256.New()
	n, _ := io.Copy(hash, r.Body)
	key := r.Header.Get("Idempotency-Key")
	body := fmt.Sprintf(`{"key":%q,"bytes":%d,"sha256":%q}`, key, n, hex.EncodeToString(hash.Sum(nil)))
	execute(key, body)
	fault := r.Header.Get("X-Fault")
	if strings.HasPrefix(fault, "sleep=") {
		ms, _ := strconv.Atoi(strings.TrimPrefix(fault, "sleep="))
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}
	if fault == "reset" {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			if tcp, ok := conn.(*net.TCPConn); ok {
				tcp.SetLinger(0)
			}
			conn.Close()
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Set-Cookie", "order="+key)
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, body)
}

func stream(w http.ResponseWriter, r *http.Request) {
	chunks, _ := strconv.Atoi(r.URL.Query().Get("chunks"))
	size, _ := strconv.Atoi(r.URL.Query().Get("size"))
	key := r.Header.Get("Idempotency-Key")
	execute(key, "")
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	for i := 0; i < chunks; i++ {
		w.Write([]byte(strings.Repeat(string(rune('a'+i%26)), size)))
		flusher.Flush()
	}
}

func reconcile(w http.ResponseWriter, r *http.Request) {
	mu.Lock()
	body, seen := responses[r.URL.Query().Get("key")]
	mu.Unlock()
	if !seen {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, body)
}

func main() {
	var err error
	log, err = os.OpenFile(os.Args[2], os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/orders", orders)
	mux.HandleFunc("/stream", stream)
	mux.HandleFunc("/reconcile", reconcile)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	listener, err := net.Listen("tcp", "127.0.0.1:"+os.Args[1])
	if err != nil {
		panic(err)
	}
	fmt.Println("ready")
	http.Serve(listener, mux)
}
