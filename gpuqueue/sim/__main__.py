import sys

from gpuqueue.sim.cli import main

sys.exit(main())
