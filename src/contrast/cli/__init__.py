"""The `contrast` command: argument parsing, output and exit codes, no business logic."""
