// Command pause is the test cluster's pod sandbox image (registry.k8s.io/pause cannot be pulled
// here): like the upstream one it sleeps until SIGINT or SIGTERM, and as PID 1 of a pod's PID
// namespace it reaps the orphans that are reparented to it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
