"""`python -m contrast` runs the CLI."""

import sys

from contrast.cli.main import main

sys.exit(main())
