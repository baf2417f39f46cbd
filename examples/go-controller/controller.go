package main

import (
	"context"
	"errors"
	"io"
	"time"

	hubv1 "verge.invalid/examples/go-controller/gen/verge/hub/v1"
	messagev1 "verge.invalid/examples/go-controller/gen/verge/message/v1"
)

// drainTimeout bounds the wait for cloudhub to end the stream after the last ack.
const drainTimeout = 2 * time.Second

// received is one result of stream.Recv.
type received struct {
	frame *hubv1.HubFrame
	err   error
}

// controller is one attached stream. Only run's goroutine sends on the stream.
type controller struct {
	o      options
	stream hubv1.ControllerHub_AttachClient
	ctx    context.Context
	frames chan received
	// connected is every node's session state as cloudhub last reported it.
	connected map[string]bool
	// resendDue: cloudhub reported the command NOT_CONNECTED or SESSION_ENDED; resend it at
	// the node's next NodeSession with connected true.
	resendDue bool
	// seen are the ids of the upstream messages printed already (upstream is
	// at-least-once: a repeated id is acked again but not printed again).
	seen map[string]bool
}

func (c *controller) run() int {
	c.frames = make(chan received, 64)
	c.connected = map[string]bool{}
	c.seen = map[string]bool{}
	go func() {
		for {
			frame, err := c.stream.Recv()
			c.frames <- received{frame, err}
			if err != nil {
				return
			}
		}
	}()

	command := c.command()
	if err := c.send(command); err != nil {
		return c.failed(err)
	}
	emit("event", "sent", "id", c.o.commandID)

	for {
		var in received
		select {
		case <-c.ctx.Done():
			logf("timed out after %s without the reply to %s", c.o.timeout, c.o.commandID)
			return 1
		case in = <-c.frames:
		}
		if in.err != nil {
			return c.ended(in.err)
		}
		switch f := in.frame.GetFrame().(type) {
		case *hubv1.HubFrame_Session:
			s := f.Session
			c.connected[s.GetNode()] = s.GetConnected()
			logf("node %s connected=%t (cloudhub replica %s)", s.GetNode(), s.GetConnected(), s.GetCloudhub())
			if s.GetNode() == c.o.node && s.GetConnected() && c.resendDue {
				c.resendDue = false
				if err := c.send(command); err != nil {
					return c.failed(err)
				}
				emit("event", "sent", "id", c.o.commandID, "resend", true)
			}
		case *hubv1.HubFrame_DeliveryError:
			if code, done := c.deliveryError(f.DeliveryError); done {
				return code
			}
		case *hubv1.HubFrame_Message:
			if code, done := c.upstream(f.Message); done {
				return code
			}
		}
	}
}

// command is the frame of the command: an `update` of the node's resource in the group.
func (c *controller) command() *hubv1.ControllerFrame {
	return routed(c.o.node, &messagev1.Message{
		Header: &messagev1.Header{Id: c.o.commandID, TimestampMs: time.Now().UnixMilli()},
		Route: &messagev1.Route{
			Source:    c.o.name,
			Group:     c.o.group,
			Operation: "update",
			Resource:  "node/" + c.o.node + "/" + c.o.resource,
		},
		Content: []byte(c.o.content),
	})
}

// deliveryError handles cloudhub's report that a message of this controller was not
// delivered; done is true when the program ends with code.
func (c *controller) deliveryError(e *hubv1.DeliveryError) (code int, done bool) {
	if e.GetMessageId() != c.o.commandID {
		logf("delivery error for another message %s (node %s): %s", e.GetMessageId(), e.GetNode(), e.GetReason())
		return 0, false
	}
	emit("event", "undelivered", "id", c.o.commandID, "failure", e.GetFailure().String(), "reason", e.GetReason())
	switch e.GetFailure() {
	case hubv1.DeliveryFailure_DELIVERY_FAILURE_NOT_CONNECTED, hubv1.DeliveryFailure_DELIVERY_FAILURE_SESSION_ENDED:
		// Only a session event after this error counts: one seen before it is stale.
		c.resendDue = true
		logf("%s will be resent at node %s's next connect (last reported connected=%t)",
			c.o.commandID, c.o.node, c.connected[c.o.node])
		return 0, false
	default:
		logf("%s not delivered to node %s: %s: %s", c.o.commandID, e.GetNode(), e.GetFailure(), e.GetReason())
		return 2, true
	}
}

// upstream handles a message from the edge; done is true when the program ends with code.
func (c *controller) upstream(r *hubv1.Routed) (code int, done bool) {
	m := r.GetMessage()
	id, parent := m.GetHeader().GetId(), m.GetHeader().GetParentId()
	operation, resource := m.GetRoute().GetOperation(), m.GetRoute().GetResource()
	if operation == "ack" {
		if parent == c.o.commandID {
			emit("event", "acked", "id", c.o.commandID)
		} else {
			// The edge's ack of another command: an answer, which is never answered.
			logf("ack of another message %s from node %s", parent, r.GetNode())
		}
		return 0, false
	}
	ack := routed(r.GetNode(), &messagev1.Message{
		Header: &messagev1.Header{Id: newUUID(), ParentId: id, TimestampMs: time.Now().UnixMilli()},
		Route:  &messagev1.Route{Source: c.o.name, Group: c.o.group, Operation: "ack"},
	})
	ackErr := c.send(ack)
	if operation == "response" && parent == c.o.commandID {
		emit("event", "reply", "id", id, "parentId", c.o.commandID, "content", string(m.GetContent()))
		c.finish(ackErr)
		return 0, true
	}
	if ackErr != nil {
		return c.failed(ackErr), true
	}
	if c.seen[id] {
		logf("message %s again (acked again)", id)
		return 0, false
	}
	c.seen[id] = true
	emit("event", "message", "id", id, "operation", operation, "resource", resource)
	return 0, false
}

// finish makes sure the last ack reached cloudhub: it half-closes the stream and waits
// (at most drainTimeout) for cloudhub to end it, which cloudhub does after it handled every
// frame sent before the half-close.
func (c *controller) finish(ackErr error) {
	if ackErr == nil {
		ackErr = c.stream.CloseSend()
	}
	timer := time.NewTimer(drainTimeout)
	defer timer.Stop()
	for ackErr == nil {
		select {
		case <-timer.C:
			logf("cloudhub did not end the stream within %s after the last ack", drainTimeout)
			return
		case in := <-c.frames:
			if errors.Is(in.err, io.EOF) {
				return
			}
			ackErr = in.err
		}
	}
	logf("the ack of the reply may not have reached cloudhub (the edge will send the reply again): %v", ackErr)
}

// send writes one frame.
func (c *controller) send(frame *hubv1.ControllerFrame) error {
	return c.stream.Send(frame)
}

// failed reports a failed Send and returns the exit code. io.EOF from Send means the
// stream has ended; its status then comes from Recv.
func (c *controller) failed(err error) int {
	if errors.Is(err, io.EOF) {
		select {
		case <-c.ctx.Done():
		case in := <-c.frames:
			for in.err == nil {
				in = <-c.frames // frames after the end cannot be answered any more
			}
			err = in.err
		}
	}
	return c.ended(err)
}

// ended reports the end of the stream and returns the exit code.
func (c *controller) ended(err error) int {
	if c.ctx.Err() != nil {
		logf("timed out after %s without the reply to %s", c.o.timeout, c.o.commandID)
		return 1
	}
	if errors.Is(err, io.EOF) {
		logf("the stream ended: cloudhub closed it")
	} else {
		logf("the stream ended: %s", describe(err))
	}
	return 4
}

// routed wraps a message for the node into a ControllerFrame.
func routed(node string, m *messagev1.Message) *hubv1.ControllerFrame {
	return &hubv1.ControllerFrame{Frame: &hubv1.ControllerFrame_Message{Message: &hubv1.Routed{Node: node, Message: m}}}
}
