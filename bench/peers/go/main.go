// Go side of spindle's bench/compare.py fiber and process sections: goroutines with
// GOMAXPROCS = --workers (2 by default; compare.py also sets GOMAXPROCS).
// The measuring goroutine only waits: each workload's root is a goroutine of
// its own and main blocks on a channel (a blocked goroutine holds no P, so
// the N Ps run the workload alone).
//
// Usage (as the other peers, bench/peers/peer_common.hpp):
//
//	spindle-peer-go --workers N [--reps R] [--min-time SECONDS] [--workload NAME]...
//
// It prints one JSON object on stdout:
//
//	{"system": "go", "workers": N, "results": [
//	  {"workload": NAME, "unit": UNIT, "samples": [v, ...]}, ...]}
//
// Each sample is the mean over enough iterations to last --min-time.
//
//   - fiber_spawn_join: the root starts 10,000 empty goroutines and waits
//     for them with a sync.WaitGroup (Go has no join handle; the WaitGroup
//     is the idiom), ns per goroutine.
//   - fiber_yield: 200 goroutines x 1,000 runtime.Gosched() (ns per yield).
//   - fiber_ping_pong: two goroutines, 10,000 round trips over two
//     unbuffered chan int (ns per round trip).
//   - fiber_park: 100,000 goroutines in time.Sleep(1 h): fiber_park_memory
//     (VmRSS growth per goroutine, bytes) and fiber_park_time (ms until the
//     last one runs), one sample per process: run it alone in a fresh
//     process.
//
// The process section's workloads (goroutines with channels as mailboxes):
//
//   - process_ring: 10,000 goroutines, each with an inbox (chan int, buffer
//     1), pass one token 10^6 hops (ns per hop, counting the stop's 10,000).
//   - process_fan_in: 1,000 goroutines x 1,000 messages into one goroutine's
//     inbox (chan int, buffer 1,000), messages/s.
//   - process_skynet: 10^6 leaves of a 10-ary tree of goroutines (1,111,111
//     in all), each sending its sum to its parent's chan (ms).
//   - process_idle: 100,000 goroutines blocked receiving from their own
//     chan int: process_idle_memory (VmRSS growth per goroutine, bytes),
//     one sample per process: run it alone in a fresh process.
package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	spawnJoinGoroutines = 10_000
	yielders            = 200
	yieldsEach          = 1_000
	roundTrips          = 10_000
	parkedGoroutines    = 100_000
	ringSize            = 10_000
	ringHops            = 1_000_000
	fanSenders          = 1_000
	fanEach             = 1_000
	skynetLeaves        = 1_000_000
	idleGoroutines      = 100_000
)

type result struct {
	workload string
	unit     string
	samples  []float64
}

// measure runs body once to warm up, then reps samples, each the mean over
// as many iterations as fill minTime, in ns x scale / per.
func measure(reps int, minTime, scale, per float64, body func()) []float64 {
	start := time.Now()
	body()
	once := math.Max(time.Since(start).Seconds(), 1e-9)
	iters := int(math.Max(1, math.Ceil(minTime/once)))
	samples := make([]float64, 0, reps)
	for r := 0; r < reps; r++ {
		start := time.Now()
		for i := 0; i < iters; i++ {
			body()
		}
		ns := float64(time.Since(start).Nanoseconds()) / float64(iters)
		samples = append(samples, ns*scale/per)
	}
	return samples
}

// onRoot runs root in a goroutine of its own; the caller only waits.
func onRoot(root func()) {
	done := make(chan struct{})
	go func() {
		root()
		close(done)
	}()
	<-done
}

func spawnJoin() {
	var wg sync.WaitGroup
	wg.Add(spawnJoinGoroutines)
	for i := 0; i < spawnJoinGoroutines; i++ {
		go func() { wg.Done() }()
	}
	wg.Wait()
}

func yieldMany() {
	var wg sync.WaitGroup
	wg.Add(yielders)
	for i := 0; i < yielders; i++ {
		go func() {
			for j := 0; j < yieldsEach; j++ {
				runtime.Gosched()
			}
			wg.Done()
		}()
	}
	wg.Wait()
}

func pingPong() {
	there := make(chan int)
	back := make(chan int)
	done := make(chan struct{})
	go func() {
		for i := 0; i < roundTrips; i++ {
			v := <-there
			back <- v + 1
		}
		close(done)
	}()
	for i := 0; i < roundTrips; i++ {
		there <- i
		if v := <-back; v != i+1 {
			panic("ping_pong: wrong value")
		}
	}
	<-done
}

func statusBytes(field string) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, field) {
			fields := strings.Fields(line[len(field):])
			if len(fields) > 0 {
				kib, _ := strconv.ParseFloat(fields[0], 64)
				return kib * 1024
			}
		}
	}
	return 0
}

// park: 100,000 goroutines in a long sleep; bytes per goroutine, ms to park.
func park() (float64, float64) {
	var parked int64
	allParked := make(chan struct{})
	before := statusBytes("VmRSS:")
	start := time.Now()
	go func() {
		for i := 0; i < parkedGoroutines; i++ {
			go func() {
				if atomic.AddInt64(&parked, 1) == parkedGoroutines {
					close(allParked)
				}
				time.Sleep(time.Hour)
			}()
		}
	}()
	<-allParked
	ms := float64(time.Since(start).Nanoseconds()) / 1e6
	bytes := (statusBytes("VmRSS:") - before) / parkedGoroutines
	return bytes, ms
}

func ring() {
	inbox := make([]chan int, ringSize)
	for i := range inbox {
		inbox[i] = make(chan int, 1)
	}
	var wg sync.WaitGroup
	wg.Add(ringSize)
	for i := 0; i < ringSize; i++ {
		go func(me int) {
			next := inbox[(me+1)%ringSize]
			for {
				v := <-inbox[me]
				if v <= 0 {
					select { // the last finds the first gone
					case next <- 0:
					default:
					}
					wg.Done()
					return
				}
				next <- v - 1
			}
		}(i)
	}
	inbox[0] <- ringHops
	wg.Wait()
}

func fanIn() {
	sink := make(chan int, fanSenders)
	for i := 0; i < fanSenders; i++ {
		go func() {
			for j := 0; j < fanEach; j++ {
				sink <- 1
			}
		}()
	}
	got := 0
	for got < fanSenders*fanEach {
		got += <-sink
	}
}

func skynetNode(parent chan int, num, size int) {
	if size == 1 {
		parent <- num
		return
	}
	rc := make(chan int)
	for i := 0; i < 10; i++ {
		go skynetNode(rc, num+i*(size/10), size/10)
	}
	sum := 0
	for i := 0; i < 10; i++ {
		sum += <-rc
	}
	parent <- sum
}

func skynet() {
	rc := make(chan int)
	go skynetNode(rc, 0, skynetLeaves)
	if <-rc != 499_999_500_000 {
		panic("skynet: wrong sum")
	}
}

// idle: 100,000 goroutines blocked on their own chan; bytes per goroutine.
func idle() float64 {
	var started int64
	inboxes := make([]chan int, idleGoroutines)
	for i := range inboxes {
		inboxes[i] = make(chan int)
	}
	before := statusBytes("VmRSS:")
	for i := 0; i < idleGoroutines; i++ {
		go func(in chan int) {
			atomic.AddInt64(&started, 1)
			<-in
		}(inboxes[i])
	}
	for atomic.LoadInt64(&started) != idleGoroutines {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond) // the last ones reach the receive
	return (statusBytes("VmRSS:") - before) / idleGoroutines
}

func usage(msg string) {
	fmt.Fprintf(os.Stderr, "spindle-peer-go: %s\n", msg)
	os.Exit(2)
}

func main() {
	workers, reps, minTime := 2, 5, 0.2
	var workloads []string
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		if i+1 >= len(args) {
			usage(args[i] + " needs a value")
		}
		arg, value := args[i], args[i+1]
		i++
		var err error
		switch arg {
		case "--workers":
			workers, err = strconv.Atoi(value)
		case "--reps":
			reps, err = strconv.Atoi(value)
		case "--min-time":
			minTime, err = strconv.ParseFloat(value, 64)
		case "--workload":
			workloads = append(workloads, value)
		default:
			usage("unknown argument " + arg)
		}
		if err != nil {
			usage("bad value for " + arg + ": " + value)
		}
	}
	if workers < 1 || reps < 1 {
		usage("--workers and --reps must be >= 1")
	}
	if len(workloads) == 0 {
		workloads = []string{"fiber_spawn_join", "fiber_yield", "fiber_ping_pong"}
	}
	runtime.GOMAXPROCS(workers)

	var results []result
	for _, w := range workloads {
		switch w {
		case "fiber_spawn_join":
			results = append(results, result{w, "ns/fiber",
				measure(reps, minTime, 1, spawnJoinGoroutines, func() { onRoot(spawnJoin) })})
		case "fiber_yield":
			results = append(results, result{w, "ns/yield",
				measure(reps, minTime, 1, yielders*yieldsEach, func() { onRoot(yieldMany) })})
		case "fiber_ping_pong":
			results = append(results, result{w, "ns/round trip",
				measure(reps, minTime, 1, roundTrips, func() { onRoot(pingPong) })})
		case "process_ring":
			results = append(results, result{w, "ns/hop",
				measure(reps, minTime, 1, ringHops+ringSize, func() { onRoot(ring) })})
		case "process_fan_in":
			ns := measure(reps, minTime, 1, fanSenders*fanEach, func() { onRoot(fanIn) })
			for i := range ns {
				ns[i] = 1e9 / ns[i]
			}
			results = append(results, result{w, "msgs/s", ns})
		case "process_skynet":
			results = append(results, result{w, "ms",
				measure(reps, minTime, 1e-6, 1, func() { onRoot(skynet) })})
		case "process_idle":
			results = append(results, result{"process_idle_memory", "bytes/process",
				[]float64{idle()}})
		case "fiber_park":
			bytes, ms := park()
			results = append(results, result{"fiber_park_memory", "bytes/fiber", []float64{bytes}},
				result{"fiber_park_time", "ms", []float64{ms}})
		default:
			usage("workload " + w + " is not supported")
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "{\"system\": \"go\", \"workers\": %d, \"results\": [", workers)
	for i, r := range results {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\n  {\"workload\": \"%s\", \"unit\": \"%s\", \"samples\": [", r.workload, r.unit)
		for j, v := range r.samples {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%.6f", v)
		}
		b.WriteString("]}")
	}
	b.WriteString("\n]}\n")
	os.Stdout.WriteString(b.String())
}
