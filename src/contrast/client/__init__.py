"""What the CLI does against a Coordinator: set the manifest, verify it, recover the Coordinator."""
