"""``python -m fusebench`` (also the entry for ``torchrun -m fusebench run ...``)."""

import sys

from fusebench.cli import main

sys.exit(main())
