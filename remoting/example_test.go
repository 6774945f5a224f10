package remoting_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicemq/sluice/remoting"
)

// A server answering HEART_BEAT, and a client calling it.
func Example() {
	srv, err := remoting.NewServer(remoting.ServerConfig{Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	srv.Handle(remoting.HeartBeat, func(ctx context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
		resp := remoting.NewResponse(remoting.Success, "")
		resp.SetExt("clientID", req.ExtFields["clientID"])
		return resp
	})
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Shutdown(context.Background())

	cli, err := remoting.NewClient(remoting.ClientConfig{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	defer cli.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req := remoting.NewRequest(remoting.HeartBeat, map[string]string{"clientID": "10.0.0.1@42"}, nil)
	resp, err := cli.InvokeSync(ctx, srv.Addr(), req)
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.ResponseCode(), resp.ExtFields["clientID"], resp.Opaque == req.Opaque)

	resp, err = cli.InvokeSync(ctx, srv.Addr(), remoting.NewRequest(remoting.RequestCode(999), nil, nil))
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.ResponseCode(), resp.Remark)
	// Output:
	// SUCCESS 10.0.0.1@42 true
	// REQUEST_CODE_NOT_SUPPORTED request type 999 not supported
}
