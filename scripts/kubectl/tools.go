//go:build tools

// The command this module builds; the build tag keeps this file out of every build.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubectl"
)
