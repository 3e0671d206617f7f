"""The service-mesh sidecar: Envoy terminating and originating mutual TLS with mesh certificates."""
