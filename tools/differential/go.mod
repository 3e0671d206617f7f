module github.com/contrast-py/tools/differential

go 1.24

require (
	github.com/google/go-sev-guest v0.15.0
	github.com/google/go-tdx-guest v0.3.1
	github.com/google/logger v1.1.1
)

require (
	github.com/google/uuid v1.6.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	golang.org/x/crypto v0.17.0 // indirect
	golang.org/x/sys v0.15.0 // indirect
	google.golang.org/protobuf v1.33.0 // indirect
)
