"""The init container: a key, evidence for it, a mesh certificate, files for the workload."""
