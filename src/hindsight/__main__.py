"""`python -m hindsight` is the `hindsight` command."""

import sys

from hindsight.cli.main import main

sys.exit(main())
