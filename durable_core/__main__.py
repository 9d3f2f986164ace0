"""``python -m durable_core`` is the ``durable`` command."""

import sys

from .cli import main

sys.exit(main())
