package mailbox

import (
	"sync"
	"testing"
)

// Requests posted while the loop is busy merge into one, the newest
// winning, behind a single wake-up; waking never blocks the caller.
func TestPostMergesBehindOneWakeUp(t *testing.T) {
	b := New()
	var newest int
	for i := 1; i <= 3; i++ {
		b.Post(func() { newest = i })
	}
	if len(b.Wake) != 1 {
		t.Fatalf("%d wake-ups pending after three posts, want 1", len(b.Wake))
	}
	<-b.Wake
	var got int
	b.Do(func() { got = newest })
	if got != 3 {
		t.Fatalf("the loop found request %d, want the newest, 3", got)
	}
	b.Wake.Notify()
	b.Wake.Notify()
	if len(b.Wake) != 1 {
		t.Fatalf("%d wake-ups pending, want 1", len(b.Wake))
	}
}

// However posts and takes interleave, no request is lost: after the last
// post the loop is woken and finds it.
func TestNoRequestLost(t *testing.T) {
	const posts = 10000
	b := New()
	var pending, seen int
	done := make(chan struct{})
	go func() {
		defer close(done)
		for seen < posts {
			<-b.Wake
			b.Do(func() { seen = max(seen, pending) })
		}
	}()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < posts; i += 4 {
				b.Post(func() { pending = max(pending, i+1) })
			}
		})
	}
	wg.Wait()
	<-done
	if seen != posts {
		t.Fatalf("the loop saw %d, want %d", seen, posts)
	}
}
