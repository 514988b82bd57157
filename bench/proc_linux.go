package bench

import (
	"os/exec"
	"syscall"
)

// setChildAttrs makes the kernel kill the relay process if the bench dies
// first, so an interrupted run leaves no relay behind.
func setChildAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
