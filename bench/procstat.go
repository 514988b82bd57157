package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// procStat is the part of /proc/<pid>/stat (proc(5)) the cost figures use.
// Times are in clock ticks (see clockTicks).
type procStat struct {
	pid, ppid int
	// state is the process state letter ('R', 'S', 'Z' for a zombie, ...).
	state byte
	// utime and stime are the process's own user and system time (all its
	// threads); cutime and cstime those of its children that it has
	// waited for (reaped), which is where the time of an exited backend
	// goes: the postmaster reaps its children.
	utime, stime, cutime, cstime int64
}

// cpuTicks is the process's own CPU time plus that of its reaped children,
// in clock ticks.
func (s procStat) cpuTicks() int64 { return s.utime + s.stime + s.cutime + s.cstime }

// readProcStat reads /proc/<pid>/stat.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, fmt.Errorf("bench: read /proc/%d/stat: %w", pid, err)
	}
	return parseProcStat(string(b))
}

// parseProcStat parses one /proc/<pid>/stat line: "pid (comm) state ppid
// ...". comm may hold spaces and parentheses, so the fields are counted
// from the last ')'.
func parseProcStat(s string) (procStat, error) {
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return procStat{}, fmt.Errorf("bench: /proc stat: malformed %.40q", s)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(s[:open]))
	if err != nil {
		return procStat{}, fmt.Errorf("bench: /proc stat: pid: %w", err)
	}
	// After the comm: state(3) ppid(4) pgrp session tty_nr tpgid flags
	// minflt cminflt majflt cmajflt utime(14) stime cutime cstime(17).
	f := strings.Fields(s[closing+1:])
	if len(f) < 15 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("bench: /proc/%d/stat: %d fields after comm, want at least 15", pid, len(f))
	}
	st := procStat{pid: pid, state: f[0][0]}
	ints := []*int64{&st.utime, &st.stime, &st.cutime, &st.cstime}
	for i, p := range ints {
		if *p, err = strconv.ParseInt(f[11+i], 10, 64); err != nil {
			return procStat{}, fmt.Errorf("bench: /proc/%d/stat field %d: %w", pid, 14+i, err)
		}
	}
	if st.ppid, err = strconv.Atoi(f[1]); err != nil {
		return procStat{}, fmt.Errorf("bench: /proc/%d/stat ppid: %w", pid, err)
	}
	return st, nil
}

// atClkTck is the auxiliary vector entry holding the kernel's clock ticks
// per second (AT_CLKTCK, elf.h), what sysconf(_SC_CLK_TCK) returns.
const atClkTck = 17

var (
	clockTicksOnce sync.Once
	clockTicksHz   float64
)

// clockTicks returns the clock ticks per second of /proc's time fields:
// AT_CLKTCK from /proc/self/auxv (what sysconf(_SC_CLK_TCK) reads), or
// 100, the USER_HZ of every Linux architecture Go supports, when the
// auxiliary vector cannot be read.
func clockTicks() float64 {
	clockTicksOnce.Do(func() {
		clockTicksHz = 100
		b, err := os.ReadFile("/proc/self/auxv")
		if err != nil {
			return
		}
		if hz := auxvValue(b, atClkTck); hz > 0 {
			clockTicksHz = float64(hz)
		}
	})
	return clockTicksHz
}

// auxvValue returns the value of key in an auxiliary vector in the native
// word size and byte order, or 0.
func auxvValue(b []byte, key uint64) uint64 {
	w := int(unsafe.Sizeof(uintptr(0)))
	word := func(p []byte) uint64 {
		if w == 4 {
			return uint64(binary.NativeEndian.Uint32(p))
		}
		return binary.NativeEndian.Uint64(p)
	}
	for i := 0; i+2*w <= len(b); i += 2 * w {
		k := word(b[i:])
		if k == 0 { // AT_NULL
			break
		}
		if k == key {
			return word(b[i+w:])
		}
	}
	return 0
}

// treeCPUTicks returns the CPU time of process root and all its live
// descendants (own and reaped children's time, see procStat.cpuTicks), in
// clock ticks, and how many processes that is. A descendant that exits
// between two readings moves its time into its parent's reaped-children
// time, so the difference of two readings counts it once.
func treeCPUTicks(root int) (ticks int64, procs int, err error) {
	rootStat, err := readProcStat(root)
	if err != nil {
		return 0, 0, err
	}
	if rootStat.state == 'Z' || rootStat.state == 'X' {
		return 0, 0, fmt.Errorf("bench: process %d has exited", root)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0, fmt.Errorf("bench: read /proc: %w", err)
	}
	children := map[int][]procStat{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil {
			continue // exited meanwhile
		}
		children[st.ppid] = append(children[st.ppid], st)
	}
	ticks, procs = rootStat.cpuTicks(), 1
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			ticks += c.cpuTicks()
			procs++
			queue = append(queue, c.pid)
		}
	}
	return ticks, procs, nil
}

// processCPUSeconds returns the CPU time (user + system, all threads, not
// its children) that process pid used so far, in seconds.
func processCPUSeconds(pid int) (float64, error) {
	st, err := readProcStat(pid)
	if err != nil {
		return 0, err
	}
	return float64(st.utime+st.stime) / clockTicks(), nil
}

// processGone reports whether pid is gone and reaped: not in /proc (or
// dead, 'X').
func processGone(pid int) bool {
	st, err := readProcStat(pid)
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// A zombie is not gone: its CPU time reaches the postmaster's
	// cutime (what the cost probe counts for exited backends) only once
	// the postmaster reaps it.
	return st.state == 'X'
}
