package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// tunnelBufSize is the copy buffer of each direction of a tunnel.
const tunnelBufSize = 64 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, tunnelBufSize); return &b }}

// activity is the time of the last byte a tunnel moved, either way.
type activity struct{ last atomic.Int64 }

func (a *activity) touch()          { a.last.Store(time.Now().UnixNano()) }
func (a *activity) time() time.Time { return time.Unix(0, a.last.Load()) }

// tunnel copies bytes both ways between the client (reading through
// clientR, which may hold bytes the client sent after its request) and
// up, until both directions end, one fails, ctx is done, or no byte has
// moved either way for IdleTimeout. A direction that ends cleanly
// half-closes its destination; with closeOnUpstreamEOF (a forwarded
// request, whose response ends when the origin closes) the end of the
// origin's bytes ends the whole tunnel. It returns the bytes sent
// (client to destination) and received.
func (p *Proxy) tunnel(ctx context.Context, client net.Conn, clientR io.Reader, up net.Conn, closeOnUpstreamEOF bool) (sent, received int64) {
	stop := context.AfterFunc(ctx, func() { _ = up.Close(); _ = client.Close() })
	defer stop()
	var act activity
	act.touch()
	var nSent, nReceived atomic.Int64
	done := make(chan error, 1)
	go func() {
		err := errors.New("panic copying to the destination")
		defer func() {
			if r := recover(); r != nil {
				p.log.Error("egress proxy: panic in a tunnel", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			}
			if err == nil {
				closeWrite(up)
			} else {
				_ = up.Close()
				_ = client.Close()
			}
			done <- err
		}()
		err = p.copyIdle(up, clientR, client, &nSent, &act)
	}()
	err := p.copyIdle(client, up, up, &nReceived, &act)
	if err == nil && !closeOnUpstreamEOF {
		closeWrite(client)
	} else {
		_ = up.Close()
		_ = client.Close()
	}
	<-done
	return nSent.Load(), nReceived.Load()
}

// copyIdle copies src to dst until src ends (nil) or something fails, or
// neither direction of the tunnel has moved a byte for IdleTimeout.
// srcConn is the connection under src, for read deadlines.
func (p *Proxy) copyIdle(dst net.Conn, src io.Reader, srcConn net.Conn, n *atomic.Int64, act *activity) error {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	idle := p.cfg.IdleTimeout
	for {
		_ = srcConn.SetReadDeadline(act.time().Add(idle))
		r, err := src.Read(buf)
		if r > 0 {
			act.touch()
			_ = dst.SetWriteDeadline(time.Now().Add(idle))
			w, werr := dst.Write(buf[:r])
			n.Add(int64(w))
			if werr != nil {
				return werr
			}
			act.touch()
		}
		if err != nil {
			if err == io.EOF {
				return nil
			}
			if isTimeout(err) && time.Since(act.time()) < idle {
				continue // the other direction is busy
			}
			return err
		}
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = c.Close()
	}
}
