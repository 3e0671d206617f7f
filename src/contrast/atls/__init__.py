"""Binding attestation evidence to keys: report data, issuers and verifiers."""
