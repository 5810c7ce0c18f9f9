import sys

from sbxc.cli import main

sys.exit(main())
