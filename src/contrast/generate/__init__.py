"""`contrast generate`: plain Kubernetes YAML in, confidential workloads and their manifest out."""
