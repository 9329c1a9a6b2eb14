import sys

from tb_crash_signals.demo import main

sys.exit(main(sys.argv[1:]))
