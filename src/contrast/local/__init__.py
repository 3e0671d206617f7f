"""The embedded default: the whole flow as local processes on the emulated platform."""
