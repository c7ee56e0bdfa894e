package rendernginx

import (
	"testing"

	"github.com/openflare/openflare-agent/testing/nstest"
)

func TestMain(m *testing.M) { nstest.Main(m) }
