package console

import "sort"

// backlogOf turns samples, oldest first, into the chart's series.
func (c *Console) backlogOf(samples []sample) backlogAnswer {
	a := backlogAnswer{EverySeconds: c.cfg.SampleEvery.Seconds(), Rates: "estimate", Series: []point{}, Topics: []topicSeries{}}
	var last *sample
	for i := range samples {
		s := &samples[i]
		var prev *sample
		if i > 0 && samples[i-1].ok {
			prev = &samples[i-1]
		}
		a.Series = append(a.Series, totalPoint(s, prev))
		if s.ok {
			last = s
		}
	}
	if last == nil {
		return a
	}
	if last.hooked {
		a.Rates = "relay"
	}
	now := a.Series[len(a.Series)-1]
	a.Now = &now
	names := make([]string, 0, len(last.topics))
	for t := range last.topics {
		names = append(names, t)
	}
	sort.Slice(names, func(i, j int) bool {
		pi, pj := last.topics[names[i]].Pending, last.topics[names[j]].Pending
		return pi > pj || pi == pj && names[i] < names[j]
	})
	for _, name := range names {
		ts := topicSeries{Topic: name, Series: make([]point, 0, len(samples))}
		for i := range samples {
			var prev *sample
			if i > 0 && samples[i-1].ok {
				prev = &samples[i-1]
			}
			ts.Series = append(ts.Series, topicPoint(&samples[i], prev, name))
		}
		ts.Now = ts.Series[len(ts.Series)-1]
		a.Topics = append(a.Topics, ts)
	}
	return a
}

func totalPoint(s, prev *sample) point {
	p := point{At: s.at.UTC()}
	if !s.ok {
		return p
	}
	oldest := s.oldest.Seconds()
	p.Pending, p.OldestSecs, p.Dead = &s.pending, &oldest, &s.dead
	if prev == nil {
		return p
	}
	dt := s.at.Sub(prev.at).Seconds()
	if dt <= 0 {
		return p
	}
	if s.hooked && prev.hooked {
		p.SentRate, p.DeadRate = rate(s.sent-prev.sent, dt), rate(s.killed-prev.killed, dt)
		return p
	}
	// No relay in this process: new DEAD rows from the DEAD count, sent
	// ones from the ids written less the growth of the backlog.
	newDead := max(s.dead-prev.dead, 0)
	p.DeadRate = rate(newDead, dt)
	p.SentRate = rate(max((s.maxID-prev.maxID)-(s.pending-prev.pending)-newDead, 0), dt)
	return p
}

func topicPoint(s, prev *sample, topic string) point {
	p := point{At: s.at.UTC()}
	if !s.ok {
		return p
	}
	t := s.topics[topic]
	oldest := t.OldestPendingAge.Seconds()
	pending, dead := t.Pending, t.Dead
	p.Pending, p.OldestSecs, p.Dead = &pending, &oldest, &dead
	if prev == nil {
		return p
	}
	dt := s.at.Sub(prev.at).Seconds()
	if dt <= 0 {
		return p
	}
	pt := prev.topics[topic]
	if s.hooked && prev.hooked {
		p.SentRate, p.DeadRate = rate(t.sent-pt.sent, dt), rate(t.killed-pt.killed, dt)
		return p
	}
	p.DeadRate = rate(max(t.Dead-pt.Dead, 0), dt)
	return p
}

func rate(n int64, seconds float64) *float64 {
	r := float64(max(n, 0)) / seconds
	return &r
}
