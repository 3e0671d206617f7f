"""The Coordinator's secret seed: key derivation and the seed shares that back it up."""
