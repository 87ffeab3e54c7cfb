// The pod sandbox ("pause") process for the test node: it holds the pod's namespaces and does nothing
// else. No registry is reachable here, so the sandbox image is this static binary, built locally
// (scripts/kube/build-node.sh). It exits on SIGTERM/SIGINT, and reaps children as PID 1 must.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}
