"""The manifest: which workloads (by policy hash) may join, on which platforms, and who owns it."""
