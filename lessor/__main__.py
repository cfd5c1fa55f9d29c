from lessor.cli import main

raise SystemExit(main())
