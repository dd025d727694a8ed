import sys

from offrl.cli import main

sys.exit(main())
