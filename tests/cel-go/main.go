// The CEL oracle of tests/cel_go.rs: evaluates expressions the way the
// Kubernetes API server and Kyverno do: cel-go's extensions at the versions
// the API server enables (k8s.io/apiserver/pkg/cel/environment/base.go at
// v0.37: strings version 2, sets, two-variable comprehensions, lists
// version 3, optional types, numbers compared across types, UTC as the
// default time zone) and those Kyverno adds (bindings, encoders, math).
// Kubernetes' own libraries (quantity, IP, URL, ...) are not here.
//
// Reads one JSON object per line, {"expr": "...", "vars": {"name": value}}
// (vars are JSON values, declared as dyn), and prints one JSON object per
// line: {"string": "..."} for a string result, {"json": <value>} for any
// other a JSON value holds, {"value": "<%v>"} for the rest, or
// {"error": "..."} for a compile or evaluation error (a compile
// error's message without its location and source excerpt).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

type request struct {
	Expr string         `json:"expr"`
	Vars map[string]any `json:"vars"`
}

type answer struct {
	String *string          `json:"string,omitempty"`
	JSON   *json.RawMessage `json:"json,omitempty"`
	Value  *string          `json:"value,omitempty"`
	Error  *string          `json:"error,omitempty"`
}

func evaluate(r request) answer {
	options := []cel.EnvOption{
		cel.DefaultUTCTimeZone(true),
		ext.Strings(ext.StringsVersion(2)),
		ext.Sets(),
		ext.TwoVarComprehensions(),
		ext.Lists(ext.ListsVersion(3)),
		cel.OptionalTypes(),
		cel.CrossTypeNumericComparisons(true),
		// Kyverno's additions to the Kubernetes environment.
		ext.Bindings(),
		ext.Encoders(),
		ext.Math(),
	}
	for name := range r.Vars {
		options = append(options, cel.Variable(name, cel.DynType))
	}
	fail := func(err error) answer {
		msg := err.Error()
		// "ERROR: <input>:1:12: message\n | source\n | ....^"
		if rest, ok := strings.CutPrefix(msg, "ERROR: <input>:"); ok {
			if _, after, ok := strings.Cut(rest, ": "); ok {
				msg = after
			}
			msg, _, _ = strings.Cut(msg, "\n")
		}
		return answer{Error: &msg}
	}
	env, err := cel.NewEnv(options...)
	if err != nil {
		return fail(err)
	}
	ast, iss := env.Compile(r.Expr)
	if iss.Err() != nil {
		return fail(iss.Err())
	}
	prg, err := env.Program(ast)
	if err != nil {
		return fail(err)
	}
	vars := r.Vars
	if vars == nil {
		vars = map[string]any{}
	}
	out, _, err := prg.Eval(vars)
	if err != nil {
		return fail(err)
	}
	if s, ok := out.(types.String); ok {
		text := string(s)
		return answer{String: &text}
	}
	if native, err := out.ConvertToNative(reflect.TypeOf(&structpb.Value{})); err == nil {
		if encoded, err := protojson.Marshal(native.(*structpb.Value)); err == nil {
			raw := json.RawMessage(encoded)
			return answer{JSON: &raw}
		}
	}
	text := fmt.Sprintf("%v", out.Value())
	return answer{Value: &text}
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var r request
		if err := json.Unmarshal(in.Bytes(), &r); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := out.Encode(evaluate(r)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
