"""``python -m securefl`` is the ``securefl`` console script."""

import sys

from securefl.cli import main

sys.exit(main())
