package remoting

// Runs of inline requests on a Conn: requests of one code read in a row, handed together
// to their group handler (Server.HandleInlineGroup).

// runReq is a request waiting in a run (Conn.run) with its header encoding.
type runReq struct {
	req *RemotingCommand
	st  SerializeType
}

// addToRun adds req, whose code has the group handler h, to the run: a run of another
// code is handed over first, and the run is handed over when it reaches maxRunFrames
// requests or maxRunBytes of frames. The reader hands over a shorter run before it
// would wait for input, and before any request of another code.
func (c *Conn) addToRun(req *RemotingCommand, st SerializeType, h GroupHandler) {
	if len(c.run) > 0 && c.run[0].req.Code != req.Code {
		c.flushRun()
	}
	c.inFlight.Add(1) // Shutdown and the idle check see it being handled
	c.run = append(c.run, runReq{req, st})
	c.runH = h
	c.runBytes += len(req.frame)
	if len(c.run) >= maxRunFrames || c.runBytes >= maxRunBytes {
		c.flushRun()
	}
}

// flushRun hands the run to its group handler and queues the answers as the reader's
// own (answerOnReader). ServerConfig.Before runs first for each request; those it answers
// stay out of the handler's call.
func (c *Conn) flushRun() {
	run := c.run
	reqs := c.runReqs[:0]
	for _, r := range run {
		if c.opts.before != nil {
			if resp := c.safeBefore(r.req); resp != nil {
				c.answerOnReader(r.req, resp, r.st)
				continue
			}
		}
		reqs = append(reqs, r.req)
	}
	if len(reqs) > 0 {
		c.markServed()
		if cap(c.runResps) < len(reqs) {
			c.runResps = make([]*RemotingCommand, 0, max(len(reqs), maxRunFrames))
		}
		resps := c.runResps[:len(reqs)]
		c.serveGroup(reqs, resps)
		j := 0
		for _, r := range run {
			if j < len(reqs) && reqs[j] == r.req {
				c.answerOnReader(r.req, resps[j], r.st)
				j++
			}
		}
		clear(resps)
		c.runResps = resps[:0]
	}
	for _, r := range run {
		reuseFrame(r.req)
	}
	c.inFlight.Add(-int32(len(run)))
	clear(reqs)
	c.runReqs = reqs[:0]
	clear(run)
	c.run = run[:0]
	c.runH, c.runBytes = nil, 0
}

// dropRun forgets a run that was not handed over (the reader is ending).
func (c *Conn) dropRun() {
	c.inFlight.Add(-int32(len(c.run)))
	clear(c.run)
	c.run = c.run[:0]
	c.runH, c.runBytes = nil, 0
}

// serveGroup calls the run's handler; a panic answers each request of the run that
// has no response yet with SYSTEM_ERROR.
func (c *Conn) serveGroup(reqs, resps []*RemotingCommand) {
	defer func() {
		if r := recover(); r != nil {
			answer := c.recovered("request handler", reqs[0].Code, r)
			for i := range resps {
				if resps[i] == nil { // a command of its own each: encoding sets its opaque
					resps[i] = NewResponse(SystemError, answer.Remark)
				}
			}
		}
	}()
	c.runH(c.ctx, c, reqs, resps)
}
