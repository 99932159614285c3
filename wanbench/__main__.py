from wanbench.cli import main

raise SystemExit(main())
