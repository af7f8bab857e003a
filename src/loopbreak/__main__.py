import sys

from loopbreak.cli import main

sys.exit(main())
