import sys

from cpctl.cli import main

sys.exit(main())
