// The etcd server binary: etcd's own main package lives in the root module
// go.etcd.io/etcd/v3, whose go.mod replaces its sibling modules with local
// paths and so cannot be built as a dependency; etcdmain is the same entry
// point, taken at the version k8s.io/kubernetes requires.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
