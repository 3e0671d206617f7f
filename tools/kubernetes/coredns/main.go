// Command coredns is CoreDNS with only the plugins the test cluster's Corefile uses: the stock
// main (github.com/coredns/coredns) links every plugin, cloud DNS clients included, which adds
// minutes to a cold build and nothing the cluster needs. There is no forward plugin, on purpose:
// the cluster serves cluster.local and never asks a resolver beyond this machine.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	coremain.Run()
}
