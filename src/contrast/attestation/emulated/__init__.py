"""The emulated TEE: software SNP and TDX that produce evidence in exactly the real formats.

Evidence is signed by a locally generated AMD-style (ARK → ASK → VCEK) or Intel-style
(root → PCK → attestation key) hierarchy kept in a state directory. Verification uses the same code
as for real hardware with these roots in place of AMD's and Intel's, so emulated evidence can
never satisfy reference values that name the genuine roots.
"""
