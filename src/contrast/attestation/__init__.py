"""Attestation evidence: AMD SEV-SNP reports, Intel TDX quotes and an emulated TEE producing both.

Parsing (`snp.report`, `tdx.quote`) is kept apart from deciding whether evidence is acceptable
(`snp.verify`, `tdx.verify`) and from comparing it with reference values (`*.reference`).
"""
