import sys

from labs.compare.run import main

sys.exit(main())
