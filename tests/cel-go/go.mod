// cel-go as Kubernetes and Kyverno run it: the oracle of tests/cel_go.rs.
// cel-go at the version Kyverno v1.19.1 pins (e2e/versions.env), as in
// benches/cel-go.
module gavel.dev/tests/cel-go

go 1.26.0

require (
	github.com/google/cel-go v0.30.0
	google.golang.org/protobuf v1.36.10
)

require (
	cel.dev/expr v0.25.1 // indirect
	github.com/antlr4-go/antlr/v4 v4.13.1 // indirect
	go.yaml.in/yaml/v3 v3.0.4 // indirect
	golang.org/x/exp v0.0.0-20240823005443-9b4947da3948 // indirect
	golang.org/x/text v0.22.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20240826202546-f6391c0de4c7 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20240826202546-f6391c0de4c7 // indirect
)
