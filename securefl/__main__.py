"""``python -m securefl`` is the ``securefl`` console script."""

from securefl.cli import console

console()
