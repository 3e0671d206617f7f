// Command etcd is etcd's own server main (go.etcd.io/etcd/server/v3/etcdmain) under the name
// "etcd": built from the package path itself, go build would name the binary "server".
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
