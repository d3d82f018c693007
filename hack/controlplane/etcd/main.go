// Command etcd runs etcd's server main, as etcd's own server/main.go does.
// `go install` refuses go.etcd.io/etcd/server/v3 (its go.mod has replace directives),
// so it is built from this wrapper module instead.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
