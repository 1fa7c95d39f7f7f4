// Package tcpproxy is a loopback TCP proxy between clients and one server
// that breaks the path the way networks and servers do: it cuts every
// connection at once (both ends see it closed), pauses all traffic (bytes
// wait, nothing is closed, as in a partition), and loses replies: it
// forwards a command, lets the server run it, then closes the client's
// connection instead of delivering the reply. Tests and the chaos suite put
// one between go-redis and a redis-server.
//
//	p, err := tcpproxy.Start(srv.Addr())
//	if err != nil {
//		return err
//	}
//	defer p.Close()
//	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
//	p.DropReplyTo(receipt) // the next command naming receipt runs; its reply is lost
package tcpproxy
