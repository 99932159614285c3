"""``python -m wanbench.report rc RESULTS... --history FILE --out FILE``:
write the Allure 3 configuration that scripts/report passes to allure."""

from __future__ import annotations

import sys

from wanbench.report.allure_files import main

sys.exit(main())
