import sys

from burstscope.cli import main

sys.exit(main())
