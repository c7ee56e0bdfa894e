package nginx

import (
	"bufio"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// logEntry is one line of nginx's error log, in the format nginx writes
// it: "2026/12/01 22:08:47 [emerg] 17810#17810: message".
type logEntry struct {
	level string
	pid   int // the process; the main thread's id equals it
	line  string
}

// parseLogLine reads line as nginx wrote it, or reports ok false. Only a
// line that starts as nginx starts one counts: text a request put into a
// message never does (requests log elsewhere, landing's http-level
// error_log), and a line whose writer is not the process asked about is
// someone else's.
func parseLogLine(line string) (e logEntry, ok bool) {
	const stamp = "0000/00/00 00:00:00 ["
	if len(line) < len(stamp)+2 {
		return e, false
	}
	for i := 0; i < len(stamp); i++ {
		if c := line[i]; stamp[i] == '0' && (c < '0' || c > '9') || stamp[i] != '0' && c != stamp[i] {
			return e, false
		}
	}
	rest := line[len(stamp):]
	level, rest, ok := strings.Cut(rest, "] ")
	if !ok || !slices.Contains(logLevels, level) {
		return e, false
	}
	pid, rest, ok := strings.Cut(rest, "#")
	if !ok {
		return e, false
	}
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return e, false
	}
	tid, _, ok := strings.Cut(rest, ": ")
	if _, err := strconv.Atoi(tid); !ok || err != nil {
		return e, false
	}
	return logEntry{level: level, pid: n, line: strings.TrimSpace(line)}, true
}

var logLevels = []string{"emerg", "alert", "crit", "error", "warn", "notice", "info", "debug"}

// logSince reads the error-log lines nginx wrote after mark at one of
// levels, by pid when pid is not 0: at most maxLogLines of them, from at
// most maxLogRead bytes (what others write in between cannot make the
// agent read without end, nor push the master's lines out of sight
// below that).
func (n *Ctl) logSince(mark int64, pid int, levels ...string) []logEntry {
	return readLog(n.ErrorLog, mark, pid, levels...)
}

func readLog(path string, mark int64, pid int, levels ...string) []logEntry {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(mark, io.SeekStart); err != nil {
		return nil
	}
	r := bufio.NewReaderSize(io.LimitReader(f, maxLogRead), 4096)
	var out []logEntry
	for len(out) < maxLogLines {
		l, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// Longer than any line nginx writes about itself: skip it.
			for err == bufio.ErrBufferFull {
				_, err = r.ReadSlice('\n')
			}
			continue
		}
		if e, ok := parseLogLine(string(l)); ok && slices.Contains(levels, e.level) && (pid == 0 || e.pid == pid) {
			out = append(out, e)
		}
		if err != nil {
			break
		}
	}
	return out
}

const (
	maxLogRead  = 4 << 20
	maxLogLines = 16
)
