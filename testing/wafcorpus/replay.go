package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"openflare/testing/benchkit"
)

// A target is one server of the comparison.
type target struct {
	name string // none, ours, crs
	addr string
	pids []int // its nginx's workers
}

// A run is one category's requests through one target.
type run struct {
	answers []answer
	cpu     time.Duration // the workers' CPU time over the run
}

// An answer is a response's status and the start of its body.
type answer struct {
	status int
	body   string
}

// passed says the origin's answer came back.
func (a answer) passed() bool { return a.status == http.StatusOK && a.body == originBody }

// run sends reqs and measures the workers' CPU meanwhile.
func (t *target) run(reqs [][]byte) (run, error) {
	c0, err := benchkit.RunTime(t.pids)
	if err != nil {
		return run{}, err
	}
	answers, err := replay(t.addr, reqs, *conns)
	if err != nil {
		return run{}, err
	}
	c1, err := benchkit.RunTime(t.pids)
	if err != nil {
		return run{}, err
	}
	return run{answers: answers, cpu: c1 - c0}, nil
}

// replay sends every request to addr over n keep-alive connections and
// returns the answers.
func replay(addr string, reqs [][]byte, n int) ([]answer, error) {
	answers := make([]answer, len(reqs))
	next := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c *conn
			defer func() { c.close() }()
			for i := range next {
				var err error
				// A kept connection the server closed meanwhile fails
				// at once; a fresh one gets one more try.
				for try := 0; try < 2; try++ {
					if c == nil {
						if c, err = dial(addr); err != nil {
							break
						}
					}
					if answers[i], err = c.do(reqs[i]); err == nil {
						break
					}
					c.close()
					c = nil
				}
				if err != nil {
					errs <- fmt.Errorf("%s: request %d: %w", addr, i, err)
					for range next {
					}
					return
				}
				if c.closing {
					c.close()
					c = nil
				}
			}
		}()
	}
	for i := range reqs {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	return answers, nil
}

type conn struct {
	nc      net.Conn
	br      *bufio.Reader
	closing bool // the server said it closes the connection
}

func dial(addr string) (*conn, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &conn{nc: nc, br: bufio.NewReader(nc)}, nil
}

func (c *conn) close() {
	if c != nil {
		c.nc.Close()
	}
}

// do sends one request and reads the answer.
func (c *conn) do(req []byte) (answer, error) {
	c.nc.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.nc.Write(req); err != nil {
		return answer{}, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return answer{}, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if err != nil {
		return answer{}, err
	}
	c.closing = resp.Close
	return answer{resp.StatusCode, string(body[:min(len(body), 64)])}, nil
}
