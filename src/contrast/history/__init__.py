"""The Coordinator's manifest history: content-addressed entries under one signed head."""
