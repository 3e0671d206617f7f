"""The Coordinator: the attested root of trust that holds the manifest and issues certificates."""
