// Command spdy-client plays kubectl against edgecore's streaming handlers with client-go's
// own SPDY code (remotecommand.NewSPDYExecutor, tools/portforward), the code the API server
// and kubectl use toward a kubelet, and with the WebSocket client of Kubernetes' e2e specs.
// edge/tests/streaming.rs builds and runs it.
//
//	spdy-client exec -url URL [-stdin] [-tty] [-size WxH] [-count]
//	    stdin/stdout/stderr are the process's; exits with the remote exit code.
//	    -count prints "<bytes> bytes in <seconds> s" instead of stdout.
//	spdy-client wsraw -url URL -protocol P
//	    what the e2e spec "Pods should support remote command execution over websockets"
//	    does (golang.org/x/net/websocket): reads messages until EOF, writes channel 1 to
//	    stdout, channel 2 to stderr and channel 3 as "status: <text>" to stderr.
//	spdy-client portforward -url URL -remote PORT -path /x
//	    forwards a local port to PORT, GETs http://127.0.0.1:<local>/x (-requests N at once)
//	    and prints each status and body; exits 1 if a GET failed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/net/websocket"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/client-go/util/exec"
)

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: spdy-client exec|portforward ..."))
	}
	switch os.Args[1] {
	case "exec":
		runExec(os.Args[2:])
	case "portforward":
		runPortForward(os.Args[2:])
	case "wsraw":
		runWebSocketRaw(os.Args[2:])
	default:
		fail(fmt.Errorf("unknown mode %q", os.Args[1]))
	}
}

type sizeQueue struct {
	sizes chan remotecommand.TerminalSize
}

func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	size, ok := <-q.sizes
	if !ok {
		return nil
	}
	return &size
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

func runExec(args []string) {
	flags := flag.NewFlagSet("exec", flag.ExitOnError)
	url := flags.String("url", "", "exec URL (with query)")
	stdin := flags.Bool("stdin", false, "send our stdin")
	tty := flags.Bool("tty", false, "terminal")
	size := flags.String("size", "", "terminal size WxH sent on the resize stream")
	count := flags.Bool("count", false, "count stdout bytes instead of printing them")
	check(flags.Parse(args))
	executor, err := remotecommand.NewSPDYExecutor(&rest.Config{}, "POST", mustURL(*url))
	check(err)
	options := remotecommand.StreamOptions{Stdout: os.Stdout, Stderr: os.Stderr, Tty: *tty}
	if *stdin {
		options.Stdin = os.Stdin
	}
	if *tty {
		options.Stderr = nil
	}
	if *size != "" {
		var w, h uint16
		_, err := fmt.Sscanf(*size, "%dx%d", &w, &h)
		check(err)
		queue := &sizeQueue{sizes: make(chan remotecommand.TerminalSize, 1)}
		queue.sizes <- remotecommand.TerminalSize{Width: w, Height: h}
		options.TerminalSizeQueue = queue
	}
	bytes := &counter{}
	if *count {
		options.Stdout = bytes
	}
	started := time.Now()
	err = executor.StreamWithContext(context.Background(), options)
	if *count {
		fmt.Printf("%d bytes in %.3f s\n", bytes.n, time.Since(started).Seconds())
	}
	var exitErr exec.CodeExitError
	if errors.As(err, &exitErr) {
		os.Exit(exitErr.Code)
	}
	check(err)
}

func runPortForward(args []string) {
	flags := flag.NewFlagSet("portforward", flag.ExitOnError)
	url := flags.String("url", "", "portForward URL")
	remote := flags.Int("remote", 0, "remote port")
	path := flags.String("path", "/", "HTTP path to GET")
	requests := flags.Int("requests", 1, "GETs to send, one connection each")
	check(flags.Parse(args))
	transport, upgrader, err := spdy.RoundTripperFor(&rest.Config{})
	check(err)
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, "POST", mustURL(*url))
	stop, ready := make(chan struct{}), make(chan struct{})
	forwarder, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"},
		[]string{fmt.Sprintf("0:%d", *remote)}, stop, ready, io.Discard, os.Stderr)
	check(err)
	done := make(chan error, 1)
	go func() { done <- forwarder.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		fail(fmt.Errorf("port-forward ended before ready: %v", err))
	}
	ports, err := forwarder.GetPorts()
	check(err)
	// The GETs run at once: one connection each, so one stream pair each on the session.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 20 * time.Second}
	results := make(chan string, *requests)
	for i := 0; i < *requests; i++ {
		go func() {
			resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d%s", ports[0].Local, *path))
			if err != nil {
				results <- "error: " + err.Error()
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				results <- "error: " + err.Error()
				return
			}
			results <- fmt.Sprintf("%d %s", resp.StatusCode, body)
		}()
	}
	failed := false
	for i := 0; i < *requests; i++ {
		result := <-results
		fmt.Println(result)
		failed = failed || strings.HasPrefix(result, "error: ")
	}
	close(stop)
	<-done
	if failed {
		os.Exit(1)
	}
}

func runWebSocketRaw(args []string) {
	flags := flag.NewFlagSet("wsraw", flag.ExitOnError)
	url := flags.String("url", "", "exec URL (with query), http://")
	protocol := flags.String("protocol", "channel.k8s.io", "WebSocket subprotocol")
	check(flags.Parse(args))
	config, err := websocket.NewConfig(strings.Replace(*url, "http://", "ws://", 1), "http://localhost")
	check(err)
	config.Protocol = []string{*protocol}
	ws, err := websocket.DialConfig(config)
	check(err)
	defer ws.Close()
	for {
		var msg []byte
		if err := websocket.Message.Receive(ws, &msg); err != nil {
			if err == io.EOF {
				return
			}
			fail(err)
		}
		if len(msg) == 0 {
			continue
		}
		switch msg[0] {
		case 1:
			os.Stdout.Write(msg[1:])
		case 2:
			os.Stderr.Write(msg[1:])
		case 3:
			if len(msg) > 1 {
				fmt.Fprintf(os.Stderr, "status: %s\n", msg[1:])
			}
		default:
			fail(fmt.Errorf("message on channel %d", msg[0]))
		}
	}
}

func mustURL(raw string) *urlType {
	u, err := parseURL(raw)
	check(err)
	return u
}

func check(err error) {
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "spdy-client:", err)
	os.Exit(100)
}
