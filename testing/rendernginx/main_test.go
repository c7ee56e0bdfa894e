package rendernginx

import (
	"testing"

	"openflare/testing/nstest"
)

func TestMain(m *testing.M) { nstest.Main(m) }
