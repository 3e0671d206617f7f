"""Getting evidence inside a confidential VM: configfs-tsm, /dev/sev-guest, /dev/tdx_guest."""
