"""Intel TDX: quotes v4/v5, PCK chains, collateral, TCB status and reference values."""
