"""AMD SEV-SNP: attestation reports, VCEK/VLEK endorsements, verification and reference values."""
