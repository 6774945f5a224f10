package bench

import (
	"math"
	"math/bits"
	"time"
)

// histSubBits is the number of mantissa bits each power-of-two range is split by: 32
// buckets per doubling, so a recorded value is reported within about 3 % of itself.
const histSubBits = 5

const (
	histSub     = 1 << histSubBits       // 32 sub-buckets per power of two
	histExact   = 2 * histSub            // values below 64 ns have a bucket each
	histBuckets = histExact + 58*histSub // enough for every int64 duration
)

// Histogram records durations (send latencies) in log-linear buckets: exact below
// 64 ns, then 32 buckets per power of two (relative error under 3.2 %). Its size is
// fixed (about 15 KiB) whatever the number of samples. The zero value is empty and
// ready; it is not safe for concurrent use (give each goroutine its own and Merge).
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
	sum    time.Duration
	min    time.Duration
	max    time.Duration
}

func histIndex(v uint64) int {
	if v < histExact {
		return int(v)
	}
	shift := bits.Len64(v) - (histSubBits + 1) // ≥ 1 since v ≥ 64
	m := v >> uint(shift)                      // in [32, 63]
	return histExact + (shift-1)*histSub + int(m-histSub)
}

// histValue is the middle of bucket i, in ns.
func histValue(i int) time.Duration {
	if i < histExact {
		return time.Duration(i)
	}
	i -= histExact
	shift := uint(i/histSub + 1)
	m := uint64(i%histSub + histSub)
	lo := m << shift
	return time.Duration(lo + (uint64(1)<<shift)/2)
}

// Record adds one duration; negative durations count as 0.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[histIndex(uint64(d))]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	if d > h.max {
		h.max = d
	}
	h.n++
	h.sum += d
}

// Merge adds every sample of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
}

// Count returns the number of recorded samples.
func (h *Histogram) Count() uint64 { return h.n }

// Min returns the smallest sample (0 when empty).
func (h *Histogram) Min() time.Duration { return h.min }

// Max returns the largest sample (0 when empty).
func (h *Histogram) Max() time.Duration { return h.max }

// Mean returns the average sample (0 when empty).
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1; 0.99 = p99) to within the bucket
// precision, clamped to [Min, Max]; the lowest and highest ranks are Min and Max
// exactly; 0 when empty. q outside [0, 1] is clamped.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	q = math.Max(0, math.Min(1, q))
	rank := uint64(math.Ceil(q * float64(h.n)))
	switch {
	case rank <= 1:
		return h.min
	case rank >= h.n:
		return h.max
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(max(histValue(i), h.min), h.max)
		}
	}
	return h.max
}
