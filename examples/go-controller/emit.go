package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"unicode"

	"google.golang.org/grpc/status"
)

// emit prints one JSON object on one line of stdout, its keys in the order given:
// emit("event", "sent", "id", id) prints {"event":"sent","id":"..."}. os.Stdout is not
// buffered, so each line is written (flushed) at once.
func emit(pairs ...any) {
	var line bytes.Buffer
	line.WriteByte('{')
	for i := 0; i+1 < len(pairs); i += 2 {
		if i > 0 {
			line.WriteByte(',')
		}
		key, _ := json.Marshal(fmt.Sprint(pairs[i]))
		value, err := json.Marshal(pairs[i+1])
		if err != nil {
			value, _ = json.Marshal(fmt.Sprint(pairs[i+1]))
		}
		line.Write(key)
		line.WriteByte(':')
		line.Write(value)
	}
	line.WriteString("}\n")
	_, _ = os.Stdout.Write(line.Bytes())
}

// logf prints a diagnostic line to stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "go-controller: "+format+"\n", args...)
}

// describe renders a gRPC error as its canonical code name (as in the gRPC spec), grpc-go's
// name and number, and message: "PERMISSION_DENIED (PermissionDenied, code 7): ...".
func describe(err error) string {
	s := status.Convert(err)
	goName := s.Code().String()
	canonical := "OK"
	if goName != "OK" {
		var b strings.Builder
		for i, r := range goName {
			if i > 0 && unicode.IsUpper(r) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToUpper(r))
		}
		canonical = b.String()
	}
	return fmt.Sprintf("%s (%s, code %d): %s", canonical, goName, uint32(s.Code()), s.Message())
}
