import sys

from bottleneck_exporter.cli import main

sys.exit(main())
