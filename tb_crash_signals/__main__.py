import sys

from tb_crash_signals.cli import main

sys.exit(main())
