// cel-go on the Pod Security ValidatingPolicies: the peer measurement for
// gavel's `pss16/vpol` criterion benchmark (benches/pod_security_flavours.rs).
//
// The same 16 policies (../shared/conformance/kyverno-policies/
// pod-security-vpol) and the same Pods (benches/data/pod-*.yaml), evaluated
// the way Kyverno's ValidatingPolicy engine and the API server do: the Pod as
// unstructured JSON (map[string]any, which cel-go wraps lazily), each
// policy's variables evaluated in order into `variables`, then its
// validations. cel-go is the version Kyverno v1.19.1 pins, with the
// optional types and the strings extension the policies use.
//
// Usage: go run . <conformance/kyverno-policies dir> <benches/data dir>
// Prints one line per Pod: `cel-go <pod> <ns per Pod, all 16 policies>`.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
	"sigs.k8s.io/yaml"
)

var common = []string{
	"baseline/disallow-capabilities",
	"baseline/disallow-host-namespaces",
	"baseline/disallow-host-path",
	"baseline/disallow-host-ports",
	"baseline/disallow-host-process",
	"baseline/disallow-privileged-containers",
	"baseline/disallow-proc-mount",
	"baseline/disallow-selinux",
	"baseline/restrict-seccomp",
	"baseline/restrict-sysctls",
	"restricted/disallow-capabilities-strict",
	"restricted/disallow-privilege-escalation",
	"restricted/require-run-as-non-root-user",
	"restricted/require-run-as-nonroot",
	"restricted/restrict-seccomp-strict",
	"restricted/restrict-volume-types",
}

type named struct {
	name string
	prg  cel.Program
}

type policy struct {
	variables   []named
	validations []cel.Program
}

type doc struct {
	Spec struct {
		Variables []struct {
			Name       string `json:"name"`
			Expression string `json:"expression"`
		} `json:"variables"`
		Validations []struct {
			Expression string `json:"expression"`
		} `json:"validations"`
	} `json:"spec"`
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func compile(env *cel.Env, expr string) cel.Program {
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		must(fmt.Errorf("%q: %w", expr, iss.Err()))
	}
	prg, err := env.Program(ast, cel.CostLimit(1000000))
	must(err)
	return prg
}

func load(env *cel.Env, root string) []policy {
	var out []policy
	for _, dir := range common {
		path := filepath.Join(root, "pod-security-vpol", dir, filepath.Base(dir)+".yaml")
		text, err := os.ReadFile(path)
		must(err)
		var d doc
		must(yaml.Unmarshal(text, &d))
		var p policy
		for _, v := range d.Spec.Variables {
			p.variables = append(p.variables, named{v.Name, compile(env, v.Expression)})
		}
		for _, v := range d.Spec.Validations {
			p.validations = append(p.validations, compile(env, v.Expression))
		}
		out = append(out, p)
	}
	return out
}

// evaluate runs every policy on the Pod; it returns how many failed.
func evaluate(policies []policy, pod map[string]any) int {
	failed := 0
	for _, p := range policies {
		vars := make(map[string]any, len(p.variables))
		act := map[string]any{"object": pod, "oldObject": nil, "variables": vars}
		for _, v := range p.variables {
			if out, _, err := v.prg.Eval(act); err == nil {
				vars[v.name] = out
			}
		}
		for _, val := range p.validations {
			out, _, err := val.Eval(act)
			if err != nil || out.Value() != true {
				failed++
				break
			}
		}
	}
	return failed
}

func main() {
	if len(os.Args) != 3 {
		must(fmt.Errorf("usage: %s <kyverno-policies dir> <benches/data dir>", os.Args[0]))
	}
	env, err := cel.NewEnv(
		cel.Variable("object", cel.DynType),
		cel.Variable("oldObject", cel.DynType),
		cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)),
		cel.OptionalTypes(),
		ext.Strings(),
	)
	must(err)
	policies := load(env, os.Args[1])
	for _, name := range []string{"compliant", "violating"} {
		text, err := os.ReadFile(filepath.Join(os.Args[2], "pod-"+name+".yaml"))
		must(err)
		var pod map[string]any
		must(yaml.Unmarshal(text, &pod))
		if got := evaluate(policies, pod); (got > 0) != (name == "violating") {
			must(fmt.Errorf("pod %s: %d policies failed", name, got))
		}
		r := testing.Benchmark(func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				evaluate(policies, pod)
			}
		})
		fmt.Printf("cel-go %s %d\n", name, r.NsPerOp())
	}
}
