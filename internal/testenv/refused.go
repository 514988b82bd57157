package testenv

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// RefusedAddr returns a 127.0.0.1:PORT address where every TCP connect is
// refused at once, for as long as the test runs. The port is held by a
// socket that is bound but never listens (and has no SO_REUSEADDR), so no
// other process can bind it meanwhile, unlike a port picked free and
// closed.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("testenv: socket: %v", err)
	}
	syscall.CloseOnExec(fd)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("testenv: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("testenv: getsockname: %v", err)
	}
	port := sa.(*syscall.SockaddrInet4).Port
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
