package registry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bettercompute/computed/internal/errs"
)

type metrics struct {
	calls   *prometheus.CounterVec
	latency *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "compute_method_calls_total", Help: "Method calls by method and outcome code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "compute_method_duration_seconds", Help: "Method latency.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"method"}),
	}
	reg.MustRegister(m.calls, m.latency)
	return m
}

func (m *metrics) observe(method string, code errs.Code, ok bool, d time.Duration) {
	c := "OK"
	if !ok {
		c = string(code)
	}
	m.calls.WithLabelValues(method, c).Inc()
	m.latency.WithLabelValues(method).Observe(d.Seconds())
}
